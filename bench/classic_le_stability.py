#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Whether a classic scraper of the real scheduler agent's run-queue
histograms sees one fixed `le` set under changing load (issue 32).

    sudo bench/classic_le_stability.py [--topdeck PATH] [--minutes N] [--every S]

Runs `topdeck agent` (root: it loads eBPF) and `topdeck serve` on a
namespace of their own (a temporary TOPDECK_DIR), changes the load every
20 s (idle; busy loops, 1 and 2 per CPU; sleepers that wake every 0.5 ms
beside busy loops), and every S seconds (15, as Prometheus' default)
scrapes `serve` as a classic scraper does, in text 0.0.4 and OpenMetrics.
For each `topdeck_runq_latency_seconds` series it keeps the `le` set of
its first scrape and reports any scrape whose set differs, the largest set,
and, from `topdeck show --json` of the same moment, how many `le` series
the encoder before the fixed bounds would have written (one per bucket from
the first non-empty to the last, its lower bound and `+Inf`), and how many
of the agent's own buckets hold anything (what native scrapers and OTLP
still get). The load runs at nice 19, so it delays only work as humble.

Prints one line per scrape and a summary; exits 1 if any set changed or
any exceeded 33 (32 bounds and `+Inf`).
"""

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

NAME = "topdeck_runq_latency_seconds"
MAX_LE = 33
TEXT = "text/plain; version=0.0.4"
OPENMETRICS = "application/openmetrics-text; version=1.0.0"
PHASE_SECS = 20
SCHEMA = 3  # the agent's run-queue buckets (topdeck_sched::SCHEMA)
ZERO_THRESHOLD = 2.0**-22  # their zero bucket's bound (topdeck_sched::MIN_SECONDS)

HOG = "while True: pass"
SLEEPER = "import time\nwhile True: time.sleep(0.0005)"


def phases(cpus):
    """(name, busy loops, sleepers), in turn."""
    return [
        ("idle", 0, 0),
        ("hogs x1", cpus, 0),
        ("sleepers+hogs", cpus, 2 * cpus),
        ("hogs x2", 2 * cpus, 0),
        ("sleepers", 0, 4 * cpus),
    ]


class Load:
    """The load of one phase: python processes at nice 19."""

    def __init__(self):
        self.procs = []

    def set(self, hogs, sleepers):
        self.stop()
        for code, n in ((HOG, hogs), (SLEEPER, sleepers)):
            for _ in range(n):
                self.procs.append(
                    subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", code])
                )

    def stop(self):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []


def scrape(url, accept):
    """`{series labels: [(le, count)]}` of NAME's buckets in one scrape."""
    req = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read().decode()
    out = {}
    for line in body.splitlines():
        if not line.startswith(NAME + "_bucket{"):
            continue
        head, count = line.rsplit(" ", 1)
        series, le = head.split(',le="')
        out.setdefault(series, []).append((le.split('"')[0], float(count)))
    return out


def native_view(topdeck, env):
    """Per cgroup: (filled buckets, le series the old encoder wrote)."""
    out = subprocess.run(
        [topdeck, "show", "--json", "topdeck-agent"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if out.returncode != 0:
        return {}
    doc = json.loads(out.stdout)
    metrics = doc.get("metrics", doc) if isinstance(doc, dict) else doc
    views = {}
    for m in metrics if isinstance(metrics, list) else []:
        if m.get("name") != NAME:
            continue
        buckets = m.get("value", {}).get("buckets") or []
        cgroup = dict(m.get("labels", {})).get("cgroup", "?")
        if not buckets:
            views[cgroup] = (0, 1)
            continue
        index = [round(math.log2(ub) * 2**SCHEMA) for ub, _ in buckets if ub > ZERO_THRESHOLD]
        # The zero bucket, then every bucket from the first non-empty to
        # the last, then +Inf (histogram.rs before the fixed bounds).
        old = (max(index) - min(index) + 1 if index else 0) + 2
        views[cgroup] = (len(buckets), old)
    return views


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--topdeck", default="target/release/topdeck")
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--every", type=float, default=15)
    a = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("classic_le_stability: run as root (`topdeck agent` loads eBPF programs)")
    if not os.access(a.topdeck, os.X_OK):
        sys.exit(f"classic_le_stability: no topdeck binary at {a.topdeck}: build it (cargo build --release -p topdeck-cli) or pass --topdeck")
    # A SIGTERM unwinds through `finally`, which stops the load and both
    # processes, as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cpus = os.cpu_count() or 1
    ns = tempfile.mkdtemp(prefix="topdeck-classic-")
    env = dict(os.environ, TOPDECK_DIR=ns)
    agent = subprocess.Popen(
        [a.topdeck, "agent", "--thread-waits", "off", "--cost-every", "0s"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    serve = subprocess.Popen(
        [a.topdeck, "serve", "--listen", "127.0.0.1:0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    load = Load()
    try:
        url = serve.stdout.readline().strip().removeprefix("listening on ")
        if not url.startswith("http"):
            sys.exit(f"classic_le_stability: serve did not say where it listens: {url!r}")
        first = {}  # (format, series) -> le tuple of its first scrape
        changed, largest, scrapes = [], 0, 0
        old_largest, filled_largest = 0, 0
        start = time.monotonic()
        end = start + a.minutes * 60
        plan = phases(cpus)
        phase = -1
        next_scrape = start + a.every
        print(f"# {cpus} CPUs, phases of {PHASE_SECS} s: " + ", ".join(n for n, _, _ in plan))
        print("# t(s)\tphase\tseries\tle per series (text; openmetrics)\tfilled buckets max\told encoder le max")
        while time.monotonic() < end:
            now = time.monotonic()
            want = int((now - start) // PHASE_SECS) % len(plan)
            if want != phase:
                phase = want
                load.set(plan[phase][1], plan[phase][2])
            if agent.poll() is not None:
                sys.exit(f"classic_le_stability: the agent stopped: {agent.stderr.read()}")
            if now < next_scrape:
                time.sleep(min(0.5, next_scrape - now))
                continue
            next_scrape += a.every
            scrapes += 1
            sizes = {}
            for fmt, accept in (("text", TEXT), ("openmetrics", OPENMETRICS)):
                got = scrape(url, accept)
                sizes[fmt] = sorted({len(v) for v in got.values()})
                for series, buckets in got.items():
                    les = tuple(le for le, _ in buckets)
                    largest = max(largest, len(les))
                    was = first.setdefault((fmt, series), les)
                    if was != les:
                        changed.append((round(now - start), fmt, series, len(was), len(les)))
            views = native_view(a.topdeck, env)
            filled = max((f for f, _ in views.values()), default=0)
            old = max((o for _, o in views.values()), default=0)
            filled_largest = max(filled_largest, filled)
            old_largest = max(old_largest, old)
            print(
                f"{now - start:.0f}\t{plan[phase][0]}\t{len(got)}\t"
                f"{sizes['text']}; {sizes['openmetrics']}\t{filled}\t{old}",
                flush=True,
            )
        series = len({s for _, s in first})
        print(
            f"\n{scrapes} scrapes of each format over {a.minutes:g} min, {series} run-queue "
            f"series; le per series: at most {largest} (limit {MAX_LE}); "
            f"sets that changed: {len(changed)}"
        )
        print(
            f"the agent's own buckets filled, most in one series: {filled_largest} "
            f"(native and OTLP carry each); the encoder before the fixed bounds "
            f"would have written up to {old_largest} le series for one"
        )
        for c in changed[:20]:
            print(f"changed at {c[0]} s ({c[1]}): {c[2]}: {c[3]} -> {c[4]} le")
        return 1 if changed or largest > MAX_LE else 0
    finally:
        load.stop()
        for proc in (serve, agent):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        subprocess.run(["rm", "-rf", ns], check=False)


if __name__ == "__main__":
    sys.exit(main())
