#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The figures this project's own machines cannot show (an Intel CPU, many
# cores), as one short run for a borrowed machine that starts bare: build
# here, carry the binaries, run there.
#
#   bench/device_checks.sh build        # here: target/device/{clock,sched_overhead,machine}
#   bench/device_checks.sh run [OUT]    # there, as root: prints and writes to OUT ($OUT, or a temp dir)
#
# `run` takes about 4 minutes: the machine line; the clock reads back to
# back and each waited for (`clock_read`, `clock_read_serial`: topdeck,
# minstant, quanta, rdtsc, clock_gettime), TURNS turns (3) summarised as
# docs/PERFORMANCE.md quotes them; then the scheduler probe under load
# (`sched_overhead load`, which needs root and BPF). The device's carry
# takes `target/device` (about 35 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=target/device

usage() {
	echo "usage: bench/device_checks.sh build | run [OUT_DIR]" >&2
	exit 2
}

case ${1:-} in
build)
	mkdir -p "$dir"
	cargo build --release -p topdeck-bench --bin sched_overhead --bin machine
	# The bench binary's name carries a hash: take it from cargo's own report.
	clock=$(cargo bench -p topdeck-bench --bench clock --no-run 2>&1 |
		sed -n 's/.*Executable benches\/clock.rs (\(.*\))$/\1/p')
	[[ -n $clock && -x $clock ]] || { echo "error: cargo did not report the clock bench's binary" >&2; exit 1; }
	cp "$clock" "$dir/clock"
	cp target/release/sched_overhead target/release/machine "$dir/"
	du -sh "$dir"
	echo "carry: $dir; there: bench/device_checks.sh run \"\$OUT\""
	;;
run)
	for b in clock sched_overhead machine; do
		[[ -x $dir/$b ]] || { echo "error: $dir/$b is missing: run 'bench/device_checks.sh build' first and carry $dir" >&2; exit 1; }
	done
	out=${2:-${OUT:-$(mktemp -d /tmp/topdeck-device.XXXXXX)}}
	mkdir -p "$out"
	turns=${TURNS:-3}
	{ grep -m1 'model name' /proc/cpuinfo; grep -m1 'cpu family' /proc/cpuinfo; grep -m1 '^model' /proc/cpuinfo; nproc; } |
		tee "$out/cpu.txt"
	"$dir/machine" | tee "$out/machine.txt"
	for ((i = 1; i <= turns; i++)); do
		echo "== clock turn $i of $turns" >&2
		CRITERION_HOME="$out/clock-$i" "$dir/clock" --bench --noplot --warm-up-time 1 \
			--measurement-time "${MEASURE_SECS:-2}" clock_read >"$out/clock-$i.log" 2>&1 ||
			{ tail -n 20 "$out/clock-$i.log" >&2; exit 1; }
	done
	python3 bench/summarize.py "$out"/clock-*/ | tee "$out/clock.md"
	echo "== scheduler probe under load" >&2
	"$dir/sched_overhead" load --reps "${PROBE_REPS:-3}" --secs 2 | tee "$out/sched.txt"
	echo "results: $out" >&2
	;;
*) usage ;;
esac
