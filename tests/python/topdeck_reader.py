#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A second topdeck reader, written from docs/FORMAT.md alone.

It exists to prove that the specification is enough to interoperate: the
integration tests compare what it reads with what the Rust reader reads from
the same live files. It reads with pread into private buffers (FORMAT.md
section 8 allows this instead of a SIGBUS-guarded mapping), validates every
field it uses, and reports a bad file as an error for that file alone.

    topdeck_reader.py [--dir DIR] [--json] [FILE...]
"""

import argparse
import fcntl
import json
import math
import os
import re
import stat
import struct
import sys

MAGIC = b"TOPDECK\0"
MAJOR = 1
HEADER_FIELDS_END = 384
DESC_V1_LEN = 64
SUFFIX = ".topdeck"
KINDS = {1: "counter", 2: "gauge", 3: "gauge", 4: "histogram"}
MAX_BUCKETS = 1024
MAX_ABS_INDEX = 1 << 19
# Section 8, "Limits a reader enforces".
MAX_FILE_LEN = 1 << 32
MAX_DESC_CAPACITY = 1 << 20
MAX_DESC_LEN = 256
MAX_SHARD_COUNT = 1024
MAX_SHARD_LEN = 256 << 20
MAX_STRINGS_LEN = 256 << 20
MAX_SHARED_LEN = 64 << 20
MAX_NAME_LEN = 200
MAX_LABEL_NAME_LEN = 100
MAX_LABEL_VALUE_LEN = 1024
MAX_LABELS = 32
MAX_LABELS_LEN = MAX_LABELS * (2 + MAX_LABEL_NAME_LEN + 2 + MAX_LABEL_VALUE_LEN)
MAX_HELP_LEN = 1024
MAX_UNIT_LEN = 64
DESC_CHUNK = 256
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


class BadFile(Exception):
    """The file breaks the format; the message says how."""


def namespace_dirs(explicit):
    """Section 1: TOPDECK_DIR if set, else every /dev/shm/topdeck-<uid>."""
    if explicit:
        return [explicit]
    env = os.environ.get("TOPDECK_DIR")
    if env:
        return [env]
    found = []
    for entry in sorted(os.listdir("/dev/shm")):
        uid = entry[len("topdeck-"):]
        if entry.startswith("topdeck-") and uid.isdigit():
            found.append(os.path.join("/dev/shm", entry))
    return found


def check_dir(path):
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise BadFile(f"{path}: not a directory (symlinks are not followed)")
    if st.st_mode & 0o022:
        raise BadFile(f"{path}: writable by group or others")
    return st.st_uid


class File:
    """One open registry file read with pread."""

    def __init__(self, path, owner):
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            raise BadFile("not a regular file")
        if owner is not None and st.st_uid != owner:
            raise BadFile(f"owned by uid {st.st_uid}, not the directory's owner {owner}")
        self.fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self.path = path

    def close(self):
        os.close(self.fd)

    def read(self, offset, length):
        data = os.pread(self.fd, length, offset)
        if len(data) != length:
            raise BadFile(f"file shrank: wanted {length} bytes at {offset}, got {len(data)}")
        return data

    def alive(self):
        """Section 1, liveness: a shared probe fails while the writer lives."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        return False


def parse_header(f):
    raw = f.read(0, HEADER_FIELDS_END)
    if raw[:8] != MAGIC:
        raise BadFile("not a topdeck file (bad magic)")
    version, header_len, file_len = struct.unpack_from("<IIQ", raw, 8)
    if version == 0:
        raise BadFile("not ready (version 0)")
    if version >> 16 != MAJOR:
        raise BadFile(f"unsupported major version {version >> 16}")
    h = {"version": version, "header_len": header_len, "file_len": file_len}
    h["pid"], _flags, h["start_ticks"], h["created_unix_ns"] = struct.unpack_from("<IIQQ", raw, 24)
    (h["desc_offset"], h["desc_capacity"], h["desc_len"], h["desc_count"],
     h["shard_count"]) = struct.unpack_from("<QIIII", raw, 48)
    (h["strings_offset"], h["strings_len"], h["shared_offset"], h["shared_len"],
     h["shards_offset"], h["shard_len"], h["shards_in_use"]) = struct.unpack_from("<QQQQQQI", raw, 72)
    h["process_name"] = c_string(raw[128:192])
    h["registry_name"] = c_string(raw[192:256])

    actual = os.fstat(f.fd).st_size
    if actual > MAX_FILE_LEN:
        raise BadFile(f"the file is {actual} bytes, above the format's limit of {MAX_FILE_LEN}")
    if not HEADER_FIELDS_END <= header_len <= h["desc_offset"]:
        raise BadFile(f"header_len {header_len} out of range")
    for field, limit in [("file_len", MAX_FILE_LEN), ("desc_capacity", MAX_DESC_CAPACITY),
                         ("desc_len", MAX_DESC_LEN), ("shard_count", MAX_SHARD_COUNT),
                         ("shard_len", MAX_SHARD_LEN), ("strings_len", MAX_STRINGS_LEN),
                         ("shared_len", MAX_SHARED_LEN)]:
        if h[field] > limit:
            raise BadFile(f"{field} is {h[field]}, above the format's limit of {limit}")
    if actual < file_len:
        raise BadFile(f"file is {actual} bytes, header says {file_len}")
    if h["desc_len"] < DESC_V1_LEN or h["desc_len"] % 8:
        raise BadFile(f"desc_len {h['desc_len']} invalid")
    if h["shard_len"] % 8 or h["shared_len"] % 8:
        raise BadFile("shard_len or shared_len not a multiple of 8")
    sections = [
        (h["desc_offset"], h["desc_capacity"] * h["desc_len"]),
        (h["strings_offset"], h["strings_len"]),
        (h["shared_offset"], h["shared_len"]),
        (h["shards_offset"], (h["shard_count"] + 1) * h["shard_len"]),
    ]
    end = header_len
    for start, length in sections:
        if start < end or start + length > file_len:
            raise BadFile("sections overlap or lie outside the file")
        end = start + length
    if h["desc_count"] > h["desc_capacity"]:
        raise BadFile("desc_count above desc_capacity")
    if h["shards_in_use"] > h["shard_count"]:
        raise BadFile("shards_in_use above shard_count")
    return h


def c_string(raw):
    return raw.split(b"\0", 1)[0].decode("utf-8")


def parse_labels(raw):
    labels, i = {}, 0
    while i < len(raw):
        pair = []
        for _ in range(2):
            if i + 2 > len(raw):
                raise BadFile("label set truncated")
            (n,) = struct.unpack_from("<H", raw, i)
            i += 2
            if i + n > len(raw):
                raise BadFile("label set truncated")
            pair.append(raw[i:i + n].decode("utf-8"))
            i += n
        key, value = pair
        if not LABEL_NAME.match(key) or key.startswith("__") or key in labels:
            raise BadFile(f"invalid label name {key!r}")
        if len(value.encode("utf-8")) > MAX_LABEL_VALUE_LEN:
            raise BadFile(f"label value of {key!r} too long")
        labels[key] = value
    return labels


def parse_descriptors(f, h):
    """Sections 4 and 8: descriptors a chunk at a time, each validated
    before the next chunk is read, and only the strings they reference."""

    def text(i, off, length, limit, what):
        if off + length > h["strings_len"]:
            raise BadFile(f"descriptor {i}: string reference outside the string area")
        if length > limit:
            raise BadFile(f"descriptor {i}: {what} is {length} bytes, above the format's limit of {limit}")
        return f.read(h["strings_offset"] + off, length)

    descs = []
    used = {"shard": 0, "shared": 0}
    for first in range(0, h["desc_count"], DESC_CHUNK):
        n = min(DESC_CHUNK, h["desc_count"] - first)
        table = f.read(h["desc_offset"] + first * h["desc_len"], n * h["desc_len"])
        for i in range(first, first + n):
            descs.append(parse_descriptor(h, table, (i - first) * h["desc_len"], i, text, used))
    return descs


def parse_descriptor(h, table, at, i, text, used):
    kind, schema, _flags, value_len, value_offset = struct.unpack_from("<BbHIQ", table, at)
    refs = struct.unpack_from("<8I", table, at + 16)
    min_index, bucket_count, zero_threshold = struct.unpack_from("<iId", table, at + 48)
    if kind not in KINDS:
        raise BadFile(f"descriptor {i}: unknown kind {kind}")
    name = text(i, refs[0], refs[1], MAX_NAME_LEN, "the name").decode("utf-8")
    labels = text(i, refs[2], refs[3], MAX_LABELS_LEN, "the label set")
    help_text = text(i, refs[4], refs[5], MAX_HELP_LEN, "the help").decode("utf-8")
    unit = text(i, refs[6], refs[7], MAX_UNIT_LEN, "the unit").decode("utf-8")
    if not METRIC_NAME.match(name):
        raise BadFile(f"descriptor {i}: invalid metric name {name!r}")
    d = {
        "kind": kind, "name": name, "labels": parse_labels(labels),
        "help": help_text, "unit": unit,
        "value_offset": value_offset, "value_len": value_len,
    }
    if kind == 4:
        if not -4 <= schema <= 8 or not 1 <= bucket_count <= MAX_BUCKETS:
            raise BadFile(f"descriptor {i}: invalid histogram shape")
        if abs(min_index) > MAX_ABS_INDEX or abs(min_index + bucket_count - 1) > MAX_ABS_INDEX:
            raise BadFile(f"descriptor {i}: bucket index out of range")
        if not zero_threshold >= 0:
            raise BadFile(f"descriptor {i}: negative zero_threshold")
        expected = 8 * (4 + bucket_count)
        d.update(schema=schema, min_index=min_index, bucket_count=bucket_count)
    else:
        expected = 8
    area = "shard" if kind in (1, 4) else "shared"
    size = h[f"{area}_len"]
    if value_len != expected or value_offset % 8 or value_offset + value_len > size:
        raise BadFile(f"descriptor {i}: value block out of place")
    # Section 6: blocks are never shared, so together they fit their area.
    used[area] += value_len
    if used[area] > size:
        raise BadFile(f"descriptor {i}: value blocks overlap")
    return d


def upper_bound(index, schema):
    """Section 5: the upper bound of bucket `index`."""
    try:
        if schema > 0:
            n = 1 << schema
            bound = 2.0 ** ((index % n) / n - 1)
            return math.ldexp(bound, index // n + 1)
        return math.ldexp(1.0, index << -schema)
    except OverflowError:
        return sys.float_info.max


def from_ordered_bits(bits):
    raw = bits & ~(1 << 63) if bits >> 63 else ~bits & (2**64 - 1)
    return struct.unpack("<d", struct.pack("<Q", raw))[0]


def values(f, h, descs):
    """Section 5: sum the shards in use and the overflow shard."""
    per_shard = [d for d in descs if d["kind"] in (1, 4)]
    shards = list(range(h["shards_in_use"])) + [h["shard_count"]]
    lo = min((d["value_offset"] for d in per_shard), default=0)
    hi = max((d["value_offset"] + d["value_len"] for d in per_shard), default=0)
    blocks = [f.read(h["shards_offset"] + s * h["shard_len"] + lo, hi - lo) for s in shards] if per_shard else []
    gauges = [d for d in descs if d["kind"] in (2, 3)]
    shared_end = max((d["value_offset"] + 8 for d in gauges), default=0)
    shared = f.read(h["shared_offset"], shared_end)
    out = []
    for d in descs:
        m = {k: d[k] for k in ("name", "labels", "help", "unit")}
        m["kind"] = KINDS[d["kind"]]
        at = d["value_offset"]
        if d["kind"] == 1:
            m["value"] = sum(struct.unpack_from("<Q", b, at - lo)[0] for b in blocks) % 2**64
        elif d["kind"] == 2:
            m["value"] = struct.unpack_from("<q", shared, at)[0]
        elif d["kind"] == 3:
            m["value"] = struct.unpack_from("<d", shared, at)[0]
        else:
            m["value"] = histogram(d, [struct.unpack_from(f"<{4 + d['bucket_count']}Q", b, at - lo) for b in blocks])
        out.append(m)
    return out


def histogram(d, shard_words):
    zero = sum(w[3] for w in shard_words)
    total_sum = sum(struct.unpack("<d", struct.pack("<Q", w[1]))[0] for w in shard_words)
    max_bits = max(w[2] for w in shard_words)
    buckets = []
    for k in range(d["bucket_count"]):
        n = sum(w[4 + k] for w in shard_words)
        if n:
            buckets.append([upper_bound(d["min_index"] + k, d["schema"]), n])
    return {
        "count": zero + sum(n for _, n in buckets),
        "sum": total_sum,
        "max": from_ordered_bits(max_bits) if max_bits else None,
        "zero": zero,
        "buckets": buckets,
    }


def read_file(path, owner):
    f = File(path, owner)
    try:
        h = parse_header(f)
        return {
            "path": path, "pid": h["pid"], "process": h["process_name"],
            "registry": h["registry_name"], "state": "alive" if f.alive() else "dead",
            "metrics": values(f, h, parse_descriptors(f, h)),
        }
    finally:
        f.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help="namespace directory (default: TOPDECK_DIR or /dev/shm/topdeck-*)")
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()

    targets = [(p, None) for p in args.files]
    if not targets:
        for d in namespace_dirs(args.dir):
            owner = check_dir(d)
            for entry in sorted(os.listdir(d)):
                if entry.endswith(SUFFIX) and not entry.startswith("."):
                    targets.append((os.path.join(d, entry), owner))
    registries, errors = [], []
    for path, owner in targets:
        try:
            registries.append(read_file(path, owner))
        except (BadFile, OSError, UnicodeDecodeError) as e:
            errors.append({"path": path, "error": str(e)})
    if args.json:
        json.dump({"registries": registries, "errors": errors}, sys.stdout)
        print()
    else:
        for r in registries:
            print(f"{r['path']}  {r['process']} pid {r['pid']} {r['state']}")
            for m in r["metrics"]:
                print(f"  {m['name']}{m['labels'] or ''} = {m['value']}")
        for e in errors:
            print(f"error: {e['path']}: {e['error']}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
