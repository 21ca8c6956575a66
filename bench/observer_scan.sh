#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What an observer's walk of /proc costs: starts N sleeping processes (to
# stand for a busy host), then times `topdeck ls` RUNS times with the
# portholes and RUNS times without (`--no-portholes`, registries only),
# alternating, and prints each one's median, min and max wall time, then
# the system calls of one run of each (`strace -c -f`).
#   bench/observer_scan.sh [N] [RUNS] [TOPDECK]
#   (defaults: 2000, 21, target/release/topdeck; build it first with
#   `cargo build --release -p topdeck-cli`)
# Then the same for scrapes of `topdeck serve` (one look per scrape: the
# cost `serve` and `top` pay at every scrape or interval, after the first).
# Only the processes this script started are killed at the end, by pid.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2000}
runs=${2:-21}
topdeck=${3:-target/release/topdeck}
[[ -x $topdeck ]] || { echo "error: $topdeck is not built; run cargo build --release -p topdeck-cli" >&2; exit 2; }
command -v curl >/dev/null || { echo "error: curl is missing; install it (apt-get install curl)" >&2; exit 2; }
command -v strace >/dev/null || { echo "error: strace is missing; install it (apt-get install strace)" >&2; exit 2; }

pids=()
cleanup() {
	((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null || true
	((${#pids[@]})) && wait "${pids[@]}" 2>/dev/null || true
}
trap cleanup EXIT
for ((i = 0; i < n; i++)); do
	sleep 3600 &
	pids+=($!)
done
# Every sleeper has exec'd before the first run: each `comm` reads sleep.
for p in "${pids[@]}"; do
	until [[ $(cat "/proc/$p/comm" 2>/dev/null) == sleep ]]; do sleep 0.01; done
done

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs," \
	"$(ls -d /proc/[0-9]* | wc -l) processes ($n started here), uid $(id -u), load $(cut -d' ' -f1-3 /proc/loadavg)"

# Wall time of one run in microseconds (EPOCHREALTIME: no fork to read the clock).
time_one() {
	local t0=$EPOCHREALTIME
	"$@" >/dev/null 2>&1 || true
	local t1=$EPOCHREALTIME
	echo $(((${t1/./} - ${t0/./})))
}
summary() { # label, microseconds...
	local label=$1
	shift
	printf '%s\n' "$@" | sort -n | awk -v label="$label" '
		{ v[NR] = $1 }
		END {
			med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
			printf "%-34s median %8.2f ms   min %8.2f   max %8.2f   (%d runs)\n", label, med / 1000, v[1] / 1000, v[NR] / 1000, NR
		}'
}

with=() without=()
"$topdeck" ls >/dev/null 2>&1 || true # warm-up
for ((i = 0; i < runs; i++)); do
	with+=("$(time_one "$topdeck" ls)")
	without+=("$(time_one "$topdeck" ls --no-portholes)")
done
summary "topdeck ls" "${with[@]}"
summary "topdeck ls --no-portholes" "${without[@]}"

for args in "ls" "ls --no-portholes"; do
	out=$(mktemp)
	# shellcheck disable=SC2086 # the arguments are meant to split
	strace -c -f -o "$out" "$topdeck" $args >/dev/null 2>&1 || true
	echo "# strace -c -f topdeck $args (calls by name, then the total)"
	awk 'NR > 2 && $0 !~ /^-/ { name = $NF; calls = ($4 ~ /^[0-9]+$/) ? $4 : $3; if (name == "total") total = calls; else printf "  %-16s %8d\n", name, calls }
		END { printf "  %-16s %8d\n", "total", total }' "$out" | sort -k2 -nr | head -12
	rm -f "$out"
done

# Scrapes: serve keeps its portholes between scrapes, as top keeps them
# between intervals.
addr_file=$(mktemp)
"$topdeck" serve --listen 127.0.0.1:0 --portholes >"$addr_file" 2>/dev/null &
pids+=($!)
serve_pid=$!
until addr=$(grep -oE '127\.0\.0\.1:[0-9]+' "$addr_file" | head -1) && [[ -n $addr ]]; do sleep 0.05; done
rm -f "$addr_file"
scrape() { curl -s -o /dev/null -w '%{time_total}\n' "http://$addr/metrics"; }
scrape >/dev/null # the first look: environments read
scrapes=()
for ((i = 0; i < runs; i++)); do
	t=$(scrape)
	scrapes+=("$(awk -v t="$t" 'BEGIN { printf "%d", t * 1e6 }')")
done
summary "scrape of topdeck serve --portholes" "${scrapes[@]}"
out=$(mktemp)
strace -c -f -o "$out" -p "$serve_pid" &
tracer=$!
sleep 1
scrape >/dev/null
sleep 0.5
kill -INT "$tracer"
wait "$tracer" 2>/dev/null || true
echo "# strace -c -f of serve during one scrape"
awk 'NR > 2 && $0 !~ /^-/ { name = $NF; calls = ($4 ~ /^[0-9]+$/) ? $4 : $3; if (name == "total") total = calls; else printf "  %-16s %8d\n", name, calls }
	END { printf "  %-16s %8d\n", "total", total }' "$out" | sort -k2 -nr | head -8
rm -f "$out"
