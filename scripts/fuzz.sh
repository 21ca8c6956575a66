#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the fuzz targets (fuzz/) and runs each for a bounded time from its
# committed seeds; fails on any crash, leak, timeout or out-of-memory, and
# prints executions, executions per second and coverage per target.
#
#   scripts/fuzz.sh                      # every target, FUZZ_SECONDS (6) each
#   FUZZ_SECONDS=300 scripts/fuzz.sh reader export
#   FUZZ_JOBS=1 scripts/fuzz.sh          # one target at a time (default: one per CPU)
#
# New inputs go to a temporary directory, never into fuzz/corpus; a crash
# is saved as fuzz/artifacts/<target>/crash-* (replay it with
# `fuzz/target/x86_64-unknown-linux-gnu/release/<target> FILE`).
# Needs cargo-fuzz (scripts/deps.sh installs it) and lets the stable
# compiler take cargo-fuzz's unstable flags: see fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds=${FUZZ_SECONDS:-6}
targets=("$@")
((${#targets[@]})) || targets=(header descriptor strings reader export serve_request aeron prommp hsperf mmv_parse)

if ! command -v cargo-fuzz >/dev/null; then
	echo "error: cargo-fuzz is not installed, so nothing can be fuzzed: run scripts/deps.sh" >&2
	exit 1
fi
# cargo-fuzz passes -Z flags (sanitizer, coverage passes); RUSTC_BOOTSTRAP
# lets a stable compiler accept them.
export RUSTC_BOOTSTRAP=1
build_start=$SECONDS
if ! cargo fuzz build --debug-assertions; then
	echo "error: the fuzz targets do not build with this toolchain ($(rustc --version)):" \
		"nothing was fuzzed; see fuzz/README.md" >&2
	exit 1
fi
echo "fuzz: built in $((SECONDS - build_start)) s"

bin=target/x86_64-unknown-linux-gnu/release
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# One libFuzzer process per CPU at a time (each is single-threaded): the
# same seconds per target, in a fraction of the wall time.
jobs_max=${FUZZ_JOBS:-$(nproc)}
run() {
	local t=$1 rc=0
	mkdir -p "$work/$t" "artifacts/$t"
	"$bin/$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
		-artifact_prefix="artifacts/$t/" "$work/$t" "corpus/$t" >"$work/$t.log" 2>&1 || rc=$?
	echo "$rc" >"$work/$t.rc"
}
for t in "${targets[@]}"; do
	while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n || true; done
	run "$t" &
done
wait
failed=()
printf '%-14s %10s %9s %6s %6s %7s\n' target executions exec/s cov ft corpus
for t in "${targets[@]}"; do
	log=$work/$t.log
	rc=$(cat "$work/$t.rc" 2>/dev/null || echo 1)
	done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
	field() { sed -nE "s/.* $1: ([0-9]+).*/\1/p" <<<"$done_line"; }
	stat() { sed -nE "s/^stat::$1:[[:space:]]+([0-9]+)/\1/p" "$log" | tail -1; }
	# A target that loaded no coverage counters would "fuzz" blind.
	if ! grep -qE 'INFO: Loaded [0-9]+ modules +\([1-9][0-9]* inline 8-bit counters' "$log"; then
		echo "error: $t: libFuzzer found no coverage instrumentation" >&2
		((rc != 0)) || rc=1
	fi
	printf '%-14s %10s %9s %6s %6s %7s\n' "$t" "$(stat number_of_executed_units)" \
		"$(stat average_exec_per_sec)" "$(field cov)" "$(field ft)" "$(field corp | head -1)"
	if ((rc != 0)) || [[ -z $done_line ]]; then
		echo "error: $t failed (exit $rc); the end of its log:" >&2
		tail -40 "$log" >&2
		ls artifacts/"$t"/ >&2 2>/dev/null || true
		failed+=("$t")
	fi
done
if ((${#failed[@]})); then
	echo "fuzz: FAILED: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds} s each, no crash"
