#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Soak: do the scheduler agent's verdicts stay quiet on a busy but fair host?
# `topdeck agent` runs with its default verdict rule, its log to a file; a
# latency-sensitive process (wakes every millisecond, as in demo-sched.sh)
# runs in a QUIET cgroup; beside it, at the default CPU weight and on the
# same CPU, background noise: bursty CPU work (spins 50-300 ms, sleeps
# 0.5-3 s) in one cgroup and a churn of short-lived processes in another.
# Nothing is heavier than the quiet cgroup, so no verdict on it is right.
# Every SAMPLE_EVERY seconds `topdeck sched --json` samples the quiet
# cgroup's run-queue p99. At the end it prints a summary (duration, CPU,
# verdict and cleared lines for the quiet cgroup and for all cgroups, the
# quiet p99's min/median/max) and exits 1 if the quiet cgroup got any
# verdict, 0 if not, 2 if the soak itself could not run.
#
# Needs root (eBPF, cgroups) and python3; cleans up its cgroups, its
# processes and its bpffs pin however it ends (the agent's log is kept).
# Runs for SOAK_SECONDS (default 600, ten minutes) plus a few seconds: a
# soak, run by hand, never by `make test`.
#
# Environment:
#   TOPDECK       the topdeck binary (default /tmp/soak-bin/topdeck)
#   SOAK_SECONDS  how long to soak (default 600)
#   SAMPLE_EVERY  seconds between `topdeck sched` samples (default 30)
#   SOAK_CPUS     the CPUs (taskset list) every soak process runs on (default 0)
#   SOAK_LOG      the agent's log (default /tmp/topdeck-soak-<pid>.log, kept)
set -euo pipefail
cd "$(dirname "$0")/.."

topdeck=${TOPDECK:-/tmp/soak-bin/topdeck}
soak_seconds=${SOAK_SECONDS:-600}
sample_every=${SAMPLE_EVERY:-30}
cpus=${SOAK_CPUS:-0}
log=${SOAK_LOG:-/tmp/topdeck-soak-$$.log}

if [[ $(id -u) -ne 0 ]]; then
	echo "error: the soak needs root (it loads eBPF programs and creates cgroups)" >&2
	exit 2
fi
if [[ ! -x $topdeck ]]; then
	echo "error: $topdeck is missing; set TOPDECK to a release build of topdeck" >&2
	exit 2
fi
for n in "$soak_seconds" "$sample_every"; do
	[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "error: SOAK_SECONDS and SAMPLE_EVERY are whole seconds, not '$n'" >&2; exit 2; }
done
python=$(command -v python3) || { echo "error: the soak needs python3" >&2; exit 2; }
# The interpreter itself, not a shim (pyenv's forks a shell per start).
python=$("$python" -c 'import sys; print(sys.executable)')

# The cpu controller: a v1 hierarchy if there is one (hybrid hosts), else v2.
mount=$(findmnt -rn -t cgroup -o TARGET,OPTIONS | awk '$2 ~ /(^|,)cpu(,|$)/ {print $1; exit}')
if [[ -z $mount ]]; then
	mount=$(findmnt -rn -t cgroup2 -o TARGET | head -n 1)
	[[ -n $mount ]] || { echo "error: no cgroup hierarchy with the cpu controller is mounted" >&2; exit 2; }
	echo +cpu >"$mount/cgroup.subtree_control" 2>/dev/null || true
fi

work=$(mktemp -d)
export TOPDECK_DIR=$work/ns
# The agent's thread-waits array, pinned apart from any agent the host runs.
pin_dir=/sys/fs/bpf/topdeck-soak-$$
export TOPDECK_THREAD_WAITS=$pin_dir/thread_waits
quiet=$mount/topdeck-soak-$$-quiet
bursty=$mount/topdeck-soak-$$-bursty
churn=$mount/topdeck-soak-$$-churn
cgroups=("$quiet" "$bursty" "$churn")
agent=
children=()
stop_all() {
	local p cg
	for p in "${children[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${children[@]}"; do wait "$p" 2>/dev/null || true; done
	children=()
	# Whatever the churn had started and outlived it.
	for cg in "${cgroups[@]}"; do
		[[ -f $cg/cgroup.procs ]] || continue
		while read -r p; do kill -KILL "$p" 2>/dev/null || true; done <"$cg/cgroup.procs"
	done
	if [[ -n $agent ]]; then
		kill -TERM "$agent" 2>/dev/null || true
		wait "$agent" 2>/dev/null || true
		agent=
	fi
}
cleanup() {
	local d
	stop_all
	for d in "${cgroups[@]}"; do
		for _ in $(seq 50); do [[ -d $d ]] || break; rmdir "$d" 2>/dev/null || sleep 0.1; done
	done
	rm -rf "$work"
	rm -f "$TOPDECK_THREAD_WAITS" 2>/dev/null || true
	rmdir "$pin_dir" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Starts a command on the soak's CPUs in cgroup $1; its pid is in $started.
started=
start_in() {
	local cg=$1
	shift
	taskset -c "$cpus" "$@" </dev/null >/dev/null 2>&1 &
	started=$!
	echo "$started" >"$cg/cgroup.procs"
	children+=("$started")
}

echo "soak: ${soak_seconds}s, agent log $log, cgroups under $mount, CPUs $cpus"
"$topdeck" agent --thread-waits "$TOPDECK_THREAD_WAITS" >"$log" 2>&1 &
agent=$!
sleep 2
kill -0 "$agent" 2>/dev/null || { echo "error: the agent stopped at once:" >&2; cat "$log" >&2; exit 2; }
if ! grep -q 'probe attached' "$log"; then
	echo "error: the agent has no eBPF probe, so no verdicts to soak:" >&2
	cat "$log" >&2
	exit 2
fi

mkdir "${cgroups[@]}"
# The quiet one: wakes every millisecond, as the demo's victim does.
start_in "$quiet" "$python" -c 'import time
while True: time.sleep(0.001)'
# Bursty CPU work: two spinners, each 50-300 ms on, 0.5-3 s off.
for _ in 1 2; do
	start_in "$bursty" "$python" -c 'import random, time
while True:
    end = time.monotonic() + random.uniform(0.05, 0.3)
    while time.monotonic() < end:
        pass
    time.sleep(random.uniform(0.5, 3))'
done
# Churn: short-lived processes, a few a second.
# shellcheck disable=SC2016 # expanded by the churn's own shell
start_in "$churn" bash -c 'while :; do
	/bin/true
	"$1" -c "sum(range(10000))"
	sleep "0.$((RANDOM % 5 + 1))"
done' churn "$python"

# The quiet cgroup as the agent names it: its path in the hierarchy.
quiet_name=${quiet#"$mount"}
p99s=$work/p99s
: >"$p99s"
start=$SECONDS
started_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
end=$((start + soak_seconds))
next=$((start + sample_every))
while ((SECONDS < end)); do
	kill -0 "$agent" 2>/dev/null || { echo "error: the agent stopped:" >&2; tail -n 20 "$log" >&2; exit 2; }
	for p in "${children[@]}"; do
		kill -0 "$p" 2>/dev/null || { echo "error: soak process $p stopped" >&2; exit 2; }
	done
	if ((SECONDS >= next && SECONDS + 2 <= end)); then
		next=$((next + sample_every))
		p99=$("$topdeck" sched --json --window 2s 2>/dev/null | "$python" -c '
import json, sys
name = sys.argv[1]
try:
    view = json.load(sys.stdin).get("view") or {}  # none when coarse
except ValueError:
    view = {}
rows = [c for c in view.get("cgroups", []) if c.get("cgroup") == name]
p99 = rows[0].get("p99_seconds") if rows else None
print("-" if p99 is None else repr(p99))' "$quiet_name") || p99=-
		if [[ $p99 == - ]]; then
			printf '[%4ds] quiet p99 - (not in the window)\n' "$((SECONDS - start))"
		else
			awk -v t="$((SECONDS - start))" -v s="$p99" 'BEGIN {printf "[%4ds] quiet p99 %.1fµs\n", t, s * 1e6}'
			echo "$p99" >>"$p99s"
		fi
	fi
	sleep 1
done
elapsed=$((SECONDS - start))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
stop_all

# The agent's lines: "<time> verdict: <cgroup>: <what>; ..." and
# "<time> cleared: <cgroup>".
count() { grep -cF -- "$1" "$log" || true; }
verdicts_all=$(count ' verdict: ')
cleared_all=$(count ' cleared: ')
verdicts_quiet=$(count " verdict: $quiet_name: ")
noisy_quiet=$(count " verdict: $quiet_name: noisy neighbour ")
suspect_quiet=$(count " verdict: $quiet_name: suspect neighbour ")
cleared_quiet=$({ grep -F -- ' cleared: ' "$log" || true; } | awk -v n="$quiet_name" '$NF == n' | wc -l)
# Episodes: verdicts given while none was in force on that cgroup. A change
# of kind (suspect <-> noisy neighbour) prints the new verdict and then
# "cleared" for the old one, so lines alone overcount.
episodes() {
	awk -v want="$1" '
		$2 == "verdict:" { v = $3; sub(/:$/, "", v); if (!on[v]) n[v]++; on[v]++ }
		$2 == "cleared:" { on[$3]-- }
		END { for (v in n) if (want == "" || v == want) t += n[v]; print t + 0 }' "$log"
}
episodes_all=$(episodes '')
episodes_quiet=$(episodes "$quiet_name")
cpu_model=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)
p99_range=$(sort -g "$p99s" | awk '
	{ v[NR] = $1 }
	END {
		if (NR == 0) { print "no samples"; exit }
		med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "min %.1fµs, median %.1fµs, max %.1fµs over %d samples", v[1] * 1e6, med * 1e6, v[NR] * 1e6, NR
	}')

echo
echo "== soak summary"
echo "duration:       ${elapsed}s (SOAK_SECONDS=$soak_seconds), from $started_at"
echo "host load:      $load_before at the start, $load_after at the end (1, 5, 15 min)"
echo "cpu:            ${cpu_model:-unknown} ($(nproc) CPUs online; soak on CPU $cpus), kernel $(uname -r)"
echo "quiet cgroup:   $quiet_name: $verdicts_quiet verdict lines ($noisy_quiet noisy neighbour, $suspect_quiet suspect), $cleared_quiet cleared lines; $episodes_quiet episodes"
echo "all cgroups:    $verdicts_all verdict lines, $cleared_all cleared lines; $episodes_all episodes"
echo "quiet p99:      $p99_range (topdeck sched --window 2s every ${sample_every}s)"
echo "agent log:      $log"
if ((verdicts_all > 0)); then
	echo "verdict lines (the first 20):"
	grep -F -- ' verdict: ' "$log" | head -n 20 | sed 's/^/  /'
fi
if ((verdicts_quiet > 0)); then
	echo "FAIL: the quiet cgroup got verdicts on noise:"
	grep -F -- " verdict: $quiet_name: " "$log" | sed 's/^/  /'
	exit 1
fi
echo "ok: no verdict on the quiet cgroup"
