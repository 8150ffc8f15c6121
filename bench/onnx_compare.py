#!/usr/bin/env python3
"""ONNX Runtime, OpenVINO and PyTorch, in-process, on the batches `bench/compute --corpus` runs: the first N STS
Benchmark sentences in batches of 32, each batch padded to its longest sentence, mean-pooled and normalized.

    pip install torch transformers onnxruntime onnx onnxscript openvino    # a developer machine, not CI
    python3 bench/onnx_compare.py models/all-MiniLM-L6-v2 ../shared/data/stsbenchmark.tsv.gz [N]

Exports the model to ONNX once (models/<name>.onnx) and quantizes that with ONNX Runtime's dynamic int8
(per-channel weights, models/<name>.int8.onnx). Runs ONNX Runtime at f32 and int8, OpenVINO (when installed) at f32,
with its bf16 precision hint (it says what it resolved to: f32 on a CPU without bf16) and on the int8 graph, and
PyTorch at f32. Prints one JSON line per runtime: speed, and accuracy as `bench/compute` reports it (cosine to
PyTorch's f32 vectors over the same sentences, mean and min; Spearman on the STS-B test split). `NO_ONNX=1` runs
PyTorch only.
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


def spearman(x, y):
    rank = lambda v: np.argsort(np.argsort(v)).astype(np.float64)
    return float(np.corrcoef(rank(np.asarray(x)), rank(np.asarray(y)))[0, 1])


def sts_test(path):
    import gzip

    pairs = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) >= 8 and cols[0] == "test":
                pairs.append((float(cols[5]), cols[6], cols[7]))
    return pairs


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

        # A padded example: traced with a mask of all ones, transformers drops the mask from the graph.
        ex = tok(["hello world", "a longer sentence, so that the first one is padded"], padding=True,
                 return_tensors="pt")
        torch.onnx.export(
            # Eager attention: the SDPA path traces without the padding mask (cosine 0.95 to PyTorch here).
            Encoder(AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()),
            (ex["input_ids"], ex["attention_mask"], ex["token_type_ids"]), str(onnx_path),
            input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["last_hidden_state"],
            dynamic_axes={k: {0: "batch", 1: "seq"} for k in ["input_ids", "attention_mask", "token_type_ids",
                                                              "last_hidden_state"]},
            opset_version=17, dynamo=False,
        )

    def batched(texts):
        return [tok(texts[i:i + 32], padding=True, truncation=True, max_length=256, return_tensors="np")
                for i in range(0, len(texts), 32)]

    runtimes = []  # (name, version, embed(batches) -> vectors)

    @torch.inference_mode()
    def embed_torch(bs):
        # Whatever the tokenizer feeds the model (MPNet has no token types).
        return np.concatenate([pool(model(**{k: torch.from_numpy(v) for k, v in b.items()}).last_hidden_state.numpy(),
                                    b["attention_mask"]) for b in bs])

    if use_onnx:
        import onnxruntime as ort
        from onnxruntime.quantization import QuantType, quantize_dynamic

        int8_path = model_dir.parent / f"{model_dir.name}.int8.onnx"
        if not int8_path.exists():
            quantize_dynamic(str(onnx_path), str(int8_path), per_channel=True, weight_type=QuantType.QInt8)

        def ort_session(path):
            so = ort.SessionOptions()
            so.intra_op_num_threads = 2
            so.inter_op_num_threads = 1
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            names = {i.name for i in sess.get_inputs()}

            def embed(bs):
                return np.concatenate([pool(sess.run(None, {k: b[k].astype(np.int64) for k in b if k in names})[0],
                                            b["attention_mask"]) for b in bs])
            return embed

        runtimes.append(("onnxruntime", ort.__version__, ort_session(onnx_path)))
        runtimes.append(("onnxruntime-int8", ort.__version__, ort_session(int8_path)))
        try:
            import openvino as ov
        except ImportError:
            ov = None
        if ov is not None:
            core = ov.Core()

            def ov_model(path, hint):
                config = {"INFERENCE_NUM_THREADS": 2, "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": hint}
                compiled = core.compile_model(str(path), "CPU", config)
                resolved = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
                names = {i.get_any_name() for i in compiled.inputs}

                def embed(bs):
                    return np.concatenate([pool(compiled({k: b[k].astype(np.int64) for k in b if k in names})[0],
                                                b["attention_mask"]) for b in bs])
                return resolved, embed

            for name, path, hint in [("openvino", onnx_path, "f32"), ("openvino-bf16-hint", onnx_path, "bf16"),
                                     ("openvino-int8", int8_path, "f32")]:
                resolved, embed = ov_model(path, hint)
                runtimes.append((name, f"{ov.get_version()} (computes {resolved})", embed))
    runtimes.append(("pytorch", torch.__version__, embed_torch))

    real = sum(int(b["attention_mask"].sum()) for b in batches)
    padded = sum(b["input_ids"].size for b in batches)
    reference = embed_torch(batches)
    test = sts_test(corpus)
    test_batches = (batched([p[1] for p in test]), batched([p[2] for p in test]))
    for name, version, embed in runtimes:
        secs = timed(lambda: embed(batches))
        cos = (embed(batches) * reference).sum(1)
        a, b = embed(test_batches[0]), embed(test_batches[1])
        rho = spearman([p[0] for p in test], (a * b).sum(1))
        print(json.dumps({"runtime": name, "version": version, "sentences": len(sents), "batch": 32,
                          "seconds": secs, "sentences_per_s": len(sents) / secs, "real_tokens": real,
                          "padded_tokens": padded, "cosine_to_pytorch_mean": float(cos.mean()),
                          "cosine_to_pytorch_min": float(cos.min()), "sts_test_spearman": rho}))


if __name__ == "__main__":
    main()
