#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The recorded benchmark run: topdeck's Python package against
# prometheus_client 0.26.0 (the venv scripts/reach/prommp.sh installs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=$("$here/../../../scripts/reach/prommp.sh")
lscpu | grep 'Model name' || true
date -u +%Y-%m-%dT%H:%MZ
"$py" --version
exec "$py" "$here/bench.py" "$py"
