#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The soak: every part of topdeck together, under a scraping Prometheus, for
# a long time, to show that what should be flat is flat and that counts stay
# exact.
#
#   bench/soak.sh [DURATION]        e.g. 10m (default), 1h, 90s, 600
#
# Runs as root (the agent loads eBPF; cgroups are made for the writers),
# from release binaries (cargo build --release --workspace --bins):
#   - writers: two examples/service processes and two td-writer processes
#     (exact counts) for the whole run; every 20 s a short-lived td-writer
#     (checked exactly, then exiting or SIGKILLed so that dead files appear)
#     and a short-lived service (exiting by itself or SIGKILLed), each cycle
#     in a fresh cpu cgroup that is removed afterwards; `topdeck gc` every
#     third cycle;
#   - readers: `topdeck top --once --json` and `topdeck ls --json` in a loop,
#     `topdeck watch` on a long-lived service for the whole run;
#   - `topdeck agent` (eBPF) and `topdeck serve`, scraped by a real
#     Prometheus (scrape interval SOAK_SCRAPE, default 2s).
# Everything uses a private namespace directory (TOPDECK_DIR) in the output
# directory, so other users of the machine are neither read nor disturbed.
# Every 10 s it samples RSS, fds and threads of each long-lived process,
# the files in the namespace, what `ls` lists, and the entries of the
# agent's BPF hash maps (bpftool). Samples go to OUT/samples.csv (OUT is a
# new temp dir, or SOAK_OUT); the summary goes to stdout. Exit status is
# non-zero if a count was not exact, a process died early or something was
# left behind.
set -euo pipefail

die() { echo "soak: $*" >&2; exit 1; }
log() { echo "soak: $(date -u +%H:%M:%S) $*" >&2; }

seconds() {
	case $1 in
	*h) echo $((${1%h} * 3600)) ;;
	*m) echo $((${1%m} * 60)) ;;
	*s) echo "${1%s}" ;;
	*[!0-9]* | '') die "DURATION must look like 10m, 1h, 90s or 600: $1" ;;
	*) echo "$1" ;;
	esac
}

duration=$(seconds "${1:-10m}")
scrape=${SOAK_SCRAPE:-2s}
cycle=20 # seconds between short-lived writers
sample_every=10
# Slopes are fitted after the warm-up: a fifth of the run, at most 10 min.
warmup=$((duration / 5 < 600 ? duration / 5 : 600))

[[ $(id -u) == 0 ]] || die "run as root (the agent loads eBPF, writers get cgroups)"
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${CARGO_TARGET_DIR:-$root/target}/release
TOPDECK=$bin/topdeck
TDW=$bin/td-writer
SVC=$bin/topdeck-example-service
for b in "$TOPDECK" "$TDW" "$SVC"; do
	[[ -x $b ]] || die "$b is missing: cargo build --release --workspace --bins"
done
PROMETHEUS=$(command -v prometheus) || die "prometheus is missing: scripts/deps.sh"
for c in curl python3; do command -v $c >/dev/null || die "$c is missing"; done
command -v bpftool >/dev/null || log "bpftool is missing (apt-get install bpftool): no BPF map counts"
lib=$root/bench/soak_lib.py

out=${SOAK_OUT:-$(mktemp -d /tmp/topdeck-soak.XXXXXX)}
mkdir -p "$out"
export TOPDECK TOPDECK_DIR=$out/ns
mkdir -m 0700 "$TOPDECK_DIR"
: >"$out/pids"
: >"$out/checks.log"
: >"$out/events.log"

# Everything started from here on lives in a pids cgroup of its own, so that
# the cleanup can find (and the end can prove there is no) leftover.
track=/sys/fs/cgroup/pids/topdeck-soak-$$
home_pids=$(sed -n 's/^[0-9]*:pids:\(.*\)$/\1/p' /proc/self/cgroup)
if [[ -d /sys/fs/cgroup/pids ]] && mkdir "$track" 2>/dev/null; then
	echo $$ >"$track/cgroup.procs"
else
	track=
	log "no pids cgroup: cleanup goes by the recorded pids only"
fi
# Writers' cpu cgroups: the agent sees them come and go.
cpu=/sys/fs/cgroup/cpu/topdeck-soak-$$
[[ -d /sys/fs/cgroup/cpu ]] || cpu=/sys/fs/cgroup/unified/topdeck-soak-$$
mkdir "$cpu"

quota() { # DIR PERCENT_OF_ONE_CPU
	if [[ -e $1/cpu.cfs_quota_us ]]; then
		echo $(($2 * 1000)) >"$1/cpu.cfs_quota_us"
	elif [[ -e $1/cpu.max ]]; then
		echo "$(($2 * 1000)) 100000" >"$1/cpu.max" 2>/dev/null || true
	fi
}

# Processes of a cgroup that are not zombies (this shell reaps those).
running() {
	local pid
	while read -r pid; do
		[[ $(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null) == [^Z] ]] && echo "$pid"
	done <"$1/cgroup.procs"
}

cleaned=
cleanup() {
	[[ -n $cleaned ]] && return
	cleaned=1
	set +e
	touch "$out/stop" "$out/stop-churn"
	if [[ -n $track ]]; then
		# Everything but this shell, politely first so that writers
		# remove their files; then whatever is still there.
		echo $$ >"/sys/fs/cgroup/pids${home_pids}/cgroup.procs"
		while read -r pid; do kill -TERM "$pid" 2>/dev/null; done <"$track/cgroup.procs"
		for _ in $(seq 200); do
			[[ -z $(running "$track") ]] && break
			sleep 0.1
		done
		for pid in $(running "$track"); do
			echo "$pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" >>"$out/sigkilled-at-cleanup"
			kill -KILL "$pid" 2>/dev/null
		done
		wait 2>/dev/null
		for _ in $(seq 50); do
			rmdir "$track" 2>/dev/null && break
			sleep 0.1
		done
		[[ -d $track ]] && echo "processes left behind in $track: $(tr '\n' ' ' <"$track/cgroup.procs")" >>"$out/leftovers"
	else
		while read -r _ pid; do kill -TERM "$pid" 2>/dev/null; done <"$out/pids"
		sleep 2
		while read -r _ pid; do kill -KILL "$pid" 2>/dev/null; done <"$out/pids"
	fi
	wait 2>/dev/null
	for d in "$cpu"/*/ "$cpu"; do
		[[ -d $d ]] && rmdir "$d" 2>/dev/null
	done
	[[ -d $cpu ]] && echo "cgroup left behind: $cpu" >>"$out/leftovers"
	set -e
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# spawn NAME CMD...: a long-lived process, sampled and checked to the end.
spawn() {
	local name=$1
	shift
	"$@" >"$out/$name.out" 2>"$out/$name.err" &
	echo "$name $!" >>"$out/pids"
	pid=$!
}

wait_line() { # FILE REGEX SECONDS: prints the first matching line
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		if grep -m1 -E "$2" "$1" 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "soak: no line matching '$2' in $1 after $3 s" >&2
	return 1
}

alive() { kill -0 "$1" 2>/dev/null && [[ $(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) != Z ]]; }

# A td-writer in `run` mode, driven through a fifo: tdw_start NAME CGROUP
# WORKERS sets tdw_pid, tdw_fd and tdw_path.
tdw_start() {
	local name=$1
	mkfifo "$out/$name.in"
	"$TDW" run --workers "$3" --shards 4 --min-per-worker 1 --batch 1000 \
		<"$out/$name.in" >"$out/$name.out" 2>"$out/$name.err" &
	tdw_pid=$!
	exec {tdw_fd}>"$out/$name.in"
	echo "$tdw_pid" >"$2/cgroup.procs"
	tdw_path=$(wait_line "$out/$name.out" '^ready ' 30 | cut -d' ' -f2-)
}

# tdw_check NAME PID FD PATH: stop it, then compare what it says it did with
# `topdeck show --json` and with Prometheus's last scrape.
tdw_check() {
	local name=$1 pid=$2 fd=$3 path=$4 done_line r=0
	echo stop >&"$fd"
	done_line=$(wait_line "$out/$name.out" '^done ' 60) || {
		echo "$name done-line missing" >>"$out/checks.log"
		return 1
	}
	"$TOPDECK" show --json "$path" >"$out/$name.show.json" 2>>"$out/$name.err" || r=1
	echo "$name $(python3 "$lib" check-show "$out/$name.show.json" "$done_line")" >>"$out/checks.log" || r=1
	echo "$name $(python3 "$lib" check-prom "$prom" "$pid" "$done_line")" >>"$out/checks.log" || r=1
	return $r
}

now() { echo $(($(date +%s) - start_s)); }
date +%s.%N >"$out/start"
start_s=$(date +%s)
log "output in $out; duration ${duration}s, scrape interval $scrape"

# --- serve and Prometheus
spawn serve "$TOPDECK" serve --listen 127.0.0.1:0
target=$(wait_line "$out/serve.out" '^listening on ' 30 | grep -oE '[0-9.]+:[0-9]+')
pport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
prom=http://127.0.0.1:$pport
cat >"$out/prometheus.yml" <<EOF
global:
  scrape_interval: $scrape
  scrape_timeout: $scrape
scrape_configs:
  - job_name: topdeck
    static_configs:
      - targets: ['$target']
EOF
spawn prometheus "$PROMETHEUS" --config.file="$out/prometheus.yml" \
	--storage.tsdb.path="$out/prometheus" --storage.tsdb.retention.time=1d \
	--web.listen-address=127.0.0.1:"$pport" --log.level=warn
for i in $(seq 600); do
	curl -fs "$prom/-/ready" >/dev/null && break
	((i < 600)) || die "Prometheus is not ready after 60 s (see $out/prometheus.err)"
	sleep 0.1
done

# --- the agent
spawn agent "$TOPDECK" agent
sleep 3
alive "$pid" || die "the agent did not start: $(tail -n 5 "$out/agent.err")"

# --- long-lived services, watched
mkdir "$cpu/services"
for n in 1 2; do
	spawn "svc$n" "$SVC" --workers 2 --rate 300 --seed "$n"
	echo "$pid" >"$cpu/services/cgroup.procs"
done
svc1=$(wait_line "$out/svc1.out" '^pid ' 30 | cut -d' ' -f2)
spawn watch "$TOPDECK" watch "$svc1" --interval 1s

# --- readers in a loop
(
	set +e
	n=0 failed=0
	while [[ ! -e $out/stop ]]; do
		for what in "top --once --json" "ls --json"; do
			# shellcheck disable=SC2086
			if ! "$TOPDECK" $what >"$out/reader.last" 2>>"$out/readers.err" || [[ ! -s $out/reader.last ]]; then
				failed=$((failed + 1))
				echo "$(now) $what failed" >>"$out/events.log"
			fi
			n=$((n + 1))
		done
		echo "$n $failed" >"$out/readers.count"
		sleep 2
	done
) &

# --- the sampler
python3 "$lib" sample "$out" "$sample_every" 2>"$out/sampler.err" &
sampler=$!

# --- short-lived writers, dead files and gc
(
	set +e
	k=0
	while [[ ! -e $out/stop-churn ]]; do
		k=$((k + 1))
		t0=$(date +%s)
		cg=$cpu/short-$k
		mkdir "$cg"
		quota "$cg" 20
		"$SVC" --workers 1 --rate 200 --duration 12 --seed $((100 + k)) \
			>>"$out/short-svc.out" 2>>"$out/short-svc.err" &
		spid=$!
		echo "$spid" >"$cg/cgroup.procs"
		tdw_start "short-$k" "$cg" 2
		echo go >&"$tdw_fd"
		sleep 3
		tdw_check "short-$k" "$tdw_pid" "$tdw_fd" "$tdw_path" ||
			echo "$(now) short-$k: counts not exact" >>"$out/events.log"
		if ((k % 2)); then
			kill -KILL "$tdw_pid"
			echo "$(now) short-$k td-writer SIGKILLed" >>"$out/events.log"
		else
			echo exit >&"$tdw_fd"
		fi
		exec {tdw_fd}>&-
		wait "$tdw_pid" 2>/dev/null
		rm -f "$out/short-$k.in"
		if ((k % 3 == 0)); then
			kill -KILL "$spid"
			echo "$(now) short service $spid SIGKILLed" >>"$out/events.log"
		fi
		wait "$spid" 2>/dev/null
		rmdir "$cg"
		if ((k % 3 == 0)); then
			"$TOPDECK" gc --json >>"$out/gc.log" 2>>"$out/gc.err"
			echo >>"$out/gc.log"
		fi
		echo "$k" >"$out/cycles"
		sleep $((t0 + cycle - $(date +%s) > 0 ? t0 + cycle - $(date +%s) : 0))
	done
) &
churn=$!

# --- long-lived td-writers, last, so that no other child inherits their fifos
mkdir "$cpu/writers"
quota "$cpu/writers" 10
declare -A wpid wfd wpath
for n in 1 2; do
	tdw_start "tdw$n" "$cpu/writers" 2
	echo "tdw$n $tdw_pid" >>"$out/pids"
	wpid[tdw$n]=$tdw_pid wfd[tdw$n]=$tdw_fd wpath[tdw$n]=$tdw_path
	echo go >&"$tdw_fd"
done

# --- the run
status=0
# Records long-lived processes that ended before their time. A dead agent
# is started again (SOAK_RESTART_AGENT=0: not), so that the rest still runs
# with one; its series then span its lives.
deaths() {
	local name p
	while read -r name p; do
		if ! alive "$p" && ! grep -q "^$name (pid $p) died" "$out/events.log"; then
			echo "$name (pid $p) died at $(now) s: $(tail -n 3 "$out/$name.err" | tr '\n' ' ')" | tee -a "$out/events.log" >&2
			status=1
			if [[ $name == agent && ${SOAK_RESTART_AGENT:-1} == 1 ]]; then
				cat "$out/agent.err" >>"$out/agent.err.all"
				spawn agent "$TOPDECK" agent
				echo "$(now) agent restarted as pid $pid" >>"$out/events.log"
			fi
		fi
	done < <(awk '{last[$1] = $2} END {for (n in last) print n, last[n]}' "$out/pids")
}
end=$((start_s + duration))
while (($(date +%s) < end)); do
	sleep $((end - $(date +%s) < 5 ? end - $(date +%s) : 5)) || true
	deaths
done
log "time is up; stopping the writers"
touch "$out/stop-churn"
wait "$churn" || true
for n in 1 2; do
	tdw_check "tdw$n" "${wpid[tdw$n]}" "${wfd[tdw$n]}" "${wpath[tdw$n]}" || status=1
done

# --- what Prometheus saw, over the whole run
window=$(($(date +%s) - start_s))s
q() { python3 "$lib" prom "$prom" "$1"; }
{
	echo "scrapes|$(q "count_over_time(up{job=\"topdeck\"}[$window])")"
	echo "failed scrapes (up == 0)|$(q "count_over_time(up{job=\"topdeck\"}[$window]) - sum_over_time(up{job=\"topdeck\"}[$window])")"
	echo "scrape duration max (s)|$(q "max_over_time(scrape_duration_seconds{job=\"topdeck\"}[$window])")"
	echo "scrape duration mean (s)|$(q "avg_over_time(scrape_duration_seconds{job=\"topdeck\"}[$window])")"
	echo "samples per scrape, max|$(q "max_over_time(scrape_samples_scraped{job=\"topdeck\"}[$window])")"
	echo "samples per scrape, last|$(q "scrape_samples_scraped{job=\"topdeck\"}")"
	echo "serve: scrapes it answered|$(q "sum(topdeck_scrapes_total)")"
	for reason in dead corrupt; do
		echo "serve: files skipped as $reason (total)|$(q "sum(topdeck_scrape_errors_total{reason=\"$reason\"})")"
	done
	echo "serve: scrape errors, any reason|$(q "sum(topdeck_scrape_errors_total)")"
} >"$out/prometheus-stats"
deaths
touch "$out/stop"
wait "$sampler" || true
for n in 1 2; do echo exit >&"${wfd[tdw$n]}" || true; done
sleep 1
cleanup

# --- the summary
echo
echo "## Soak: ${duration} s, $(date -u +%FT%TZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs"
echo
python3 "$lib" summary "$out" "$warmup"
echo
echo "| Prometheus (scrape interval $scrape) | value |"
echo "|---|---|"
sed 's/|/ | /; s/^/| /; s/$/ |/' "$out/prometheus-stats"
echo
checked=$(grep -c ' ok ' "$out/checks.log" || true)
bad=$(grep -c -v ' ok ' "$out/checks.log" || true)
read -r nread rfail <"$out/readers.count" || true
removed=$(grep -o '"/[^"]*"' "$out/gc.log" 2>/dev/null | wc -l || true)
echo "| check | result |"
echo "|---|---|"
echo "| exact counts (td-writer vs show --json and vs Prometheus) | $checked ok, $bad not |"
grep -E '^tdw[0-9]' "$out/checks.log" | sed 's/^/| long-lived /; s/ \(show\|prometheus\) / | \1 /; s/$/ |/'
echo "| short-lived writer cycles | $(cat "$out/cycles" 2>/dev/null || echo 0) |"
echo "| SIGKILLed writers | $(grep -c SIGKILLed "$out/events.log" || true) |"
echo "| files removed by gc | $removed |"
echo "| reader runs (top --once --json, ls --json) | ${nread:-0}, ${rfail:-0} failed |"
echo "| watch output | $(wc -l <"$out/watch.out") lines |"
echo "| processes that needed SIGKILL at cleanup | $(if [[ -s $out/sigkilled-at-cleanup ]]; then wc -l <"$out/sigkilled-at-cleanup"; else echo 0; fi) |"
echo "| agent restarts (it died) | $(grep -c 'agent restarted' "$out/events.log" || true) |"
echo "| processes or cgroups left behind | $(if [[ -s $out/leftovers ]]; then wc -l <"$out/leftovers"; else echo 0; fi) |"
if ((bad > 0)); then
	echo; echo "not exact:"; grep -v ' ok ' "$out/checks.log"; status=1
fi
if [[ -s $out/leftovers ]]; then
	echo; cat "$out/leftovers"; status=1
fi
if grep -q died "$out/events.log"; then
	echo; echo "deaths ($(grep -c died "$out/events.log"), the first 5:"; grep died "$out/events.log" | head -n 5; status=1
fi
echo
echo "samples: $out/samples.csv; logs and checks: $out"
exit $status
