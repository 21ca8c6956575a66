#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs `make TARGET` for each target given, in order, stopping at the
# first that fails, and ends with the time each took: what `make test`
# spends where (issue budgets are per command, and the slow part moves).
set -uo pipefail

times=()
summary() {
	local t
	echo
	echo "make test, seconds per target:"
	for t in "${times[@]}"; do echo "  $t"; done
}
trap summary EXIT
for target in "$@"; do
	start=$SECONDS
	${MAKE:-make} --no-print-directory "$target"
	rc=$?
	times+=("$(printf '%-12s %5d%s' "$target" $((SECONDS - start)) "$( ((rc)) && echo "  (failed, exit $rc)")")")
	((rc)) && exit "$rc"
done
times+=("$(printf '%-12s %5d' total "$SECONDS")")
