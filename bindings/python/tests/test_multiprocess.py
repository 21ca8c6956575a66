# SPDX-License-Identifier: Apache-2.0
"""A prefork server (examples/prefork.py) read by the Rust CLI: one registry
per worker, alive, right totals; SIGKILL'd workers dead, and gc removes
exactly them. And the conformance drivers, read by both readers."""

import json
import os
import signal
import subprocess
import sys
import time

from conftest import PACKAGE

WORKERS, REQUESTS = 4, 1000


def test_prefork_workers_each_publish_their_own_registry(ns, cli):
    p = subprocess.Popen([sys.executable, str(PACKAGE / "examples" / "prefork.py"), "--workers", str(WORKERS),
                          "--requests", str(REQUESTS)], stdout=subprocess.PIPE, text=True)
    try:
        lines = [p.stdout.readline() for _ in range(WORKERS + 1)]
        workers = [int(line.split()[1]) for line in lines if line.startswith("worker ")]
        assert len(workers) == WORKERS and lines[-1].startswith(f"parent {p.pid} ready"), lines
        listing = cli(ns, "ls", "--json")
        by_pid = {r["pid"]: r for r in listing["registries"]}
        assert sorted(by_pid) == sorted(workers + [p.pid]), listing
        assert all(r["state"] == "alive" for r in by_pid.values())
        for pid in workers:
            show = cli(ns, "show", "--json", by_pid[pid]["path"])
            vals = {(m["name"], m["labels"].get("route")): m["value"] for m in show["metrics"]}
            assert vals[("http_requests_total", "/")] == REQUESTS // 4
            assert vals[("http_requests_total", "/api")] == REQUESTS - REQUESTS // 4
            assert vals[("http_request_duration_seconds", None)]["count"] == REQUESTS
        parent = cli(ns, "show", "--json", by_pid[p.pid]["path"])
        assert [m["name"] for m in parent["metrics"]] == ["http_request_duration_seconds"]
        assert parent["metrics"][0]["value"]["count"] == 0

        killed = workers[:2]
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while True:
            states = {r["pid"]: r["state"] for r in cli(ns, "ls", "--json")["registries"]}
            if all(states[pid] == "dead" for pid in killed) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert {pid: states[pid] for pid in workers} == {
            **{pid: "dead" for pid in killed}, **{pid: "alive" for pid in workers[2:]}}
        # The dead keep their counts until collected.
        assert cli(ns, "show", "--json", by_pid[killed[0]]["path"])["metrics"]
        gc = cli(ns, "gc")
        for pid in killed:
            assert by_pid[pid]["path"] in gc
        left = {r["pid"] for r in cli(ns, "ls", "--json")["registries"]}
        assert left == set(workers[2:]) | {p.pid}
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)


def _driver(name, *args, **kw):
    return subprocess.Popen([sys.executable, str(PACKAGE / "conformance" / name), *args], text=True, **kw)


def test_the_conformance_drivers_agree_with_the_rust_reader(ns, cli):
    w = _driver("writer.py", str(ns), "crash", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert w.stdout.readline() == "ready\n"
    alive = json.loads(_driver("reader.py", str(ns), stdout=subprocess.PIPE).communicate()[0])
    (reg,) = alive["registries"]
    assert (reg["registry"], reg["state"], alive["rejected"]) == ("conformance", "alive", [])
    rust = cli(ns, "show", "--json", str(ns / reg["file"]))
    assert len(rust["metrics"]) == len(reg["metrics"]) == 7
    for ours, theirs in zip(reg["metrics"], rust["metrics"]):
        assert (ours["name"], dict(ours["labels"]), ours["help"], ours["unit"]) == (
            theirs["name"], theirs["labels"], theirs["help"], theirs["unit"])
        if ours["kind"] == "histogram":
            assert (ours["value"]["count"], ours["value"]["max"]) == (theirs["value"]["count"], theirs["value"]["max"])
        else:
            assert ours["value"] == theirs["value"]
    values = {m["name"] + str(m["labels"]): m["value"] for m in reg["metrics"]}
    assert values["jobs_total[['queue', 'fast']]"] == 100_000
    assert values["request_duration_seconds[['route', '/']]"]["count"] == 1000
    assert values["payload_bytes[]"]["zero_count"] == 3
    assert values["db_query_seconds[]"]["count"] == 10
    w.stdin.close()
    assert w.wait(timeout=10) == -signal.SIGKILL
    dead = json.loads(_driver("reader.py", str(ns), stdout=subprocess.PIPE).communicate()[0])
    assert dead["registries"][0]["state"] == "dead"
    (ns / "junk.topdeck").write_bytes(b"NOTTOPDK" + bytes(4088))
    dead = json.loads(_driver("reader.py", str(ns), stdout=subprocess.PIPE).communicate()[0])
    assert dead["rejected"] == ["junk.topdeck"]
    assert reg["file"] in cli(ns, "gc")


def test_late_registration_is_seen(ns):
    w = _driver("writer.py", str(ns), "late", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert w.stdout.readline() == "ready\n"
    w.stdin.write("more\n")
    w.stdin.flush()
    assert w.stdout.readline() == "more-done\n"
    doc = json.loads(_driver("reader.py", str(ns), stdout=subprocess.PIPE).communicate()[0])
    assert doc["registries"][0]["metrics"][-1]["name"] == "late_total"
    assert doc["registries"][0]["metrics"][-1]["value"] == 3
    w.stdin.close()
    assert w.wait(timeout=10) == 0
    assert not [n for n in os.listdir(ns) if n.endswith(".topdeck")], "exit mode removes the file"
