# SPDX-License-Identifier: Apache-2.0
"""The fork model prometheus_client's multiprocess users expect: a forked
worker's counts outlive it, whichever way it ends, and no file per fork is
left behind. Read through the Rust CLI, as `serve` and `push` read them:
only live registries are exported, so a count in a dead file is lost to
every total."""

import os
import subprocess
import time
import sys

import pytest

from conftest import PACKAGE

WORKERS, EACH, OWN = 200, 3, 5

PARENT = f"""
import os, signal, sys, topdeck
reg = topdeck.Registry("forked")
jobs = reg.counter("jobs_total", help="Jobs.")
jobs.inc({OWN})
ending = sys.argv[1]
for _ in range({WORKERS}):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        jobs.inc({EACH})
        os.write(w, b"x")
        if ending == "exit":
            sys.exit(0)        # atexit runs
        if ending == "os._exit":
            os._exit(0)        # multiprocessing's children end so
        signal.pause()         # killed below
    os.close(w)
    os.read(r, 1)
    os.close(r)
    if ending == "kill":
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print(reg.path, flush=True)
sys.stdin.read()               # alive until the test has read
"""


@pytest.mark.parametrize("ending", ["exit", "os._exit", "kill"])
def test_the_counts_of_forked_workers_outlive_them_and_leave_no_file_each(ns, cli, ending):
    p = subprocess.Popen([sys.executable, "-c", PARENT, ending], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, env={**os.environ, "PYTHONPATH": str(PACKAGE)})
    try:
        assert p.stdout.readline().strip(), "the parent printed no path"
        listed = cli(ns, "ls", "--json")["registries"]
        alive = [r["path"] for r in listed if r["state"] == "alive"]
        total = 0
        for path in alive:
            total += sum(m["value"] for m in cli(ns, "show", "--json", path)["metrics"] if m["name"] == "jobs_total")
        assert total == OWN + WORKERS * EACH, f"{ending}: {total} counted in {len(alive)} live registries"
        files = [n for n in os.listdir(ns) if n.endswith(".topdeck")]
        assert len(files) == 1, f"{ending}: {len(files)} files for one parent and {WORKERS} finished workers"
    finally:
        p.stdin.close()
        p.wait(timeout=30)


def run(script, *args, **kw):
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(PACKAGE)}, **kw)


def values(cli, ns, path):
    return {(m["name"], tuple(sorted(m["labels"].items()))): m["value"]
            for m in cli(ns, "show", "--json", path)["metrics"]}


CONCURRENT = """
import os, sys, topdeck
workers, n = int(sys.argv[1]), int(sys.argv[2])
reg = topdeck.Registry("family", shards=3)
jobs = topdeck.Counter("jobs", "Jobs.", ["queue"], registry=reg)
busy = topdeck.Gauge("busy", "Busy.", registry=reg)
took = topdeck.Histogram("took_seconds", "Took.", registry=reg)
go_r, go_w = os.pipe()
pids = []
for _ in range(workers):
    pid = os.fork()
    if pid == 0:
        os.read(go_r, 1)
        for i in range(n):
            jobs.labels(f"q{i % 3}").inc()
            busy.inc()
            took.observe(0.001 * (i % 7 + 1))
        os._exit(0)
    pids.append(pid)
os.write(go_w, b"x" * workers)
for pid in pids:
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
print(reg.path, flush=True)
sys.stdin.read()
"""


def test_workers_counting_at_once_past_the_shards_lose_nothing_and_share_each_series(ns, cli):
    """Six workers at once in a file of three shards: three write shards of
    their own and three share the overflow shard (a lock across processes),
    every one adds to one gauge word, and each label value a worker first
    registers is registered once for all of them."""
    workers, n = 6, 50_000
    p = run(CONCURRENT, workers, n)
    try:
        path = p.stdout.readline().strip()
        assert path, p.stderr.read()
        got = values(cli, ns, path)
        jobs = {k: v for k, v in got.items() if k[0] == "jobs_total"}
        assert len(jobs) == 3 and sum(jobs.values()) == workers * n, jobs
        assert got[("busy", ())] == workers * n
        assert got[("took_seconds", ())]["count"] == workers * n
        assert [f for f in os.listdir(ns) if f.endswith(".topdeck")] == [os.path.basename(path)]
    finally:
        p.stdin.close()
        p.wait(timeout=30)


MISMATCH = """
import os, sys, topdeck
reg = topdeck.Registry("family")
reg.counter("warmup_total").inc()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.read(r, 1)
    try:
        reg.gauge("depth", {"q": "a"})
    except ValueError as e:
        print(e, flush=True)
    reg.counter("depth", {"q": "b"}).inc(2)
    os._exit(0)
reg.counter("depth", {"q": "a"}).inc()
os.write(w, b"x")
os.waitpid(pid, 0)
print(reg.path, flush=True)
sys.stdin.read()
"""


def test_a_series_registered_otherwise_by_another_process_of_the_family_is_refused(ns, cli):
    p = run(MISMATCH)
    try:
        said = p.stdout.readline()
        assert "registered by another process sharing this file" in said and "as a counter" in said, said
        assert "not as an integer gauge" in said, said
        path = p.stdout.readline().strip()
        got = values(cli, ns, path)
        assert got[("depth", (("q", "a"),))] == 1 and got[("depth", (("q", "b"),))] == 2
    finally:
        p.stdin.close()
        p.wait(timeout=30)


LAZY = """
import os, sys, topdeck
jobs = topdeck.Counter("jobs", "Jobs.", ["queue"])   # the default registry, nothing registered yet
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        jobs.labels("fast").inc()
        sys.exit(0)
    os.waitpid(pid, 0)
print(topdeck.REGISTRY.path, flush=True)
sys.stdin.read()
"""


def test_the_default_registry_is_opened_before_fork_so_workers_share_it(ns, cli):
    """A family with labels registers nothing until a worker picks its
    label values: the default registry is opened at the fork anyway."""
    p = run(LAZY)
    try:
        path = p.stdout.readline().strip()
        assert path, p.stderr.read()
        assert values(cli, ns, path) == {("jobs_total", (("queue", "fast"),)): 3}
        assert [f for f in os.listdir(ns) if f.endswith(".topdeck")] == [os.path.basename(path)]
    finally:
        p.stdin.close()
        p.wait(timeout=30)


OUTLIVED = """
import os, sys, topdeck
reg = topdeck.Registry("family")
jobs = reg.counter("jobs_total")
jobs.inc()
r, w = os.pipe()
if os.fork() == 0:
    os.read(r, 1)        # until the parent has exited
    jobs.inc(2)
    print("counted", flush=True)
    sys.stdin.read()
    sys.exit(0)
print(reg.path, flush=True)
os.write(w, b"x")
sys.exit(0)
"""


def test_the_last_process_of_the_family_to_exit_removes_the_file(ns, cli):
    p = run(OUTLIVED)
    try:
        path = p.stdout.readline().strip()
        assert p.stdout.readline() == "counted\n"
        assert p.wait(timeout=30) == 0
        # The parent exited cleanly; its worker lives on and keeps the file.
        (reg,) = cli(ns, "ls", "--json")["registries"]
        assert (reg["path"], reg["state"]) == (path, "alive")
        assert values(cli, ns, path) == {("jobs_total", ()): 3}
    finally:
        p.stdin.close()  # the worker's stdin too: it exits cleanly
    deadline = time.monotonic() + 10
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(path)
