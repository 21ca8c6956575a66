#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A topdeck reader written from docs/FORMAT.md alone.

It proves that the specification is enough to interoperate: the Rust
integration tests (tests/tests/integration/second_reader.rs) compare what it
reads with what the Rust reader reads from the same live, dead and damaged
files. It reads with pread into private buffers (FORMAT.md section 8 allows
this instead of a SIGBUS-guarded mapping), validates every field it uses,
reports a bad file as an error for that file alone, and never locks a
writer out: liveness is a shared ``flock`` probe, with ``/proc/locks``
asked who holds the lock when others than the owner may open the file.

    python3 -m topdeck.reader [--dir DIR] [--json] [FILE...]

As a library:

>>> import tempfile, topdeck
>>> reg = topdeck.Registry(dir=tempfile.mkdtemp())
>>> reg.gauge("queue_depth", help="Jobs waiting.").set(3)
>>> listing = topdeck.reader.listing(dir=reg.path.rsplit("/", 1)[0])
>>> [(r.state, [(m.kind, m.name, m.value) for m in r.metrics]) for r in listing.registries]
[('alive', [('gauge', 'queue_depth', 3)])]
>>> reg.close()
"""

import argparse
import errno
import fcntl
import json
import os
import stat
import struct
import sys

try:
    from . import _format as F
    from .exponential import from_ordered_bits, upper_bound
except ImportError:  # run as a file: python3 bindings/python/topdeck/reader.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from topdeck import _format as F
    from topdeck.exponential import from_ordered_bits, upper_bound

KINDS = {F.COUNTER: "counter", F.GAUGE_I64: "gauge", F.GAUGE_F64: "gauge", F.HISTOGRAM: "histogram"}
#: The kind names of the conformance protocol (conformance/PROTOCOL.md).
KIND_NAMES = {F.COUNTER: "counter", F.GAUGE_I64: "gauge", F.GAUGE_F64: "gauge_f64", F.HISTOGRAM: "histogram"}
DESC_CHUNK = 256


class BadFile(Exception):
    """The file breaks the format (or was planted); the message says how."""


def namespace_dirs(explicit=None):
    """Section 1: ``explicit``, else TOPDECK_DIR, else every
    /dev/shm/topdeck-<uid> and /dev/shm/topdeck-<uid>.<tag>."""
    if explicit:
        return [os.fspath(explicit)]
    env = os.environ.get("TOPDECK_DIR")
    if env:
        return [env]
    found = []
    for entry in sorted(os.listdir("/dev/shm")):
        uid, _, tag = entry[len("topdeck-"):].partition(".")
        if entry.startswith("topdeck-") and uid.isdigit() and (not _ or (tag.isascii() and tag.isalnum())):
            found.append(os.path.join("/dev/shm", entry))
    return found


def _expected_owner(path):
    parent, name = os.path.split(os.path.abspath(path))
    uid = name[len("topdeck-"):].partition(".")[0]
    if parent == "/dev/shm" and name.startswith("topdeck-") and uid.isdigit():
        return int(uid)
    return None


def open_dir(path):
    """Opens a namespace directory without following links and checks it
    through the descriptor; returns ``(fd, owner)``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise BadFile(f"{path}: not a directory (symlinks are not followed)") from None
        raise
    st = os.fstat(fd)
    expected = _expected_owner(path)
    why = None
    if expected is not None and st.st_uid != expected:
        why = f"owned by uid {st.st_uid}, expected uid {expected}"
    elif st.st_mode & 0o022:
        why = "writable by group or others"
    if why:
        os.close(fd)
        raise BadFile(f"{path}: unsafe namespace directory: {why}")
    return fd, st.st_uid


def check_dir(path):
    """The owner of a namespace directory that passes section 1's checks."""
    fd, owner = open_dir(path)
    os.close(fd)
    return owner


class File:
    """One open registry file read with pread."""

    def __init__(self, path, owner, dir_fd=None):
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        name = os.path.basename(path) if dir_fd is not None else path
        try:
            self.fd = os.open(name, flags, dir_fd=dir_fd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise BadFile("a symlink where a metrics file belongs; topdeck did not make it") from None
            raise
        self.path = path
        try:
            st = os.fstat(self.fd)
            if not stat.S_ISREG(st.st_mode):
                raise BadFile("not a regular file; topdeck did not make it")
            if owner is not None and st.st_uid != owner:
                raise BadFile(f"owned by uid {st.st_uid}, not the directory's owner {owner}")
        except BaseException:
            os.close(self.fd)
            raise
        self.stat = st

    def close(self):
        os.close(self.fd)

    def read(self, offset, length):
        data = os.pread(self.fd, length, offset)
        if len(data) != length:
            raise BadFile(f"file shrank: wanted {length} bytes at {offset}, got {len(data)}")
        return data

    def alive(self, writer=None):
        """Section 1, liveness: a shared probe fails while the writer lives.
        Only the owner can open a private file, so its lock is the writer's;
        for a file others may open too, ``/proc/locks`` says who holds it."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            if self.stat.st_mode & 0o077 == 0:
                return True
            return writer_holds_lock(self.stat, writer)
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        return False


def writer_holds_lock(st, writer=None):
    """Whether a write ``flock`` on the file ``st`` describes is held by a
    process of the file's owner, by ``writer`` (pid, start ticks), or by a
    pid this reader cannot see (0: another pid namespace). An unreadable
    table counts as held: calling a live file dead would let gc remove it."""
    try:
        with open("/proc/locks") as f:
            table = f.read()
    except OSError:
        return True
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        parts = line.split()
        if "->" in parts:
            parts.remove("->")
        if len(parts) < 6 or parts[1] != "FLOCK" or parts[3] != "WRITE" or parts[5] != want:
            continue
        pid = int(parts[4])
        if pid <= 0:
            return True
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            return True
        if uid == st.st_uid:
            return True
        if writer is not None and writer[0] == pid and _start_ticks(pid) == writer[1]:
            return True
    return False


def _start_ticks(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
        return int(raw[raw.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def parse_header(f):
    raw = f.read(0, F.HEADER_FIELDS_END)
    if raw[:8] != F.MAGIC:
        raise BadFile("not a topdeck file (bad magic)")
    version, header_len, file_len = struct.unpack_from("<IIQ", raw, 8)
    if version == 0:
        raise BadFile("not ready (version 0)")
    if version >> 16 != F.MAJOR:
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
    if actual > F.MAX_FILE_LEN:
        raise BadFile(f"the file is {actual} bytes, above the format's limit of {F.MAX_FILE_LEN}")
    if not F.HEADER_FIELDS_END <= header_len <= h["desc_offset"]:
        raise BadFile(f"header_len {header_len} out of range")
    for field, limit in [("file_len", F.MAX_FILE_LEN), ("desc_capacity", F.MAX_DESC_CAPACITY),
                         ("desc_len", F.MAX_DESC_LEN), ("shard_count", F.MAX_SHARD_COUNT),
                         ("shard_len", F.MAX_SHARD_LEN), ("strings_len", F.MAX_STRINGS_LEN),
                         ("shared_len", F.MAX_SHARED_LEN)]:
        if h[field] > limit:
            raise BadFile(f"{field} is {h[field]}, above the format's limit of {limit}")
    if actual < file_len:
        raise BadFile(f"file is {actual} bytes, header says {file_len}")
    if h["desc_len"] < F.DESC_LEN or h["desc_len"] % 8:
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
        if not F.LABEL_NAME.match(key) or key.startswith("__") or key in labels:
            raise BadFile(f"invalid label name {key!r}")
        if len(value.encode("utf-8")) > F.MAX_LABEL_VALUE_LEN:
            raise BadFile(f"label value of {key!r} too long")
        labels[key] = value
    return labels


def parse_descriptors(f, h):
    """Sections 4 and 8: descriptors a chunk at a time, each validated
    before the next chunk is read, and only the strings they reference."""
    descs = []
    used = {"shard": 0, "shared": 0}
    for first in range(0, h["desc_count"], DESC_CHUNK):
        n = min(DESC_CHUNK, h["desc_count"] - first)
        table = f.read(h["desc_offset"] + first * h["desc_len"], n * h["desc_len"])
        text = chunk_strings(f, h, table, n)
        for i in range(first, first + n):
            descs.append(parse_descriptor(h, table, (i - first) * h["desc_len"], i, text, used))
    return descs


def chunk_strings(f, h, table, n):
    """Section 8: the strings one chunk references, in one read when they
    lie together (as a writer appends them), else each reference alone."""
    refs = [struct.unpack_from("<8I", table, k * h["desc_len"] + 16) for k in range(n)]
    spans = [(r[j], r[j] + r[j + 1]) for r in refs for j in (0, 2, 4, 6)]
    lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
    block = None
    if hi <= h["strings_len"] and hi - lo <= sum(e - s for s, e in spans) + 4096:
        block = f.read(h["strings_offset"] + lo, hi - lo)

    def text(i, off, length, limit, what):
        if off + length > h["strings_len"]:
            raise BadFile(f"descriptor {i}: string reference outside the string area")
        if length > limit:
            raise BadFile(f"descriptor {i}: {what} is {length} bytes, above the format's limit of {limit}")
        if block is not None:
            return block[off - lo:off - lo + length]
        return f.read(h["strings_offset"] + off, length)
    return text


def parse_descriptor(h, table, at, i, text, used):
    kind, schema, _flags, value_len, value_offset = struct.unpack_from("<BbHIQ", table, at)
    refs = struct.unpack_from("<8I", table, at + 16)
    min_index, bucket_count, zero_threshold = struct.unpack_from("<iId", table, at + 48)
    if kind not in KINDS:
        raise BadFile(f"descriptor {i}: unknown kind {kind}")
    name = text(i, refs[0], refs[1], F.MAX_NAME_LEN, "the name").decode("utf-8")
    labels = text(i, refs[2], refs[3], F.MAX_LABELS_LEN, "the label set")
    help_text = text(i, refs[4], refs[5], F.MAX_HELP_LEN, "the help").decode("utf-8")
    unit = text(i, refs[6], refs[7], F.MAX_UNIT_LEN, "the unit").decode("utf-8")
    if not F.METRIC_NAME.match(name):
        raise BadFile(f"descriptor {i}: invalid metric name {name!r}")
    d = {
        "kind": kind, "name": name, "labels": parse_labels(labels),
        "help": help_text, "unit": unit,
        "value_offset": value_offset, "value_len": value_len,
    }
    if kind == F.HISTOGRAM:
        if not -4 <= schema <= 8 or not 1 <= bucket_count <= F.MAX_BUCKETS:
            raise BadFile(f"descriptor {i}: invalid histogram shape")
        if abs(min_index) > F.MAX_ABS_INDEX or abs(min_index + bucket_count - 1) > F.MAX_ABS_INDEX:
            raise BadFile(f"descriptor {i}: bucket index out of range")
        if not zero_threshold >= 0:
            raise BadFile(f"descriptor {i}: negative zero_threshold")
        expected = 8 * (4 + bucket_count)
        d.update(schema=schema, min_index=min_index, bucket_count=bucket_count,
                 zero_threshold=zero_threshold)
    else:
        expected = 8
    area = "shard" if kind in (F.COUNTER, F.HISTOGRAM) else "shared"
    size = h[f"{area}_len"]
    if value_len != expected or value_offset % 8 or value_offset + value_len > size:
        raise BadFile(f"descriptor {i}: value block out of place")
    # Section 6: blocks are never shared, so together they fit their area.
    used[area] += value_len
    if used[area] > size:
        raise BadFile(f"descriptor {i}: value blocks overlap")
    return d


def values(f, h, descs):
    """Section 5: sum the shards in use and the overflow shard."""
    per_shard = [d for d in descs if d["kind"] in (F.COUNTER, F.HISTOGRAM)]
    shards = list(range(h["shards_in_use"])) + [h["shard_count"]]
    lo = min((d["value_offset"] for d in per_shard), default=0)
    hi = max((d["value_offset"] + d["value_len"] for d in per_shard), default=0)
    blocks = [f.read(h["shards_offset"] + s * h["shard_len"] + lo, hi - lo) for s in shards] if per_shard else []
    gauges = [d for d in descs if d["kind"] in (F.GAUGE_I64, F.GAUGE_F64)]
    shared_end = max((d["value_offset"] + 8 for d in gauges), default=0)
    shared = f.read(h["shared_offset"], shared_end)
    out = []
    for d in descs:
        m = {k: d[k] for k in ("name", "labels", "help", "unit")}
        m["kind"] = KINDS[d["kind"]]
        m["type"] = KIND_NAMES[d["kind"]]
        at = d["value_offset"]
        if d["kind"] == F.COUNTER:
            # Saturating, as writers stop a word at 2^64-1 (FORMAT.md section 7).
            m["value"] = min(sum(struct.unpack_from("<Q", b, at - lo)[0] for b in blocks), 2**64 - 1)
        elif d["kind"] == F.GAUGE_I64:
            m["value"] = struct.unpack_from("<q", shared, at)[0]
        elif d["kind"] == F.GAUGE_F64:
            m["value"] = struct.unpack_from("<d", shared, at)[0]
        else:
            m["value"] = histogram(d, [struct.unpack_from(f"<{4 + d['bucket_count']}Q", b, at - lo) for b in blocks])
        out.append(m)
    return out


def histogram(d, shard_words):
    zero = sum(w[3] for w in shard_words) % 2**64
    total_sum = sum(struct.unpack("<d", struct.pack("<Q", w[1]))[0] for w in shard_words)
    max_bits = max(w[2] for w in shard_words)
    counts = [sum(col) % 2**64 for col in zip(*(w[4:] for w in shard_words))]
    buckets = [[upper_bound(d["schema"], d["min_index"] + k), n] for k, n in enumerate(counts) if n]
    return {
        "count": zero + sum(counts),
        "sum": total_sum,
        "max": from_ordered_bits(max_bits),
        "zero": zero,
        "buckets": buckets,
        "schema": d["schema"],
        "zero_threshold": d["zero_threshold"],
        "min_index": d["min_index"],
        "counts": counts,
    }


def read_file(path, owner=None, dir_fd=None):
    """One registry as a dict: path, pid, process, registry, state, metrics."""
    f = File(path, owner, dir_fd)
    try:
        h = parse_header(f)
        return {
            "path": path, "pid": h["pid"], "process": h["process_name"],
            "registry": h["registry_name"],
            "state": "alive" if f.alive((h["pid"], h["start_ticks"])) else "dead",
            "metrics": values(f, h, parse_descriptors(f, h)),
        }
    finally:
        f.close()


# --- the library API: objects over the same dicts ---------------------------

class Metric:
    """One series: ``kind`` (counter, gauge, gauge_f64, histogram), name,
    labels (a dict, in registration order), help, unit and value (an int, a
    float, or a :class:`HistogramValue`)."""

    __slots__ = ("kind", "name", "labels", "help", "unit", "value")

    def __init__(self, m):
        self.kind, self.name, self.labels = m["type"], m["name"], m["labels"]
        self.help, self.unit = m["help"], m["unit"]
        self.value = HistogramValue(m["value"]) if m["kind"] == "histogram" else m["value"]

    def __repr__(self):
        return f"Metric({self.kind} {self.name}{self.labels or ''} = {self.value!r})"


class HistogramValue:
    """count, sum, max (None if empty), zero_count, zero_threshold, schema,
    min_index and counts (one per bucket from min_index);
    ``buckets()`` gives (upper bound, count) of the non-empty ones."""

    __slots__ = ("count", "sum", "max", "zero_count", "zero_threshold", "schema", "min_index", "counts")

    def __init__(self, v):
        self.count, self.sum, self.max = v["count"], v["sum"], v["max"]
        self.zero_count, self.zero_threshold = v["zero"], v["zero_threshold"]
        self.schema, self.min_index, self.counts = v["schema"], v["min_index"], v["counts"]

    def buckets(self):
        return [(upper_bound(self.schema, self.min_index + k), n) for k, n in enumerate(self.counts) if n]

    def __repr__(self):
        return f"HistogramValue(count={self.count}, sum={self.sum}, max={self.max})"


class RegistryFile:
    """One registry file: ``snapshot()`` reads its metrics now, ``state()``
    says whether its writer is alive. Holds no descriptor between reads."""

    def __init__(self, path, owner=None, _read=None):
        self.path = os.fspath(path)
        self._owner = owner
        self._last = _read

    def _read(self):
        d = os.path.dirname(self.path) or "."
        dir_fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self._last = read_file(self.path, self._owner, dir_fd)
        finally:
            os.close(dir_fd)
        return self._last

    def _info(self):
        return self._last or self._read()

    @property
    def pid(self):
        return self._info()["pid"]

    @property
    def process(self):
        return self._info()["process"]

    @property
    def registry(self):
        return self._info()["registry"]

    @property
    def state(self):
        return self._info()["state"]

    @property
    def metrics(self):
        return [Metric(m) for m in self._info()["metrics"]]

    def snapshot(self):
        """Reads the file again: a list of :class:`Metric`."""
        return [Metric(m) for m in self._read()["metrics"]]

    def __repr__(self):
        return f"<topdeck registry {self.path}>"


def open(path):  # noqa: A001 - the reader's entry point, like os.open
    """A registry file given by path (checked as section 1 says, except the
    directory's owner, which a bare path does not name)."""
    return RegistryFile(path)


class Listing:
    """What one listing found: ``registries`` (RegistryFile, read once),
    ``errors`` ((path, message) of files and directories it could not read)."""

    def __init__(self, registries, errors):
        self.registries, self.errors = registries, errors


def listing(dir=None):
    """Lists and reads every registry of a namespace: ``dir``, else
    TOPDECK_DIR, else every /dev/shm/topdeck-<uid>[.<tag>]."""
    registries, errors = [], []
    for d in namespace_dirs(dir):
        try:
            dfd, owner = open_dir(d)
        except (BadFile, OSError) as e:
            errors.append((d, str(e)))
            continue
        try:
            names = sorted(n for n in os.listdir(dfd) if n.endswith(F.SUFFIX) and not n.startswith("."))
            for name in names[:4096]:
                path = os.path.join(d, name)
                try:
                    registries.append(RegistryFile(path, owner, read_file(path, owner, dfd)))
                except (BadFile, OSError, UnicodeDecodeError, struct.error) as e:
                    errors.append((path, str(e)))
        finally:
            os.close(dfd)
    return Listing(registries, errors)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help="namespace directory (default: TOPDECK_DIR or /dev/shm/topdeck-*)")
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()

    registries, errors = [], []
    if args.files:
        for path in args.files:
            try:
                registries.append(read_file(path, None))
            except (BadFile, OSError, UnicodeDecodeError, struct.error) as e:
                errors.append({"path": path, "error": str(e)})
    else:
        found = listing(args.dir)
        registries = [r._last for r in found.registries]
        errors = [{"path": p, "error": e} for p, e in found.errors]
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
