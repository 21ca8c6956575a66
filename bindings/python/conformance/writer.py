#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writer driver of conformance/PROTOCOL.md for the Python package:

    python3 bindings/python/conformance/writer.py <dir> exit|crash|late
"""

import os
import signal
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import topdeck  # noqa: E402


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("exit", "crash", "late"):
        print("usage: writer.py <dir> exit|crash|late", file=sys.stderr)
        return 2
    directory, mode = sys.argv[1], sys.argv[2]
    reg = topdeck.Registry("conformance", dir=directory)

    fast = reg.counter("jobs_total", [("queue", "fast")], "Jobs done.")
    slow = reg.counter("jobs_total", [("queue", "slow")], "Jobs done.")
    depth = reg.gauge("queue_depth", (), "Jobs waiting — ünïcödé ✓")
    temp = reg.gauge_f64("temperature_celsius", [("room", 'a"b\\c')], "Temperature.", "celsius")
    duration = reg.histogram("request_duration_seconds", [("route", "/")], "Time to serve.", "seconds")
    payload = reg.histogram("payload_bytes", (), "Sizes.", "bytes")
    db = reg.timer("db_query_seconds", (), "Time in the database.")

    def count():
        for _ in range(25_000):
            fast.inc()
    threads = [threading.Thread(target=count) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    slow.add(7)
    depth.set(-42)
    temp.set(21.5)
    temp.set(-0.125)
    for i in range(1, 1001):
        duration.record(i / 1000)
    for v in (0, 0, 0, 1024, 1024, 1e9):
        payload.record(v)
    for _ in range(10):
        with db.time():
            pass
    print("ready", flush=True)

    for line in sys.stdin:
        if mode == "late" and line.strip() == "more":
            reg.counter("late_total", (), "Registered late.").add(3)
            print("more-done", flush=True)
    if mode == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    reg.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
