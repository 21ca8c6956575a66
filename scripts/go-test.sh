#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the Go module's checks (bindings/go): a CGO_ENABLED=0 build (the
# module is pure Go), go vet, go test -race (the race detector itself needs
# cgo and a C compiler; the module does not), and the example read by the
# Rust CLI. Modules are cached in the default GOMODCACHE, so a second run
# fetches nothing. Benchmarks are not run here (bindings/go/README.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
command -v go >/dev/null || {
	echo "error: go is missing; install Go 1.26 or later (https://go.dev/dl/) and run again" >&2
	exit 1
}
export GOFLAGS=${GOFLAGS:--buildvcs=false}
cargo build --quiet -p topdeck-cli --bins
cd "$root/bindings/go"
CGO_ENABLED=0 go build -o "$root/target/go/bin/" ./cmd/... ./examples/...
go vet ./...
(cd bench && go vet ./...)
CGO_ENABLED=1 go test -race -count=1 ./...
