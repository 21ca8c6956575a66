#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What sharing a registry with forked workers costs per update.

    python3 bindings/python/bench/fork.py

Thread CPU time per call, median of 7 runs of 100,000, in one process
before any fork, in a forked worker, and in the parent after the fork.
Counters and histograms write the thread's own shard either way; a gauge's
``inc`` and a write to the overflow shard (here a registry of no shards)
take a lock across the family once the file is shared (two ``fcntl``
calls)."""

import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import topdeck  # noqa: E402


def per_call(f, n=100_000):
    t = time.thread_time_ns()
    for _ in range(n):
        f()
    return (time.thread_time_ns() - t) / n


def main():
    d = tempfile.mkdtemp()
    os.chmod(d, 0o700)
    reg = topdeck.Registry(dir=d)
    c, g, h = reg.counter("c_total"), reg.gauge("g"), reg.histogram("h_seconds")
    spill = topdeck.Registry(dir=d, shards=0)
    o = spill.counter("o_total")
    cases = {"counter inc": c.inc, "observe": lambda: h.observe(0.003), "gauge inc": g.inc,
             "overflow-shard inc": o.inc}

    def report(who):
        row = {name: statistics.median(per_call(f) for _ in range(7)) for name, f in cases.items()}
        print(f"{who:<18}" + ", ".join(f"{name} {ns:.0f} ns" for name, ns in row.items()), flush=True)
    report("before any fork")
    pid = os.fork()
    if pid == 0:
        report("forked worker")
        os._exit(0)
    os.waitpid(pid, 0)
    report("parent after fork")
    reg.close()
    spill.close()
    os.rmdir(d)


if __name__ == "__main__":
    main()
