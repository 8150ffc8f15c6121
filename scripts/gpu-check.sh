#!/usr/bin/env bash
# The GPU check: one prepared run for a lent GPU machine (one H100/H200, 16 cores, no network, 10 minutes a command,
# 15 minutes in all, at most 64 MiB carried beside the tracked files). Its steps are scripts/gpu_check.py's:
# (a) every tiny fixture on the GPU at float32/float16/bfloat16 against transformers' references, (b) MiniLM-,
# BERT-base- and Qwen3-0.6B-shaped random models on the GPU against the same binary on the CPU, (c) `aleph bench`
# in-process and over HTTP with the peak device memory, (d) PyTorch's fp16 SDPA as a yardstick where installed.
#
#   scripts/gpu-check.sh --pack       here: build the CUDA binary and the CUDA models suite (release), strip and
#                                     compress them into target/gpu-check/ (about 20 MiB: carry that folder)
#   scripts/gpu-check.sh              on the GPU machine: unpack target/gpu-check/ and run every step on cuda:0;
#                                     the table goes to stdout, the JSON and logs to $OUT (or target/gpu-check/out)
#   scripts/gpu-check.sh --dry-run    here: the same steps on this machine's CPU (candle's CPU device) with the
#                                     ordinary debug build (built if missing) and tiny shapes, in a few minutes
#
# Further arguments go to scripts/gpu_check.py (e.g. `--steps a,b`, `--shapes bert-base`, `--seconds 2`). On a lent
# GPU (10 minutes a command) run it as two commands, `--steps a,b` then `--steps c,d`, each with `timeout_s` to spare.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
pack_dir="$root/target/gpu-check"

mode=gpu
if [ "${1:-}" = --pack ] || [ "${1:-}" = --dry-run ]; then
  mode=${1#--}
  shift
fi

# The models suite's test binary as cargo built it (its path has a hash): the newest `suite-*` with the tests.
# The listing is read whole before it is searched: `--list | grep -q` would close the pipe at the first match,
# and the suite, writing on, would fail under pipefail.
newest_suite() { # target dir -> path
  local f listing
  for f in $(ls -t "$1"/deps/suite-* 2>/dev/null); do
    [ -x "$f" ] && [ ! -d "$f" ] || continue
    listing=$("$f" --list 2>/dev/null) || continue
    if grep -q '^candle_precision::' <<<"$listing"; then
      echo "$f"
      return
    fi
  done
}

case "$mode" in
  pack)
    scripts/cuda-build.sh --release --suite
    mkdir -p "$pack_dir"
    for f in aleph models-suite; do
      strip -o "$pack_dir/$f" "target/cuda/release/$f"
      python3 -c 'import lzma, shutil, sys
with open(sys.argv[1], "rb") as i, lzma.open(sys.argv[1] + ".xz", "wb", preset=6) as o: shutil.copyfileobj(i, o)' "$pack_dir/$f"
      rm "$pack_dir/$f"
    done
    du -ch "$pack_dir"/*.xz
    ;;
  dry-run)
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    # What `cargo test --workspace` builds (the server binary too): nothing to do after scripts/test.sh's run.
    cargo test -q --workspace --no-run
    suite=$(newest_suite target/debug)
    [ -n "$suite" ] || { echo "gpu-check: no models suite binary under target/debug/deps" >&2; exit 1; }
    exec python3 scripts/gpu_check.py --aleph target/debug/aleph --suite "$suite" --device cpu \
      --shapes tiny-bert,tiny-qwen3 --batch-sizes 1,8 --lengths 16,64 --concurrency 1,4 --seconds 0.2 \
      --sentences 12 --max-batch-tokens 16384 --work "$work" --out "${OUT:-$work/out}" "$@"
    ;;
  gpu)
    bin="$pack_dir/bin"
    mkdir -p "$bin"
    for f in aleph models-suite; do
      [ -f "$pack_dir/$f.xz" ] || { echo "gpu-check: $pack_dir/$f.xz is missing: run scripts/gpu-check.sh --pack here first" >&2; exit 1; }
      python3 -c 'import lzma, shutil, sys
with lzma.open(sys.argv[1]) as i, open(sys.argv[2], "wb") as o: shutil.copyfileobj(i, o)' "$pack_dir/$f.xz" "$bin/$f"
      chmod +x "$bin/$f"
    done
    out="${OUT:-$pack_dir/out}"
    exec python3 scripts/gpu_check.py --aleph "$bin/aleph" --suite "$bin/models-suite" --device cuda:0 \
      --work "$pack_dir/work" --out "$out" "$@"
    ;;
esac
