#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the real producer of prometheus_client's multiprocess files, to
# test topdeck-portholes' prommp reader against it: a venv with
# prometheus_client 0.26.0 (pinned: the reader merges exactly as that
# version's MultiProcessCollector), under the cache directory, so a second
# run fetches nothing. Prints the venv's python.
set -euo pipefail

version=0.26.0
cache=${XDG_CACHE_HOME:-$HOME/.cache}/topdeck/prommp
venv=$cache/venv-prometheus_client-$version
py=$venv/bin/python

if [[ "$("$py" -c 'import importlib.metadata as m; print(m.version("prometheus_client"))' 2>/dev/null)" != "$version" ]]; then
	command -v python3 >/dev/null || {
		echo "error: python3 is missing; install it (scripts/deps.sh) and run again" >&2
		exit 1
	}
	mkdir -p "$cache"
	rm -rf "$venv"
	python3 -m venv "$venv" >&2 || {
		echo "error: python3 -m venv failed; install python3-venv (apt-get install python3-venv) and run again" >&2
		exit 1
	}
	"$venv/bin/pip" install --quiet --disable-pip-version-check "prometheus_client==$version" >&2
fi
echo "$py"
