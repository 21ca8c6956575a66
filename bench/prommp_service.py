#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A pre-forking prometheus_client service, for bench/record_vs_prometheus.sh.

Usage: prommp_service.py [WORKERS] [RATE]   (with the venv of scripts/reach/prommp.sh,
                                            PROMETHEUS_MULTIPROC_DIR set to an empty directory)

The parent forks WORKERS worker processes (2), as gunicorn does; each serves
RATE simulated requests a second (100) with the real prometheus_client in
multiprocess mode, writing its own `*.db` files into PROMETHEUS_MULTIPROC_DIR:
a request counter by method, route and status, a latency histogram by method
and route (the default buckets), requests in progress (`livesum`) and the
worker's largest request so far (`max`). topdeck finds the directory through
the processes' environment. Prints `ready <pid> <dir>` once every worker has
written, and runs until SIGTERM or SIGINT; then the workers stop and the
parent calls `mark_process_dead` for each, as such a server does.
"""
import os
import random
import signal
import sys
import time

ROUTES = ["/", "/api/users", "/api/orders", "/search", "/health"]
METHODS = ["GET", "POST"]
STATUSES = ["200", "200", "200", "200", "404", "500"]

stopping = False


def stop(*_):
    global stopping
    stopping = True


def work(seed, rate):
    """One worker: requests at `rate` a second until told to stop."""
    from prometheus_client import Counter, Gauge, Histogram

    rng = random.Random(seed)
    requests = Counter("http_requests", "Requests served.", ["method", "route", "status"])
    latency = Histogram("http_request_duration_seconds", "Time to serve a request.", ["method", "route"])
    busy = Gauge("http_requests_in_progress", "Requests being served.", multiprocess_mode="livesum")
    largest = Gauge("http_response_bytes_max", "Largest response so far.", multiprocess_mode="max")
    biggest = 0
    next_at = time.monotonic()
    while not stopping:
        route, method = rng.choice(ROUTES), rng.choice(METHODS)
        with busy.track_inprogress():
            latency.labels(method, route).observe(rng.lognormvariate(-4, 1.2))
            requests.labels(method, route, rng.choice(STATUSES)).inc()
            size = int(rng.lognormvariate(8, 1.5))
            if size > biggest:
                biggest = size
                largest.set(size)
        next_at += 1.0 / rate
        time.sleep(max(0.0, next_at - time.monotonic()))


def main():
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    rate = float(sys.argv[2]) if len(sys.argv) > 2 else 100.0
    mp_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not mp_dir or not os.path.isdir(mp_dir):
        sys.exit("prommp_service.py: set PROMETHEUS_MULTIPROC_DIR to an existing directory")
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    pids = []
    for w in range(workers):
        pid = os.fork()
        if pid == 0:
            try:
                work(w + 1, rate)
            finally:
                os._exit(0)
        pids.append(pid)
    # Ready once each worker has written its files.
    deadline = time.monotonic() + 30
    while not stopping and time.monotonic() < deadline:
        written = {f.rsplit("_", 1)[-1] for f in os.listdir(mp_dir) if f.endswith(".db")}
        if all(f"{p}.db" in written for p in pids):
            break
        time.sleep(0.05)
    print(f"ready {os.getpid()} {mp_dir}", flush=True)
    while not stopping:
        time.sleep(0.2)
    from prometheus_client import multiprocess

    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for pid in pids:
        os.waitpid(pid, 0)
        multiprocess.mark_process_dead(pid, mp_dir)


if __name__ == "__main__":
    main()
