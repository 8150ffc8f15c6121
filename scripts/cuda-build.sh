#!/usr/bin/env bash
# Build Aleph with candle's CUDA backend (cargo feature `cuda`) from PyPI's CUDA 13.0 toolkit: no system CUDA, no
# GPU and no driver needed to build.
#
#   scripts/cuda-build.sh [--cap 90|89|80] [--release] [--clippy] [--smoke] [--suite]
#
#   --cap N     the compute capability candle's kernels are compiled for: 90 (H100/H200, the default),
#               89 (L4/L40S) or 80 (A100); also CUDA_COMPUTE_CAP
#   --release   the release profile; the binary lands in target/cuda/release/aleph (else target/cuda/debug/aleph)
#   --clippy    lint the workspace with the feature on (`-D warnings`) instead of building
#   --smoke     after building, compile the run-time kernels with NVRTC (scripts/nvrtc_check.py), check the binary
#               needs no CUDA library to start, start it here (where there is no driver) and require that it
#               serves embeddings on the CPU and logs why
#   --suite     also the models test suite with the feature on, copied to target/cuda/<profile>/models-suite (the
#               GPU check runs its candle_precision tests on the GPU: scripts/gpu-check.sh)
#
# The driver and CUDA's libraries (cuBLAS, cuBLASLt, cuRAND, NVRTC) are opened at run time, not linked: a `cuda`
# binary starts on a machine without them and serves on the CPU. Two registry crates need a small change for that,
# made to copies under target/cuda/patched and used through a copy of the workspace manifest (target/cuda/ws), so
# the checkout's Cargo.lock is never touched:
#   - cudarc: candle asks for `dynamic-linking`; the copy turns it into cudarc's own `dynamic-loading`;
#   - candle-kernels: its build script links the CUDA runtime as a shared library; the copy links cudart_static
#     (which itself opens the driver at run time).
# The toolkit (nvcc, nvvm, crt, the runtime's headers and libcudart_static, cccl, NVRTC: about 190 MB) goes into a venv
# at target/cuda/toolkit. 13.0 on purpose: 13.x nvcc writes PTX a 13.0 driver (580) refuses.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

cap=${CUDA_COMPUTE_CAP:-90}
profile=dev
mode=build
smoke=0
suite=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cap) cap=$2; shift 2 ;;
    --release) profile=release; shift ;;
    --clippy) mode=clippy; shift ;;
    --smoke) smoke=1; shift ;;
    --suite) suite=1; shift ;;
    *) echo "cuda-build: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$cap" in 80|89|90) ;; *) echo "cuda-build: --cap must be 80, 89 or 90 (got $cap)" >&2; exit 2 ;; esac

work="$root/target/cuda"
mkdir -p "$work"

# --- the toolkit, from PyPI --------------------------------------------------------------------------------
toolkit_venv="$work/toolkit"
# NVRTC too: the smoke step compiles the run-time kernels with it (scripts/nvrtc_check.py).
pins="nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 nvidia-cuda-nvrtc==13.0.88"
if [ "$(cat "$toolkit_venv/.pins" 2>/dev/null)" != "$pins" ]; then
  rm -rf "$toolkit_venv"
  python3 -m venv "$toolkit_venv"
  # shellcheck disable=SC2086
  "$toolkit_venv/bin/pip" install -q --disable-pip-version-check --no-deps $pins
  echo "$pins" >"$toolkit_venv/.pins"
fi
cuda_home=$("$toolkit_venv/bin/python" -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13"))')
export CUDA_HOME="$cuda_home" CUDA_PATH="$cuda_home" CUDA_ROOT="$cuda_home" CUDA_COMPUTE_CAP="$cap"
export PATH="$cuda_home/bin:$PATH"
[[ "$(nvcc --version)" == *"release 13.0"* ]] || { echo "cuda-build: nvcc is not 13.0" >&2; exit 1; }

# --- patched copies of cudarc and candle-kernels -----------------------------------------------------------
locked_version() { # crate -> the version Cargo.lock pins (the newest, where several are locked)
  awk -v n="$1" '$0 == "name = \"" n "\"" { getline; gsub(/version = |"/, ""); print }' Cargo.lock | sort -V | tail -n1
}
cudarc_v=$(locked_version cudarc)
kernels_v=$(locked_version candle-kernels)
cargo fetch --locked -q
registry_cache=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/ | head -n1)
patched="$work/patched"
unpack() { # crate version -> a fresh copy under $patched
  rm -rf "$patched/$1-$2"
  mkdir -p "$patched"
  tar xzf "$registry_cache/$1-$2.crate" -C "$patched"
}
if [ ! -f "$patched/.done-$cudarc_v-$kernels_v" ]; then
  unpack cudarc "$cudarc_v"
  # `dynamic-linking` becomes `dynamic-loading`; the build script's link step (and its both-features guard) goes:
  # its `feature = "dynamic-linking"` conditions become `any()`, which is always false.
  sed -i 's/^dynamic-linking = \[\]/dynamic-linking = ["dynamic-loading"]/' "$patched/cudarc-$cudarc_v/Cargo.toml"
  sed -i 's/feature = "dynamic-linking"/any()/g' "$patched/cudarc-$cudarc_v/build.rs"
  grep -q 'dynamic-linking = \["dynamic-loading"\]' "$patched/cudarc-$cudarc_v/Cargo.toml"
  unpack candle-kernels "$kernels_v"
  kb="$patched/candle-kernels-$kernels_v/build.rs"
  grep -q 'rustc-link-lib=dylib=cudart' "$kb"
  sed -i 's|println!("cargo:rustc-link-lib=dylib=cudart");|println!("cargo:rustc-link-search=native={}/lib", std::env::var("CUDA_HOME").expect("CUDA_HOME")); println!("cargo:rustc-link-lib=static=cudart_static");|' "$kb"
  grep -q 'static=cudart_static' "$kb"
  touch "$patched/.done-$cudarc_v-$kernels_v"
fi

# --- the workspace, seen through a manifest with the patches ----------------------------------------------
ws="$work/ws"
mkdir -p "$ws"
for d in crates bench tests; do ln -sfn "$root/$d" "$ws/$d"; done
cp Cargo.lock "$ws/Cargo.lock"
cp rustfmt.toml "$ws/rustfmt.toml"
{
  cat Cargo.toml
  echo
  echo "# Added by scripts/cuda-build.sh: CUDA's libraries opened at run time."
  echo "[patch.crates-io]"
  echo "cudarc = { path = \"$patched/cudarc-$cudarc_v\" }"
  echo "candle-kernels = { path = \"$patched/candle-kernels-$kernels_v\" }"
} >"$ws/Cargo.toml"

# One target directory with the ordinary build: the dependencies CUDA does not change are built once.
export CARGO_TARGET_DIR="$root/target"
if [ "$mode" = clippy ]; then
  # Libraries and binaries: the code behind the feature is there; the test targets are linted without it.
  cargo clippy --manifest-path "$ws/Cargo.toml" --workspace --features aleph-models/cuda -- -D warnings
  exit 0
fi
cargo build --manifest-path "$ws/Cargo.toml" --profile "$profile" -p aleph-server --features cuda
out_dir=$([ "$profile" = dev ] && echo debug || echo release)
mkdir -p "$work/$out_dir"
# The ordinary build writes the same path (target/<profile>/aleph): the CUDA binary is kept apart.
cp "target/$out_dir/aleph" "$work/$out_dir/aleph"
bin="$work/$out_dir/aleph"
echo "cuda-build: $bin (compute capability $cap)"
if [ "$suite" = 1 ]; then
  exe=$(cargo test --manifest-path "$ws/Cargo.toml" --profile "$profile" -p aleph-models --features cuda --test suite \
    --no-run --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "suite" and m.get("executable"):
        print(m["executable"])')
  cp "$exe" "$work/$out_dir/models-suite"
  echo "cuda-build: $work/$out_dir/models-suite (the models suite, cuda)"
fi

[ "$smoke" = 1 ] || exit 0
# --- smoke: the kernels a GPU load compiles at run time compile (NVRTC needs no GPU) --------------------------
python3 scripts/nvrtc_check.py "$cuda_home/lib/libnvrtc.so.13"
# --- smoke: starts without CUDA's libraries, serves on the CPU, says why ------------------------------------
needed=$(readelf -d "$bin" | awk '/NEEDED/ { print $NF }' | tr -d '[]')
if echo "$needed" | grep -Ei 'libcuda|libcudart|libcublas|libcurand|libnvrtc'; then
  echo "cuda-build: the binary links a CUDA library (above); it would not start without a driver" >&2
  exit 1
fi
scripts/fetch-models.sh >/dev/null
port=$((20000 + RANDOM % 20000))
log=$(mktemp)
"$bin" v2 --model-id models/all-MiniLM-L6-v2 --port "$port" >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 120); do
  curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { cat "$log"; echo "cuda-build: the CUDA binary exited" >&2; exit 1; }
  sleep 0.5
done
reply=$(curl -fsS "http://127.0.0.1:$port/embeddings" -H 'content-type: application/json' \
  -d '{"model": "all-MiniLM-L6-v2", "input": ["a CUDA build on a machine without a GPU"]}')
echo "$reply" | python3 -c 'import json, sys; d = json.load(sys.stdin)["data"][0]["embedding"]; assert len(d) == 384, len(d)'
grep -q "serving on the CPU" "$log" || { cat "$log"; echo "cuda-build: no log line saying why it serves on the CPU" >&2; exit 1; }
grep "serving on the CPU" "$log"
echo "cuda-build: smoke passed (started without CUDA, served a 384-d embedding on the CPU)"
