# SPDX-License-Identifier: Apache-2.0
"""The file format's constants, limits and encodings (docs/FORMAT.md),
shared by the writer and the reader of this package."""

import re
import struct

MAGIC = b"TOPDECK\0"
MAJOR = 1
#: v1.1: the clock area exists; this writer leaves it zero (it stores
#: seconds, never raw ticks, so readers need no conversion).
VERSION = (1 << 16) | 1
HEADER_LEN = 4096
HEADER_FIELDS_END = 384
DESC_LEN = 64
PAGE = 4096
WORD = 8
SUFFIX = ".topdeck"
TEMP_PREFIX = ".creating-"
NAME_FIELD_LEN = 64

# Header offsets of the words published after creation (section 7).
VERSION_OFFSET = 8
DESC_COUNT_OFFSET = 64
SHARDS_IN_USE_OFFSET = 120

COUNTER, GAUGE_I64, GAUGE_F64, HISTOGRAM = 1, 2, 3, 4
#: Histogram words before the buckets: count, sum, max, zero.
H_COUNT, H_SUM, H_MAX, H_ZERO, H_HEAD = 0, 1, 2, 3, 4

# Section 8, "Limits a reader enforces" (a writer must stay within them).
MAX_FILE_LEN = 1 << 32
MAX_DESC_CAPACITY = 1 << 20
MAX_DESC_LEN = 256
MAX_SHARD_COUNT = 1024
MAX_SHARD_LEN = 256 << 20
MAX_STRINGS_LEN = 256 << 20
MAX_SHARED_LEN = 64 << 20
MAX_BUCKETS = 1024
MAX_ABS_INDEX = 1 << 19
# Section 4: names.
MAX_NAME_LEN = 200
MAX_LABEL_NAME_LEN = 100
MAX_LABEL_VALUE_LEN = 1024
MAX_LABELS = 32
MAX_LABELS_LEN = MAX_LABELS * (2 + MAX_LABEL_NAME_LEN + 2 + MAX_LABEL_VALUE_LEN)
MAX_HELP_LEN = 1024
MAX_UNIT_LEN = 64
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


def align_up(n):
    return (n + PAGE - 1) // PAGE * PAGE


def truncate_utf8(text, field_len=NAME_FIELD_LEN):
    """At most ``field_len - 1`` bytes, cut at a character boundary."""
    raw = text.encode("utf-8")[: field_len - 1]
    return raw.decode("utf-8", "ignore").encode("utf-8")


class Layout:
    """Where the sections of a new file go (the Rust ``Header::new``)."""

    def __init__(self, metrics=4096, string_bytes=256 << 10, gauge_bytes=32 << 10,
                 shard_bytes=1 << 20, shards=16):
        self.desc_offset = HEADER_LEN
        self.desc_capacity = metrics
        self.strings_offset = align_up(HEADER_LEN + metrics * DESC_LEN)
        self.shared_offset = align_up(self.strings_offset + string_bytes)
        self.shards_offset = align_up(self.shared_offset + gauge_bytes)
        self.shard_len = align_up(shard_bytes)
        self.shard_count = shards
        self.strings_len = self.shared_offset - self.strings_offset
        self.shared_len = self.shards_offset - self.shared_offset
        self.file_len = self.shards_offset + self.shard_len * (shards + 1)
        self._check(metrics, string_bytes, gauge_bytes, shard_bytes, shards)

    def _check(self, metrics, string_bytes, gauge_bytes, shard_bytes, shards):
        """A file past the readers' limits must never be created."""
        for what, value, low, limit in [
            ("metrics", metrics, 1, MAX_DESC_CAPACITY),
            ("shards", shards, 0, MAX_SHARD_COUNT),
            ("shard_bytes", self.shard_len, WORD, MAX_SHARD_LEN),
            ("string_bytes", self.strings_len, 0, MAX_STRINGS_LEN),
            ("gauge_bytes", self.shared_len, 0, MAX_SHARED_LEN),
            ("the file (all areas together)", self.file_len, 0, MAX_FILE_LEN),
        ]:
            if not isinstance(value, int) or not low <= value <= limit:
                raise ValueError(
                    f"cannot create a registry this large: {what} is {value}, outside {low}..={limit} "
                    "(docs/FORMAT.md section 8); lower Registry's metrics, string_bytes, "
                    "gauge_bytes, shard_bytes or shards")

    def encode_header(self, pid, start_ticks, created_unix_ns, process_name, registry_name):
        """Every header field except ``version``, ``desc_count`` and
        ``shards_in_use``, which are published separately."""
        out = bytearray(HEADER_FIELDS_END)
        out[0:8] = MAGIC
        struct.pack_into("<IQ", out, 12, HEADER_LEN, self.file_len)
        struct.pack_into("<IIQQ", out, 24, pid, 0, start_ticks, created_unix_ns)
        struct.pack_into("<QII", out, 48, self.desc_offset, self.desc_capacity, DESC_LEN)
        struct.pack_into("<I", out, 68, self.shard_count)
        struct.pack_into("<QQQQQQ", out, 72, self.strings_offset, self.strings_len,
                         self.shared_offset, self.shared_len, self.shards_offset, self.shard_len)
        for off, text in ((128, process_name), (192, registry_name)):
            raw = truncate_utf8(text)
            out[off:off + len(raw)] = raw
        return bytes(out)


def encode_labels(labels):
    out = bytearray()
    for k, v in labels:
        for s in (k, v):
            raw = s.encode("utf-8")
            out += struct.pack("<H", len(raw)) + raw
    return bytes(out)


def decode_labels(raw):
    """``encode_labels``'s pairs back, as a tuple of (key, value)."""
    out, i = [], 0
    while i < len(raw):
        pair = []
        for _ in range(2):
            (n,) = struct.unpack_from("<H", raw, i)
            pair.append(bytes(raw[i + 2:i + 2 + n]).decode("utf-8"))
            i += 2 + n
        out.append(tuple(pair))
    return tuple(out)


def encode_descriptor(kind, value_len, value_offset, refs, buckets=None):
    """``refs``: (offset, length) of name, labels, help and unit."""
    schema, min_index, count, zero = 0, 0, 0, 0.0
    if buckets is not None:
        schema, min_index, count, zero = (buckets.schema, buckets.min_index,
                                          buckets.bucket_count, buckets.zero_threshold)
    out = struct.pack("<BbHIQ", kind, schema, 0, value_len, value_offset)
    out += struct.pack("<8I", *(x for r in refs for x in r))
    out += struct.pack("<iId", min_index, count, zero)
    return out


def check_series(name, labels, help_text, unit):
    """Section 4's rules, with what to change when one is broken."""
    def bad(why):
        raise ValueError(f"cannot register {name!r}: {why}")

    if not isinstance(name, str) or not METRIC_NAME.match(name):
        bad("a metric name matches [a-zA-Z_:][a-zA-Z0-9_:]*")
    if len(name.encode("utf-8")) > MAX_NAME_LEN:
        bad(f"the name is longer than {MAX_NAME_LEN} bytes")
    if len(labels) > MAX_LABELS:
        bad(f"{len(labels)} labels, more than {MAX_LABELS}")
    seen = set()
    for k, v in labels:
        if not isinstance(k, str) or not LABEL_NAME.match(k) or k.startswith("__"):
            bad(f"label name {k!r} must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __")
        if len(k) > MAX_LABEL_NAME_LEN:
            bad(f"label name {k!r} is longer than {MAX_LABEL_NAME_LEN} bytes")
        if k in seen:
            bad(f"label {k!r} given twice")
        seen.add(k)
        if len(v.encode("utf-8")) > MAX_LABEL_VALUE_LEN:
            bad(f"the value of label {k!r} is longer than {MAX_LABEL_VALUE_LEN} bytes")
    for what, text, limit in (("help", help_text, MAX_HELP_LEN), ("unit", unit, MAX_UNIT_LEN)):
        if len(text.encode("utf-8")) > limit:
            bad(f"the {what} is longer than {limit} bytes")
