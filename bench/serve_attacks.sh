#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `topdeck serve` under attack: builds the release binary and
# bench/src/bin/serve_attacks.rs, then runs every attack RUNS times
# (default 3) and prints each run's table (scrape latency on a new
# connection every 50 ms, the server's peak RSS, threads and descriptors,
# its CPU share), headed by the date, CPU and load, as docs/PERFORMANCE.md
# quotes them.
#   bench/serve_attacks.sh [RUNS] [-- serve_attacks arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
shift || true
[[ ${1:-} == -- ]] && shift
cargo build --release -p topdeck-cli --bin topdeck -p topdeck-bench --bin serve_attacks >&2
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
echo "date: $(date)"
echo "commit: $(git rev-parse --short HEAD)"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs"
for ((i = 1; i <= runs; i++)); do
	echo
	echo "## run $i of $runs (load average before: $(cut -d' ' -f1-3 /proc/loadavg))"
	echo
	"$target/release/serve_attacks" --topdeck "$target/release/topdeck" "$@"
done
