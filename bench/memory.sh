#!/usr/bin/env bash
# Memory of one served model after a workload: `/models`' weight_bytes and the kernel's view of the process.
#
#   bench/memory.sh BINARY MODEL_DIR PORT [aleph v2 flags...]     N=texts (default 3000) from the STS-B test split
set -euo pipefail
bin=$1; model=$2; port=$3; shift 3
root="$(cd "$(dirname "$0")/.." && pwd)"
"$bin" v2 --model-id "$model" --port "$port" "$@" >"/tmp/aleph-memory-$port.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 1200); do curl -sf "localhost:$port/health" >/dev/null && break; sleep 0.5; done
python3 - "$port" "$root/tests/fixtures/stsb/test.tsv" "${N:-3000}" <<'PY'
import json, sys, urllib.request
port, corpus, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
texts = [x for line in open(corpus, encoding="utf-8") for x in line.rstrip("\n").split("\t") if len(x) > 20][:n]
base = f"http://localhost:{port}"
model = json.load(urllib.request.urlopen(f"{base}/models"))["data"][0]["id"]
def embed(batch):
    body = json.dumps({"model": model, "input": batch}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{base}/embeddings", data=body, headers={"content-type": "application/json"})).read()
for i in range(0, len(texts), 64):
    embed(texts[i:i + 64])
m = json.load(urllib.request.urlopen(f"{base}/models"))
print("texts", len(texts), "weight_bytes", m["data"][0]["weight_bytes"], "process_resident_bytes", m.get("process_resident_bytes"))
PY
grep -E "VmHWM|VmRSS|RssAnon|RssFile" "/proc/$pid/status" | tr -s ' ' | tr '\n' ' '; echo
