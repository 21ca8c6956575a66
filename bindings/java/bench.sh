#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Java binding's update benchmark against the Prometheus Java client, in one JVM (JDK 22+).
# The client's jars come from Maven Central once (mvn, into the local repository and a cache
# directory); a second run fetches nothing. Results: docs/PERFORMANCE.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/build.sh"
cache=${XDG_CACHE_HOME:-$HOME/.cache}/topdeck/java-bench
deps=$cache/prometheus-metrics-core-1.10.0
if [[ ! -e "$deps/.done" ]]; then
	command -v mvn >/dev/null || { echo "error: mvn is missing; install maven (apt-get install maven) and run again" >&2; exit 1; }
	rm -rf "$deps"; mkdir -p "$deps"
	mvn -B -q -f "$here/bench/pom.xml" dependency:copy-dependencies -DoutputDirectory="$deps"
	touch "$deps/.done"
fi
cp="$here/build/topdeck.jar:$(echo "$deps"/*.jar | tr ' ' :)"
out=$here/build/bench
if [[ ! -e "$out.stamp" || -n "$(find "$here/bench" "$here/build/topdeck.jar" -newer "$out.stamp" -print -quit)" ]]; then
	rm -rf "$out"; mkdir -p "$out"
	"$JDK22/bin/javac" --release 22 -encoding UTF-8 -cp "$cp" -d "$out" $(find "$here/bench" -name '*.java')
	touch "$out.stamp"
fi
exec "$JAVA22" --enable-native-access=ALL-UNNAMED -cp "$cp:$out" dev.topdeck.bench.Updates "$@"
