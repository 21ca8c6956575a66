# SPDX-License-Identifier: Apache-2.0
"""A prefork server (examples/prefork.py) read by the Rust CLI: the workers
count into the parent's registry, alive, right totals, and SIGKILL'd
workers' counts stay in them with no file of their own; the last process to
exit removes the file. And the conformance drivers, read by both readers."""

import json
import os
import signal
import subprocess
import sys
import time

from conftest import PACKAGE

WORKERS, REQUESTS = 4, 1000


def test_prefork_workers_count_into_the_parents_registry(ns, cli):
    p = subprocess.Popen([sys.executable, str(PACKAGE / "examples" / "prefork.py"), "--workers", str(WORKERS),
                          "--requests", str(REQUESTS)], stdout=subprocess.PIPE, text=True)
    try:
        lines = [p.stdout.readline() for _ in range(WORKERS + 1)]
        workers = [int(line.split()[1]) for line in lines if line.startswith("worker ")]
        assert len(workers) == WORKERS and lines[-1].startswith(f"parent {p.pid} ready"), lines

        def totals():
            (reg,) = cli(ns, "ls", "--json")["registries"]
            assert (reg["pid"], reg["state"]) == (p.pid, "alive"), reg
            show = cli(ns, "show", "--json", reg["path"])
            return {(m["name"], m["labels"].get("route")): m["value"] for m in show["metrics"]}
        expected = {("http_requests_total", "/"): WORKERS * (REQUESTS // 4),
                    ("http_requests_total", "/api"): WORKERS * (REQUESTS - REQUESTS // 4)}
        vals = totals()
        assert {k: vals[k] for k in expected} == expected
        assert vals[("http_request_duration_seconds", None)]["count"] == WORKERS * REQUESTS

        killed = workers[:2]
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not all(map(ended, killed)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(map(ended, killed))
        # SIGKILL'd workers take nothing with them and leave no file: gc has
        # nothing to collect, and the totals stay.
        assert cli(ns, "gc", "--json")["removed"] == []
        assert len([n for n in os.listdir(ns) if n.endswith(".topdeck")]) == 1
        assert totals() == vals
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
    # The parent outlived its workers, and its clean exit removed the file.
    assert not [n for n in os.listdir(ns) if n.endswith(".topdeck")]


def ended(pid):
    """Gone, or a zombie its parent has not reaped yet."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(b")") + 2:].startswith(b"Z")


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
