#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Helpers for bench/record_vs_prometheus.sh. Standard library only.

  record_lib.py sources LS_JSON   one line: sources and series by kind,
                                  from `topdeck ls --json --portholes`
  record_lib.py report OUT        the markdown report, from the R_*
                                  variables the script exports, into OUT
"""

import collections
import json
import os
import sys


def sources(path):
    d = json.load(open(path))
    by = collections.defaultdict(lambda: [0, 0])
    for r in d["registries"] + d["portholes"]:
        k = r.get("source") or "?"
        by[k][0] += 1
        by[k][1] += r.get("metrics") or 0
    print("; ".join(f"{k}: {n} source{'s' if n != 1 else ''}, {m:,} series"
                    for k, (n, m) in sorted(by.items())))


def n(x):
    return f"{float(x):,.0f}"


def ms(seconds):
    try:
        return f"{float(seconds) * 1000:.1f} ms"
    except ValueError:
        return seconds


def per(a, b):
    return f"{a / b:,.2f}" if b else "-"


def report(out_path):
    e = os.environ
    window = float(e["R_CPU_T1"]) - float(e["R_CPU_T0"])

    def cpu(pair):
        """% of one core from 'ticks_at_start ticks_at_end'."""
        t0, t1 = map(int, pair.split())
        return f"{(t1 - t0) / int(e['R_HZ']) / window * 100:.2f}"

    prom_bytes, prom_samples = int(e["R_PROM_BYTES"]), int(e["R_PROM_SAMPLES"])
    prom_span, rec_span = float(e["R_PROM_SPAN"]), float(e["R_REC_SPAN"])
    rows = [("Prometheus (data directory, WAL included)", n(prom_bytes), n(prom_samples),
             per(prom_bytes, prom_samples), n(prom_bytes / prom_span * 86400), f"{prom_span / 60:.1f}",
             cpu(e["R_PROM_CPU"]))]
    h = json.load(open(e["R_HISTORY"])) if e.get("R_HISTORY") else None
    if h:
        rows.append(("topdeck record", n(h["bytes"]), n(h["samples"]), per(h["bytes"], h["samples"]),
                     n(h["bytes"] / rec_span * 86400), f"{rec_span / 60:.1f}", cpu(e["R_REC_CPU"])))
    else:
        rows.append(("topdeck record", "not run (RECORDER=none)", "-", "-", "-", "-", "-"))
    rows.append(("topdeck serve, scraped by Prometheus", "-", "-", "-", "-", "-", cpu(e["R_SERVE_CPU"])))

    recorder = ""
    if e.get("R_RECORDER"):
        recorder = f" (recording: `{e['R_RECORDER']} record --dir DIR --interval 1s --all-users --portholes"
        recorder += (" " + e["R_RECORDER_ARGS"] if e.get("R_RECORDER_ARGS") else "") + "`)"
    other = prom_bytes - int(e["R_PROM_WAL"]) - int(e["R_PROM_CHUNKS"])
    out = [
        f"## topdeck record vs Prometheus: scenario {e['R_SCENARIO']}, {e['R_MINUTES']} min at 1 s",
        "",
        f"- What: {e['R_DESCRIPTION']}",
        f"- Sources, as `topdeck ls --portholes` saw them at the start: {e['R_SOURCES']}",
        f"- Command: `{e['R_COMMAND']}`{recorder}",
        f"- Date: {e['R_DATE']}; CPU: {e['R_CPU']}, {e['R_NPROC']} CPUs; kernel: {e['R_KERNEL']}; "
        f"load average at the start {e['R_LOAD0']}, at the end {e['R_LOAD1']}",
        f"- Prometheus: {e['R_PROM_VERSION']}, scrape interval 1 s, {e['R_HISTOGRAMS']} histograms; "
        f"scrapes: {e['R_SCRAPES_OK']} ok of {e['R_SCRAPES']}; scrape duration mean {ms(e['R_SCRAPE_MEAN'])}, "
        f"max {ms(e['R_SCRAPE_MAX'])}; samples in the last scrape: {e['R_SCRAPED']}; "
        f"series in its head: {n(e['R_PROM_SERIES'])}",
        "",
        "| | bytes on disk | samples | bytes per sample | bytes per day (extrapolated) | minutes | CPU, % of one core |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    out += [
        "",
        f"- Prometheus's data directory: WAL {n(e['R_PROM_WAL'])} B, head chunks {n(e['R_PROM_CHUNKS'])} B, "
        f"the rest (blocks, lock, query log) {n(other)} B. Within its first 2 h Prometheus compacts nothing: "
        "the WAL and the head chunks hold the same samples, so a day extrapolated from a shorter run "
        "overstates what it keeps once blocks are compacted.",
        "- Samples: Prometheus's are prometheus_tsdb_head_samples_appended_total from its own /metrics "
        "(a series' value at one scrape: a native histogram is one sample, a classic one a sample per "
        "bucket plus _sum and _count; each scrape adds 5 of Prometheus's own, up and scrape_*). "
        "The recorder's are `samples` from `topdeck history --json` (series values recorded in all frames).",
    ]
    if h:
        out.append(f"- topdeck record: {n(h['frames'])} frames, {n(h['series'])} series, {n(h['sources'])} sources, "
                   f"from {h['from']} to {h['to']}; `du -sb` of its directory: {n(e.get('R_REC_DU') or 0)} B.")
    try:
        made = float(e["R_SCRAPES"])
    except ValueError:
        made = 0
    if made and made < 0.95 * prom_span:
        bps = prom_bytes / prom_samples if prom_samples else 0
        # A scrape's samples: the last scrape's and Prometheus's own 5.
        try:
            per_scrape = float(e["R_SCRAPED"]) + 5
        except ValueError:
            per_scrape = prom_samples / made
        out.append(f"- Prometheus made {made:.0f} scrapes in {prom_span:.0f} s, not one a second: it could not "
                   f"keep up. Had it made them all, at {bps:,.2f} bytes per sample and {per_scrape:,.0f} "
                   f"samples a scrape it would write {n(bps * per_scrape * 86400)} bytes a day.")
    if h and h["frames"] < 0.95 * rec_span:
        out.append(f"- topdeck record made {h['frames']:,} frames in {rec_span:.0f} s, fewer than one a second.")
    out.append(f"- Peak resident memory (VmHWM): {e['R_PEAK']}.")
    out.append(f"- CPU: utime + stime from /proc/<pid>/stat over {window:.0f} s, from {e['R_WARMUP']} s after "
               "the start to the end. Bytes per day: bytes ÷ the minutes it ran × 1,440.")
    out += [f"- Note: {x}" for x in e.get("R_NOTES", "").splitlines() if x]
    with open(out_path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "sources":
        sources(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "report":
        report(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
