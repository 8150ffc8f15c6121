#!/usr/bin/env bash
# The client-library compatibility suite (tests/clients): the real OpenAI, LiteLLM, LangChain, LlamaIndex,
# Haystack, infinity_client, huggingface_hub, Cohere, chromadb and qdrant clients against the real binary.
#
#   scripts/client-tests.sh [pytest args...]
#
# Needs target/debug/aleph (or $ALEPH_BIN; `cargo build -p aleph-server` / `cargo test` builds it) and
# models/all-MiniLM-L6-v2 (scripts/fetch-models.sh). The clients live in a venv outside the repo, keyed by the
# hash of the requirement files (scripts/client-venv.sh makes it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv=$(scripts/client-venv.sh)

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
