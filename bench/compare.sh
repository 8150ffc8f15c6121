#!/usr/bin/env bash
# Aleph beside Infinity (and in-process sentence-transformers), same machine, same model, same sentences,
# one run. Each server runs alone while it is measured.
#
#   cargo build --release -p aleph-server -p aleph-bench
#   bench/compare.sh                      # all peers that are installed
#
# A rerank line runs too when models/minilm-l6-rerank-bench exists (bench/make_rerank_model.py makes it).
# env: CORPUS (default ../shared/data/stsbenchmark.tsv.gz), MODEL_DIR (default models/all-MiniLM-L6-v2),
#      PEER_HOME (Infinity's venv from ../shared/peers/run-infinity.sh), ST_PYTHON (a python with
#      sentence-transformers; skipped if unset), REQUESTS (default 300), DEBUG_REQUESTS (default 5000).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
corpus="${CORPUS:-$root/../shared/data/stsbenchmark.tsv.gz}"
model_dir="${MODEL_DIR:-$root/models/all-MiniLM-L6-v2}"
peer_home="${PEER_HOME:-$HOME/.cache/aleph-peers}"
infinity="$peer_home/infinity-venv/bin/infinity_emb"
aleph="$root/target/release/aleph"
loadgen="$root/target/release/loadgen"
requests="${REQUESTS:-300}"
debug_requests="${DEBUG_REQUESTS:-5000}"
port=7996
name=all-MiniLM-L6-v2

pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; }
trap cleanup EXIT

# start NAME CMD...: starts a server, waits for /health, prints time-to-ready
start() {
  local label=$1; shift
  local t0; t0=$(date +%s.%N)
  "$@" >"/tmp/aleph-bench-$label.log" 2>&1 &
  pid=$!
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { echo "$label died:"; tail -20 "/tmp/aleph-bench-$label.log"; exit 1; }
    sleep 0.05
  done
  local t1; t1=$(date +%s.%N)
  echo "{\"label\": \"$label\", \"time_to_ready_s\": $(echo "$t1 - $t0" | bc -l | awk '{printf "%.3f", $0}')}"
}

stop() {
  local label=$1
  echo "{\"label\": \"$label\", \"peak_rss_mb\": $(awk '/VmHWM/ {print $2/1024}' "/proc/$pid/status")}"
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
}

load() { # label batch concurrency requests warmup
  "$loadgen" --url "http://127.0.0.1:$port/embeddings" --model "$name" --corpus "$corpus" --json \
    --label "$1" --batch "$2" --concurrency "$3" --requests "$4" --warmup "$5"
}

measure_model() { # label
  load "$1 batch8xc16" 8 16 "$requests" 32
  load "$1 batch1xc1" 1 1 200 20
  load "$1 batch32xc1" 32 1 40 4
}

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DO_NOT_TRACK=1 INFINITY_ANONYMOUS_USAGE_STATS=0

start aleph-nowarmup "$aleph" v2 --model-id "$model_dir" --served-model-name $name --port $port --host 127.0.0.1 --no-model-warmup
stop aleph-nowarmup
start aleph "$aleph" v2 --model-id "$model_dir" --served-model-name $name --port $port --host 127.0.0.1
measure_model aleph
stop aleph
rerank_model="$root/models/minilm-l6-rerank-bench"
if [ -f "$rerank_model/model.safetensors" ]; then
  start aleph-rerank "$aleph" v2 --model-id "$rerank_model" --served-model-name $name --port $port --host 127.0.0.1
  "$loadgen" --url "http://127.0.0.1:$port/rerank" --rerank --model "$name" --corpus "$corpus" --json \
    --label "aleph-rerank batch8xc16 (pairs)" --batch 8 --concurrency 16 --requests "$requests" --warmup 32
  stop aleph-rerank
fi
start aleph-debug "$aleph" v2 --engine debugengine --model-id dummy/model --served-model-name $name --port $port --host 127.0.0.1
load "aleph-debug batch8xc16" 8 16 "$debug_requests" 200
stop aleph-debug

if [ -x "$infinity" ]; then
  export INFINITY_HOME="$peer_home"
  start infinity-nowarmup "$infinity" v2 --model-id "$model_dir" --served-model-name $name --device cpu --engine torch \
    --host 127.0.0.1 --port $port --no-model-warmup
  measure_model infinity
  stop infinity-nowarmup
  if [ -f "$rerank_model/model.safetensors" ]; then
    start infinity-rerank "$infinity" v2 --model-id "$rerank_model" --served-model-name $name --device cpu \
      --engine torch --host 127.0.0.1 --port $port --no-model-warmup
    "$loadgen" --url "http://127.0.0.1:$port/rerank" --rerank --model "$name" --corpus "$corpus" --json \
      --label "infinity-rerank batch8xc16 (pairs)" --batch 8 --concurrency 16 --requests "$requests" --warmup 32
    stop infinity-rerank
  fi
  start infinity-debug "$infinity" v2 --engine debugengine --model-id dummy/model --served-model-name $name \
    --host 127.0.0.1 --port $port
  load "infinity-debug batch8xc16" 8 16 "$debug_requests" 200
  stop infinity-debug
else
  echo "{\"note\": \"Infinity not installed at $infinity: run ../shared/peers/run-infinity.sh once\"}"
fi

if [ -n "${ST_PYTHON:-}" ]; then
  HF_HUB_OFFLINE=1 "$ST_PYTHON" "$root/bench/st_baseline.py" "$model_dir" "$corpus"
fi
