#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what the Aeron porthole's tests run against: a real Aeron media
# driver (io.aeron:aeron-all, one jar holding MediaDriver and AeronStat).
# Maven comes from Debian when missing; the jar comes from Maven Central
# through `mvn dependency:get` and is copied into topdeck's cache, so a
# second run fetches nothing. Prints the jar's path on stdout.
#
#   scripts/reach/aeron.sh               # pinned version (below)
#   AERON_VERSION=RELEASE scripts/reach/aeron.sh
#
# Java 17 or newer must be on PATH (aeron-all 1.51.0 is class file 61).
set -euo pipefail

# Pinned so that the tests compare against the layout they were written
# for; RELEASE follows Maven Central.
version=${AERON_VERSION:-1.51.0}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/topdeck/aeron
jar=$cache/aeron-all-$version.jar

if [[ $version != RELEASE && -s $jar ]]; then
	echo "$jar"
	exit 0
fi

if ! command -v java >/dev/null; then
	echo "error: java is not on PATH; install a JDK 17 or newer (apt-get install -y openjdk-17-jre-headless)" >&2
	exit 1
fi
if ! command -v mvn >/dev/null; then
	echo "aeron: installing maven from Debian" >&2
	if [[ $(id -u) -ne 0 ]]; then
		echo "error: maven is missing and installing it needs root: run 'sudo apt-get install -y maven' and retry" >&2
		exit 1
	fi
	apt-get install -y maven >&2 || { apt-get update >&2 && apt-get install -y maven >&2; }
fi

echo "aeron: fetching io.aeron:aeron-all:$version from Maven Central" >&2
mvn -B -q dependency:get -Dartifact="io.aeron:aeron-all:$version" -Dtransitive=false >&2
repo=$(mvn -B -q help:evaluate -Dexpression=settings.localRepository -DforceStdout 2>/dev/null || true)
[[ -d $repo ]] || repo=$HOME/.m2/repository
if [[ $version == RELEASE ]]; then
	# The newest version directory that holds a jar is the one just fetched.
	found=$(ls -1 "$repo"/io/aeron/aeron-all/*/aeron-all-*.jar 2>/dev/null | grep -v -- '-sources\|-javadoc' | sort -V | tail -n1)
	version=$(basename "$(dirname "$found")")
	jar=$cache/aeron-all-$version.jar
else
	found=$repo/io/aeron/aeron-all/$version/aeron-all-$version.jar
fi
if [[ ! -s $found ]]; then
	echo "error: mvn reported success but $found is missing; check ~/.m2/settings.xml and retry" >&2
	exit 1
fi
mkdir -p "$cache"
cp "$found" "$jar.tmp"
mv "$jar.tmp" "$jar"
echo "$jar"
