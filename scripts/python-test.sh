#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the Python binding's tests (bindings/python): pytest in a venv cached
# under ${XDG_CACHE_HOME:-$HOME/.cache}/topdeck/python, so a second run
# fetches nothing. The package itself needs nothing beyond the standard
# library; the tests read its files with the Rust CLI, built here if needed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/lib/venv.sh"
py=$(cached_venv python pytest 8.3.5)
cargo build --quiet -p topdeck-cli --bins
cd "$root/bindings/python"
exec "$py" -m pytest -q --doctest-modules topdeck tests "$@"
