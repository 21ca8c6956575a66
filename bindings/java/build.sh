#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the Java binding with the JDK alone (javac, jar): build/topdeck.jar, a multi-release jar
# (base classes for Java 17, META-INF/versions/22 with the FFM system calls a writer needs), and
# the tests, conformance drivers and example against it. Rebuilds only what changed.
# Prints nothing but errors; `source`d by test.sh and bench.sh for $JAVA22 and $JAVA17.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$here/build

jdk_version() { # major version of the JDK at $1, or 0
	sed -n 's/^JAVA_VERSION="\([0-9]*\).*/\1/p' "$1/release" 2>/dev/null || echo 0
}

# A JDK 22 or newer: $TOPDECK_JDK, else JAVA_HOME, else the newest under /usr/lib/jvm.
find_jdk22() {
	local c best="" bestv=0
	for c in "${TOPDECK_JDK:-}" "${JAVA_HOME:-}" /usr/lib/jvm/*; do
		[[ -n "$c" && -x "$c/bin/javac" ]] || continue
		local v; v=$(jdk_version "$c")
		if [[ -n "${TOPDECK_JDK:-}" && "$c" == "$TOPDECK_JDK" && "$v" -ge 22 ]]; then best=$c; break; fi
		if [[ "$v" -ge 22 && "$v" -gt "$bestv" ]]; then best=$c; bestv=$v; fi
	done
	echo "$best"
}

find_jdk17() {
	local c
	for c in /usr/lib/jvm/java-17-openjdk-* /usr/lib/jvm/temurin-17-*; do
		[[ -x "$c/bin/java" ]] && { echo "$c"; return; }
	done
}

JDK22=$(find_jdk22)
if [[ -z "$JDK22" ]]; then
	echo "error: no JDK 22 or newer found (looked at TOPDECK_JDK, JAVA_HOME and /usr/lib/jvm/*);" \
		"the Java writer needs one (flock through java.lang.foreign): install one, or set TOPDECK_JDK to its home" >&2
	exit 1
fi
JDK17=$(find_jdk17)
export JAVA22=$JDK22/bin/java JAVA17=${JDK17:+$JDK17/bin/java}
javac=$JDK22/bin/javac

newer() { # whether any file under $2.. is newer than $1 (or $1 is missing)
	local stamp=$1; shift
	[[ ! -e "$stamp" ]] && return 0
	[[ -n "$(find "$@" -newer "$stamp" -print -quit)" ]]
}

compile() { # compile <release> <dest> <classpath> <source dirs...>
	local release=$1 dest=$2 cp=$3; shift 3
	rm -rf "$dest"; mkdir -p "$dest"
	find "$@" -name '*.java' >"$dest.sources"
	"$javac" -Xlint:all,-options,-serial,-try -Werror --release "$release" -encoding UTF-8 -cp "$cp" -d "$dest" @"$dest.sources"
}

jar=$out/topdeck.jar
if newer "$jar" "$here/src/main" "$here/build.sh"; then
	compile 17 "$out/classes" "" "$here/src/main/java"
	compile 22 "$out/classes-22" "$out/classes" "$here/src/main/java22"
	"$JDK22/bin/jar" --create --file "$jar.tmp" -C "$out/classes" . --release 22 -C "$out/classes-22" .
	mv "$jar.tmp" "$jar"
fi
# Tests, drivers, example: Java 17 code against the jar's API.
if newer "$out/extra.stamp" "$jar" "$here/src/test" "$here/conformance" "$here/examples"; then
	compile 17 "$out/extra" "$jar" "$here/src/test/java" "$here/conformance" "$here/examples"
	touch "$out/extra.stamp"
fi
