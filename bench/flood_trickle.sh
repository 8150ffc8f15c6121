#!/usr/bin/env bash
# One model flooded while another serves a steady trickle, in one process: the trickle's latency alone, then
# beside the flood, with the compute scheduler fair (the default) and off. Both models are all-MiniLM-L6-v2,
# served under two names (two queues, two batchers: two models as far as the scheduler knows).
#
#   cargo build --release -p aleph-server -p aleph-bench
#   bench/flood_trickle.sh
#
# env: CORPUS (default ../shared/data/stsbenchmark.tsv.gz), MODEL_DIR (default models/all-MiniLM-L6-v2),
#      TRICKLE (requests, default 300), INTERVAL_MS (the trickle's pause between requests, default 20)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
corpus="${CORPUS:-$root/../shared/data/stsbenchmark.tsv.gz}"
model_dir="${MODEL_DIR:-$root/models/all-MiniLM-L6-v2}"
aleph="$root/target/release/aleph"
loadgen="$root/target/release/loadgen"
trickle="${TRICKLE:-300}"
interval="${INTERVAL_MS:-20}"
port=7995
url="http://127.0.0.1:$port/embeddings"

pid="" flood=""
cleanup() {
  [ -n "$flood" ] && kill "$flood" 2>/dev/null || true
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
}
trap cleanup EXIT

serve() {
  "$aleph" v2 --model-id "$model_dir" --served-model-name flooded --model-id "$model_dir" \
    --served-model-name trickled --port "$port" \
    --compute-scheduler "$1" >"/tmp/aleph-flood-$1.log" 2>&1 &
  pid=$!
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { tail -20 "/tmp/aleph-flood-$1.log"; exit 1; }
    sleep 0.05
  done
}

trickle_run() {
  "$loadgen" --url "$url" --model trickled --corpus "$corpus" --batch 1 --concurrency 1 \
    --requests "$trickle" --warmup 20 --interval-ms "$interval" --json --label "$1"
}

# Requests the flood has had answered, from the server's own counter.
flood_answered() {
  curl -s "http://127.0.0.1:$port/metrics" |
    awk '/^aleph_requests_total\{/ && /model="flooded"/ && /status="200"/ { n += $NF } END { print n + 0 }'
}

for mode in fair off; do
  serve "$mode"
  trickle_run "trickle alone, scheduler $mode"
  # The flood: 32 sentences per request, 8 in flight, for longer than the trickle lasts.
  "$loadgen" --url "$url" --model flooded --corpus "$corpus" --batch 32 --concurrency 8 --requests 100000 \
    --json --label flood >/dev/null 2>&1 &
  flood=$!
  sleep 2
  before=$(flood_answered) t0=$(date +%s.%N)
  trickle_run "trickle beside the flood, scheduler $mode"
  after=$(flood_answered) t1=$(date +%s.%N)
  awk -v n=$((after - before)) -v a="$t0" -v b="$t1" -v m="$mode" \
    'BEGIN { printf "{\"label\":\"flood meanwhile, scheduler %s\",\"sentences_per_s\":%.1f}\n", m, n * 32 / (b - a) }'
  kill "$flood" 2>/dev/null || true
  wait "$flood" 2>/dev/null || true
  flood=""
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=""
done
