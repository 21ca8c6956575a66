#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The demo behind `make demo`: a real service publishes metrics; topdeck
# lists, shows and watches them, and a JVM's beside them; the clock reports itself; Prometheus
# scrapes them; `top` takes one look; the scheduler agent names a noisy
# neighbour live (root only) and clears the verdict when it stops; the lab
# measures what an observer costs; a crashed writer is told from a live
# one and cleaned up after; the flight recorder, running all along, shows
# the service as it was after it is gone. Runs in a private namespace directory, cleans
# up after itself (cgroups included), and ends by itself in about 30 s,
# with or without a terminal.
# Needs `make build` first (the Makefile does it).
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${CARGO_TARGET_DIR:-target}/release
for b in topdeck topdeck-example-service topdeck-lab; do
	if [[ ! -x $bin/$b ]]; then
		echo "error: $bin/$b is missing; run \`make build\` first" >&2
		exit 1
	fi
done

work=$(mktemp -d /dev/shm/topdeck-demo.XXXXXX 2>/dev/null || mktemp -d)
export TOPDECK_DIR=$work/ns
children=()
cleanup() {
	local p
	for p in "${children[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
	done
	for p in "${children[@]}"; do
		# Give each a moment to stop cleanly, then make sure it is gone.
		for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ -t 1 ]]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
n_step=0
step() {
	n_step=$((n_step + 1))
	printf '\n%s== %d. %s%s\n' "$bold" "$n_step" "$*" "$plain"
}
run() {
	printf '$ %s\n' "${*#"$bin/"}"
	"$@"
}

# Starts the service with the given flags, logging to $work/<name>.log;
# sets $svc_pid and $svc_file from the line it prints at start.
start_service() {
	local name=$1
	shift
	"$bin/topdeck-example-service" "$@" >"$work/$name.log" </dev/null &
	children+=("$!")
	local line=''
	for _ in $(seq 100); do
		line=$(head -n 1 "$work/$name.log")
		[[ -n $line ]] && break
		kill -0 "$!" 2>/dev/null || break
		sleep 0.05
	done
	if [[ ! $line =~ ^pid\ ([0-9]+)\ registry\ (.+)$ ]]; then
		echo "error: the service did not start; its output:" >&2
		cat "$work/$name.log" >&2
		exit 1
	fi
	svc_pid=${BASH_REMATCH[1]}
	svc_file=${BASH_REMATCH[2]}
	echo "$line"
}

# The Go and Java example services are built now, in the background, for
# the steps before them spend mostly waiting on their intervals (`make
# build` warmed Go's build cache: from a cold one it takes ~20 s).
go_build=''
if command -v go >/dev/null; then
	(cd bindings/go && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -o "$work/go/" ./examples/httpservice) \
		>"$work/go-build.log" 2>&1 </dev/null &
	go_build=$!
	children+=("$go_build")
fi
# Without a JDK 22 it fails, and service.sh says why when it is started.
bindings/java/build.sh >"$work/java-build.log" 2>&1 </dev/null &
java_build=$!
children+=("$java_build")

step "A service starts: a generator queues 3,000 requests/s of random size, 2 workers hash them (SHA-256); TOPDECK_DIR=$TOPDECK_DIR"
start_service main --workers 2 --rate 3000
main_pid=$svc_pid main_file=$svc_file
# The flight recorder, from now to the end: the last step goes back in time.
"$bin/topdeck" record --dir "$work/history" --interval 1s >"$work/record.log" 2>&1 </dev/null &
children+=("$!")
sleep 2
seen_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)

step "topdeck ls: every registry in the namespace, and whether its writer is alive"
run "$bin/topdeck" ls

step "topdeck show <pid>: every metric of one process; histograms as count and quantiles, in their units"
run "$bin/topdeck" show "$main_pid"

step "topdeck watch: every second, counters as rates, gauges as values, histograms over that second only"
run "$bin/topdeck" watch "$main_pid" --interval 1s --count 3

step "A JVM starts beside it: topdeck reads its hsperfdata (what jstat reads) without a lock, in every view"
jvm_pid=''
if command -v javac >/dev/null && command -v java >/dev/null; then
	mkdir -p "$work/java"
	javac -d "$work/java" examples/jvm/Alloc.java
	java -Xmx64m -XX:+UseSerialGC -cp "$work/java" Alloc forever >"$work/jvm.log" </dev/null &
	jvm_pid=$!
	children+=("$jvm_pid")
	for _ in $(seq 200); do
		grep -q allocating "$work/jvm.log" 2>/dev/null && break
		sleep 0.05
	done
	# With TOPDECK_DIR set, views read that directory only; --portholes
	# adds the other runtimes' (without TOPDECK_DIR they are always read).
	run "$bin/topdeck" ls --portholes
	echo "$ topdeck show $jvm_pid --portholes | grep -E 'collector_0|threads_live|space_0_used'"
	"$bin/topdeck" show "$jvm_pid" --portholes | grep -E 'collector_0_(invocations|time)|java_threads_live|generation_0_space_0_used' || true
else
	echo "skipped: no JDK (javac, java) on PATH; \`make deps\` installs openjdk-17-jdk-headless"
fi

step "topdeck clock: the TSC clock timers use, why it was chosen, and what it costs next to clock_gettime"
run "$bin/topdeck" clock

step "topdeck serve: Prometheus scrapes every registry on the host (here with curl; the tests use a real Prometheus)"
"$bin/topdeck" serve --portholes --listen 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.err" &
children+=("$!")
addr=''
for _ in $(seq 100); do
	addr=$(grep -oE '127\.0\.0\.1:[0-9]+' "$work/serve.out" | head -n 1 || true)
	[[ -n $addr ]] && break
	sleep 0.05
done
[[ -n $addr ]] || { echo "error: topdeck serve did not start:" >&2; cat "$work/serve.err" >&2; exit 1; }
echo "$ curl -s http://$addr/metrics | grep requests"
curl -s "http://$addr/metrics" | grep -E '^(# TYPE )?[a-z_]*requests' | head -n 8
if [[ -n $jvm_pid ]]; then
	echo "$ curl -s http://$addr/metrics | grep 'jvm_sun_gc_collector_0'"
	curl -s "http://$addr/metrics" | grep -E '^jvm_sun_gc_collector_0_(invocations|time)' | head -n 4
fi
echo "$ curl -s http://$addr/metrics | grep topdeck_scrape"
curl -s "http://$addr/metrics" | grep -E '^topdeck_scrape' | head -n 6

step "Java and Go services publish through their own implementations of the format (bindings/java, bindings/go): topdeck top --once sees them beside the Rust service"
# Java's writer needs a JDK 22+ (its flock goes through java.lang.foreign);
# service.sh finds one or says why not. Its build is the one started above.
wait "$java_build" || true
bindings/java/examples/service.sh 1 >"$work/java.log" 2>&1 </dev/null &
java_pid=$!
children+=("$java_pid")
if [[ -n $go_build ]] && wait "$go_build"; then
	"$work/go/httpservice" -addr 127.0.0.1:0 >"$work/go.log" 2>&1 </dev/null &
	children+=("$!")
	for _ in $(seq 100); do grep -q 'listening on' "$work/go.log" 2>/dev/null && break; sleep 0.05; done
	go_addr=$(grep -oE '127\.0\.0\.1:[0-9]+' "$work/go.log" | head -n 1 || true)
	# Requests for it to count, until the demo ends.
	(while [[ -n $go_addr ]] && curl -s "http://$go_addr/hello" >/dev/null; do sleep 0.01; done) &
	children+=("$!")
else
	echo "skipped the Go service: no Go toolchain, or its build failed${go_build:+:}"
	[[ -n $go_build ]] && tail -n 5 "$work/go-build.log"
fi
for _ in $(seq 200); do
	grep -q 'publishing in' "$work/java.log" 2>/dev/null && break
	kill -0 "$java_pid" 2>/dev/null || { echo "skipped the Java service: $(tail -n 1 "$work/java.log")"; break; }
	sleep 0.05
done
run "$bin/topdeck" top --once --interval 1s

step "topdeck top --once --json: the live view's data, for scripts (run \`topdeck top\` in a terminal for the view itself)"
echo "$ topdeck top --once --json | head -c 600"
"$bin/topdeck" top --once --json | head -c 600
echo

step "topdeck agent + sched: eBPF run-queue latency per cgroup; a noisy neighbour starts, is named, stops"
if [[ $(id -u) -ne 0 ]]; then
	echo "skipped: the scheduler agent loads eBPF programs and creates cgroups, which needs root; run \`sudo make demo\`"
	echo "without root, \`topdeck sched\` says why and shows coarse per-cgroup figures:"
	run "$bin/topdeck" sched --window 1s
else
	scripts/demo-sched.sh
fi

step "topdeck-lab idle --quick: what an idle process pays for topdeck vs a 1 ms time-cache ticker (seed 001)"
run "$bin/topdeck-lab" --quick --out "$work/lab" idle

step "A second instance starts, and is killed with SIGKILL: it cannot clean up, so its file stays"
start_service crashed --workers 1 --rate 500
crashed_pid=$svc_pid crashed_file=$svc_file
# Not a job of this shell any more, so that bash does not report its death.
disown "$crashed_pid"
sleep 1
run kill -9 "$crashed_pid"
while kill -0 "$crashed_pid" 2>/dev/null; do sleep 0.05; done
run "$bin/topdeck" ls

step "Its last values can still be read; the writer is reported dead"
run "$bin/topdeck" show "$crashed_file"

step "topdeck gc: removes the files of dead writers, and only those"
run "$bin/topdeck" gc
run "$bin/topdeck" ls

step "SIGTERM: the service stops cleanly, and removing its registry removes its file"
run kill -TERM "$main_pid"
wait "$main_pid" || true
tail -n 1 "$work/main.log"
if [[ -e $main_file ]]; then
	echo "error: $main_file is still there" >&2
	exit 1
fi
echo "$main_file is gone"
run "$bin/topdeck" ls

step "topdeck record kept every second since the service started: what it holds, and the service as it was at $seen_at"
run "$bin/topdeck" history --dir "$work/history"
run "$bin/topdeck" show "$main_pid" --at "$seen_at" --history "$work/history"
run "$bin/topdeck" watch "$main_pid" requests_total --from "$seen_at" --count 3 --history "$work/history"

echo
echo "demo done"
