#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the Python binding's tests (bindings/python): pytest in a venv cached
# under ${XDG_CACHE_HOME:-$HOME/.cache}/topdeck/python, so a second run
# fetches nothing. The package itself needs nothing beyond the standard
# library; the tests read its files with the Rust CLI, built here if needed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pytest_version=8.3.5
cache=${XDG_CACHE_HOME:-$HOME/.cache}/topdeck/python
venv=$cache/venv-pytest-$pytest_version
py=$venv/bin/python

if [[ "$("$py" -c 'import importlib.metadata as m; print(m.version("pytest"))' 2>/dev/null)" != "$pytest_version" ]]; then
	command -v python3 >/dev/null || {
		echo "error: python3 is missing; install it (scripts/deps.sh) and run again" >&2
		exit 1
	}
	mkdir -p "$cache"
	rm -rf "$venv"
	python3 -m venv "$venv" || {
		echo "error: python3 -m venv failed; install python3-venv (apt-get install python3-venv) and run again" >&2
		exit 1
	}
	"$venv/bin/pip" install --quiet --disable-pip-version-check "pytest==$pytest_version"
fi
cargo build --quiet -p topdeck-cli --bins
cd "$root/bindings/python"
exec "$py" -m pytest -q --doctest-modules topdeck tests "$@"
