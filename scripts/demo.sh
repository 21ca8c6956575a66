#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The demo behind `make demo`: a real service publishes metrics, and topdeck
# lists, shows and watches them, tells a crashed writer from a live one, and
# cleans up after the crash. Runs in a private namespace directory and ends
# by itself, with or without a terminal.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=target/release
for b in topdeck topdeck-example-service; do
	[[ -x $bin/$b ]] || { echo "error: $bin/$b is missing; run \`make build\` first" >&2; exit 1; }
done
TOPDECK_DIR=$(mktemp -d /dev/shm/topdeck-demo.XXXXXX)
export TOPDECK_DIR
chmod 755 "$TOPDECK_DIR"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	rm -rf "$TOPDECK_DIR"
}
trap cleanup EXIT

if [[ -t 1 ]]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
run() { printf '$ %s\n' "$*"; "$@"; }

step "A service starts: 2 workers hash 2,000 requests/s and publish metrics in $TOPDECK_DIR"
$bin/topdeck-example-service --workers 2 --rate 2000 >"$TOPDECK_DIR/.service.log" &
svc=$!
pids+=("$svc")
for _ in $(seq 50); do [[ -s $TOPDECK_DIR/.service.log ]] && break; sleep 0.1; done
cat "$TOPDECK_DIR/.service.log"
sleep 2

step "topdeck ls: every registry in the namespace, with its writer's liveness"
run $bin/topdeck ls

step "topdeck show: all metrics of one process (histograms as count and quantiles)"
run $bin/topdeck show "$svc"

step "topdeck watch: rates per interval; histograms over each interval, not since start"
run $bin/topdeck watch "$svc" requests_total bytes_processed_total request_duration_seconds queue_depth --interval 1s --count 4

step "A second instance starts and is killed with SIGKILL: its file stays, readable, marked dead"
$bin/topdeck-example-service --workers 1 --rate 500 >/dev/null &
crashed=$!
pids+=("$crashed")
sleep 1.5
kill -9 "$crashed"
wait "$crashed" 2>/dev/null || true
run $bin/topdeck ls
run $bin/topdeck show "$crashed"

step "topdeck gc: removes the dead writer's file, and only that one"
run $bin/topdeck gc
run $bin/topdeck ls

step "SIGTERM: the service stops cleanly and removes its own file"
kill -TERM "$svc"
wait "$svc" || true
run $bin/topdeck ls
echo
echo "demo done"
