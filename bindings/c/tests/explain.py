#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The C timer's CPU wait, end to end (root; `make c` runs it): the real
`topdeck agent` pins its thread-waits array, a C victim (tests/victim.c)
times requests with td_timer_begin/td_timer_end in one cgroup, a CPU hog
joins it on its CPU from another cgroup, and `topdeck explain --json`
must say the victim's p99 rise is CPU wait behind the hog's cgroup.

    tests/explain.py <topdeck-c-victim> <topdeck>
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

CPU = "0"


def cpu_hierarchy():
    """The mount of the cgroup hierarchy with the cpu controller."""
    v2 = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            mount = fields[4]
            fstype, opts = line.split(" - ")[1].split()[0], line.split(" - ")[1].split()[2]
            if fstype == "cgroup" and "cpu" in opts.split(","):
                return mount
            if fstype == "cgroup2" and v2 is None:
                v2 = mount
    return v2


def main():
    victim_bin, topdeck = sys.argv[1], sys.argv[2]
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            sys.exit("explain.py: needs root (it loads BPF programs and makes cgroups), and CI must run it")
        print("SKIPPED explain.py: needs root (it loads BPF programs and makes cgroups)")
        return
    mount = cpu_hierarchy()
    tag = f"topdeck-ctest-{os.getpid()}"
    cgroups = {name: os.path.join(mount, f"{tag}-{name}") for name in ("victim", "hog")}
    pin_dir = f"/sys/fs/bpf/{tag}"
    pin = os.path.join(pin_dir, "thread_waits")
    ns = tempfile.mkdtemp()
    env = dict(os.environ, TOPDECK_DIR=ns, TOPDECK_THREAD_WAITS=pin)
    procs = []
    try:
        for d in cgroups.values():
            os.mkdir(d)

        def start(argv, cgroup, **kw):
            def enter():
                with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                    f.write("0")
                os.sched_setaffinity(0, {int(CPU)})
            p = subprocess.Popen(argv, env=env, preexec_fn=enter if cgroup else None, **kw)
            procs.append(p)
            return p

        agent = start([topdeck, "agent", "--interval", "500ms", "--thread-waits", pin], None,
                      stdout=subprocess.DEVNULL)
        deadline = time.time() + 30
        while not os.path.exists(pin):
            if time.time() > deadline or agent.poll() is not None:
                sys.exit("explain.py: the agent pinned no thread-waits array")
            time.sleep(0.1)
        victim = start([victim_bin], cgroups["victim"], stdout=subprocess.PIPE, text=True)
        first = victim.stdout.readline().split()
        if first[:1] != ["tid"] or first[3] != "1":
            sys.exit(f"explain.py: the C victim's timer measures no CPU wait: {first}")
        explain = start([topdeck, "explain", str(victim.pid), "--window", "2s", "--count", "5", "--json"],
                        None, stdout=subprocess.PIPE, text=True)
        time.sleep(4.5)
        start(["sh", "-c", "while :; do :; done"], cgroups["hog"])
        out, _ = explain.communicate(timeout=60)
        windows = [json.loads(line) for line in out.splitlines()]
        last = windows[-1]
        row = last["rows"][0]
        hog = "/" + os.path.basename(cgroups["hog"])
        checks = [
            (row["series"] == "victim_request_seconds", "the C timer's histogram is explained"),
            (row["per_request"] is True, "each request's wait came from the C timer"),
            (last["level"] == "thread_waits", "the agent's array was read"),
            (row["finding"] == "cpu", "the CPU is the cause"),
            ((row["rise_explained"] or 0) >= 0.8, "at least 80% of the p99 rise is CPU wait"),
            (last["culprits"][0]["who"] == hog, "the hog's cgroup is named"),
        ]
        failed = [what for ok, what in checks if not ok]
        if failed:
            sys.exit("explain.py: " + "; ".join(failed) + "\n" + "\n".join(json.dumps(w) for w in windows))
        print(f"explain.py: C victim: {row['verdict']}")
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM if p.args[1:2] == ["agent"] else signal.SIGKILL)
            p.wait()
        for d in cgroups.values():
            for _ in range(500):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)
        for path in (pin, pin_dir):
            try:
                os.remove(path) if path == pin else os.rmdir(path)
            except OSError:
                pass
        subprocess.run(["rm", "-rf", ns])


if __name__ == "__main__":
    main()
