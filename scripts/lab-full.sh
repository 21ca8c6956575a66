#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The interference lab's full runs on this machine, as recorded in
# docs/LAB.md and docs/PERFORMANCE.md. Each experiment runs under the shared
# benchmark lock (/tmp/topdeck-bench.lock), after waiting (up to MAX_WAIT
# seconds) for the 1-minute load average to fall below MAX_LOAD, so other
# people's builds disturb it as little as possible; each run also records
# how busy the rest of the host was.
#
# Output: $OUT/<variant>/{<experiment>.json,report.html} and $OUT/<variant>.txt
# (the printed tables), and $OUT/report/report.html with the main variant
# of every experiment. Pass variant names to run only those.
#
# Needs root for 50,000 sockets (the helper raises its open-file limit) and
# strace for the idle experiment's system-call counts (optional), and Go
# for seed 001's ticker in its own language (optional).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-lab-out/full}
MAX_LOAD=${MAX_LOAD:-1.0}
MAX_WAIT=${MAX_WAIT:-120}
LOCK=/tmp/topdeck-bench.lock
SOCKETS=${SOCKETS:-50000}
THREADS=${THREADS:-20000}
PROCESSES=${PROCESSES:-2000}

# The lab, and the topdeck beside it that an observer command `topdeck` runs.
cargo build --release -p topdeck-lab -p topdeck-cli
BIN="${CARGO_TARGET_DIR:-target}/release/topdeck-lab"
mkdir -p "$OUT"

quiet() {
    local waited=0
    while awk -v max="$MAX_LOAD" '{ exit !($1 > max) }' /proc/loadavg && [ "$waited" -lt "$MAX_WAIT" ]; do
        sleep 10
        waited=$((waited + 10))
    done
    echo "load before the run: $(cut -d' ' -f1-3 /proc/loadavg) (waited ${waited}s)"
}

run() {
    local variant=$1
    shift
    if [ -n "$ONLY" ] && [[ " $ONLY " != *" $variant "* ]]; then
        return
    fi
    {
        echo "## $variant: topdeck-lab $*"
        echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); $(nproc) CPUs; $(uname -r)"
        quiet
        flock "$LOCK" "$BIN" --out "$OUT/$variant" "$@"
    } 2>&1 | tee "$OUT/$variant.txt"
}

ONLY="$*"
# The article's netstat case: /proc/net/unix is what `netstat -xa` reads.
run observer-netstat observer --populate-sockets "$SOCKETS" -- netstat -xa
run observer-netstat-same observer --populate-sockets "$SOCKETS" --same-cpu -- netstat -xa
run observer-netstat-other observer --populate-sockets "$SOCKETS" --other-cpu -- netstat -xa
run observer-netstat-few observer -- netstat -xa
# Control: an observer that burns about as much CPU as netstat over 50,000
# sockets (~0.3 s) without touching a socket table.
run observer-cpu-control observer --populate-sockets "$SOCKETS" -- \
    sh -c 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done'
run observer-ss observer --populate-sockets "$SOCKETS" -- ss -xa
# /proc traversal over many processes and threads.
run observer-ps observer --populate-processes "$PROCESSES" --populate-threads "$THREADS" \
    --iterations 300000 -- ps -eLf
# The article's `ps auxww` table, and its thread-walking sibling.
run contend-ps contend --populate-processes "$PROCESSES" --populate-threads "$THREADS" -- ps auxww
run contend-psL contend --populate-processes "$PROCESSES" --populate-threads "$THREADS" -- ps -eLf
run selftest selftest
# The two selftest targets alone, with many more rounds for tighter medians.
run selftest-targets selftest --pins other-cpu,same-cpu --exporters topdeck \
    --readers 4,16 --rates 1000 --rounds 31
run selftest-targets-1s selftest --pins other-cpu,same-cpu --exporters topdeck \
    --readers 4,16 --rates 1000 --rounds 15 --duration 1s
# Seed 001's ticker in Go too, when a Go toolchain is here (the build needs no network).
ALSO=()
if command -v go >/dev/null; then
    go build -o "$OUT/go-ticker" crates/topdeck-lab/go/ticker.go
    ALSO=(--also "go=$OUT/go-ticker")
fi
run idle idle "${ALSO[@]}"

mkdir -p "$OUT/report"
for f in observer-netstat/observer contend-ps/contend selftest/selftest idle/idle; do
    if [ -f "$OUT/$f.json" ]; then cp "$OUT/$f.json" "$OUT/report/"; fi
done
"$BIN" report --out "$OUT/report"
