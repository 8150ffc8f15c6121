#!/usr/bin/env python3
"""ONNX Runtime and PyTorch, in-process, on the batches `bench/compute --corpus` runs: the first N STS
Benchmark sentences in batches of 32, each batch padded to its longest sentence, mean-pooled and normalized.

    pip install torch transformers onnxruntime onnx onnxscript     # a developer machine, not CI
    python3 bench/onnx_compare.py models/all-MiniLM-L6-v2 ../shared/data/stsbenchmark.tsv.gz [N]

Exports the model to ONNX once (models/<name>.onnx). Prints one JSON line per runtime. `NO_ONNX=1` runs
PyTorch only (no onnxruntime installed, or a model whose export is not set up here).
"""
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import sts  # bench/sts.py, beside this file


def pool(hidden, mask):
    m = mask[..., None].astype(np.float32)
    v = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def timed(fn, repeats=3):
    fn()
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def main():
    model_dir, corpus = Path(sys.argv[1]), sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 1024
    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(model_dir)
    sents = [x.strip() for x in sts.sentences(corpus, n)]
    batches = [tok(sents[i:i + 32], padding=True, truncation=True, max_length=256, return_tensors="np")
               for i in range(0, len(sents), 32)]
    model = AutoModel.from_pretrained(model_dir).eval()

    onnx_path = model_dir.parent / f"{model_dir.name}.onnx"
    use_onnx = not os.environ.get("NO_ONNX")
    if use_onnx and not onnx_path.exists():
        class Encoder(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                                  token_type_ids=token_type_ids).last_hidden_state

        ex = tok(["hello world"], return_tensors="pt")
        torch.onnx.export(
            Encoder(model), (ex["input_ids"], ex["attention_mask"], ex["token_type_ids"]), str(onnx_path),
            input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["last_hidden_state"],
            dynamic_axes={k: {0: "batch", 1: "seq"} for k in ["input_ids", "attention_mask", "token_type_ids",
                                                              "last_hidden_state"]},
            opset_version=17, dynamo=False,
        )

    if use_onnx:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 2
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])

    def run_ort():
        for b in batches:
            feeds = {k: b[k].astype(np.int64) for k in ["input_ids", "attention_mask", "token_type_ids"]}
            pool(sess.run(None, feeds)[0], b["attention_mask"])

    @torch.inference_mode()
    def run_torch():
        for b in batches:
            # Whatever the tokenizer feeds the model (MPNet has no token types).
            out = model(**{k: torch.from_numpy(v) for k, v in b.items()})
            pool(out.last_hidden_state.numpy(), b["attention_mask"])

    real = sum(int(b["attention_mask"].sum()) for b in batches)
    padded = sum(b["input_ids"].size for b in batches)
    runs = [("onnxruntime", run_ort)] if use_onnx else []
    for name, fn in runs + [("pytorch", run_torch)]:
        secs = timed(fn)
        print(json.dumps({"runtime": name, "sentences": len(sents), "batch": 32, "seconds": secs,
                          "sentences_per_s": len(sents) / secs, "real_tokens": real, "padded_tokens": padded,
                          "version": ort.__version__ if name == "onnxruntime" else torch.__version__}))


if __name__ == "__main__":
    main()
