#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Services in every language side by side, read by one topdeck.

Each publishes a request counter and a latency histogram through its own
implementation of the format: the Rust example service, the C example
(bindings/c), a small service on the Python package (bindings/python),
the Java example (bindings/java) and the Go HTTP example (bindings/go,
sent requests by this script). The Rust, C and Python ones use the same
names, `requests_total` and `request_duration_seconds`; Java's and Go's
examples share theirs, `http_requests_total` and
`http_request_duration_seconds`. `topdeck ls`, `top --once` and `serve` must show them
alike: alive, counting, and in `serve` one family per name, of one type,
holding every process's series.

    tests/languages.py    (after `cargo build --workspace --bins` and `make -C bindings/c`)
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(TOP, "target"))
TOPDECK = os.path.join(TARGET, "debug", "topdeck")
DEADLINE = 30.0

PYTHON_SERVICE = r'''
import sys, time, topdeck
reg = topdeck.Registry("main")
requests = reg.counter("requests_total", [("route", "/")], "Requests served.")
latency = reg.histogram("request_duration_seconds", [("route", "/")], "Time to serve a request.", "seconds")
print(f"pid {__import__('os').getpid()} registry {reg.path}", flush=True)
while True:
    start = time.perf_counter()
    sum(range(2000))
    latency.observe(time.perf_counter() - start)
    requests.inc()
    time.sleep(0.001)
'''

SHARED = ("requests_total", "request_duration_seconds")
# name: (command line, its counter and histogram)
SERVICES = {
    "rust": ([os.path.join(TARGET, "debug", "topdeck-example-service"), "--workers", "1", "--rate", "300"], SHARED),
    "c": ([os.path.join(TARGET, "c", "debug", "bin", "topdeck-c-example"), "--rate", "300"], SHARED),
    "python": ([sys.executable, "-c", PYTHON_SERVICE], SHARED),
    "java": ([os.path.join(TOP, "bindings", "java", "examples", "service.sh"), "1"],
             ("http_requests_total", "http_request_duration_seconds")),
    "go": ([os.path.join(TOP, "target", "go", "bin", "httpservice"), "-addr", "127.0.0.1:0"],
           ("http_requests_total", "http_request_duration_seconds")),
}


def build_go_example():
    """The Go example, built as scripts/go-test.sh builds it (cached by Go)."""
    out = subprocess.run(["go", "build", "-o", os.path.join(TOP, "target", "go", "bin") + "/",
                          "./examples/httpservice"],
                         cwd=os.path.join(TOP, "bindings", "go"), capture_output=True, text=True,
                         env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"})
    if out.returncode != 0:
        fail(f"building the Go example: {out.stderr}")


def keep_asking(url, stop):
    """Requests to an HTTP example until `stop` is set."""
    while not stop.is_set():
        try:
            urllib.request.urlopen(url, timeout=5).read()
        except OSError:
            pass
        time.sleep(0.002)


def fail(why):
    print(f"FAIL: {why}", file=sys.stderr)
    sys.exit(1)


def topdeck(ns, *args):
    out = subprocess.run([TOPDECK, *args], env={**os.environ, "TOPDECK_DIR": ns},
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        fail(f"topdeck {' '.join(args)}: {out.stderr}")
    return out.stdout


def start(ns, name, argv):
    env = {**os.environ, "TOPDECK_DIR": ns, "PYTHONPATH": os.path.join(TOP, "bindings", "python")}
    p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    # "pid N ...", or a registry path named <pid>-<start>-<seq>.topdeck.
    m = re.search(r"pid (\d+)", line) or re.search(r"/(\d+)-\d+-\d+\.topdeck", line)
    if not m:
        p.kill()
        fail(f"the {name} service did not start: {line!r}")
    return p, int(m.group(1)), line


def main():
    build_go_example()
    missing = [argv[0] for argv, _ in SERVICES.values() if not os.path.exists(argv[0])] + \
        ([TOPDECK] if not os.path.exists(TOPDECK) else [])
    if missing:
        fail(f"not built: {', '.join(missing)}; run `cargo build --workspace --bins` and `make -C bindings/c`")
    ns = tempfile.mkdtemp(prefix="topdeck-languages-")
    os.chmod(ns, 0o700)
    running = {}
    stop = threading.Event()
    try:
        for name, (argv, _) in SERVICES.items():
            p, pid, line = start(ns, name, argv)
            running[name] = (p, pid)
            listening = re.search(r"listening on ([\d.]+:\d+)", line)
            if listening:
                url = f"http://{listening.group(1)}/hello"
                threading.Thread(target=keep_asking, args=(url, stop), daemon=True).start()
        pids = {name: pid for name, (_, pid) in running.items()}
        time.sleep(0.5)

        # ls: three registries, each alive, under its writer's pid.
        listed = {r["pid"]: r for r in json.loads(topdeck(ns, "ls", "--json"))["registries"]}
        for name, pid in pids.items():
            if listed.get(pid, {}).get("state") != "alive":
                fail(f"ls: the {name} service (pid {pid}) is not listed alive: {listed}")
        print(f"ls: {', '.join(pids)} listed alive")

        # top: each counts requests, as a rate over the interval.
        harvest = json.loads(topdeck(ns, "top", "--once", "--json", "--interval", "500ms"))
        rows = {r["pid"]: r for r in harvest["registries"]}
        for name, pid in pids.items():
            counter = SERVICES[name][1][0]
            series = [s for s in rows[pid]["series"] if s["name"] == counter]
            rates = [s.get("rate") or 0 for s in series]
            if not series or sum(rates) <= 0:
                fail(f"top: the {name} service's {counter} has no rate: {series}")
        print(f"top: each service's counter counts ({', '.join(pids)})")

        # serve: one family per name and type, every process's series in it.
        srv = subprocess.Popen([TOPDECK, "serve", "--listen", "127.0.0.1:0"],
                               env={**os.environ, "TOPDECK_DIR": ns},
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            url = srv.stdout.readline().split()[-1]
            body = urllib.request.urlopen(url, timeout=30).read().decode()
        finally:
            srv.terminate()
            srv.wait(timeout=10)
        for name, pid in pids.items():
            for family, kind in zip(SERVICES[name][1], ("counter", "histogram")):
                types = re.findall(rf"^# TYPE {family} (\w+)$", body, re.M)
                if types != [kind]:
                    fail(f"serve: {family} is typed {types}, not once {kind}")
                sample = family if kind == "counter" else f"{family}_count"
                if not re.search(rf'^{sample}{{[^}}]*pid="{pid}"', body, re.M):
                    fail(f"serve: no {sample} of the {name} service (pid {pid})")
        if "topdeck_scrape_errors_total{reason=\"type_conflict\"} 0" not in body:
            fail("serve: a type conflict between the implementations")
        print("serve: one family per name and type, every service's series in its families")
    finally:
        stop.set()
        for p, _ in running.values():
            p.send_signal(signal.SIGTERM)
        for p, _ in running.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    # SIGTERM: every service removes its own file (Python's through the
    # handler its package installs where SIGTERM has its default action).
    left = [f for f in os.listdir(ns) if f.endswith(".topdeck")]
    if left:
        fail(f"files left after SIGTERM: {left}")
    os.rmdir(ns)
    print("languages: pass")


if __name__ == "__main__":
    main()
