"""What the Python package costs over the engine: MiniLM on the same STS sentences through `aleph embed` (the
engine in-process, in Rust), through the package (aleph.AsyncEmbeddingEngine's synchronous path), and through
the HTTP server, alternating rounds in one run; medians and ratios.

    python bench/python_binding.py models/all-MiniLM-L6-v2 ../shared/data/stsbenchmark.tsv.gz [N] [ROUNDS]

Needs the package installed (`pip install .`, a release build) and target/release/aleph
(`cargo build --release -p aleph-server`). Each path embeds the N sentences in chunks of 1,024 with two chunks
in flight, as `aleph embed` does; the server gets them as requests of 32 sentences from 8 client threads.
"""
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(__file__))
import sts  # noqa: E402

from aleph import AsyncEmbeddingEngine, EngineArgs  # noqa: E402

BIN = os.environ.get("ALEPH_BIN", "target/release/aleph")
CHUNK = 1024


def rust_in_process(model, corpus_path, out_path):
    """`aleph embed`'s own rate (its summary line), model load excluded."""
    r = subprocess.run(
        [BIN, "embed", "--model-id", model, "--input", corpus_path, "--output", out_path, "--no-resume",
         "--chunk-size", str(CHUNK), "--no-model-warmup"],
        capture_output=True, text=True, check=True,
    )
    return float(re.search(r"([0-9.]+) texts/s", r.stderr).group(1))


def package(engine, sentences):
    chunks = [sentences[i:i + CHUNK] for i in range(0, len(sentences), CHUNK)]
    started = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        for _ in pool.map(engine._embed_sync, chunks):
            pass
    return len(sentences) / (time.perf_counter() - started)


def http(base, sentences):
    def post(batch):
        body = json.dumps({"input": batch, "encoding_format": "float"}).encode()
        req = urllib.request.Request(base + "/embeddings", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req) as r:
            r.read()

    batches = [sentences[i:i + 32] for i in range(0, len(sentences), 32)]
    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(post, batches))
    return len(sentences) / (time.perf_counter() - started)


def main():
    model, corpus = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 8192
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    sentences = [s.strip() for s in sts.sentences(corpus)]
    sentences = (sentences * (n // len(sentences) + 1))[:n]
    tmp = tempfile.mkdtemp(prefix="aleph-binding-")
    corpus_path = os.path.join(tmp, "corpus.txt")
    with open(corpus_path, "w") as f:
        f.write("\n".join(sentences) + "\n")

    engine = AsyncEmbeddingEngine.from_args(EngineArgs(model_name_or_path=model, model_warmup=False))
    asyncio.run(engine.astart())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([BIN, "v2", "--model-id", model, "--port", str(port), "--host", "127.0.0.1",
                               "--no-model-warmup"], stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(base + "/health").read()
            break
        except OSError:
            time.sleep(0.1)
    package(engine, sentences[:256])  # warm both
    http(base, sentences[:256])
    rates = {"aleph embed (Rust, in-process)": [], "aleph package (Python)": [], "HTTP server (8 x 32)": []}
    for _ in range(rounds):
        rates["aleph embed (Rust, in-process)"].append(rust_in_process(model, corpus_path, os.path.join(tmp, "v.npy")))
        rates["aleph package (Python)"].append(package(engine, sentences))
        rates["HTTP server (8 x 32)"].append(http(base, sentences))
    server.terminate()
    base_rate = statistics.median(rates["aleph embed (Rust, in-process)"])
    print(f"| path | sentences/s (median of {rounds}) | runs | vs in-process |")
    print("|---|---|---|---|")
    for name, values in rates.items():
        med = statistics.median(values)
        runs = ", ".join(f"{v:.0f}" for v in values)
        print(f"| {name} | {med:.0f} | {runs} | {med / base_rate:.3f} |")


if __name__ == "__main__":
    main()
