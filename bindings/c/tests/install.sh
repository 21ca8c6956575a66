#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make install` into a scratch prefix, then the README's example built
# the way the README says (pkg-config) and run against the shared library.
#   tests/install.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/tests/lib.sh"

prefix=$(private_dir)
trap 'rm -rf "$prefix"' EXIT
make -s -C "$here" install PREFIX="$prefix" >/dev/null
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
check "pkg-config knows topdeck" test "$(pkg-config --modversion topdeck)" = 0.1.0

# The README's snippet, taken from the README itself so the two cannot drift.
sed -n '/^```c$/,/^```$/p' "$here/../../README.md" | sed '1d;$d' >"$prefix/hello.c"
check "the README's example is under 15 lines" test "$(wc -l <"$prefix/hello.c")" -lt 15
cc -std=c11 -Wall -Wextra -Werror -o "$prefix/hello" "$prefix/hello.c" $(pkg-config --cflags --libs topdeck)
check "it links the shared library by its soname" \
	bash -c "readelf -d '$prefix/hello' | grep -q 'NEEDED.*libtopdeck.so.0'"
mkdir -m 700 "$prefix/ns"
check "it runs: the registry opens and its metrics register" \
	env TOPDECK_DIR="$prefix/ns" LD_LIBRARY_PATH="$prefix/lib" "$prefix/hello"
finish
