#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The demo behind `make demo`: a real service publishes metrics; topdeck
# lists, shows and watches them, tells a crashed writer from a live one and
# cleans up after the crash; a clean stop removes the service's own file.
# Runs in a private namespace directory, cleans up after itself, and ends
# by itself in about 15 s, with or without a terminal.
# Needs `cargo build --release --workspace` first (the Makefile does it).
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${CARGO_TARGET_DIR:-target}/release
for b in topdeck topdeck-example-service; do
	if [[ ! -x $bin/$b ]]; then
		echo "error: $bin/$b is missing; run \`make build\` (or cargo build --release --workspace) first" >&2
		exit 1
	fi
done

work=$(mktemp -d /dev/shm/topdeck-demo.XXXXXX 2>/dev/null || mktemp -d)
export TOPDECK_DIR=$work/ns
children=()
cleanup() {
	local p
	for p in "${children[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
	done
	for p in "${children[@]}"; do
		# Give each a moment to stop cleanly, then make sure it is gone.
		for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$work"
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

# Starts the service with the given flags, logging to $work/<name>.log;
# sets $svc_pid and $svc_file from the line it prints at start.
start_service() {
	local name=$1
	shift
	"$bin/topdeck-example-service" "$@" >"$work/$name.log" </dev/null &
	children+=("$!")
	local line=''
	for _ in $(seq 100); do
		line=$(head -n 1 "$work/$name.log")
		[[ -n $line ]] && break
		kill -0 "$!" 2>/dev/null || break
		sleep 0.05
	done
	if [[ ! $line =~ ^pid\ ([0-9]+)\ registry\ (.+)$ ]]; then
		echo "error: the service did not start; its output:" >&2
		cat "$work/$name.log" >&2
		exit 1
	fi
	svc_pid=${BASH_REMATCH[1]}
	svc_file=${BASH_REMATCH[2]}
	echo "$line"
}

step "1. A service starts: a generator queues 3,000 requests/s of random size, 2 workers hash them (SHA-256); TOPDECK_DIR=$TOPDECK_DIR"
start_service main --workers 2 --rate 3000
main_pid=$svc_pid main_file=$svc_file
sleep 2

step "2. topdeck ls: every registry in the namespace, and whether its writer is alive"
run "$bin/topdeck" ls

step "3. topdeck show <pid>: every metric of one process; histograms as count and quantiles, in their units"
run "$bin/topdeck" show "$main_pid"

step "4. topdeck watch: every second, counters as rates, gauges as values, histograms over that second only"
run "$bin/topdeck" watch "$main_pid" --interval 1s --count 5

step "5. A second instance starts, and is killed with SIGKILL: it cannot clean up, so its file stays"
start_service crashed --workers 1 --rate 500
crashed_pid=$svc_pid crashed_file=$svc_file
# Not a job of this shell any more, so that bash does not report its death.
disown "$crashed_pid"
sleep 1
run kill -9 "$crashed_pid"
while kill -0 "$crashed_pid" 2>/dev/null; do sleep 0.05; done
run "$bin/topdeck" ls

step "6. Its last values can still be read; the writer is reported dead"
run "$bin/topdeck" show "$crashed_file"

step "7. topdeck gc: removes the files of dead writers, and only those"
run "$bin/topdeck" gc
run "$bin/topdeck" ls

step "8. SIGTERM: the service stops cleanly, and removing its registry removes its file"
run kill -TERM "$main_pid"
wait "$main_pid" || true
tail -n 1 "$work/main.log"
if [[ -e $main_file ]]; then
	echo "error: $main_file is still there" >&2
	exit 1
fi
echo "$main_file is gone"
run "$bin/topdeck" ls

echo
echo "demo done"
