#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks what deploy/ holds with the tools this host has (`make deploy`):
# the Prometheus rules (promtool check + unit tests), the scrape configs,
# the systemd units (systemd-analyze verify) and the Kubernetes manifest
# (scripts/deploy-kube-check.py). No container engine or cluster is used.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

promtool check rules deploy/prometheus/topdeck.rules.yml
promtool test rules deploy/prometheus/tests/topdeck.test.yml
promtool check config deploy/prometheus/prometheus.yml
# Debian's promtool has no Kubernetes service discovery: check the job
# with a static target in its place (relabelling, regexes, fields).
sed -e 's/^    kubernetes_sd_configs:$/    static_configs:/' \
	-e 's/^      - role: pod$/      - targets: ["pod.example:9464"]/' \
	deploy/prometheus/scrape-kubernetes.yml >"$tmp/scrape-kubernetes.yml"
if grep -q '^[^#]*kubernetes_sd_configs' "$tmp/scrape-kubernetes.yml"; then
	echo "error: deploy/prometheus/scrape-kubernetes.yml: its kubernetes_sd_configs block changed shape; update scripts/deploy-check.sh" >&2
	exit 1
fi
promtool check config "$tmp/scrape-kubernetes.yml"

# systemd-analyze verify exits 0 on unknown keys and bad values (it warns):
# any output is a failure. The binary need not be installed here, so the
# units are checked with ExecStart pointing at true(1); man pages neither.
true_bin=$(command -v true)
mkdir -p "$tmp/systemd/user" "$tmp/runtime"
chmod 700 "$tmp/runtime"
for unit in deploy/systemd/*.service deploy/systemd/user/*.service; do
	copy="$tmp/systemd/${unit#deploy/systemd/}"
	sed "s|/usr/local/bin/topdeck|$true_bin|" "$unit" >"$copy"
	scope=()
	[[ $unit == */user/* ]] && scope=(--user)
	if ! out=$(XDG_RUNTIME_DIR="$tmp/runtime" systemd-analyze "${scope[@]}" verify --man=no "$copy" 2>&1) || [[ -n $out ]]; then
		echo "error: $unit: systemd-analyze verify says:" >&2
		echo "$out" >&2
		exit 1
	fi
	echo "$unit: systemd-analyze verify: ok"
done

# The Kubernetes manifest, against the schema as the official Python client
# models it, in a venv cached under ${XDG_CACHE_HOME:-$HOME/.cache}/topdeck,
# so a second run fetches nothing. (kubeconform would fetch its JSON schemas
# from GitHub at run time, which this project's machines cannot reach.)
source scripts/lib/venv.sh
py=$(cached_venv kube kubernetes 37.0.2)
"$py" scripts/deploy-kube-check.py deploy/kubernetes/*.yaml
