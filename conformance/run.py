#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The topdeck conformance runner (conformance/README.md, PROTOCOL.md).

Runs every implementation's writer driver, in `exit`, `crash` and `late`
modes, against every implementation's reader driver; every reader over
the hostile-file corpus and the reference vectors; checks that the Rust
writer still writes the vector's format-fixed bytes; prints a matrix and
exits non-zero on any failure.

    python3 conformance/run.py              # build, then run everything
    python3 conformance/run.py --no-build   # drivers already built
    python3 conformance/run.py --self-test  # a mutated vector must turn the run red
    python3 conformance/run.py --write-vector   # regenerate conformance/vectors/
    python3 conformance/run.py --write-expected # regenerate expected*.json (then review them)

Python 3.11, standard library only.
"""

import argparse
import json
import math
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from decimal import Decimal, localcontext

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import layout as L  # noqa: E402

CARGO_TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(TOP, "target"))
DEBUG = os.path.join(CARGO_TARGET, "debug")
TOPDECK = os.path.join(DEBUG, "topdeck")
VECTOR_TOOL = os.path.join(DEBUG, "td-conform-vector")
RUST_WRITER = os.path.join(DEBUG, "td-conform-writer")
VECTOR = os.path.join(HERE, "vectors", "conformance.topdeck")
CORPUS = os.path.join(HERE, "corpus")
# Any one wait: far above a normal run, there so that a hung driver fails
# the run instead of hanging it.
TIMEOUT = 60

# The implementations. `dir` is where one lives: a binding whose directory
# exists without its drivers fails the run in CI (CI set) and is reported
# "not built" elsewhere. Commands are argv lists run from the top of the
# repository; the writer gets `<dir> <mode>` appended, the reader `<dir>`.
# A binding overrides its entry's `build`, `writer`, `reader` and `env`
# with a `conformance.json` in its directory (README.md, "Adding an
# implementation"); without one, the defaults below are tried, then any
# `*conform*writer*` / `*conform*reader*` program found in its directory.
CARGO = os.environ.get("CARGO", "cargo")
IMPLEMENTATIONS = [
    {
        "name": "rust",
        "dir": "tests",
        "build": [[CARGO, "build", "-q", "-p", "topdeck-tests", "--bins"],
                  [CARGO, "build", "-q", "-p", "topdeck-cli", "--bin", "topdeck"]],
        "writer": [RUST_WRITER],
        "reader": [os.path.join(DEBUG, "td-conform-reader")],
    },
    {
        "name": "c",
        "dir": "bindings/c",
        "build": [["make", "-C", "bindings/c"]],
        # bindings/c/Makefile builds under <target>/c/<profile>/bin.
        "writer": [os.path.join(CARGO_TARGET, "c", "debug", "bin", "conformance-writer")],
        "reader": [os.path.join(CARGO_TARGET, "c", "debug", "bin", "conformance-reader")],
    },
    {
        "name": "python",
        "dir": "bindings/python",
        "build": [],
        "writer": [sys.executable, "bindings/python/conformance/writer.py"],
        "reader": [sys.executable, "bindings/python/conformance/reader.py"],
        "env": {"PYTHONPATH": "bindings/python"},
    },
    {
        "name": "java",
        "dir": "bindings/java",
        "build": [["bindings/java/build.sh"]],
        "writer": ["bindings/java/conformance/writer.sh"],
        "reader": ["bindings/java/conformance/reader.sh"],
    },
    # Its build command and drivers come from bindings/go/conformance.json.
    {"name": "go", "dir": "bindings/go", "build": [], "writer": [], "reader": []},
]

MODES = ("exit", "crash", "late")
TIMER = "db_query_seconds"


# ---------------------------------------------------------------- comparing

def first_difference(got, want, path="$"):
    """Where `got` (a reader's parsed JSON) first differs from `want`, or
    None. Integers must be integers; where a float is expected an integer
    is accepted (`%.17g` prints 1e9 as `1000000000`)."""
    if isinstance(want, bool) or want is None:
        return None if got is want else f"{path}: {show(got)} != {show(want)}"
    if isinstance(want, int):
        if isinstance(got, int) and not isinstance(got, bool) and got == want:
            return None
        return f"{path}: {show(got)} != {show(want)}"
    if isinstance(want, float):
        ok = isinstance(got, (int, float)) and not isinstance(got, bool) and (
            float(got) == want and math.copysign(1, float(got)) == math.copysign(1, want)
            or (math.isnan(want) and isinstance(got, float) and math.isnan(got)))
        return None if ok else f"{path}: {show(got)} != {show(want)}"
    if isinstance(want, str):
        return None if got == want else f"{path}: {show(got)} != {show(want)}"
    if isinstance(want, list):
        if not isinstance(got, list):
            return f"{path}: {show(got)} is not a list"
        for i, (g, w) in enumerate(zip(got, want)):
            d = first_difference(g, w, f"{path}[{i}]")
            if d:
                return d
        if len(got) != len(want):
            return f"{path}: {len(got)} items != {len(want)}"
        return None
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"{path}: {show(got)} is not an object"
        for k in want:
            if k not in got:
                return f"{path}.{k}: missing"
            d = first_difference(got[k], want[k], f"{path}.{k}")
            if d:
                return d
        extra = sorted(set(got) - set(want))
        return f"{path}.{extra[0]}: unexpected" if extra else None
    raise TypeError(f"unexpected {type(want)} in the expected document")


def show(v):
    s = json.dumps(v, ensure_ascii=False)
    return s if len(s) <= 60 else s[:57] + "..."


def comparable(doc):
    """The parts of a reader's document the protocol compares: no file
    names, and of the timer's value only its count."""
    doc = json.loads(json.dumps(doc))
    for r in doc.get("registries", []) if isinstance(doc, dict) else []:
        if isinstance(r, dict):
            r.pop("file", None)
            for m in r.get("metrics", []) if isinstance(r.get("metrics"), list) else []:
                if isinstance(m, dict) and m.get("name") == TIMER and isinstance(m.get("value"), dict):
                    m["value"] = {"count": m["value"].get("count")}
    return doc


def check_doc(got, want, state):
    """None if the reader's document `got` is `want` (one registry) with `state`."""
    want = json.loads(json.dumps(want))
    for r in want["registries"]:
        r["state"] = state
    return first_difference(comparable(got), comparable(want))


# ---------------------------------------------------------------- processes

class Writer:
    """A writer driver talking on stdin/stdout; never outlives the run."""

    def __init__(self, argv, ns, mode, env=None):
        self.argv = argv + [ns, mode]
        self.err = tempfile.TemporaryFile()
        self.p = subprocess.Popen(self.argv, cwd=TOP, env=environment(env), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.err,
                                  start_new_session=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line.decode(errors="replace").strip())
        self.lines.put(None)

    def expect(self, word):
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise Failure(f"no `{word}` from the writer within {TIMEOUT} s") from None
            if line == word:
                return
            if line is None:
                raise Failure(f"the writer ended before `{word}`: {self.stderr()}")

    def send(self, line):
        self.p.stdin.write(line.encode() + b"\n")
        self.p.stdin.flush()

    def close(self):
        """Closes stdin and returns the exit status (negative: a signal)."""
        self.p.stdin.close()
        try:
            return self.p.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            raise Failure(f"the writer did not end within {TIMEOUT} s of stdin's close") from None

    def stderr(self):
        self.err.seek(0)
        return self.err.read().decode(errors="replace").strip()[-300:] or "(no stderr)"

    def kill(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()


class Failure(Exception):
    pass


def environment(extra):
    """This process's environment with `extra` (relative paths from the top
    made absolute, prepended to what is there)."""
    env = dict(os.environ)
    for k, v in (extra or {}).items():
        v = os.path.join(TOP, v) if k.endswith("PATH") and not os.path.isabs(v) else v
        env[k] = v + os.pathsep + env[k] if k.endswith("PATH") and env.get(k) else v
    return env


def read(reader, ns, env=None):
    """The reader driver's document for `ns`."""
    try:
        out = subprocess.run(reader + [ns], cwd=TOP, env=environment(env),
                             capture_output=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        raise Failure(f"the reader did not finish within {TIMEOUT} s") from None
    if out.returncode != 0:
        raise Failure(f"the reader exited {out.returncode}: "
                      f"{out.stderr.decode(errors='replace').strip()[-300:]}")
    try:
        return json.loads(out.stdout)
    except ValueError as e:
        raise Failure(f"the reader printed no JSON document ({e})") from None


def registry_files(ns):
    return sorted(n for n in os.listdir(ns) if n.endswith(".topdeck"))


def namespace():
    """A private namespace directory (mode 0700, as the format requires)."""
    return tempfile.mkdtemp(prefix="topdeck-conform-")


# ---------------------------------------------------------------- the matrix

def run_writer(impl, mode, readers, expected, late, cells):
    """Runs `impl`'s writer in `mode` once; every reader reads it at each
    checkpoint. The first failure of each (writer, reader) pair goes to
    `cells`; a failure of the writer itself fails every pair."""
    ns = namespace()
    w = None

    def each_reader(what, want, state):
        for r in readers:
            key = (impl["name"], r["name"])
            if cells.get(key):
                continue
            try:
                d = check_doc(read(r["reader"], ns, r.get("env")), want, state)
            except Failure as e:
                d = str(e)
            if d:
                cells[key] = f"{mode}, {what}: {d}"

    def fail_all(why):
        for r in readers:
            cells.setdefault((impl["name"], r["name"]), f"{mode}: {why}")

    try:
        w = Writer(impl["writer"], ns, mode, impl.get("env"))
        w.expect("ready")
        each_reader("alive", expected, "alive")
        if mode == "late":
            w.send("more")
            w.expect("more-done")
            each_reader("after more", late, "alive")
        status = w.close()
        if mode == "crash":
            if status != -signal.SIGKILL:
                raise Failure(f"the writer ended with {status}, not SIGKILL: {w.stderr()}")
            each_reader("dead", expected, "dead")
            try:
                gc = subprocess.run([TOPDECK, "gc"], env={**os.environ, "TOPDECK_DIR": ns},
                                    capture_output=True, timeout=TIMEOUT)
            except OSError as e:
                raise Failure(f"cannot run {TOPDECK} gc ({e}): build it with "
                              "`cargo build -p topdeck-cli`") from None
            left = registry_files(ns)
            if gc.returncode != 0 or left:
                raise Failure(f"`topdeck gc` exited {gc.returncode} and left {left}: "
                              f"{gc.stderr.decode(errors='replace').strip()[-200:]}")
        else:
            if status != 0:
                raise Failure(f"the writer exited {status}: {w.stderr()}")
            left = registry_files(ns)
            if left:
                raise Failure(f"the writer exited and left {left}")
            each_reader("after exit", {"registries": [], "rejected": []}, "dead")
    except Failure as e:
        fail_all(str(e))
    finally:
        if w:
            w.kill()
        shutil.rmtree(ns, ignore_errors=True)


# A listing names at most this many bad files of one directory and counts
# the rest in one note (topdeck's MAX_ERRORS_PER_DIR, docs/SECURITY.md): the
# corpus is read in batches of that many, so that every reader gives its
# verdict on every file.
BATCH = 16


def corpus_dirs():
    """The corpus in private namespace directories of BATCH files each."""
    names = sorted(n for n in os.listdir(CORPUS) if n.endswith(".topdeck"))
    return [corpus_dir(names[i:i + BATCH]) for i in range(0, len(names), BATCH)]


def corpus_dir(names):
    """Corpus files in a private namespace directory. `sparse-*` files are
    extended to the length their header claims, with a hole, as a hostile
    user's sparse file is: their claims cost nothing and a reader that
    believes them pays for gigabytes."""
    ns = namespace()
    for n in names:
        if n.endswith(".topdeck"):
            dst = os.path.join(ns, n)
            shutil.copyfile(os.path.join(CORPUS, n), dst)
            os.chmod(dst, 0o600)
            if n.startswith("sparse-"):
                with open(dst, "rb") as f:
                    claimed = L.u64(f.read(L.FILE_LEN + 8), L.FILE_LEN)
                os.truncate(dst, claimed)
    return ns


def check_corpus(impl, want):
    dirs = corpus_dirs()
    try:
        got = []
        for ns in dirs:
            part = read(impl["reader"], ns, impl.get("env")).get("rejected")
            if part is None:
                got = None
                break
            got += part
        if got != want:
            extra = sorted(set(got or []) - set(want))
            missing = sorted(set(want) - set(got or []))
            if got is None:
                return "corpus: no `rejected` list"
            said = ([f"rejects {', '.join(extra)}, which the others read"] if extra else []) + \
                ([f"reads {', '.join(missing)}, which the others reject"] if missing else [])
            return "corpus: " + "; ".join(said) if said else "corpus: `rejected` is not sorted"
        return None
    except Failure as e:
        return f"corpus: {e}"
    finally:
        for ns in dirs:
            shutil.rmtree(ns, ignore_errors=True)


def check_vector(impl, vector, expected):
    """The reader reads the reference file to the expected document, dead."""
    ns = namespace()
    try:
        dst = os.path.join(ns, "4242-1-0.topdeck")
        shutil.copyfile(vector, dst)
        os.chmod(dst, 0o600)
        d = check_doc(read(impl["reader"], ns, impl.get("env")), expected, "dead")
        return f"vector: {d}" if d else None
    except Failure as e:
        return f"vector: {e}"
    finally:
        shutil.rmtree(ns, ignore_errors=True)


# ------------------------------------------------------ the vector's fixed bytes

def fresh_vector(out):
    """Runs the Rust writer with fixed durations and packs its file into `out`."""
    ns = namespace()
    w = Writer([RUST_WRITER, "--fixed-durations"], ns, "exit")
    try:
        w.expect("ready")
        files = registry_files(ns)
        if len(files) != 1:
            raise Failure(f"the Rust writer made {files}, not one file")
        r = subprocess.run([VECTOR_TOOL, os.path.join(ns, files[0]), out],
                           capture_output=True, timeout=TIMEOUT)
        if r.returncode != 0:
            raise Failure(f"td-conform-vector failed: {r.stderr.decode(errors='replace')}")
        if w.close() != 0:
            raise Failure(f"the Rust writer failed: {w.stderr()}")
    finally:
        w.kill()
        shutil.rmtree(ns, ignore_errors=True)


def fixed_fields(b):
    """What docs/FORMAT.md fixes for a given script, whatever the writer's
    layout: magic, major version, names, and per metric its descriptor's
    meaning (not where its strings and values were put), its strings'
    bytes, and its value words summed over shards (not for the timer,
    whose durations are the clock's)."""
    fields = {
        "magic": bytes(b[:8]), "major": L.u32(b, L.VERSION) >> 16,
        "registry_name": bytes(b[L.REGISTRY_NAME:L.REGISTRY_NAME + 64]),
    }
    for i, m in enumerate(L.metrics(b)):
        m.pop("value_offset")
        if m["name"] == TIMER.encode():
            m["words"] = m["words"][:0]
        for k, v in m.items():
            fields[f"metric {i} ({m['name'].decode(errors='replace')}) {k}"] = v
    return fields


def check_fixed_bytes(vector):
    with tempfile.TemporaryDirectory() as t:
        out = os.path.join(t, "fresh.topdeck")
        try:
            fresh_vector(out)
        except Failure as e:
            return str(e)
        with open(out, "rb") as f:
            fresh = fixed_fields(f.read())
    with open(vector, "rb") as f:
        ref = fixed_fields(f.read())
    for k in sorted(set(ref) | set(fresh)):
        if ref.get(k) != fresh.get(k):
            return f"{k}: the Rust writer now writes {fresh.get(k)!r}, the vector holds {ref.get(k)!r}"
    return None


# --------------------------------------------- the expected document, from the script

def bucket_index(v, schema):
    """FORMAT.md section 5's index of a finite v > 0, for schema > 0, with
    the bounds computed to 60 digits and rounded once to binary64 (not the
    Rust table lookup this checks)."""
    frac, exp = math.frexp(v)
    n = 1 << schema
    with localcontext() as ctx:
        ctx.prec = 60
        bounds = [float(Decimal(2) ** (Decimal(j) / n - 1)) for j in range(n)]
    return sum(1 for b in bounds if b < frac) + (exp - 1) * n


def upper_bound(i, schema):
    n = 1 << schema
    with localcontext() as ctx:
        ctx.prec = 60
        frac = float(Decimal(2) ** (Decimal(i % n) / n - 1))
    return math.ldexp(frac, i // n + 1)


def histogram(values, schema=3, lo=1e-9, hi=1e6):
    """The canonical value of a histogram of `values` with the default
    buckets (schema 3, (1 ns, 10^6 s]), computed from the format's text."""
    min_i, max_i = bucket_index(lo, schema), bucket_index(hi, schema)
    zt = upper_bound(min_i - 1, schema)
    zero, counts, total = 0, {}, 0.0
    for v in values:
        total += v
        if v <= zt:
            zero += 1
        else:
            i = min(max(bucket_index(v, schema), min_i), max_i)
            counts[i] = counts.get(i, 0) + 1
    first, last = min(counts), max(counts)
    return {
        "schema": schema, "zero_threshold": zt, "zero_count": zero, "min_index": first,
        "buckets": [counts.get(i, 0) for i in range(first, last + 1)],
        "count": len(values), "sum": total, "max": max(values),
    }


def metric(kind, name, labels, help_, unit, value):
    return {"kind": kind, "name": name, "labels": [list(p) for p in labels],
            "help": help_, "unit": unit, "value": value}


def from_script():
    """PROTOCOL.md's script, turned into the expected documents by hand,
    phase 1 and after `more`."""
    phase1 = [
        metric("counter", "jobs_total", [("queue", "fast")], "Jobs done.", "", 4 * 25_000),
        metric("counter", "jobs_total", [("queue", "slow")], "Jobs done.", "", 7),
        metric("gauge", "queue_depth", [], "Jobs waiting — ünïcödé ✓", "", -42),
        metric("gauge_f64", "temperature_celsius", [("room", 'a"b\\c')], "Temperature.",
               "celsius", -0.125),
        metric("histogram", "request_duration_seconds", [("route", "/")], "Time to serve.",
               "seconds", histogram([i / 1000 for i in range(1, 1001)])),
        metric("histogram", "payload_bytes", [], "Sizes.", "bytes",
               histogram([0.0, 0.0, 0.0, 1024.0, 1024.0, 1e9])),
        metric("histogram", TIMER, [], "Time in the database.", "seconds",
               {"count": 10}),
    ]
    late = metric("counter", "late_total", [], "Registered late.", "", 3)

    def doc(metrics):
        return {"registries": [{"file": "", "registry": "conformance", "state": "alive",
                                "metrics": metrics}], "rejected": []}
    return doc(phase1), doc(phase1 + [late])


ORDER = ["registries", "rejected", "file", "registry", "state", "metrics",
         "kind", "name", "labels", "help", "unit", "value",
         "schema", "zero_threshold", "zero_count", "min_index", "buckets", "count", "sum", "max"]


def pretty(v, indent=0):
    """JSON for people: keys in the protocol's order, one metric field a
    line, lists of numbers or strings on one line."""
    pad = "  " * (indent + 1)
    if isinstance(v, dict):
        keys = sorted(v, key=lambda k: ORDER.index(k) if k in ORDER else len(ORDER))
        body = ",\n".join(f"{pad}{json.dumps(k)}: {pretty(v[k], indent + 1)}" for k in keys)
        return "{\n" + body + "\n" + "  " * indent + "}" if v else "{}"
    if isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v) and \
            not all(isinstance(x, list) and all(isinstance(y, str) for y in x) for x in v):
        body = ",\n".join(pad + pretty(x, indent + 1) for x in v)
        return "[\n" + body + "\n" + "  " * indent + "]"
    return json.dumps(v, ensure_ascii=False)


def write_expected():
    """Runs the Rust writer in `late` mode and keeps what the Rust reader
    reads before and after `more`: the documents to review and check in."""
    ns = namespace()
    reader = IMPLEMENTATIONS[0]["reader"]
    w = Writer([RUST_WRITER, "--fixed-durations"], ns, "late")
    try:
        w.expect("ready")
        docs = [read(reader, ns)]
        w.send("more")
        w.expect("more-done")
        docs.append(read(reader, ns))
        if w.close() != 0:
            raise Failure(f"the Rust writer failed: {w.stderr()}")
    finally:
        w.kill()
        shutil.rmtree(ns, ignore_errors=True)
    for name, d in zip(("expected.json", "expected-late.json"), docs):
        for r in d["registries"]:
            r["file"] = "<pid>-<start>-<seq>.topdeck"
        with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
            f.write(pretty(d) + "\n")
        print(f"wrote conformance/{name}")


def self_check(expected, late):
    """The checked-in documents say what the script implies."""
    want, want_late = from_script()
    for name, got, w in (("expected.json", expected, want),
                         ("expected-late.json", late, want_late)):
        d = first_difference(comparable(got), comparable(w))
        if d:
            return f"{name} disagrees with the script: {d}"
    return None


# ---------------------------------------------------------------- main

def program(argv):
    """The driver's file: the script an interpreter runs, else the program."""
    return argv[1] if argv[0] == sys.executable and len(argv) > 1 else argv[0]


def built(impl):
    """Whether both drivers exist."""
    return all(os.path.exists(os.path.join(TOP, program(impl[k]))) for k in ("writer", "reader"))


def with_manifest(impl):
    """The entry with its binding's conformance.json applied, if any."""
    path = os.path.join(TOP, impl["dir"], "conformance.json")
    if impl["name"] == "rust" or not os.path.exists(path):
        return impl
    with open(path, encoding="utf-8") as f:
        m = json.load(f)
    unknown = set(m) - {"build", "writer", "reader", "env"}
    if unknown:
        raise SystemExit(f"{path}: unknown keys {sorted(unknown)}")
    return {**impl, **m, "manifest": os.path.relpath(path, TOP)}


def discovered(impl):
    """`impl` with drivers found by name in its directory when the
    configured ones are missing: `*conform*writer*` and `*conform*reader*`,
    executables or Python scripts."""
    if built(impl) or "manifest" in impl:
        return impl
    found = {}
    root = os.path.join(TOP, impl["dir"])
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith((".", "__")))
        for f in sorted(files):
            p = os.path.join(d, f)
            rel = os.path.relpath(p, TOP)
            for role in ("writer", "reader"):
                if "conform" in f and role in f and role not in found:
                    if f.endswith(".py"):
                        found[role] = [sys.executable, rel]
                    elif "." not in f and os.access(p, os.X_OK):
                        found[role] = [rel]
    if len(found) == 2:
        return {**impl, **found, "discovered": True}
    return impl


def build(impls):
    for impl in impls:
        for cmd in impl["build"]:
            r = subprocess.run(cmd, cwd=TOP, env=environment(impl.get("env")))
            if r.returncode != 0:
                print(f"conformance: building {impl['name']} failed: {' '.join(cmd)}",
                      file=sys.stderr)
                return False
    return True


def load(name):
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return json.load(f)


def table(rows, header):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    print(line(header))
    print(line(["-" * w for w in widths]))
    for r in rows:
        print(line(r))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-build", action="store_true", help="do not build the drivers first")
    ap.add_argument("--self-test", action="store_true",
                    help="flip a counter's value word in a copy of the vector and check that "
                         "the run fails (exits 0 if it does)")
    ap.add_argument("--write-vector", action="store_true",
                    help="regenerate conformance/vectors/conformance.topdeck from the Rust writer")
    ap.add_argument("--write-expected", action="store_true",
                    help="regenerate conformance/expected*.json from the Rust writer and reader")
    ap.add_argument("--vector", default=VECTOR, help=argparse.SUPPRESS)
    # The self-test's run: the vector checks alone (the matrix and the
    # corpus do not read the vector, and would double make conformance).
    ap.add_argument("--vector-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    started = time.monotonic()

    everyone = [with_manifest(i) for i in IMPLEMENTATIONS]
    present = [i for i in everyone
               if i["name"] == "rust" or os.path.isdir(os.path.join(TOP, i["dir"]))]
    if not args.no_build and not build(present):
        return 1
    everyone = [discovered(i) if i in present else i for i in everyone]
    if args.write_vector:
        fresh_vector(VECTOR)
        print(f"wrote {os.path.relpath(VECTOR, TOP)}")
        return 0
    if args.write_expected:
        write_expected()
        return 0
    if args.self_test:
        return self_test()

    failures = []
    status = []
    for impl in everyone:
        have_dir = os.path.isdir(os.path.join(TOP, impl["dir"]))
        if built(impl):
            how = impl.get("manifest") or ("found by name" if impl.get("discovered") else "")
            drivers = f"{' '.join(impl['writer'])} | {' '.join(impl['reader'])}"
            status.append((impl["name"], f"built{' (' + how + ')' if how else ''}: "
                           f"{drivers.replace(sys.executable, 'python3').replace(TOP + '/', '')}"))
        elif have_dir:
            status.append((impl["name"], "not built (its directory exists)"))
            if os.environ.get("CI"):
                failures.append(f"{impl['name']}: {impl['dir']} exists but its drivers do not")
        else:
            status.append((impl["name"], "not built (not in the tree)"))
    impls = [i for i in everyone if built(i)]
    table([list(s) for s in status], ["implementation", "drivers"])
    print()

    expected, late = load("expected.json"), load("expected-late.json")
    d = self_check(expected, late)
    if d:
        failures.append(d)
    with open(os.path.join(CORPUS, "rejected.txt")) as f:
        rejected = [ln.strip() for ln in f if ln.strip()]

    cells = {}
    for w in [] if args.vector_only else impls:
        for mode in MODES:
            run_writer(w, mode, impls, expected, late, cells)
    rows = [[w["name"]] + [("FAIL: " + cells[(w["name"], r["name"])])
                           if cells.get((w["name"], r["name"])) else "pass" for r in impls]
            for w in impls]
    if not args.vector_only:
        print("writer \\ reader (modes exit, crash, late):")
        table(rows, ["writer"] + [r["name"] for r in impls])
        print()

    rows = []
    for r in impls:
        c = None if args.vector_only else check_corpus(r, rejected)
        v = check_vector(r, args.vector, expected)
        corpus = "not run" if args.vector_only else "FAIL: " + c if c else "pass"
        rows.append([r["name"], corpus, "FAIL: " + v if v else "pass"])
        failures += [f"{r['name']} reader: {x}" for x in (c, v) if x]
    table(rows, ["reader", f"corpus ({sum(n.endswith('.topdeck') for n in os.listdir(CORPUS))} files)", "vector"])
    print()

    fixed = check_fixed_bytes(args.vector)
    print(f"rust writer, format-fixed bytes of the vector: {'FAIL: ' + fixed if fixed else 'pass'}")
    if fixed:
        failures.append(f"fixed bytes: {fixed}")
    failures += [f"{w} writer, {r} reader: {c}" for (w, r), c in sorted(cells.items()) if c]

    print(f"\n{len(failures)} failure(s) in {time.monotonic() - started:.1f} s")
    for f in failures:
        print(f"  FAIL {f}")
    return 1 if failures else 0


def self_test():
    """The test of the test: one counter's value word flipped in a copy of
    the vector must turn the run red, on the reader and on the fixed bytes."""
    with open(VECTOR, "rb") as f:
        b = bytearray(f.read())
    fast = next(m for m in L.metrics(b) if m["name"] == b"jobs_total")
    h = L.header(b)
    word = L.shard_offsets(h)[0] + fast["value_offset"]
    L.put_u64(b, word, L.u64(b, word) ^ 1)
    with tempfile.TemporaryDirectory() as t:
        mutated = os.path.join(t, "mutated.topdeck")
        with open(mutated, "wb") as f:
            f.write(b)
        r = subprocess.run([sys.executable, __file__, "--no-build", "--vector-only",
                            "--vector", mutated],
                           capture_output=True, text=True, timeout=10 * TIMEOUT)
    reds = [ln for ln in r.stdout.splitlines() if ln.startswith("  FAIL")]
    # Red on both counts: every reader reads the flipped value, and the
    # Rust writer's bytes no longer match the vector's.
    reader_red = any("vector: $.registries[0].metrics[0].value" in ln for ln in reds)
    bytes_red = any("fixed bytes: metric 0 (jobs_total) words" in ln for ln in reds)
    if r.returncode != 0 and reader_red and bytes_red:
        print("self-test: a vector with one flipped counter word turned the run red, as it must")
        return 0
    print(r.stdout + r.stderr)
    print("self-test: FAIL: a vector with a flipped counter word did not fail the run "
          "on both the readers and the fixed bytes", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
