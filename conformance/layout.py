# SPDX-License-Identifier: Apache-2.0
"""The byte layout of docs/FORMAT.md, as much as the conformance runner
needs: offsets to patch files with, and a small parser of trusted files
(the reference vectors and what the Rust writer just wrote) that sums the
value words over the shards. It validates nothing: hostile files are the
readers' business, not the runner's."""

import struct

MAGIC = b"TOPDECK\0"

# Header fields (section 3).
VERSION = 8
HEADER_LEN = 12
FILE_LEN = 16
PID = 24
START_TICKS = 32
CREATED_UNIX_NS = 40
DESC_OFFSET = 48
DESC_CAPACITY = 56
DESC_LEN = 60
DESC_COUNT = 64
SHARD_COUNT = 68
STRINGS_OFFSET = 72
STRINGS_LEN = 80
SHARED_OFFSET = 88
SHARED_LEN = 96
SHARDS_OFFSET = 104
SHARD_LEN = 112
SHARDS_IN_USE = 120
PROCESS_NAME = 128
REGISTRY_NAME = 192
CLOCK = 256
HEADER_FIELDS_END = 384

# Descriptor fields (section 4).
D_KIND = 0
D_SCHEMA = 1
D_FLAGS = 2
D_VALUE_LEN = 4
D_VALUE_OFFSET = 8
D_NAME = 16
D_LABELS = 24
D_HELP = 32
D_UNIT = 40
D_MIN_INDEX = 48
D_BUCKET_COUNT = 52
D_ZERO_THRESHOLD = 56

COUNTER, GAUGE, GAUGE_F64, HISTOGRAM = 1, 2, 3, 4
SHARDED = (COUNTER, HISTOGRAM)
HEAD_WORDS = 4  # count, sum, max, zero

U64 = 1 << 64


def u32(b, off):
    return struct.unpack_from("<I", b, off)[0]


def i32(b, off):
    return struct.unpack_from("<i", b, off)[0]


def u64(b, off):
    return struct.unpack_from("<Q", b, off)[0]


def put_u32(b, off, v):
    struct.pack_into("<I", b, off, v)


def put_u64(b, off, v):
    struct.pack_into("<Q", b, off, v % U64)


def f64_of(bits):
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def header(b):
    """The header's fields by name."""
    names = {
        "version": (VERSION, u32), "header_len": (HEADER_LEN, u32),
        "file_len": (FILE_LEN, u64), "desc_offset": (DESC_OFFSET, u64),
        "desc_capacity": (DESC_CAPACITY, u32), "desc_len": (DESC_LEN, u32),
        "desc_count": (DESC_COUNT, u32), "shard_count": (SHARD_COUNT, u32),
        "strings_offset": (STRINGS_OFFSET, u64), "strings_len": (STRINGS_LEN, u64),
        "shared_offset": (SHARED_OFFSET, u64), "shared_len": (SHARED_LEN, u64),
        "shards_offset": (SHARDS_OFFSET, u64), "shard_len": (SHARD_LEN, u64),
        "shards_in_use": (SHARDS_IN_USE, u32),
    }
    return {k: get(b, off) for k, (off, get) in names.items()}


def desc_at(h, i):
    """Offset in the file of descriptor `i`."""
    return h["desc_offset"] + i * h["desc_len"]


def shard_offsets(h):
    """Start of every shard that may hold values: those in use, then the overflow shard."""
    return [h["shards_offset"] + s * h["shard_len"]
            for s in list(range(h["shards_in_use"])) + [h["shard_count"]]]


def metrics(b):
    """Every metric of a trusted file: the descriptor's fields, its
    strings' bytes, and its value words summed over the shards as section 5
    says (a list of words: counters and gauges one, histograms 4 + buckets;
    max is the largest order-preserving word)."""
    h = header(b)
    out = []
    for i in range(h["desc_count"]):
        at = desc_at(h, i)
        d = {
            "kind": b[at + D_KIND], "schema": struct.unpack_from("<b", b, at + D_SCHEMA)[0],
            "flags": struct.unpack_from("<H", b, at + D_FLAGS)[0],
            "value_len": u32(b, at + D_VALUE_LEN), "min_index": i32(b, at + D_MIN_INDEX),
            "bucket_count": u32(b, at + D_BUCKET_COUNT),
            "zero_threshold_bits": u64(b, at + D_ZERO_THRESHOLD),
        }
        for field, off in (("name", D_NAME), ("labels", D_LABELS), ("help", D_HELP), ("unit", D_UNIT)):
            s = h["strings_offset"] + u32(b, at + off)
            d[field] = bytes(b[s:s + u32(b, at + off + 4)])
        words = d["value_len"] // 8
        voff = u64(b, at + D_VALUE_OFFSET)
        d["value_offset"] = voff
        if d["kind"] in SHARDED:
            total = [0] * words
            for s in shard_offsets(h):
                for w in range(words):
                    v = u64(b, s + voff + 8 * w)
                    if d["kind"] == HISTOGRAM and w == 1:
                        total[w] = struct.unpack("<Q", struct.pack("<d", f64_of(total[w]) + f64_of(v)))[0]
                    elif d["kind"] == HISTOGRAM and w == 2:
                        total[w] = max(total[w], v)
                    else:
                        total[w] = (total[w] + v) % U64
            d["words"] = total
        else:
            d["words"] = [u64(b, h["shared_offset"] + voff)]
        out.append(d)
    return out
