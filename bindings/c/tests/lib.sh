# SPDX-License-Identifier: Apache-2.0
# Shared by the shell tests: a private namespace directory, a check that
# counts, and the closing "N passed, N failed" line.
passed=0
failed=0

check() { # check <description> <command...>
	local what=$1
	shift
	if "$@"; then
		passed=$((passed + 1))
		echo "test $what ... ok"
	else
		failed=$((failed + 1))
		echo "test $what ... FAILED" >&2
	fi
}

finish() {
	echo "$passed passed, $failed failed"
	((failed == 0))
}

private_dir() {
	local d
	d=$(mktemp -d /tmp/topdeck-c-XXXXXX)
	chmod 700 "$d"
	echo "$d"
}

# json <expression over doc> < file: prints the value Python finds.
json() { python3 -c "import json,sys; doc=json.load(sys.stdin); print($1)"; }
