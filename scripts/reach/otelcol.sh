#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds what `topdeck push` is tested against: a real OpenTelemetry
# Collector, from the Go module proxy with the official builder (ocb), with
# the core components the end-to-end test uses: the otlp receiver, the
# debug and otlp_http exporters, and the file and env config providers (the
# collector refuses to start without env). Nothing is committed and only Go
# modules are fetched; the builder and the collector are kept in topdeck's
# cache, so a second run does nothing. Prints the collector's path on stdout.
#
#   scripts/reach/otelcol.sh                   # pinned version (below)
#   OTELCOL_VERSION=0.165.0 OTELCOL_PROVIDERS_VERSION=1.71.0 scripts/reach/otelcol.sh
#
# Needs Go (1.24 or newer) on PATH. About 3 minutes the first time.
set -euo pipefail

# Pinned so the tests run against the collector they were written for; the
# config providers are versioned with pdata (v1.x) beside the v0.x modules.
version=${OTELCOL_VERSION:-0.165.0}
providers=${OTELCOL_PROVIDERS_VERSION:-1.71.0}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/topdeck/otelcol
bin=$cache/topdeck-otelcol-$version

if [[ -x $bin ]]; then
	echo "$bin"
	exit 0
fi

if ! command -v go >/dev/null; then
	echo "error: go is not on PATH; install Go 1.24 or newer (https://go.dev/dl/) and retry" >&2
	exit 1
fi

mkdir -p "$cache"
# A GOBIN of our own: the builder must not land in $(go env GOPATH)/bin,
# which comes before the system directories on PATH on some machines.
builder=$cache/bin/builder-$version
if [[ ! -x $builder ]]; then
	echo "otelcol: building the collector builder (ocb) v$version" >&2
	GOBIN=$cache/bin GOFLAGS=-mod=mod nice -n 19 go install "go.opentelemetry.io/collector/cmd/builder@v$version" >&2
	mv "$cache/bin/builder" "$builder"
fi

work=$cache/build-$version
rm -rf "$work"
mkdir -p "$work"
cat >"$work/manifest.yaml" <<EOF
dist:
  name: topdeck-otelcol
  description: OpenTelemetry Collector (core components) for topdeck's push tests
  output_path: $work/dist
receivers:
  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver v$version
exporters:
  - gomod: go.opentelemetry.io/collector/exporter/debugexporter v$version
  - gomod: go.opentelemetry.io/collector/exporter/otlphttpexporter v$version
providers:
  - gomod: go.opentelemetry.io/collector/confmap/provider/fileprovider v$providers
  - gomod: go.opentelemetry.io/collector/confmap/provider/envprovider v$providers
EOF
echo "otelcol: building the collector v$version (about 2.5 minutes)" >&2
(cd "$work" && GOFLAGS=-mod=mod nice -n 19 "$builder" --config manifest.yaml >&2)
if [[ ! -x $work/dist/topdeck-otelcol ]]; then
	echo "error: the builder reported success but $work/dist/topdeck-otelcol is missing; see its output above" >&2
	exit 1
fi
cp "$work/dist/topdeck-otelcol" "$bin.tmp"
mv "$bin.tmp" "$bin"
rm -rf "$work"
echo "$bin"
