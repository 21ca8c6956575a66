#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Helpers for bench/soak.sh: the sampler, the exact-count checks and the
summary. Standard library only.

  soak_lib.py sample OUT INTERVAL     sample until OUT/stop exists
  soak_lib.py check-show SHOW_JSON DONE_LINE
  soak_lib.py check-prom PROM_URL PID DONE_LINE
  soak_lib.py prom PROM_URL QUERY    prints the first value or 'none'
  soak_lib.py summary OUT WARMUP_S
"""

import csv
import glob
import json
import math
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request

# ---------------------------------------------------------------- sampling


def proc_sample(pid):
    """(rss_kib, fds, threads, anon_kib) of a live pid, or None. RssAnon
    (heap and stacks) apart from VmRSS, which also counts the pages of
    mapped registries a reader has touched."""
    try:
        rss = threads = anon = None
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("RssAnon:"):
                    anon = int(line.split()[1])
                elif line.startswith("Threads:"):
                    threads = int(line.split()[1])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        if rss is None:  # a zombie
            return None
        return rss, fds, threads, anon
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def read_names(out):
    """name -> pid from OUT/pids (lines `name pid`); later lines win."""
    names = {}
    try:
        with open(os.path.join(out, "pids")) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    names[parts[0]] = parts[1]
    except FileNotFoundError:
        pass
    return names


def agent_map_ids(pid):
    """Ids of the BPF maps the process holds, from /proc/PID/fdinfo."""
    ids = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return ids
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                for line in f:
                    if line.startswith("map_id:"):
                        ids.add(int(line.split()[1]))
        except OSError:
            pass
    return ids


def bpf_maps(agent_pid):
    """Entries of the agent's BPF maps: {map name: entries} (hash maps only:
    arrays always hold max_entries, task storage cannot be dumped)."""
    if not agent_pid:
        return {}
    ids = agent_map_ids(agent_pid)
    if not ids:
        return {}
    try:
        shown = json.loads(
            subprocess.run(
                ["bpftool", "-j", "map", "show"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    counts = {}
    for m in shown:
        if m.get("id") not in ids:
            continue
        if m.get("type") not in ("hash", "lru_hash", "percpu_hash", "lru_percpu_hash"):
            continue
        try:
            dump = subprocess.run(
                ["bpftool", "-j", "map", "dump", "id", str(m["id"])],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout
            counts[m.get("name", str(m["id"]))] = len(json.loads(dump))
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
    return counts


def files_in(d):
    n = 0
    for _root, _dirs, files in os.walk(d):
        n += len(files)
    return n


def ls_counts(topdeck):
    """(alive, dead, metrics of the live topdeck-agent registry) from
    `topdeck ls --json`."""
    try:
        out = subprocess.run(
            [topdeck, "ls", "--json"], capture_output=True, text=True, timeout=30
        ).stdout
        doc = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    regs = doc.get("registries", doc) if isinstance(doc, dict) else doc
    alive = dead = 0
    agent = None
    for r in regs:
        if r.get("state") == "dead":
            dead += 1
        else:
            alive += 1
            if r.get("registry") == "topdeck-agent":
                agent = (r.get("metrics"), r.get("path"))
    return alive, dead, agent


def agent_shape(topdeck, path, out):
    """What the agent's registry holds, by metric name and distinct label
    values, kept in OUT/agent-shape.json (the agent removes its file when
    it dies, so this is the last look at it)."""
    try:
        doc = json.loads(
            subprocess.run(
                [topdeck, "show", "--json", path], capture_output=True, text=True, timeout=30
            ).stdout
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return
    names, labels = {}, {}
    for m in doc.get("metrics", []):
        names[m["name"]] = names.get(m["name"], 0) + 1
        for k, v in m["labels"].items():
            labels.setdefault(k, set()).add(v)
    shape = {
        "metrics": len(doc.get("metrics", [])),
        "by_name": names,
        "distinct_label_values": {k: len(v) for k, v in labels.items()},
        "cgroups_sample": sorted(labels.get("cgroup", []))[:40],
    }
    with open(os.path.join(out, "agent-shape.json.tmp"), "w") as f:
        json.dump(shape, f, indent=1)
    os.replace(os.path.join(out, "agent-shape.json.tmp"), os.path.join(out, "agent-shape.json"))


def sample(out, interval):
    interval = float(interval)
    ns = os.environ["TOPDECK_DIR"]
    topdeck = os.environ["TOPDECK"]
    path = os.path.join(out, "samples.csv")
    start = float(open(os.path.join(out, "start")).read())
    with open(path, "a", newline="") as f:
        w = csv.writer(f)
        if f.tell() == 0:
            w.writerow(["t_s", "series", "value"])
        tick = 0
        while not os.path.exists(os.path.join(out, "stop")):
            t = round(time.time() - start, 1)
            names = read_names(out)
            for name, pid in sorted(names.items()):
                s = proc_sample(pid)
                if s is None:
                    continue
                w.writerow([t, f"{name}.rss_kib", s[0]])
                w.writerow([t, f"{name}.fds", s[1]])
                w.writerow([t, f"{name}.threads", s[2]])
                w.writerow([t, f"{name}.anon_kib", s[3]])
            w.writerow([t, "ns.files", files_in(ns)])
            lc = ls_counts(topdeck)
            if lc is not None:
                w.writerow([t, "ls.alive", lc[0]])
                w.writerow([t, "ls.dead", lc[1]])
                if lc[2] is not None:
                    w.writerow([t, "agent.registry_metrics", lc[2][0]])
                    if lc[2][0] > 1000:
                        agent_shape(topdeck, lc[2][1], out)
            for name, n in sorted(bpf_maps(names.get("agent")).items()):
                w.writerow([t, f"bpf.{name}.entries", n])
            f.flush()
            tick += 1
            # Sleep to the next multiple of the interval, in small steps so
            # that a stop is noticed quickly.
            due = start + tick * interval
            while time.time() < due and not os.path.exists(os.path.join(out, "stop")):
                time.sleep(min(0.5, max(0.0, due - time.time())))


# ---------------------------------------------------------------- checks


def parse_done(line):
    """`done ops=.. records=.. sum=.. max=.. threads=.. per_worker=a,b` -> dict."""
    fields = dict(kv.split("=", 1) for kv in line.split()[1:])
    return {
        "ops": int(fields["ops"]),
        "records": int(fields["records"]),
        "sum": int(fields["sum"]),
        "per_worker": [int(x) for x in fields["per_worker"].split(",")],
    }


def check_show(show_json, done_line):
    want = parse_done(done_line)
    doc = json.load(open(show_json))
    got = {"per_worker": {}}
    for m in doc["metrics"]:
        if m["name"] == "ops_total":
            got["ops"] = m["value"]
        elif m["name"] == "op_value":
            got["records"] = m["value"]["count"]
            got["sum"] = m["value"]["sum"]
        elif m["name"] == "worker_ops_total":
            got["per_worker"][int(m["labels"]["worker"])] = m["value"]
    got["per_worker"] = [got["per_worker"].get(i) for i in range(len(want["per_worker"]))]
    return compare("show", want, got)


def compare(who, want, got):
    bad = [k for k in want if got.get(k) != want[k] and not (
        isinstance(want[k], int) and isinstance(got.get(k), float) and got[k] == want[k])]
    if bad:
        print(f"{who} MISMATCH " + " ".join(f"{k}: want {want[k]} got {got.get(k)}" for k in bad))
        return 1
    print(f"{who} ok ops={want['ops']} records={want['records']} sum={want['sum']}")
    return 0


def prom_query(url, query):
    q = urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as r:
        doc = json.load(r)
    return doc["data"]["result"]


def prom_scalar(url, query):
    try:
        res = prom_query(url, query)
    except OSError:
        return None
    if not res:
        return None
    v = res[0]["value"][1] if "value" in res[0] else res[0][1]
    return float(v)


def check_prom(url, pid, done_line, deadline_s=20.0):
    """Waits until Prometheus's last scrape of the writer equals what it did."""
    want = parse_done(done_line)
    end = time.time() + deadline_s
    while True:
        got = {
            "ops": prom_scalar(url, f'ops_total{{pid="{pid}"}}'),
            "records": prom_scalar(url, f'op_value_count{{pid="{pid}"}}'),
            "sum": prom_scalar(url, f'op_value_sum{{pid="{pid}"}}'),
            "per_worker": [
                prom_scalar(url, f'worker_ops_total{{pid="{pid}",worker="{i}"}}')
                for i in range(len(want["per_worker"]))
            ],
        }
        got = {k: (int(v) if isinstance(v, float) else
                   [int(x) if x is not None else None for x in v] if isinstance(v, list) else v)
               for k, v in got.items()}
        if all(got[k] == want[k] for k in want) or time.time() > end:
            return compare("prometheus", want, got)
        time.sleep(0.5)


# ---------------------------------------------------------------- summary


def slope_per_hour(points):
    n = len(points)
    if n < 3:
        return None
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return None
    return sum((t - mt) * (v - mv) for t, v in points) / var * 3600


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:.1f}" if abs(v) >= 0.05 else f"{v:.2f}"
    return str(int(v))


def summary(out, warmup):
    warmup = float(warmup)
    series = {}
    with open(os.path.join(out, "samples.csv")) as f:
        for row in csv.DictReader(f):
            series.setdefault(row["series"], []).append((float(row["t_s"]), float(row["value"])))
    rows = []
    for name in sorted(series):
        pts = series[name]
        after = [p for p in pts if p[0] >= warmup]
        s = slope_per_hour(after)
        first_after = after[0][1] if after else None
        rows.append(
            (
                name,
                len(pts),
                fmt(pts[0][1]),
                fmt(first_after),
                fmt(pts[-1][1]),
                fmt(max(v for _, v in pts)),
                "-" if s is None else f"{s:+.1f}",
            )
        )
    head = ("series", "samples", "first", f"at {int(warmup)}s", "last", "max", "slope/h")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    print(f"Samples every 10 s; slope: least-squares fit over t >= {int(warmup)} s, per hour.")
    print("RSS in KiB.")
    print()
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |")


def main():
    cmd = sys.argv[1]
    if cmd == "sample":
        sample(sys.argv[2], sys.argv[3])
    elif cmd == "check-show":
        sys.exit(check_show(sys.argv[2], sys.argv[3]))
    elif cmd == "check-prom":
        sys.exit(check_prom(sys.argv[2], sys.argv[3], sys.argv[4]))
    elif cmd == "prom":
        v = prom_scalar(sys.argv[2], sys.argv[3])
        print("none" if v is None else fmt(v))
    elif cmd == "summary":
        summary(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
