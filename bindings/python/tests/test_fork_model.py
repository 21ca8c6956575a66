# SPDX-License-Identifier: Apache-2.0
"""The fork model prometheus_client's multiprocess users expect: a forked
worker's counts outlive it, whichever way it ends, and no file per fork is
left behind. Read through the Rust CLI, as `serve` and `push` read them:
only live registries are exported, so a count in a dead file is lost to
every total."""

import os
import subprocess
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
