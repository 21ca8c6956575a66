#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Reader driver of conformance/PROTOCOL.md: reader.sh <dir> (runs on the oldest JDK found, 17 or newer).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/build.sh"
exec "${JAVA17:-$JAVA22}" -cp "$here/build/topdeck.jar:$here/build/extra" dev.topdeck.conformance.Reader "$@"
