#!/usr/bin/env bash
# The Python package (python/aleph over crates/python) against the real binary: builds the native module into
# the package's test venv with `maturin develop` (cargo's dev profile, the workspace's target dir, so the
# engine's crates built by `cargo test` are reused), then runs tests/package.
#
#   scripts/python-tests.sh [pytest args...]
#
# Needs target/debug/aleph (`cargo build -p aleph-server`) and models/all-MiniLM-L6-v2 (scripts/fetch-models.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv=$(scripts/python-venv.sh)
export ALEPH_BIN="${ALEPH_BIN:-$root/target/debug/aleph}"
VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" maturin develop --quiet >&2
exec "$venv/bin/python" -m pytest tests/package -q "$@"
