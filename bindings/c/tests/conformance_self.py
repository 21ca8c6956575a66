#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The C conformance drivers against each other and against the protocol's
script (conformance/PROTOCOL.md), ahead of the cross-implementation runner:
every mode of the writer, the reader's document checked value by value.

    tests/conformance_self.py <dir of C programs>
"""
import json
import os
import subprocess
import sys
import tempfile

BIN = sys.argv[1]
results = []


def check(what, cond, detail=""):
    results.append(cond)
    print(f"test {what} ... {'ok' if cond else 'FAILED'}")
    if not cond:
        print(f"  {detail}", file=sys.stderr)


def writer(d, mode):
    p = subprocess.Popen([f"{BIN}/conformance-writer", d, mode],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line == "ready\n", f"writer printed {line!r}"
    return p


def read(d):
    out = subprocess.run([f"{BIN}/conformance-reader", d], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def metric(reg, name, labels):
    found = [m for m in reg["metrics"] if m["name"] == name and m["labels"] == labels]
    return found[0] if len(found) == 1 else None


def check_phase_1(doc, state):
    regs = doc["registries"]
    check(f"one {state} registry named conformance",
          [(r["registry"], r["state"]) for r in regs] == [("conformance", state)], regs)
    if not regs:
        return
    r = regs[0]
    names = [m["name"] for m in r["metrics"]]
    check("metrics in registration order", names[:7] == [
        "jobs_total", "jobs_total", "queue_depth", "temperature_celsius",
        "request_duration_seconds", "payload_bytes", "db_query_seconds"], names)
    fast = metric(r, "jobs_total", [["queue", "fast"]])
    check("4 threads x 25,000 increments", fast and fast["value"] == 100000 and
          fast["help"] == "Jobs done." and fast["kind"] == "counter", fast)
    check("add(7)", metric(r, "jobs_total", [["queue", "slow"]])["value"] == 7)
    depth = metric(r, "queue_depth", [])
    check("integer gauge and a UTF-8 help byte-exact",
          depth["kind"] == "gauge" and depth["value"] == -42 and
          depth["help"] == "Jobs waiting \u2014 \u00fcn\u00efc\u00f6d\u00e9 \u2713", depth)
    temp = metric(r, "temperature_celsius", [["room", 'a"b\\c']])
    check("float gauge, a label value with a quote and a backslash",
          temp and temp["kind"] == "gauge_f64" and temp["value"] == -0.125 and
          temp["unit"] == "celsius", temp)
    h = metric(r, "request_duration_seconds", [["route", "/"]])["value"]
    total = 0.0
    for i in range(1, 1001):
        total += i / 1000
    check("histogram of i/1000: count, sum, max, zero bucket",
          (h["count"], h["sum"], h["max"], h["zero_count"], h["schema"]) ==
          (1000, total, 1.0, 0, 3), h)
    check("buckets trimmed and summing to the count",
          h["buckets"][0] > 0 and h["buckets"][-1] > 0 and sum(h["buckets"]) == 1000, h)
    p = metric(r, "payload_bytes", [])["value"]
    check("zeros go to the zero bucket",
          (p["count"], p["zero_count"], p["sum"], p["max"], sum(p["buckets"])) ==
          (6, 3, 1e9 + 2048, 1e9, 3), p)
    db = metric(r, "db_query_seconds", [])
    check("timer: 10 sections, in seconds",
          db["kind"] == "histogram" and db["value"]["count"] == 10 and db["unit"] == "seconds", db)


with tempfile.TemporaryDirectory() as d:
    w = writer(d, "exit")
    check_phase_1(read(d), "alive")
    w.stdin.close()
    check("exit mode exits 0", w.wait(timeout=10) == 0)
    check("and removes its file", read(d)["registries"] == [])

with tempfile.TemporaryDirectory() as d:
    w = writer(d, "late")
    w.stdin.write("more\n")
    w.stdin.flush()
    check("late mode answers more-done", w.stdout.readline() == "more-done\n")
    late = metric(read(d)["registries"][0], "late_total", [])
    check("phase 2: late_total is 3", late and late["value"] == 3 and
          late["help"] == "Registered late.", late)
    w.stdin.close()
    check("late mode exits 0", w.wait(timeout=10) == 0)

with tempfile.TemporaryDirectory() as d:
    w = writer(d, "crash")
    w.stdin.close()
    check("crash mode dies of SIGKILL", w.wait(timeout=10) == -9)
    check_phase_1(read(d), "dead")
    with open(os.path.join(d, "1-1-0.topdeck"), "wb") as f:
        f.write(b"\0" * 4096)
    doc = read(d)
    check("a file that is not a registry is rejected, the rest still read",
          doc["rejected"] == ["1-1-0.topdeck"] and len(doc["registries"]) == 1, doc["rejected"])

check("a directory that cannot be read exits 1",
      subprocess.run([f"{BIN}/conformance-reader", "/nonexistent/dir"],
                     capture_output=True).returncode == 1)

print(f"{results.count(True)} passed, {results.count(False)} failed")
sys.exit(0 if all(results) else 1)
