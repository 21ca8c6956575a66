#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the whole benchmark suite RUNS times (default 3), each into its own
# criterion directory, and prints the tables docs/PERFORMANCE.md quotes:
# median of the runs' medians and their spread.
#   bench/run.sh [RUNS] [OUT_DIR]      (OUT_DIR defaults to a new temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
out=${2:-$(mktemp -d /tmp/topdeck-bench.XXXXXX)}
mkdir -p "$out"
cargo bench -p topdeck-bench --no-run
# The machine line every figure is quoted with (CPU generation, whether
# the vCPUs act as one core), measured before the runs.
cargo run -q --release -p topdeck-bench --bin machine | tee "$out/machine.txt"
for ((i = 1; i <= runs; i++)); do
	echo "== run $i of $runs -> $out/run-$i (load average before: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	CRITERION_HOME="$out/run-$i" cargo bench -p topdeck-bench -- --noplot >"$out/run-$i.log" 2>&1 ||
		{ tail -n 30 "$out/run-$i.log" >&2; echo "error: run $i failed; log in $out/run-$i.log" >&2; exit 1; }
	echo "   load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
{ echo "Machine: $(cat "$out/machine.txt")"; echo; python3 bench/summarize.py "$out"/run-*/; } |
	tee "$out/summary.md"
echo "results: $out/summary.md (logs and criterion data in $out)" >&2
