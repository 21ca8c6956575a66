#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Proves with strace that metric updates and snapshots make no system call.
#
# Builds crates/topdeck/examples/syscall_probe.rs in release (beside the
# library `make demo` built, so only the probe is new) and runs it under
# `strace -f -e trace=all`. The probe sets everything up (registry, reader,
# threads, first updates, first snapshots), writes BEGIN to stderr, then two
# threads do 10 M counter increments, 2 M thread-bound increments, 1 M
# histogram records and 1 M gauge sets while the main thread takes at least
# 1,000 snapshots of a 1,000-metric registry; then it writes END. Every line
# strace logs between the two marker writes is a system call in the update
# or snapshot path, and fails the check.
#
# First, a control run makes one getppid() inside the window, to show the
# check sees a system call there (a check that cannot fail proves nothing).
#
# Exit status: 0 no system call in the window; 1 some (listed); 2 the check
# could not be made (no strace, build or probe failure, markers missing,
# control not detected).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "syscalls: error: $*" >&2; exit 2; }

if ! command -v strace >/dev/null; then
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
		echo "syscalls: installing strace (apt-get)"
		export DEBIAN_FRONTEND=noninteractive
		{ apt-get update -qq && apt-get install -y -qq strace; } >/dev/null ||
			die "apt-get install strace failed"
	else
		die "strace is missing; install it (apt-get install strace) or run scripts/deps.sh as root"
	fi
fi

echo "syscalls: building the probe (cargo build --release -p topdeck --example syscall_probe)"
build_log=$(mktemp)
trap 'rm -f "$build_log"' EXIT
cargo build --release -p topdeck --example syscall_probe \
	--message-format=json-render-diagnostics >"$build_log" ||
	die "building the probe failed (see the compiler output above)"
probe=$(grep -o '"executable":"[^"]*/syscall_probe"' "$build_log" | tail -n1 | cut -d'"' -f4)
[[ -n $probe && -x $probe ]] || die "cargo reported no syscall_probe executable"
# A bad argument is a usage line and exit status 2, not a run.
rc=0
"$probe" --bogus >/dev/null 2>"$build_log" || rc=$?
((rc == 2)) && grep -q '^usage: syscall_probe' "$build_log" ||
	die "the probe answered a bad argument with status $rc: $(head -n 3 "$build_log")"

work=$(mktemp -d)
trap 'rm -rf "$work" "$build_log"' EXIT

# run NAME [ARGS...]: traces the probe into $work/NAME.{trace,out,err} and
# leaves the window's lines (markers removed) in $work/NAME.window.
run() {
	local name=$1
	shift
	if ! strace -f -qq -e trace=all -o "$work/$name.trace" "$probe" "$@" \
		>"$work/$name.out" 2>"$work/$name.err"; then
		cat "$work/$name.err" "$work/$name.out" >&2
		die "the probe ($name run) failed under strace; output above"
	fi
	grep -q 'write(2, "BEGIN\\n"' "$work/$name.trace" && grep -q 'write(2, "END\\n"' "$work/$name.trace" ||
		die "the BEGIN/END marker writes are not in the $name trace ($work/$name.trace)"
	# Lines are "PID call(...) = ret". The window runs from the BEGIN write to
	# the END write. A marker write that strace split because another thread
	# made a call meanwhile shows as "<unfinished ...>" plus "<... write
	# resumed>"; the resumed half of a marker is dropped too.
	awk '
		/write\(2, "BEGIN\\n"/ { on = 1; pid = $1; next }
		/write\(2, "END\\n"/   { on = 0; next }
		on && $1 == pid && /<\.\.\. write resumed>/ && !seen++ { next }
		on' "$work/$name.trace" >"$work/$name.window"
}

run control --control
if ! grep -q 'getppid' "$work/control.window"; then
	cat "$work/control.window"
	die "control run: the getppid() made inside the window was not seen; the check is blind"
fi
echo "syscalls: control run: the one getppid() made inside the window was caught, as it must be"

run proof
total=$(wc -l <"$work/proof.trace")
in_window=$(wc -l <"$work/proof.window")
echo "syscalls: probe: $(cat "$work/proof.out")"
echo "syscalls: strace logged $total lines in the whole run (start-up, set-up, thread start and exit, teardown)"
echo "syscalls: the window, as strace logged it:"
awk '/write\(2, "BEGIN\\n"/,/write\(2, "END\\n"/ { print "    " $0 }' "$work/proof.trace"
if ((in_window > 0)); then
	echo "syscalls: FAIL: $in_window system call(s) between BEGIN and END, by name:"
	sed -E 's/^[0-9]+ +//; s/^<\.\.\. ([a-z0-9_]+) resumed>.*/\1/; s/\(.*//' "$work/proof.window" |
		sort | uniq -c | sort -rn | sed 's/^/    /'
	exit 1
fi
echo "syscalls: PASS: 0 system calls between BEGIN and END besides the two marker writes"
