#!/usr/bin/env bash
# The Python package's test venv (tests/package), outside the repo and keyed by the hash of its requirements:
# ${XDG_CACHE_HOME:-~/.cache}/aleph/. Prints its path; everything else goes to stderr.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
python=${PYTHON:-python3}
req=tests/package/requirements.txt
hash=$(sha256sum "$req" | cut -c1-16)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/aleph"
venv="$cache/package-venv-$hash"
if [ ! -f "$venv/.complete" ]; then
  exec 3>&1 1>&2
  echo "python-tests: creating $venv"
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
  touch "$venv/.complete"
  exec 1>&3 3>&-
fi
echo "$venv"
