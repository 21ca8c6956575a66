#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The scheduler probe, live: `topdeck agent` runs; a latency-sensitive
# process (wakes every millisecond) runs in one cgroup; a noisy neighbour
# (two CPU hogs with a heavy CPU weight) starts in another cgroup on the same
# CPU; the victim's run-queue latency climbs and the agent names the
# neighbour; `topdeck explain` says a service beside the victim waits for
# the CPU behind it; `topdeck top` shows both containers on one screen;
# the neighbour stops and the verdict clears. Needs root (eBPF, cgroups);
# cleans up its cgroups and processes however it ends; about 16 s.
# Needs `cargo build --release --workspace` first (the Makefile does it).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -ne 0 ]]; then
	echo "skipped: the scheduler demo needs root (it loads eBPF programs and creates cgroups)"
	exit 0
fi
bin=${CARGO_TARGET_DIR:-target}/release
if [[ ! -x $bin/topdeck ]]; then
	echo "error: $bin/topdeck is missing; run \`make build\` (or cargo build --release --workspace) first" >&2
	exit 1
fi

# The cpu controller: a v1 hierarchy if there is one (hybrid hosts), else v2.
mount=$(findmnt -rn -t cgroup -o TARGET,OPTIONS | awk '$2 ~ /(^|,)cpu(,|$)/ {print $1; exit}')
if [[ -n $mount ]]; then
	weight_file=cpu.shares weight=262144 middle=8192
else
	mount=$(findmnt -rn -t cgroup2 -o TARGET | head -n 1)
	[[ -n $mount ]] || { echo "error: no cgroup hierarchy with the cpu controller is mounted" >&2; exit 1; }
	echo +cpu >"$mount/cgroup.subtree_control" 2>/dev/null || true
	weight_file=cpu.weight weight=10000 middle=800
fi

work=$(mktemp -d)
export TOPDECK_DIR=$work/ns
# The agent's thread-waits array, pinned apart from any agent the host runs.
pin_dir=/sys/fs/bpf/topdeck-demo-$$
export TOPDECK_THREAD_WAITS=$pin_dir/thread_waits
victim=$mount/topdeck-demo-$$-web
noisy=$mount/topdeck-demo-$$-batch
children=()
hogs=()
cleanup() {
	local p
	for p in "${hogs[@]}" "${children[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${hogs[@]}" "${children[@]}"; do wait "$p" 2>/dev/null || true; done
	for d in "$victim" "$noisy"; do
		for _ in 1 2 3 4 5 6 7 8 9 10; do [[ -d $d ]] || break; rmdir "$d" 2>/dev/null || sleep 0.1; done
	done
	rm -rf "$work"
	rmdir "$pin_dir" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ -t 1 ]]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
run() {
	printf '$ %s\n' "${*#"$bin/"}"
	"$@"
}
# Starts a command pinned to CPU 0 in cgroup $1; prints its pid.
start_in() {
	local cg=$1
	shift
	taskset -c 0 "$@" </dev/null >/dev/null 2>&1 &
	echo "$!" >"$cg/cgroup.procs"
	echo "$!"
}

step "The agent loads the probe and publishes the topdeck-agent registry"
"$bin/topdeck" agent --interval 500ms --cost-every 5s --thread-waits "$TOPDECK_THREAD_WAITS" > >(sed 's/^/  [agent] /') 2>&1 &
children+=("$!")
sleep 1.5

step "A latency-sensitive process (wakes every 1 ms) in ${victim#"$mount"}"
mkdir "$victim" "$noisy"
echo "$weight" >"$noisy/$weight_file"
children+=("$(start_in "$victim" python3 -c 'import time
while True: time.sleep(0.001)')")
# Beside it, a service whose timer records each request's CPU wait.
service=$(start_in "$victim" "$bin/topdeck-example-service" --workers 1 --rate 1000)
children+=("$service")
# The agent sees the new cgroups at its next window (500 ms).
sleep 1
run "$bin/topdeck" sched --window 2s

step "A noisy neighbour starts: two CPU hogs in ${noisy#"$mount"} on the same CPU"
for _ in 1 2; do hogs+=("$(start_in "$noisy" python3 -c 'while True: pass')"); done
# A verdict is given once it holds for 3 windows (1.5 s).
sleep 1.5
run "$bin/topdeck" sched --window 2s

step "At a lighter weight (8× the default) the neighbour lets the service run: why is it slow?"
echo "$middle" >"$noisy/$weight_file"
sleep 1
run "$bin/topdeck" explain "$service" --window 2s --count 1

step "topdeck top: the host on one screen, a row per container (here as --once prints 80x24 into a pipe)"
run env COLUMNS=80 LINES=24 "$bin/topdeck" top --once --interval 1s

step "The neighbour stops; the verdict clears"
for p in "${hogs[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
hogs=()
# And cleared after as many quiet windows, within the table's 2 s.
sleep 1
run "$bin/topdeck" sched --window 2s
