#!/usr/bin/env bash
# The client libraries' venv for tests/clients (scripts/client-tests.sh), outside the repo and keyed by the hash
# of the requirement files, so a changed pin makes a new one: ${XDG_CACHE_HOME:-~/.cache}/aleph/. Prints its
# path. First run: about 2 minutes of pip and 1.1 GB of disk; later runs reuse it. No torch is installed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
python=${PYTHON:-python3}
req=tests/clients/requirements.txt
nodeps=tests/clients/requirements-nodeps.txt
constraints=tests/clients/constraints.txt

hash=$(cat "$req" "$nodeps" "$constraints" | sha256sum | cut -c1-16)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/aleph"
venv="$cache/clients-venv-$hash"
# Everything but the path goes to stderr.
if [ ! -f "$venv/.complete" ]; then
  exec 3>&1 1>&2
  echo "client-tests: creating $venv"
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" -c "$constraints"
  # infinity_client pins httpx<0.28, which LiteLLM (>=0.28) excludes; it runs fine on 0.28, so it goes in
  # without its dependency metadata (its other dependencies, attrs and python-dateutil, are in $req).
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$nodeps"
  # The listing is read whole: `pip list | grep -q` would close the pipe at the first match, and under
  # pipefail pip's failure to write on would hide the very match.
  if grep -qi torch <<<"$("$venv/bin/python" -m pip list 2>/dev/null)"; then
    echo "client-tests: torch was pulled into the venv; a pin needs fixing"
    exit 1
  fi
  touch "$venv/.complete"
  exec 1>&3 3>&-
fi

echo "$venv"
