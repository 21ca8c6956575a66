#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make build`: installs what the demo needs (scripts/deps.sh demo) and
# builds what it runs, in release. On a fresh machine the first steps wait
# on the network, so they overlap: the crates are fetched while Debian's
# packages install, and the Go example is compiled into Go's build cache
# meanwhile (from a cold cache ~20 s of CPU, which the demo would otherwise
# wait for); the demo's own `go build` then only links.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}

fetch=''
if command -v "$cargo" >/dev/null; then
	# Whatever the fetch misses, the build fetches and says.
	"$cargo" fetch --quiet 2>/dev/null &
	fetch=$!
fi
go_warm=''
if command -v go >/dev/null; then
	(cd bindings/go && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -o /dev/null ./examples/httpservice) \
		>/dev/null 2>&1 </dev/null &
	go_warm=$!
fi
# If a step fails, nothing is left running behind it.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT

scripts/deps.sh demo
if [[ -n $fetch ]]; then wait "$fetch" || true; fi
build=("$cargo" build --release -p topdeck-cli -p topdeck-example-service -p topdeck-lab --bins)
echo "${build[*]}"
"${build[@]}"
# A failed Go build is the demo's to report (it builds again and says why).
if [[ -n $go_warm ]]; then wait "$go_warm" || true; fi
