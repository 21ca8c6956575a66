# SPDX-License-Identifier: Apache-2.0
"""The writer: creation as docs/FORMAT.md says, exact totals from many
threads, values the Rust reader agrees with, fork, errors."""

import os
import re
import stat
import struct
import subprocess
import sys
import threading

import pytest

import topdeck
from topdeck import reader

from conftest import PACKAGE


def test_the_file_is_created_as_the_format_says(ns):
    reg = topdeck.Registry("http", dir=ns)
    name = os.path.basename(reg.path)
    m = re.fullmatch(r"(\d+)-(\d+)-(\d+)\.topdeck", name)
    assert m and int(m[1]) == os.getpid()
    st = os.stat(reg.path)
    assert stat.S_IMODE(st.st_mode) == 0o600 and stat.S_IMODE(os.stat(ns).st_mode) == 0o700
    assert not [n for n in os.listdir(ns) if n.startswith(".creating-")]
    with open(reg.path, "rb") as f:
        head = f.read(384)
    assert head[:8] == b"TOPDECK\0"
    assert struct.unpack_from("<I", head, 8)[0] == 0x0001_0001
    assert struct.unpack_from("<Q", head, 16)[0] == st.st_size
    assert struct.unpack_from("<I", head, 24)[0] == os.getpid()
    assert head[192:196] == b"http"
    r = reader.open(reg.path)
    assert (r.state, r.registry, r.pid) == ("alive", "http", os.getpid())
    reg.close()
    assert not os.path.exists(reg.path)


def test_an_unsafe_directory_is_refused_and_left_alone(tmp_path):
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    with pytest.raises(OSError, match="unsafe namespace directory"):
        topdeck.Registry(dir=d)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o777 and not os.listdir(d)


def test_counts_from_more_threads_than_shards_are_exact(ns, cli):
    reg = topdeck.Registry(dir=ns, shards=3)
    c = reg.counter("ops_total", help="Ops.")
    h = reg.histogram("op_seconds")

    def work():
        for i in range(20_000):
            c.inc()
            h.observe((i % 100 + 1) / 1000)
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    show = cli(ns, "show", "--json", reg.path)
    vals = {m["name"]: m["value"] for m in show["metrics"]}
    assert vals["ops_total"] == 160_000
    assert vals["op_seconds"]["count"] == 160_000
    assert vals["op_seconds"]["max"] == 0.1
    assert c.get() == 160_000 and h.count() == 160_000
    reg.close()


def test_the_rust_reader_reads_every_kind_as_written(ns, cli):
    reg = topdeck.Registry(dir=ns)
    reg.counter("c_total", {"k": "v"}).add(41)
    reg.gauge("g").set(-7)
    reg.gauge_f64("f", unit="ratio").set(0.25)
    h = reg.histogram("h_seconds", help="H.", unit="seconds")
    for v in (0.0, -3.0, 0.001, 0.002, 5.0, 1e9, float("nan")):
        h.observe(v)
    ours = {m.name: m for m in reader.open(reg.path).snapshot()}
    rust = {m["name"]: m for m in cli(ns, "show", "--json", reg.path)["metrics"]}
    assert rust["c_total"]["value"] == ours["c_total"].value == 41
    assert rust["c_total"]["labels"] == {"k": "v"}
    assert rust["g"]["value"] == -7 and rust["f"]["value"] == 0.25 and rust["f"]["unit"] == "ratio"
    hv = ours["h_seconds"].value
    assert (hv.count, hv.zero_count, hv.max, hv.sum) == (6, 2, 1e9, 1e9 + 5.003 - 3.0)
    assert rust["h_seconds"]["value"]["count"] == 6
    assert rust["h_seconds"]["value"]["max"] == 1e9
    # Same bounds, same counts (the Rust reader lists the zero bucket
    # first): the bucket index is the Rust library's.
    assert [[hv.zero_threshold, 2]] + [list(b) for b in hv.buckets()] == rust["h_seconds"]["value"]["buckets"]
    reg.close()


def test_a_metric_registered_without_a_unit_takes_the_one_its_name_ends_in(ns, cli):
    reg = topdeck.Registry(dir=ns)
    reg.histogram("wait_seconds").observe(0.004)
    reg.counter("cpu_seconds_total").add(2)
    reg.gauge("body_bytes").set(3)
    reg.gauge("depth").set(1)
    rust = {m["name"]: m["unit"] for m in cli(ns, "show", "--json", reg.path)["metrics"]}
    assert rust == {"wait_seconds": "seconds", "cpu_seconds_total": "seconds",
                    "body_bytes": "bytes", "depth": ""}
    reg.close()


def test_the_prometheus_shaped_api(ns):
    reg = topdeck.Registry(dir=ns)
    c = topdeck.Counter("requests", "Requests.", ["route", "code"], registry=reg)
    c.labels("/", 200).inc()
    c.labels(route="/", code="200").inc(2)
    plain = topdeck.Counter("errors_total", "Errors.", registry=reg)
    with pytest.raises(ZeroDivisionError):
        with plain.count_exceptions():
            1 / 0
    g = topdeck.Gauge("inflight", "In flight.", registry=reg)
    with g.track_inprogress():
        assert g._child.get() == 1.0
    g.inc(3)
    g.dec()
    h = topdeck.Histogram("work", "Work.", unit="seconds", registry=reg)

    @h.time()
    def f():
        return 5
    assert f() == 5
    with h.time():
        pass
    got = {(m.name, tuple(m.labels.items())): m.value for m in reader.open(reg.path).snapshot()}
    assert got[("requests_total", (("route", "/"), ("code", "200")))] == 3
    assert got[("errors_total", ())] == 1
    assert got[("inflight", ())] == 2.0
    assert got[("work_seconds", ())].count == 2
    with pytest.raises(ValueError, match="only go up"):
        plain.inc(-1)
    with pytest.raises(TypeError, match="whole events"):
        plain.inc(0.5)
    with pytest.raises(ValueError, match="has labels"):
        c.labels(route="/")
    with pytest.raises(NotImplementedError, match="never removes"):
        c.remove("/", "200")
    reg.close()


def test_names_and_duplicates_are_refused_with_the_rule(ns):
    reg = topdeck.Registry(dir=ns)
    reg.counter("a_total", [("k", "v")])
    with pytest.raises(ValueError, match="already registered"):
        reg.gauge("a_total", [("k", "v")])
    with pytest.raises(ValueError, match=r"\[a-zA-Z_:\]"):
        reg.counter("bad-name")
    with pytest.raises(ValueError, match="not start with __"):
        reg.counter("x_total", [("__k", "v")])
    small = topdeck.Registry(dir=ns, metrics=1)
    small.counter("one_total")
    with pytest.raises(MemoryError, match="registry full.*larger metrics"):
        small.counter("two_total")
    with pytest.raises(ValueError, match="shards is 2000"):
        topdeck.Registry(dir=ns, shards=2000)
    reg.close()
    small.close()


def test_a_forked_child_counts_into_the_parents_file(ns):
    reg = topdeck.Registry(dir=ns)
    c = reg.counter("n_total")
    g = reg.gauge("g")
    h = reg.histogram("h_seconds")
    c.inc(5)
    g.set(9)
    h.observe(1.0)
    # Kept before the fork (as a hot loop would): they work in the child.
    inc, observe = c.inc, h.observe
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            inc(2)
            observe(2.0)
            g.inc()
            os.write(w, reg.path.encode())
        finally:
            os._exit(0)
    os.close(w)
    child_path = os.read(r, 4096).decode()
    os.waitpid(pid, 0)
    # No file of its own: its counts are in the parent's, after it ended.
    assert child_path == reg.path and os.listdir(ns) == [os.path.basename(reg.path)]
    parent = reader.open(reg.path)
    got = {m.name: m.value for m in parent.snapshot()}
    assert (got["n_total"], got["g"], got["h_seconds"].count, got["h_seconds"].max) == (7, 10, 2, 2.0)
    assert parent.state == "alive"
    c.inc()
    assert c.get() == 8
    reg.close()
    assert not os.path.exists(reg.path)


@pytest.mark.parametrize("ending, stays", [("sys.exit(0)", False), ("os._exit(0)", True)])
def test_a_clean_exit_removes_the_file_and_os_exit_leaves_it_dead(ns, cli, ending, stays):
    program = (
        "import os, sys, topdeck\n"
        "r = topdeck.Registry('ending')\n"
        "r.counter('jobs_total', help='Jobs.').inc(3)\n"
        "print(r.path, flush=True)\n"
        f"{ending}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(PACKAGE)}
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    path = out.stdout.strip()
    assert os.path.exists(path) == stays, path
    listed = cli(ns, "ls", "--json")["registries"]
    assert [r["state"] for r in listed] == (["dead"] if stays else [])


def test_a_counter_refuses_what_it_cannot_hold_and_stops_at_the_top(ns, cli):
    """An increment of 2**64 or more is refused as inc(-1) is (ValueError),
    never taken and lost; a total past 2**64-1 stays there, in one shard and
    summed over two, as the Rust reader reads it: never backwards."""
    reg = topdeck.Registry(dir=ns, shards=1)
    c = reg.counter("bytes_total", help="Bytes.")
    c.inc(5)
    for amount in (2**64, 2**64 + 7, 2**70):
        with pytest.raises(ValueError, match="below 2\\*\\*64"):
            c.inc(amount)
    with pytest.raises(ValueError, match="only go up"):
        c.inc(-1)
    assert c.get() == 5
    top = 2**64 - 1
    c.inc(top - 10)
    c.inc(100)  # this thread's own shard passes the top
    assert c.get() == top
    # A second thread finds the only shard taken: its words are in the
    # overflow shard, and the sum of the two passes the top too.
    half = reg.counter("half_total")
    half.inc(2**63)
    t = threading.Thread(target=lambda: (half.inc(2**63), c.inc(3)))
    t.start()
    t.join()
    vals = {m["name"]: m["value"] for m in cli(ns, "show", "--json", reg.path)["metrics"]}
    assert (vals["bytes_total"], vals["half_total"]) == (top, top)
    assert half.get() == top
    ours = {m.name: m.value for m in reader.open(reg.path).snapshot()}
    assert (ours["bytes_total"], ours["half_total"]) == (top, top)
    reg.close()
