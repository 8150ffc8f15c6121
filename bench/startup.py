#!/usr/bin/env python3
"""Time to ready and the first requests after it: spawns `aleph v2` on a model, polls /health every 2 ms from
the moment the process starts until it answers 200, then sends one request and a run of the same request, and
compares the first one's latency with the median of the rest (the steady state). Repeats the whole start
`--runs` times and prints the medians.

    python3 bench/startup.py --binary target/release/aleph --model models/all-MiniLM-L6-v2 [--runs 5] [-- flags]

Two request shapes: one sentence, and a batch of 32 sentences from the STS-B test split.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sentences(n):
    out = []
    with open(os.path.join(ROOT, "tests/fixtures/stsb/test.tsv"), encoding="utf-8") as f:
        for line in f:
            out.extend(x for x in line.rstrip("\n").split("\t") if len(x) > 20)
            if len(out) >= n:
                break
    return out[:n]


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    t0 = time.perf_counter()
    urllib.request.urlopen(req).read()
    return time.perf_counter() - t0


def one_start(args, extra):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [args.binary, "v2", "--host", "127.0.0.1", "--port", str(port), "--model-id", args.model, *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:
            try:
                if urllib.request.urlopen(f"{base}/health", timeout=1).status == 200:
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if proc.poll() is not None:
                raise SystemExit(f"the server exited with {proc.returncode} before it was ready")
            time.sleep(0.002)
        ready = time.perf_counter() - t0
        model = json.load(urllib.request.urlopen(f"{base}/models"))["data"][0]["id"]
        result = {"ready_s": ready}
        for name, texts in (("1 sentence", sentences(1)), ("32 sentences", sentences(32))):
            body = {"model": model, "input": texts}
            first = post(f"{base}/embeddings", body)
            steady = statistics.median(post(f"{base}/embeddings", body) for _ in range(args.repeat))
            result[name] = (first, steady)
        return result
    finally:
        proc.terminate()
        proc.wait()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", default=os.path.join(ROOT, "target/release/aleph"))
    p.add_argument("--model", default=os.path.join(ROOT, "models/all-MiniLM-L6-v2"))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--repeat", type=int, default=30, help="requests after the first, for the steady state")
    p.add_argument("extra", nargs="*", help="more `aleph v2` flags (after --)")
    args = p.parse_args()
    runs = [one_start(args, args.extra) for _ in range(args.runs)]
    print(f"{args.model}, {args.runs} starts: medians")
    print("| measure | value |\n|---|---:|")
    print(f"| process start → /health 200 (s) | {statistics.median(r['ready_s'] for r in runs):.3f} |")
    for name in ("1 sentence", "32 sentences"):
        first = statistics.median(r[name][0] for r in runs) * 1e3
        steady = statistics.median(r[name][1] for r in runs) * 1e3
        print(f"| {name}: first request after ready (ms) | {first:.2f} |")
        print(f"| {name}: steady state, median of {args.repeat} (ms) | {steady:.2f} |")
        print(f"| {name}: first / steady | {first / steady:.2f}× |")


if __name__ == "__main__":
    main()
