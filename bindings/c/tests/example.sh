#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The C example as another process sees it: `topdeck ls --json` and
# `topdeck show --json` find its registry alive with the values it
# published; after SIGKILL it is dead and `topdeck gc` removes it; after
# SIGTERM it removes its own file.
#   tests/example.sh <the example program> <topdeck binary>
set -euo pipefail
example=$1
topdeck=$2
. "$(dirname "$0")/lib.sh"

TOPDECK_DIR=$(private_dir)
export TOPDECK_DIR
out=$TOPDECK_DIR.out
trap 'kill -9 $pid 2>/dev/null || true; rm -rf "$TOPDECK_DIR" "$out"' EXIT

# Waits until the example's output holds a line starting with $1.
wait_for() {
	for _ in $(seq 100); do
		grep -q "^$1" "$out" 2>/dev/null && return 0
		sleep 0.05
	done
	echo "the example never printed '$1'; it printed:" >&2
	cat "$out" >&2
	return 1
}

start() {
	"$example" --limit 250 --rate 20000 >"$out" &
	pid=$!
	wait_for served
}

start
"$topdeck" ls --json >"$TOPDECK_DIR.ls"
check "ls lists the example's registry alive" \
	test "$(json '[(r["pid"], r["registry"], r["state"], r["metrics"]) for r in doc["registries"]]' <"$TOPDECK_DIR.ls")" \
	= "[($pid, 'c-example', 'alive', 2)]"
"$topdeck" show --json "$pid" >"$TOPDECK_DIR.show"
check "show reads the counter the example published" \
	test "$(json '[(m["labels"], m["value"]) for m in doc["metrics"] if m["name"] == "requests_total"]' <"$TOPDECK_DIR.show")" \
	= "[({'route': '/hash'}, 250)]"
check "show reads the histogram the example published" \
	test "$(json '[(m["unit"], m["value"]["count"], m["value"]["sum"] > 0) for m in doc["metrics"] if m["name"] == "request_duration_seconds"]' <"$TOPDECK_DIR.show")" \
	= "[('seconds', 250, True)]"

{
	kill -KILL "$pid"
	wait "$pid"
} 2>/dev/null || true
check "after SIGKILL the registry is listed dead" \
	test "$("$topdeck" ls --json | json '[(r["pid"], r["state"]) for r in doc["registries"]]')" = "[($pid, 'dead')]"
"$topdeck" gc >/dev/null
check "gc removes the dead registry's file" test -z "$(ls -A "$TOPDECK_DIR")"

start
file=$(awk '{print $4; exit}' "$out")
check "the example publishes under TOPDECK_DIR" test -f "$file"
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
check "SIGTERM stops the example cleanly" test "$status" = 0
check "and it removes its own file" test ! -e "$file"

finish
