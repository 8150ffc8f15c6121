#!/usr/bin/env python3
"""A MiniLM-L6 cross-encoder with the shape of cross-encoder/ms-marco-MiniLM-L-6-v2, for rerank *speed*
benchmarks only: the all-MiniLM-L6-v2 encoder plus a seeded random pooler and 1-label classifier.
Its scores mean nothing; its cost per pair is that of the real reranker.

    python3 bench/make_rerank_model.py models/all-MiniLM-L6-v2 models/minilm-l6-rerank-bench
"""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file


def main():
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    dst.mkdir(parents=True, exist_ok=True)
    weights = {f"bert.{k}": v for k, v in load_file(src / "model.safetensors").items()}
    rng = np.random.default_rng(0)
    h = weights["bert.embeddings.word_embeddings.weight"].shape[1]
    weights["bert.pooler.dense.weight"] = (rng.standard_normal((h, h)) * 0.02).astype(np.float32)
    weights["bert.pooler.dense.bias"] = np.zeros(h, np.float32)
    weights["classifier.weight"] = (rng.standard_normal((1, h)) * 0.02).astype(np.float32)
    weights["classifier.bias"] = np.zeros(1, np.float32)
    save_file(weights, dst / "model.safetensors")
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(architectures=["BertForSequenceClassification"], id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    for f in ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]:
        if (src / f).exists():
            shutil.copy(src / f, dst / f)
    print(f"wrote {dst}")


if __name__ == "__main__":
    main()
