#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what the hsperfdata porthole's tests against a real JVM need
# (crates/topdeck-portholes/tests/hsperf.rs): javac and java to build and
# run the JVM under test, jcmd and jstat to compare with. All four come
# with Debian's openjdk-17-jdk-headless. Idempotent: when the tools are
# there it does nothing; a stamp under the cache directory records what
# was found, so a second run fetches nothing.
set -euo pipefail

cache=${XDG_CACHE_HOME:-$HOME/.cache}/topdeck/reach
stamp=$cache/hsperf.ok
tools=(javac java jcmd jstat)

have_all() {
	local tool
	for tool in "${tools[@]}"; do
		command -v "$tool" >/dev/null || return 1
	done
}

if ! have_all; then
	if [[ $(id -u) -ne 0 ]]; then
		echo "error: missing one of ${tools[*]}; install openjdk-17-jdk-headless" \
			"(apt-get install openjdk-17-jdk-headless) or run this script as root" >&2
		exit 1
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless
	have_all || { echo "error: openjdk-17-jdk-headless installed, but ${tools[*]} are not all on PATH" >&2; exit 1; }
fi

mkdir -p "$cache"
version=$(java -version 2>&1 | head -n 1)
if [[ ! -f $stamp ]] || [[ $(cat "$stamp") != "$version" ]]; then
	echo "$version" >"$stamp"
fi
echo "hsperf: $version; javac, jcmd and jstat present"
