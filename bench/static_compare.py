#!/usr/bin/env python3
"""Static embeddings on one core: Aleph serving a model2vec model and the same table as a sentence-transformers
`StaticEmbedding`, beside model2vec's `StaticModel.encode`, sentence-transformers' `encode`, and Aleph's
all-MiniLM-L6-v2; the same STS Benchmark sentences, rounds alternating in one run; medians, and each static
vector's cosine to model2vec's.

    pip install "model2vec[distill]" sentence-transformers    # a developer machine, not CI
    cargo build --release -p aleph-server && scripts/fetch-models.sh
    python3 bench/static_compare.py ../shared/data/stsbenchmark.tsv.gz [N] [ROUNDS]

The static model is distilled once from models/all-MiniLM-L6-v2 with model2vec (`distill`, 256 PCA dimensions, float32,
as the potion models are made) into /tmp/aleph-static. The whole process is pinned to CPU 0, so every path
(Aleph's `aleph embed` with one compute thread and one tokenizer worker, the Python libraries) runs on one core.
Aleph's rate is `aleph embed`'s own (model load excluded, tokenization and writing the .npy included).
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import sts  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BIN = os.environ.get("ALEPH_BIN", str(ROOT / "target/release/aleph"))
MINILM = ROOT / "models/all-MiniLM-L6-v2"
OUT = Path("/tmp/aleph-static")


def distilled():
    m2v, st = OUT / "model2vec", OUT / "sentence-transformers"
    if not (m2v / "model.safetensors").exists():
        from model2vec.distill import distill

        distill(str(MINILM), pca_dims=256, quantize_to="float32", device="cpu").save_pretrained(str(m2v))
    if not (st / "modules.json").exists():
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.sentence_transformer.modules import StaticEmbedding

        SentenceTransformer(modules=[StaticEmbedding.from_model2vec(str(m2v))], device="cpu").save(str(st))
    return m2v, st


def aleph(model, corpus, out):
    env = dict(os.environ, ALEPH_COMPUTE_THREADS="1")
    r = subprocess.run(
        [BIN, "embed", "--model-id", str(model), "--input", corpus, "--output", out, "--no-resume",
         "--tokenizer-workers", "1", "--no-model-warmup"],
        capture_output=True, text=True, env=env,
    )
    if r.returncode != 0:
        sys.exit(r.stderr)
    return float(re.search(r"([0-9.]+) texts/s", r.stderr).group(1))


def timed(encode, sentences):
    started = time.perf_counter()
    vectors = encode(sentences)
    return len(sentences) / (time.perf_counter() - started), vectors


def cosines(a, b):
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return (a * b).sum(axis=1)


def main():
    os.sched_setaffinity(0, {0})
    os.environ.update(RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    sentences = sts.sentences(path, n)
    m2v_dir, st_dir = distilled()

    import torch
    from model2vec import StaticModel
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    m2v = StaticModel.from_pretrained(str(m2v_dir))
    st = SentenceTransformer(str(st_dir), device="cpu")
    tmp = tempfile.mkdtemp()
    corpus = os.path.join(tmp, "corpus.txt")
    Path(corpus).write_text("".join(s.replace("\n", " ") + "\n" for s in sentences))
    paths = {
        "Aleph, model2vec folder": lambda: (aleph(m2v_dir, corpus, f"{tmp}/m2v.npy"), None),
        "Aleph, StaticEmbedding folder": lambda: (aleph(st_dir, corpus, f"{tmp}/st.npy"), None),
        "model2vec StaticModel.encode": lambda: timed(
            lambda s: m2v.encode(s, batch_size=1024, use_multiprocessing=False, show_progress_bar=False), sentences),
        "sentence-transformers encode (StaticEmbedding)": lambda: timed(
            lambda s: st.encode(s, batch_size=1024, convert_to_numpy=True), sentences),
        "Aleph, all-MiniLM-L6-v2 (f32)": lambda: (aleph(MINILM, corpus, f"{tmp}/minilm.npy"), None),
    }
    rates = {name: [] for name in paths}
    outputs = {}
    for _ in range(rounds):
        for name, run in paths.items():
            rate, vectors = run()
            rates[name].append(rate)
            if vectors is not None:
                outputs[name] = vectors
    m2v_vectors = outputs["model2vec StaticModel.encode"]
    st_vectors = outputs["sentence-transformers encode (StaticEmbedding)"]
    agree = {
        "Aleph, model2vec folder": cosines(np.load(f"{tmp}/m2v.npy"), m2v_vectors),
        "Aleph, StaticEmbedding folder": cosines(np.load(f"{tmp}/st.npy"), st_vectors),
    }
    minilm = statistics.median(rates["Aleph, all-MiniLM-L6-v2 (f32)"])
    print(f"{len(sentences)} STS-B sentences, one core, {rounds} alternating rounds")
    print("| path | sentences/s (median) | x MiniLM on Aleph | min cosine to its library |")
    print("|---|---:|---:|---:|")
    for name, rs in rates.items():
        median = statistics.median(rs)
        cos = f"{agree[name].min():.6f}" if name in agree else ""
        print(f"| {name} | {median:,.0f} | {median / minilm:.1f} | {cos} |")


if __name__ == "__main__":
    main()
