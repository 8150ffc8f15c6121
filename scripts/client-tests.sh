#!/usr/bin/env bash
# The client-library compatibility suite (tests/clients): the real OpenAI, LiteLLM, LangChain, LlamaIndex,
# Haystack, infinity_client, huggingface_hub, Cohere, chromadb and qdrant clients against the real binary.
#
#   scripts/client-tests.sh [pytest args...]
#
# Needs target/debug/aleph (or $ALEPH_BIN; `cargo build -p aleph-server` / `cargo test` builds it) and
# models/all-MiniLM-L6-v2 (scripts/fetch-models.sh). The clients live in a venv outside the repo, keyed by the
# hash of the requirement files, so a changed pin makes a new one: ${XDG_CACHE_HOME:-~/.cache}/aleph/.
# First run: about 2 minutes of pip and 1.1 GB of disk; later runs reuse it. No torch is installed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
req=tests/clients/requirements.txt
nodeps=tests/clients/requirements-nodeps.txt
constraints=tests/clients/constraints.txt
python=${PYTHON:-python3}

hash=$(cat "$req" "$nodeps" "$constraints" | sha256sum | cut -c1-16)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/aleph"
venv="$cache/clients-venv-$hash"
if [ ! -f "$venv/.complete" ]; then
  echo "client-tests: creating $venv" >&2
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" -c "$constraints"
  # infinity_client pins httpx<0.28, which LiteLLM (>=0.28) excludes; it runs fine on 0.28, so it goes in
  # without its dependency metadata (its other dependencies, attrs and python-dateutil, are in $req).
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$nodeps"
  if "$venv/bin/python" -m pip list 2>/dev/null | grep -qi torch; then
    echo "client-tests: torch was pulled into the venv; a pin needs fixing" >&2
    exit 1
  fi
  touch "$venv/.complete"
fi

export ALEPH_BIN="${ALEPH_BIN:-$root/target/debug/aleph}"
export ALEPH_TEST_MINILM="${ALEPH_TEST_MINILM:-$root/models/all-MiniLM-L6-v2}"
export ALEPH_TEST_TINY="${ALEPH_TEST_TINY:-$root/tests/fixtures/tiny}"
if [ ! -x "$ALEPH_BIN" ]; then
  echo "client-tests: $ALEPH_BIN is missing: cargo build -p aleph-server (or set ALEPH_BIN)" >&2
  exit 1
fi
if [ ! -f "$ALEPH_TEST_MINILM/model.safetensors" ]; then
  echo "client-tests: $ALEPH_TEST_MINILM is missing: run scripts/fetch-models.sh" >&2
  exit 1
fi

exec "$venv/bin/python" -m pytest tests/clients -q "$@"
