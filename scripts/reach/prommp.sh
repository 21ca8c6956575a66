#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the real producer of prometheus_client's multiprocess files, to
# test topdeck-portholes' prommp reader against it: a venv with
# prometheus_client 0.26.0 (pinned: the reader merges exactly as that
# version's MultiProcessCollector), under the cache directory, so a second
# run fetches nothing. Prints the venv's python.
set -euo pipefail

source "$(dirname "$0")/../lib/venv.sh"
cached_venv prommp prometheus_client 0.26.0
