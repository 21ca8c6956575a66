#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tables for docs/PERFORMANCE.md from several criterion runs.

Usage: summarize.py RUN_DIR...   (each a CRITERION_HOME that `cargo bench` filled)

For every benchmark: the median of the runs' medians, the min-max of the
runs' medians, the widest 95% confidence interval of a run's median, and the
ratio to topdeck's entry in the same group (how many times slower than topdeck),
from the medians and within each run.
"""
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def fmt(ns):
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} µs"
    if ns >= 100:
        return f"{ns:.0f} ns"
    return f"{ns:.2f} ns"


def main(runs):
    if not runs:
        sys.exit("usage: summarize.py RUN_DIR...")
    # group -> function -> list of (median, ci_low, ci_high), one per run
    data = defaultdict(lambda: defaultdict(list))
    # (group, function) -> {run: median}, for ratios within one run
    by_run = defaultdict(dict)
    order = []
    for run in runs:
        found = sorted(Path(run).glob("**/new/benchmark.json"))
        if not found:
            sys.exit(f"error: no criterion results under {run}; run `cargo bench -p topdeck-bench` with CRITERION_HOME={run}")
        for bench in found:
            meta = json.loads(bench.read_text())
            est = json.loads((bench.parent / "estimates.json").read_text())["median"]
            group, func = meta["group_id"], meta["function_id"] or meta["value_str"]
            ci = est["confidence_interval"]
            data[group][func].append((est["point_estimate"], ci["lower_bound"], ci["upper_bound"]))
            by_run[(group, func)][run] = est["point_estimate"]
            if (group, func) not in order:
                order.append((group, func))
    groups = []
    for g, _ in order:
        if g not in groups:
            groups.append(g)
    for group in groups:
        funcs = data[group]
        base_name = next((f for f in ("topdeck", "topdeck_counters") if f in funcs), None)
        base = statistics.median(m for m, _, _ in funcs[base_name]) if base_name else None
        print(f"### `{group}`\n")
        print(f"| contender | median ({len(runs)} runs) | min–max of run medians | widest 95% CI of a run's median | × topdeck | × topdeck, per run (min–max) |")
        print("|---|---:|---:|---:|---:|---:|")
        for func in sorted(funcs, key=lambda f: statistics.median(m for m, _, _ in funcs[f])):
            vals = funcs[func]
            med = statistics.median(m for m, _, _ in vals)
            lo, hi = min(m for m, _, _ in vals), max(m for m, _, _ in vals)
            cilo, cihi = min(l for _, l, _ in vals), max(h for _, _, h in vals)
            ratio = f"{med / base:.2f}×" if base else "–"
            per_run = [m / by_run[(group, base_name)][r] for r, m in by_run[(group, func)].items()
                       if base_name and r in by_run[(group, base_name)]]
            spread = f"{min(per_run):.2f}× – {max(per_run):.2f}×" if per_run else "–"
            missing = "" if len(vals) == len(runs) else f" (only {len(vals)} runs)"
            print(f"| {func}{missing} | {fmt(med)} | {fmt(lo)} – {fmt(hi)} | {fmt(cilo)} – {fmt(cihi)} | {ratio} | {spread} |")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
