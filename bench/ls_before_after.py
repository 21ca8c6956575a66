#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`topdeck ls` on a host of many processes, two builds side by side: the
system calls each makes into `/proc/<pid>/...` (strace) and its wall time,
run in turns (before, after, after, before, ...), each under
`flock /tmp/topdeck-bench.lock`.

    bench/ls_before_after.py BEFORE AFTER [--procs 2000] [--rounds 15]

BEFORE and AFTER are `topdeck` binaries built from the two commits. The
script starts `--procs` sleeping processes (so that /proc holds about that
many more), runs `ls` with its portholes on (no TOPDECK_DIR), and stops the
sleepers at the end. Prints, per build: the calls that name a
`/proc/<pid>/` path, by system call and in all, the distinct pids whose
`/proc/<pid>` directory was touched, and the median [min, max] wall time
in ms, then the ratio of the medians.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter

LOCK = "/tmp/topdeck-bench.lock"
PROC = re.compile(r'^(?:\d+\s+)?(\w+)\(.*?"/proc/(\d+)/')


def sleepers(n):
    procs = []
    for _ in range(n):
        procs.append(subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL))
    return procs


def syscalls(binary):
    with tempfile.NamedTemporaryFile(mode="r", suffix=".strace") as log:
        env = dict(os.environ)
        env.pop("TOPDECK_DIR", None)
        subprocess.run(
            ["strace", "-f", "-qq", "-e", "trace=%file,%desc", "-o", log.name, binary, "ls"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        )
        calls, pids = Counter(), set()
        for line in log:
            m = PROC.match(line)
            if m:
                calls[m.group(1)] += 1
                pids.add(m.group(2))
        return calls, len(pids)


def wall(binary):
    env = dict(os.environ)
    env.pop("TOPDECK_DIR", None)
    t = time.monotonic()
    subprocess.run(["flock", LOCK, binary, "ls"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return (time.monotonic() - t) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--procs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    procs = sleepers(a.procs)
    try:
        time.sleep(1)
        total = len([d for d in os.listdir("/proc") if d.isdigit()])
        print(f"processes in /proc: {total}")
        builds = {"before": a.before, "after": a.after}
        for name, binary in builds.items():
            calls, pids = syscalls(binary)
            detail = ", ".join(f"{k} {v}" for k, v in calls.most_common())
            print(f"{name}: {sum(calls.values())} calls on /proc/<pid>/ paths "
                  f"({pids} pids): {detail}")
        times = {name: [] for name in builds}
        order = list(builds)
        for r in range(a.rounds):
            for name in order if r % 2 == 0 else reversed(order):
                times[name].append(wall(builds[name]))
        for name, ts in times.items():
            print(f"{name}: median {statistics.median(ts):.1f} ms "
                  f"[{min(ts):.1f}, {max(ts):.1f}] over {len(ts)} runs")
        ratio = statistics.median(times["after"]) / statistics.median(times["before"])
        print(f"after / before: {ratio:.2f}")
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
