#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Java binding's tests (`make java`, part of `make test`): built with the JDK alone, run on
# JDK 22+ (everything) and on JDK 17 when installed (reading; a writer is refused there), reading
# back with the Rust CLI. Fetches nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$here/build.sh"
(cd "$root" && cargo build --quiet -p topdeck-cli --bin topdeck)
cli=${CARGO_TARGET_DIR:-$root/target}/debug/topdeck
cp="$here/build/topdeck.jar:$here/build/extra"
props=(-Dtopdeck.root="$root" -Dtopdeck.cli="$cli" -Dtopdeck.java22="$JAVA22")
status=0
"$JAVA22" --enable-native-access=ALL-UNNAMED "${props[@]}" -cp "$cp" dev.topdeck.Tests || status=1
if [[ -n "$JAVA17" ]]; then
	"$JAVA17" "${props[@]}" -cp "$cp" dev.topdeck.Tests || status=1
else
	echo "note: no JDK 17 under /usr/lib/jvm; the Java 17 run (reading, the writer's refusal) was not made" >&2
fi
exit $status
