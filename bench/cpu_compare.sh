#!/usr/bin/env bash
# In-process compute, one run: Aleph's CPU path and candle (bench/compute) beside ONNX Runtime and PyTorch
# (bench/onnx_compare.py) on the same STS sentences in batches of 32, 2 threads each.
#
#   cargo build --release -p aleph-bench && PYTHON=/path/to/venv/bin/python bench/cpu_compare.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
corpus="${CORPUS:-$root/../shared/data/stsbenchmark.tsv.gz}"
model="${MODEL_DIR:-$root/models/all-MiniLM-L6-v2}"
n="${SENTENCES:-1024}"
ALEPH_COMPUTE_THREADS=2 "$root/target/release/compute" --model "$model" --corpus "$corpus" --sentences "$n" "$@"
if [ -n "${PYTHON:-}" ]; then
  OMP_NUM_THREADS=2 HF_HUB_OFFLINE=1 "$PYTHON" "$root/bench/onnx_compare.py" "$model" "$corpus" "$n"
fi
