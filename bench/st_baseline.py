#!/usr/bin/env python3
"""In-process sentence-transformers (torch, CPU) on the same sentences the load generator sends.

    python3 bench/st_baseline.py MODEL_DIR CORPUS.tsv.gz

Prints JSON lines: single-sentence latency (encode one sentence at a time) and batch-32 throughput.
"""
import json
import statistics
import sys
import time

import sts  # bench/sts.py, beside this file


def main():
    model_dir, corpus_path = sys.argv[1], sys.argv[2]
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(2)
    sentences = sts.sentences(corpus_path)
    model = SentenceTransformer(model_dir, device="cpu")
    model.encode(sentences[:64], batch_size=32)  # warm-up

    lat = []
    for s in sentences[:200]:
        t0 = time.perf_counter()
        model.encode([s], batch_size=1)
        lat.append((time.perf_counter() - t0) * 1e3)
    lat.sort()
    print(json.dumps({"label": "sentence-transformers single", "batch": 1, "requests": len(lat),
                      "p50_ms": statistics.median(lat), "p99_ms": lat[int(0.99 * (len(lat) - 1))]}))

    batch = sentences[:32 * 40]
    t0 = time.perf_counter()
    for i in range(0, len(batch), 32):
        model.encode(batch[i:i + 32], batch_size=32)
    secs = time.perf_counter() - t0
    print(json.dumps({"label": "sentence-transformers batch-32", "batch": 32, "sentences": len(batch),
                      "seconds": secs, "sentences_per_s": len(batch) / secs}))


if __name__ == "__main__":
    main()
