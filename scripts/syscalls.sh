#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Shows, with strace, that metric updates and snapshots make no system call:
# runs tests/src/bin/td-syscall-probe under `strace -f` and fails if any
# system call other than its two marker writes falls between BEGIN and END.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v strace >/dev/null || { echo "error: strace is missing; run scripts/deps.sh (as root)" >&2; exit 1; }
cargo build -q --release -p topdeck-tests --bin td-syscall-probe
probe=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/td-syscall-probe
work=$(mktemp -d /dev/shm/topdeck-syscalls.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"

strace -f -qq -o "$work/trace" "$probe" "$work/ns" >"$work/out" 2>"$work/err" || {
	echo "error: the probe failed:" >&2; cat "$work/err" "$work/out" >&2; exit 1; }
window=$(awk '/write\(2, "BEGIN/ {on=1; next} /write\(2, "END/ {on=0} on' "$work/trace")
total=$(wc -l <"$work/trace")
grep -q 'write(2, "BEGIN' "$work/trace" && grep -q 'write(2, "END' "$work/trace" || {
	echo "error: markers not found in the trace" >&2; exit 1; }
cat "$work/out"
if [[ -n $window ]]; then
	echo "FAIL: system calls between BEGIN and END (updates and snapshots must make none):"
	echo "$window"
	exit 1
fi
echo "ok: 0 system calls between BEGIN and END ($total in the whole run, all in setup and teardown)"
