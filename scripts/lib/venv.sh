# SPDX-License-Identifier: Apache-2.0
# Sourced, not run: `cached_venv <name> <package> <version>` makes (once) a
# venv under ${XDG_CACHE_HOME:-$HOME/.cache}/topdeck/<name>/ holding
# <package>==<version> from PyPI, and prints its python. A second call finds
# the package at that version and fetches nothing. Messages go to stderr.
cached_venv() {
	local name=$1 package=$2 version=$3
	local venv=${XDG_CACHE_HOME:-$HOME/.cache}/topdeck/$name/venv-$package-$version
	local py=$venv/bin/python
	if [[ "$("$py" -c "import importlib.metadata as m; print(m.version('$package'))" 2>/dev/null)" != "$version" ]]; then
		command -v python3 >/dev/null || {
			echo "error: python3 is missing; install it (scripts/deps.sh) and run again" >&2
			return 1
		}
		mkdir -p "$(dirname "$venv")"
		rm -rf "$venv"
		python3 -m venv "$venv" >&2 || {
			echo "error: python3 -m venv failed; install python3-venv (apt-get install python3-venv) and run again" >&2
			return 1
		}
		"$venv/bin/pip" install --quiet --disable-pip-version-check "$package==$version" >&2 || {
			echo "error: pip could not install $package==$version from PyPI into $venv" >&2
			return 1
		}
	fi
	echo "$py"
}
