#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the example service (JDK 22+, built if needed) until SIGTERM: service.sh [workers]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/build.sh"
exec "$JAVA22" --enable-native-access=ALL-UNNAMED -cp "$here/build/topdeck.jar:$here/build/extra" \
	dev.topdeck.examples.Service "$@"
