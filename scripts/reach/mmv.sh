#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what the PCP MMV porthole's tests against real writers need
# (crates/topdeck-portholes/tests/mmv.rs), from Debian, only what is
# missing: python3-pcp (the `pcp.mmv` writer, for Debian's own
# /usr/bin/python3), libpcp-mmv1-dev and libpcp3-dev (libpcp_mmv's C registry API and
# headers, for the version 2 and 3 writer the test compiles) and pcp (for
# /usr/lib/pcp/pmdas/mmv/mmvdump, the reference the parser is compared
# with). Idempotent: when all are there it fetches nothing.
set -euo pipefail

mmvdump=/usr/lib/pcp/pmdas/mmv/mmvdump
need=()
/usr/bin/python3 -c 'import pcp.mmv' 2>/dev/null || need+=(python3-pcp)
[[ -f /usr/include/pcp/mmv_stats.h ]] || need+=(libpcp-mmv1-dev)
# mmv_stats.h includes nothing, but needs pmapi.h (pmUnits, PM_TYPE_*) first.
[[ -f /usr/include/pcp/pmapi.h ]] || need+=(libpcp3-dev)
# A pcp whose postinst failed once (see below) is unpacked but not configured.
{ [[ -x $mmvdump ]] && [[ $(dpkg-query -W -f '${Status}' pcp 2>/dev/null) == "install ok installed" ]]; } || need+=(pcp)
command -v cc >/dev/null || need+=(build-essential)

if ((${#need[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "error: missing packages: ${need[*]}; install them (apt-get install ${need[*]})" \
			"or run this script as root" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	# pcp's postinst starts pmcd and pmlogger with systemctl whenever
	# systemctl is installed, and fails when systemd is not the init (a
	# container): there a systemctl that does nothing stands in for it
	# during the install. The tests need none of PCP's daemons.
	shim=$(mktemp -d)
	trap 'rm -rf "$shim"' EXIT
	if [[ ! -d /run/systemd/system ]]; then
		printf '#!/bin/sh\nexit 0\n' >"$shim/systemctl"
		chmod +x "$shim/systemctl"
	fi
	apt-get update -qq
	PATH=$shim:$PATH apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	/usr/bin/python3 -c 'import pcp.mmv' 2>/dev/null && [[ -f /usr/include/pcp/mmv_stats.h && -f /usr/include/pcp/pmapi.h && -x $mmvdump ]] ||
		{ echo "error: ${need[*]} installed, but pcp.mmv, mmv_stats.h, pmapi.h or mmvdump is still missing" >&2; exit 1; }
fi
echo "mmv: $(dpkg-query -W -f '${Package} ${Version}\n' python3-pcp libpcp-mmv1-dev libpcp3-dev pcp 2>/dev/null | paste -sd ' ')"
