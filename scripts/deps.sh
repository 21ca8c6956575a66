#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the system packages topdeck needs, and only those missing:
# `deps.sh demo` what `make demo` builds and shows (the compilers, libbpf's
# libraries, curl and taskset); `deps.sh` (or `deps.sh test`) that and what
# only the tests use (a real Prometheus, tmux, Chromium, strace, cargo-fuzz,
# other runtimes' producers). Everything comes from Debian's archive,
# crates.io and the registries the reach scripts name; each is said before
# it is installed.
set -euo pipefail

case ${1:-test} in
demo) tests=false ;;
test) tests=true ;;
*)
	echo "usage: scripts/deps.sh [demo|test]" >&2
	exit 2
	;;
esac

need=()
# The build, and what `make demo` runs.
command -v cc >/dev/null || need+=(build-essential)
command -v python3 >/dev/null || need+=(python3)
# The scheduler probe: libbpf-sys builds its vendored libbpf against
# libelf and zlib, found with pkg-config. Its BPF object is committed
# (crates/topdeck-sched-build), so only the tests need clang.
command -v pkg-config >/dev/null || need+=(pkg-config)
pkg-config --exists libelf 2>/dev/null || need+=(libelf-dev)
pkg-config --exists zlib 2>/dev/null || need+=(zlib1g-dev)
# The flight recorder's compression links Debian's libzstd.
pkg-config --exists libzstd 2>/dev/null || need+=(libzstd-dev)
# The demo scrapes `topdeck serve` with curl and pins its workloads with taskset.
command -v curl >/dev/null || need+=(curl)
command -v taskset >/dev/null || need+=(util-linux)
if $tests; then
	# clang and llvm-strip build the BPF programs: the probe again, to check
	# the committed object (crates/topdeck-sched-build), and the overhead
	# benchmark's baselines (bench/build.rs).
	command -v clang >/dev/null || need+=(clang)
	command -v llvm-strip >/dev/null || command -v llvm-strip-14 >/dev/null || need+=(llvm)
	# libfuzzer-sys builds libFuzzer (for `make fuzz`) with the C++ compiler.
	command -v g++ >/dev/null || need+=(g++)
	command -v strace >/dev/null || need+=(strace)
	# The prometheus_client porthole is tested against the real library, in a
	# venv (scripts/reach/prommp.sh): Debian ships venv's pip bootstrap apart.
	python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
	# `topdeck serve` is checked by a real Prometheus server and promtool (same package).
	{ command -v prometheus && command -v promtool; } >/dev/null || need+=(prometheus)
	# `make deploy` checks the systemd units with systemd-analyze verify.
	command -v systemd-analyze >/dev/null || need+=(systemd)
	# `topdeck top` is tested in a real terminal: a tmux session, driven and read back.
	command -v tmux >/dev/null || need+=(tmux)
	# The lab's HTML report is checked as a browser renders it: a headless
	# Chromium screenshot (crates/topdeck-lab/tests/report_screenshot.rs).
	command -v chromium >/dev/null || need+=(chromium)
	# The hostile-user tests make users (useradd), run as them (setpriv) and
	# clean up after them (pkill).
	command -v useradd >/dev/null || need+=(passwd)
	command -v pkill >/dev/null || need+=(procps)
fi
command -v cargo >/dev/null || { echo "error: cargo not found; install Rust (rustup) first" >&2; exit 1; }

if ((${#need[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "error: missing packages: ${need[*]}; install them (apt-get install ${need[*]}) or run as root" >&2
		exit 1
	fi
	echo "installing from Debian, for make ${1:-test}: ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${need[@]}" >/dev/null
fi
$tests || exit 0

# `make fuzz` runs the fuzz targets with cargo-fuzz, from crates.io, built
# once and kept in ~/.cargo/bin, so later runs fetch nothing.
if ! command -v cargo-fuzz >/dev/null; then
	echo "installing from crates.io, for make test: cargo-fuzz"
	cargo install --locked cargo-fuzz
fi

# Other runtimes' portholes are tested against their real producers: the
# JDK's tools (jcmd, jstat), a venv with prometheus_client, Aeron's media
# driver from Maven Central. Each script installs its own once, cached
# under ~/.cache/topdeck, so later runs fetch nothing.
for s in "$(dirname "$0")"/reach/*.sh; do
	"$s" >/dev/null
done
