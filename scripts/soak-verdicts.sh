#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Soak: do the scheduler agent's verdicts stay quiet on a busy but fair host?
# The requirement: a quiet container gets no verdict in a 10-minute soak
# with the demo's background noise.
# `topdeck agent` runs with its default verdict rule, its log to a file; a
# latency-sensitive process (wakes every millisecond, as in demo-sched.sh)
# runs in a QUIET cgroup; beside it, each in its own cgroup at the default
# CPU weight, background noise (SOAK_NOISE):
#   demo   (default) what scripts/demo.sh runs in the background: the
#          example service, one instance as `--workers 2 --rate 3000` and one
#          as `--workers 1 --rate 500`; nothing pinned unless SOAK_CPUS says.
#   harsh  bursty CPU work (two spinners, each 50-300 ms on, 0.5-3 s off) in
#          one cgroup and a churn of short-lived processes in another, all on
#          CPU 0 (SOAK_CPUS) with the quiet process: more than the demo asks.
# Nothing is heavier than the quiet cgroup, so no verdict on it is right.
# Every SAMPLE_EVERY seconds `topdeck sched --json` samples the quiet
# cgroup's run-queue p99. At the end it prints a summary (duration, CPU,
# verdict and cleared lines and verdict episodes for the quiet cgroup, the
# episodes of every cgroup, the quiet p99's min/median/max) and exits 1 if
# the quiet cgroup had any verdict episode, 0 if not, 2 if the soak itself
# could not run.
#
# Needs root (eBPF, cgroups) and python3; cleans up its cgroups, its
# processes and its bpffs pin however it ends (the agent's log is kept).
# Runs for SOAK_SECONDS (default 600, ten minutes) plus a few seconds: a
# soak, run by hand, never by `make test`.
#
# Environment:
#   TOPDECK          the topdeck binary (default /tmp/soak-bin/topdeck)
#   EXAMPLE_SERVICE  the example service, for demo noise
#                    (default /tmp/soak-bin/topdeck-example-service)
#   SOAK_NOISE       demo (default) or harsh, as above
#   SOAK_SECONDS     how long to soak (default 600)
#   SAMPLE_EVERY     seconds between `topdeck sched` samples (default 30)
#   SOAK_CPUS        the CPUs (taskset list) every soak process runs on;
#                    empty or "all" for no taskset (default: all for demo
#                    noise, 0 for harsh)
#   SOAK_LOG         the agent's log (default /tmp/topdeck-soak-<pid>.log, kept)
set -euo pipefail
cd "$(dirname "$0")/.."

topdeck=${TOPDECK:-/tmp/soak-bin/topdeck}
example_service=${EXAMPLE_SERVICE:-/tmp/soak-bin/topdeck-example-service}
noise=${SOAK_NOISE:-demo}
soak_seconds=${SOAK_SECONDS:-600}
sample_every=${SAMPLE_EVERY:-30}
log=${SOAK_LOG:-/tmp/topdeck-soak-$$.log}
case $noise in
demo) cpus=${SOAK_CPUS-all} ;;
harsh) cpus=${SOAK_CPUS-0} ;;
*)
	echo "error: SOAK_NOISE is demo or harsh, not '$noise'" >&2
	exit 2
	;;
esac
[[ $cpus == all ]] && cpus=

if [[ $(id -u) -ne 0 ]]; then
	echo "error: the soak needs root (it loads eBPF programs and creates cgroups)" >&2
	exit 2
fi
if [[ ! -x $topdeck ]]; then
	echo "error: $topdeck is missing; set TOPDECK to a release build of topdeck" >&2
	exit 2
fi
if [[ $noise == demo && ! -x $example_service ]]; then
	echo "error: $example_service is missing; set EXAMPLE_SERVICE to a release build of topdeck-example-service" >&2
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
if [[ $noise == demo ]]; then
	service_main=$mount/topdeck-soak-$$-service
	service_small=$mount/topdeck-soak-$$-service-small
	cgroups=("$quiet" "$service_main" "$service_small")
else
	bursty=$mount/topdeck-soak-$$-bursty
	churn=$mount/topdeck-soak-$$-churn
	cgroups=("$quiet" "$bursty" "$churn")
fi
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

# Starts a command on the soak's CPUs (all if none are named) in cgroup $1;
# its pid is in $started.
started=
start_in() {
	local cg=$1
	shift
	if [[ -n $cpus ]]; then
		taskset -c "$cpus" "$@" </dev/null >/dev/null 2>&1 &
	else
		"$@" </dev/null >/dev/null 2>&1 &
	fi
	started=$!
	echo "$started" >"$cg/cgroup.procs"
	children+=("$started")
}

echo "soak: ${soak_seconds}s, $noise noise, agent log $log, cgroups under $mount, CPUs ${cpus:-all (no taskset)}"
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
if [[ $noise == demo ]]; then
	# The demo's services, with its flags: the one that runs throughout
	# (2 workers hashing 3,000 requests/s) and the second instance.
	start_in "$service_main" "$example_service" --workers 2 --rate 3000
	start_in "$service_small" "$example_service" --workers 1 --rate 500
else
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
fi

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

# The agent's lines, one per episode and one per change of kind:
# "<time> verdict: <cgroup>: <what>; ...", with " (was <kind>)" at the end
# when the kind of a verdict in force changes, and "<time> cleared: <cgroup>"
# when it clears.
count() { grep -cF -- "$1" "$log" || true; }
verdicts_all=$(count ' verdict: ')
cleared_all=$(count ' cleared: ')
verdicts_quiet=$(count " verdict: $quiet_name: ")
noisy_quiet=$(count " verdict: $quiet_name: noisy neighbour ")
suspect_quiet=$(count " verdict: $quiet_name: suspect neighbour ")
changes_quiet=$({ grep -F -- " verdict: $quiet_name: " "$log" || true; } | grep -cE ' \(was [a-z_]+\)$' || true)
cleared_quiet=$({ grep -F -- ' cleared: ' "$log" || true; } | awk -v n="$quiet_name" '$NF == n' | wc -l)
# Episodes per cgroup: a verdict line for a cgroup with no verdict in force
# opens one, a "(was ...)" line does not (the episode goes on), a cleared
# line closes it. Prints "<episodes> <cgroup>[ (in force at the end)]" for
# every cgroup with one.
episodes=$(awk '
	$2 == "verdict:" {
		v = $3; sub(/:$/, "", v)
		if (!(v in n)) { n[v] = 0; order[++k] = v }
		if (!on[v] && $0 !~ / \(was [a-z_]+\)$/) n[v]++
		on[v] = 1
	}
	$2 == "cleared:" { on[$3] = 0 }
	END { for (i = 1; i <= k; i++) print n[order[i]], order[i] (on[order[i]] ? " (in force at the end)" : "") }' "$log")
episodes_all=$(awk '{ t += $1 } END { print t + 0 }' <<<"$episodes")
episodes_quiet=$(awk -v n="$quiet_name" '$2 == n { t += $1 } END { print t + 0 }' <<<"$episodes")
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
echo "noise:          $noise ($(for cg in "${cgroups[@]:1}"; do printf '%s ' "${cg#"$mount"}"; done | sed 's/ $//'))"
echo "host load:      $load_before at the start, $load_after at the end (1, 5, 15 min)"
echo "cpu:            ${cpu_model:-unknown} ($(nproc) CPUs online; soak on CPUs ${cpus:-all, no taskset}), kernel $(uname -r)"
echo "quiet cgroup:   $quiet_name: $verdicts_quiet verdict lines ($noisy_quiet noisy neighbour, $suspect_quiet suspect; $changes_quiet changes of kind), $cleared_quiet cleared lines; $episodes_quiet episodes"
echo "all cgroups:    $verdicts_all verdict lines, $cleared_all cleared lines; $episodes_all episodes"
if [[ -n $episodes ]]; then
	echo "episodes by cgroup:"
	awk '{ print "  " $0 }' <<<"$episodes"
fi
echo "quiet p99:      $p99_range (topdeck sched --window 2s every ${sample_every}s)"
echo "agent log:      $log"
if ((verdicts_all > 0)); then
	echo "verdict lines (the first 20):"
	grep -F -- ' verdict: ' "$log" | head -n 20 | sed 's/^/  /'
fi
if ((episodes_quiet > 0)); then
	echo "FAIL: the quiet cgroup got verdicts on noise ($episodes_quiet episodes):"
	grep -E -- " (verdict: $quiet_name: |cleared: $quiet_name\$)" "$log" | sed 's/^/  /'
	exit 1
fi
echo "ok: no verdict on the quiet cgroup"
