#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Writer driver of conformance/PROTOCOL.md: writer.sh <dir> exit|crash|late (JDK 22+, built if needed).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/build.sh"
exec "$JAVA22" --enable-native-access=ALL-UNNAMED -cp "$here/build/topdeck.jar:$here/build/extra" \
	dev.topdeck.conformance.Writer "$@"
