#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Regenerates bindings/python/tests/bucket_vectors.txt from topdeck-format
# (the Rust library's bucket maths), which the Python tests hold the
# pure-Python bucket index to. With --check, only says whether the checked-in
# file is current (exit 1 if not).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$here/../tests/bucket_vectors.txt
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$here/../../../target}/bucket-vectors
fresh=$(cargo run --quiet --release --manifest-path "$here/bucket_vectors/Cargo.toml")
if [[ ${1:-} == --check ]]; then
	if ! diff -q <(printf '%s\n' "$fresh") "$out" >/dev/null; then
		echo "error: $out is stale; run $0 to regenerate it" >&2
		exit 1
	fi
	exit 0
fi
printf '%s\n' "$fresh" >"$out"
echo "wrote $out ($(wc -l <"$out") cases)"
