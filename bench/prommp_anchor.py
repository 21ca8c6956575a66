#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The prometheus_client side of the `portholes` bench (bench/benches/portholes.rs).

Usage: prommp_anchor.py DIR FILES [LIVE]   (with the venv of scripts/reach/prommp.sh)

1. Fills DIR with FILES `*.db` files written by the real prometheus_client in
   multiprocess mode, the way a pre-forking server leaves them: short-lived
   workers serve requests and exit, and the parent calls
   `mark_process_dead(pid)`, which deletes only their `live*` gauge files;
   nothing ever deletes the rest, so the directory grows with every worker
   that ever ran. LIVE workers (default 2) stay alive, holding their files,
   until stdin closes.
2. Prints `ready <workers> <files>` and serves commands on stdin, one a line,
   so that the interpreter's start-up and imports are never timed:
   - `time N`: N scrapes, `generate_latest` of a registry holding a
     `MultiProcessCollector(DIR)`, as a multiprocess app's /metrics does;
     prints the total nanoseconds;
   - `cpu N`: N scrapes; prints each one's CPU time (`time.thread_time_ns`),
     in nanoseconds, on one line;
   - `dump PATH`: writes one scrape's body to PATH; prints `ok`.
   At end of input the live workers stop and the script exits.
"""
import multiprocessing
import os
import random
import sys
import time

# Each worker writes: a counter, a histogram, a summary and seven gauge
# files, two of them `live*` (deleted when the worker dies).
KINDS = ["counter", "histogram", "summary", "all", "min", "max", "sum", "mostrecent", "liveall", "livesum"]
LIVE_KINDS = {"liveall", "livesum"}
ROUTES = ["/", "/api/users", "/api/orders", "/api/items", "/login", "/static", "/health", "/search"]
METHODS = ["GET", "POST"]
STATUSES = ["200", "201", "304", "404", "500"]


def work(seed, kinds, stop=None):
    """One worker: its metrics, then a few hundred requests."""
    from prometheus_client import Counter, Gauge, Histogram, Summary

    rng = random.Random(seed)
    want = set(kinds)
    requests = Counter("http_requests", "Requests served.", ["method", "route", "status"], registry=None)
    latency = Histogram("http_request_duration_seconds", "Time to serve a request.", ["method", "route"], registry=None)
    size = Summary("http_response_size_bytes", "Bytes of response bodies.", ["route"], registry=None)
    rss = Gauge("worker_resident_memory_bytes", "Resident memory of the worker.", registry=None, multiprocess_mode="all")
    queue_min = Gauge("worker_queue_free_slots", "Least free queue slots seen.", ["queue"], registry=None, multiprocess_mode="min")
    queue_max = Gauge("worker_queue_depth_max", "Deepest queue seen.", ["queue"], registry=None, multiprocess_mode="max")
    cache = Gauge("cache_entries", "Entries in the workers' caches.", ["cache"], registry=None, multiprocess_mode="sum")
    last = Gauge("last_request_unixtime", "When a route was last served.", ["route"], registry=None, multiprocess_mode="mostrecent")
    heap = Gauge("worker_heap_bytes", "Heap of the live workers.", registry=None, multiprocess_mode="liveall")
    busy = Gauge("http_requests_in_progress", "Requests being served.", ["route"], registry=None, multiprocess_mode="livesum")
    for _ in range(300):
        route, method = rng.choice(ROUTES), rng.choice(METHODS)
        if "counter" in want:
            requests.labels(method, route, rng.choice(STATUSES)).inc()
        if "histogram" in want:
            latency.labels(method, route).observe(rng.lognormvariate(-4, 1.2))
        if "summary" in want:
            size.labels(route).observe(rng.randrange(200, 200_000))
        if "livesum" in want:
            busy.labels(route).set(rng.randrange(0, 4))
        if "mostrecent" in want:
            last.labels(route).set(time.time())
    for q in ["default", "mail", "reports"]:
        if "min" in want:
            queue_min.labels(q).set(rng.randrange(0, 100))
        if "max" in want:
            queue_max.labels(q).set(rng.randrange(0, 1000))
    for c in ["sessions", "templates", "users", "tokens"]:
        if "sum" in want:
            cache.labels(c).set(rng.randrange(0, 10_000))
    if "all" in want:
        rss.set(rng.randrange(50, 500) << 20)
    if "liveall" in want:
        heap.set(rng.randrange(20, 200) << 20)
    if stop is not None:
        stop.wait()


def fill(path, files, live):
    from prometheus_client import multiprocess

    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    workers = []
    for i in range(live):
        p = ctx.Process(target=work, args=(i, KINDS, stop))
        p.start()
        workers.append(p)
    dead_files = files - live * len(KINDS)
    per_dead = len(KINDS) - len(LIVE_KINDS)
    if dead_files < 0:
        sys.exit(f"error: {files} files are fewer than the {live} live workers write; ask for more files or fewer live workers")
    jobs = [[k for k in KINDS if k not in LIVE_KINDS]] * (dead_files // per_dead)
    if dead_files % per_dead:
        jobs.append([k for k in KINDS if k not in LIVE_KINDS][: dead_files % per_dead])
    for n, kinds in enumerate(jobs):
        p = ctx.Process(target=work, args=(1000 + n, kinds))
        p.start()
        p.join()
        if p.exitcode != 0:
            sys.exit(f"error: worker {p.pid} exited with {p.exitcode}")
        multiprocess.mark_process_dead(p.pid, path)
    # The live workers' files exist once they have written (they then wait).
    deadline = time.monotonic() + 60
    while len([f for f in os.listdir(path) if f.endswith(".db")]) < files:
        if time.monotonic() > deadline:
            sys.exit("error: the live workers did not write their files within 60 s")
        time.sleep(0.01)
    return workers, stop, live + len(jobs)


def main(argv):
    if len(argv) not in (2, 3):
        sys.exit(__doc__)
    path, files = argv[0], int(argv[1])
    live = int(argv[2]) if len(argv) == 3 else 2
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    workers, stop, count = fill(path, files, live)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=path)
    found = len([f for f in os.listdir(path) if f.endswith(".db")])
    print(f"ready {count} {found}", flush=True)
    try:
        for line in sys.stdin:
            cmd, arg = line.split(maxsplit=1)
            if cmd == "time":
                n = int(arg)
                start = time.perf_counter_ns()
                for _ in range(n):
                    generate_latest(registry)
                print(time.perf_counter_ns() - start, flush=True)
            elif cmd == "cpu":
                times = []
                for _ in range(int(arg)):
                    start = time.thread_time_ns()
                    generate_latest(registry)
                    times.append(time.thread_time_ns() - start)
                print(" ".join(map(str, times)), flush=True)
            elif cmd == "dump":
                with open(arg.strip(), "wb") as out:
                    out.write(generate_latest(registry))
                print("ok", flush=True)
            else:
                sys.exit(f"error: unknown command {cmd!r}")
    finally:
        stop.set()
        for p in workers:
            p.join()


if __name__ == "__main__":
    main(sys.argv[1:])
