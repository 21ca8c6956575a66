#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Summarises several `cargo bench -p topdeck-bench` outputs as Markdown.

For each benchmark: the median of the runs' point estimates and their range
(min-max across runs), in ns; and the ratio to topdeck in the same group.
Usage: scripts/bench-table.py run1.txt run2.txt run3.txt
"""
import re
import statistics
import sys

UNITS = {"ps": 1e-3, "ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}


def runs(paths):
    for path in paths:
        text = open(path, encoding="utf-8").read()
        # criterion prints the name on its own line when it is long
        text = re.sub(r"\n\s+time:", " time:", text)
        out = {}
        for m in re.finditer(r"^(\S+)\s+time:\s+\[(\S+) (\S+) (\S+) (\S+) (\S+) (\S+)\]", text, re.M):
            out[m.group(1)] = float(m.group(4)) * UNITS[m.group(5)]
        yield out


def fmt(ns):
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.2f} ns"


def main(paths):
    results = list(runs(paths))
    names = [n for n in results[0]]
    groups = {}
    for n in names:
        groups.setdefault(n.rsplit("/", 1)[0], []).append(n)
    for group, members in groups.items():
        print(f"\n**{group}** ({len(results)} runs)\n")
        print("| contender | median | min – max | × topdeck |")
        print("|---|---:|---:|---:|")
        med = {n: statistics.median(r[n] for r in results if n in r) for n in members}
        base = next((med[n] for n in members if n.endswith("/topdeck") or n.endswith("topdeck_counters")), None)
        for n in members:
            vals = [r[n] for r in results if n in r]
            ratio = f"{med[n] / base:.2f}" if base else "–"
            print(f"| {n.rsplit('/', 1)[1]} | {fmt(med[n])} | {fmt(min(vals))} – {fmt(max(vals))} | {ratio} |")


if __name__ == "__main__":
    main(sys.argv[1:])
