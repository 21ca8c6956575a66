#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What the CPU wait adds to a timed section: ``with timer.time(): pass``
from Registry.timer without the thread-waits array and with it, in
thread-CPU ns per section, median (min-max) of REPEATS runs of N.

    bindings/python/bench/waits.py [PIN]

PIN: a live agent's pin (default: TOPDECK_THREAD_WAITS, else the agent's
default); run ``topdeck agent`` first (root).
"""

import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import topdeck  # noqa: E402
from topdeck import waits  # noqa: E402

N = 200_000
REPEATS = 15


def per_section(timer):
    samples = []
    for _ in range(REPEATS):
        t = time.thread_time_ns()
        for _ in range(N):
            with timer.time():
                pass
        samples.append((time.thread_time_ns() - t) / N)
    return statistics.median(samples), min(samples), max(samples)


def main():
    pin = sys.argv[1] if len(sys.argv) > 1 else waits.pin_from_env()
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o700)
        cases = {}
        for label, arg in (("latency only", "off"), ("with CPU wait", pin)):
            reg = topdeck.Registry(dir=d, thread_waits=arg)
            if arg != "off" and reg.thread_waits is None:
                sys.exit(f"no thread-waits array at {pin}: {reg.thread_waits_problem or 'is the agent running?'}")
            cases[label] = per_section(reg.timer("bench_seconds"))
            reg.close()
    for label, (med, lo, hi) in cases.items():
        print(f"{label:14} {med:6.0f} ns ({lo:.0f}-{hi:.0f}) per `with timer.time(): pass`")
    print(f"added          {cases['with CPU wait'][0] - cases['latency only'][0]:6.0f} ns")


if __name__ == "__main__":
    main()
