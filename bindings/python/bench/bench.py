#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""topdeck against prometheus_client, per update and per scrape.

    bindings/python/bench/run.sh        # the recorded run (docs/PERFORMANCE.md)

Each case runs in a fresh interpreter (prometheus_client picks its
multiprocess mode at import). Single process: ns per call, median and
min-max of REPEATS runs of N calls, loop and call overhead included (an
empty function's cost is printed as the floor). Times are thread CPU
time: on a shared 2-vCPU machine, wall time measures the scheduler.
Multiprocess: 8 forked workers each time their own loop; then one scrape: prometheus_client's
MultiProcessCollector + generate_latest over the workers' files, against
topdeck.reader.listing() over the workers' registries.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
N = 200_000
REPEATS = 15
WORKERS = 8


def per_call(f, n=N, clock=time.perf_counter_ns):
    t = clock()
    for _ in range(n):
        f()
    return (clock() - t) / n


def summary(samples):
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def metrics(lib):
    if lib == "topdeck":
        import topdeck as m
    else:
        import prometheus_client as m
    c = m.Counter("bench_requests", "Requests.")
    lc = m.Counter("bench_routed", "Requests by route.", ["route"])
    h = m.Histogram("bench_latency_seconds", "Latency.")
    return c, lc, h


def ops(lib):
    c, lc, h = metrics(lib)
    return {
        "inc": c.inc,
        "labels().inc": lambda: lc.labels("/").inc(),
        "observe": lambda: h.observe(0.003),
    }


def single(lib):
    cases = ops(lib)

    def empty():
        pass
    cases["(empty call)"] = empty
    return {name: summary([per_call(f, clock=time.thread_time_ns) for _ in range(REPEATS)])
            for name, f in cases.items()}


def multi(lib, directory):
    cases = ops(lib)
    results = []
    pids = []
    for _ in range(WORKERS):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            out = {name: statistics.median(per_call(f, N // 4, time.thread_time_ns) for _ in range(5))
                   for name, f in cases.items()}
            os.write(w, json.dumps(out).encode())
            os._exit(0)
        os.close(w)
        pids.append((pid, r))
    for pid, r in pids:
        with os.fdopen(r) as f:
            results.append(json.loads(f.read()))
        os.waitpid(pid, 0)
    update = {name: summary([res[name] for res in results]) for name in results[0]}
    scrape = []
    for _ in range(REPEATS):
        t = time.perf_counter_ns()
        if lib == "topdeck":
            import topdeck.reader
            found = topdeck.reader.listing(directory)
            # One file: the workers count into the parent's.
            assert len(found.registries) == 1 and not found.errors, found.errors
        else:
            from prometheus_client import CollectorRegistry, generate_latest, multiprocess
            reg = CollectorRegistry()
            multiprocess.MultiProcessCollector(reg)
            text = generate_latest(reg)
            assert b"bench_requests_total" in text
        scrape.append((time.perf_counter_ns() - t) / 1e6)
    return {"update_ns": update, "scrape_ms": summary(scrape)}


def child(args):
    mode, lib = args[0], args[1]
    print(json.dumps(single(lib) if mode == "single" else multi(lib, args[2])))


def run(python, mode, lib):
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o700)
        extra = [d] if mode == "multi" else []
        if mode == "multi":
            env["PROMETHEUS_MULTIPROC_DIR" if lib == "prometheus_client" else "TOPDECK_DIR"] = d
        else:
            env["TOPDECK_DIR"] = d
        out = subprocess.run([python, __file__, "--child", mode, lib, *extra], env=env, check=True,
                             capture_output=True, text=True)
        return json.loads(out.stdout)


def main():
    if sys.argv[1:2] == ["--child"]:
        return child(sys.argv[2:])
    python = sys.argv[1] if len(sys.argv) > 1 else sys.executable
    report = {}
    for mode in ("single", "multi"):
        for lib in ("topdeck", "prometheus_client"):
            report[f"{mode}/{lib}"] = run(python, mode, lib)
    print(json.dumps(report, indent=1))
    fmt = lambda s: f"{s['median']:.0f} ({s['min']:.0f}-{s['max']:.0f})"  # noqa: E731
    print("\nsingle process, thread-CPU ns per call, median (min-max) of", REPEATS, "runs of", N)
    for op in report["single/topdeck"]:
        t, p = report["single/topdeck"][op], report["single/prometheus_client"][op]
        print(f"  {op:14} topdeck {fmt(t):>16}  prometheus_client {fmt(p):>16}  x{p['median'] / t['median']:.1f}")
    print(f"\n{WORKERS} workers (multiprocess mode), thread-CPU ns per call, median (min-max) over workers")
    for op in report["multi/topdeck"]["update_ns"]:
        t, p = report["multi/topdeck"]["update_ns"][op], report["multi/prometheus_client"]["update_ns"][op]
        print(f"  {op:14} topdeck {fmt(t):>16}  prometheus_client {fmt(p):>16}  x{p['median'] / t['median']:.1f}")
    t, p = report["multi/topdeck"]["scrape_ms"], report["multi/prometheus_client"]["scrape_ms"]
    print(f"  scrape (ms)    topdeck {t['median']:.2f} ({t['min']:.2f}-{t['max']:.2f})  "
          f"prometheus_client {p['median']:.2f} ({p['min']:.2f}-{p['max']:.2f})  x{p['median'] / t['median']:.1f}")


if __name__ == "__main__":
    main()
