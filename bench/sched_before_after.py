#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs two builds of `sched_overhead` in turns (before, after, before, ...)
in both scenarios, each run under `flock /tmp/topdeck-bench.lock`, and
prints per measure the median [range] of each build and their ratio.

    bench/sched_before_after.py BEFORE AFTER [--rounds N] [--secs N]

BEFORE and AFTER are copies of target/release/sched_overhead built from
the two commits. Each round runs `--probe-only --raw` once per build and
scenario; the builds alternate which goes first from round to round.
"""

import argparse
import statistics
import subprocess
import sys
from collections import defaultdict

LOCK = "/tmp/topdeck-bench.lock"


def run(binary, scenario, secs):
    args = ["flock", LOCK, binary]
    if scenario == "load":
        # Two interleaved rounds inside: detached/attached, attached/detached.
        args += ["load", "--reps", "2"]
    else:
        args += ["--reps", "1"]
    args += ["--secs", str(secs), "--probe-only", "--raw"]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and parts[0] == "RAW":
            rows.append((parts[1], parts[2], float(parts[3])))
    return rows


def fmt(v):
    if abs(v) >= 1e5:
        return f"{v:.4g}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.4f}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--secs", type=int, default=2)
    a = p.parse_args()
    data = defaultdict(lambda: {"before": [], "after": []})
    for r in range(a.rounds):
        order = [("before", a.before), ("after", a.after)]
        if r % 2:
            order.reverse()
        for scenario in ("pingpong", "load"):
            for name, binary in order:
                for sc, measure, value in run(binary, scenario, a.secs):
                    if value == value:  # not NaN
                        data[(sc, measure)][name].append(value)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    print(f"{a.rounds} rounds, builds in turns, {a.secs} s windows\n")
    print("| scenario | measure | before median [range] | after median [range] | after/before |")
    print("|---|---|---:|---:|---:|")
    for (sc, measure), v in sorted(data.items()):
        b, f = v["before"], v["after"]
        if not b or not f:
            continue
        mb, mf = statistics.median(b), statistics.median(f)
        ratio = f"{mf / mb:.2f}" if mb else ""
        print(
            f"| {sc} | {measure} | {fmt(mb)} [{fmt(min(b))}–{fmt(max(b))}] "
            f"| {fmt(mf)} [{fmt(min(f))}–{fmt(max(f))}] | {ratio} |"
        )


if __name__ == "__main__":
    main()
