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

# `pip install bindings/python` installs the package and leaves the tree as
# it found it (no build/, no *.egg-info): with the build backend from a
# cached venv, so that nothing is fetched.
flit=$(cached_venv flit flit_core 3.12.0)
installed=$(mktemp -d)
trap 'rm -rf "$installed"' EXIT
"$flit" -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps \
	--target "$installed" "$root/bindings/python"
[[ -f $installed/topdeck/waits.py ]] || { echo "error: pip install bindings/python installed no topdeck package" >&2; exit 1; }
left=$(find "$root/bindings/python" -maxdepth 2 \( -name build -o -name '*.egg-info' -o -name dist \))
[[ -z $left ]] || { echo "error: pip install bindings/python left in the tree: $left" >&2; exit 1; }

cd "$root/bindings/python"
"$py" -m pytest -q --doctest-modules topdeck tests "$@"
