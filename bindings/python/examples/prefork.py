#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A gunicorn-style prefork server in miniature: the parent defines the
metrics, forks the workers, and each worker counts the requests it serves
into the parent's registry file (its series, registered by whichever
worker serves a route first, are shared; each process writes shards of its
own), so its counts stay in the totals after it ends.

    TOPDECK_DIR=/tmp/td python3 prefork.py [--workers 4] [--requests 1000]
    topdeck ls; topdeck show <file>   # one file: the parent's

Each worker serves ``--requests`` requests, prints ``worker <pid> served
<n>`` and then idles until SIGTERM; the parent prints ``parent <pid> ready``
once every worker has reported, and forwards SIGTERM to them.
"""

import argparse
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import topdeck  # noqa: E402

REQUESTS = topdeck.Counter("http_requests", "Requests served.", ["route"])
LATENCY = topdeck.Histogram("http_request_duration_seconds", "Time to serve a request.")


def handle(i):
    with LATENCY.time():
        REQUESTS.labels(route="/api" if i % 4 else "/").inc()


def worker(requests):
    for i in range(requests):
        handle(i)
    # One write: the workers share the pipe, and a line under PIPE_BUF stays whole.
    os.write(1, f"worker {os.getpid()} served {requests}\n".encode())
    while True:
        signal.pause()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--requests", type=int, default=1000)
    args = ap.parse_args()
    ready_r, ready_w = os.pipe()
    children = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            os.dup2(ready_w, 1)  # the worker's report goes through the pipe
            worker(args.requests)
        children.append(pid)
    os.close(ready_w)
    with os.fdopen(ready_r) as reports:
        for _ in children:
            sys.stdout.write(reports.readline())
        print(f"parent {os.getpid()} ready", flush=True)

        def stop(*_):
            for pid in children:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        signal.signal(signal.SIGTERM, stop)
        for pid in children:
            while True:
                try:
                    os.waitpid(pid, 0)
                    break
                except InterruptedError:
                    continue
                except ChildProcessError:
                    break


if __name__ == "__main__":
    main()
