#!/usr/bin/env bash
# Run every test: fetches the real models and a Python with the OpenAI SDK first (both cached), runs the
# Rust suites, then the client-library suite (tests/clients) and the Python package's (tests/package) against
# the binary they built.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-models.sh
venv=.venv-test
if ! "$venv/bin/python" -c "import openai" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'openai>=1.40,<3'
fi
export ALEPH_TEST_PYTHON="$PWD/$venv/bin/python"
cargo test --workspace "$@"
scripts/client-tests.sh
scripts/python-tests.sh
# The GPU check's steps on this machine's CPU, with tiny shapes (the same script a lent GPU runs).
scripts/gpu-check.sh --dry-run >/dev/null
