#!/usr/bin/env python3
"""A tiny seeded BGE-M3 (an XLM-RoBERTa encoder with FlagEmbedding's `sparse_linear.pt` and `colbert_linear.pt`
beside it, as BAAI/bge-m3 ships) with the three outputs FlagEmbedding's BGEM3FlagModel computes for it.

Run on a developer machine with torch (not in CI; the outputs are committed):
    pip install sentence-transformers datasets accelerate peft sentencepiece protobuf
    pip install --no-deps FlagEmbedding==1.4.2
    python3 scripts/make_bge_m3.py tests/fixtures/tiny

Writes tests/fixtures/tiny/bge-m3: XLMRobertaModel (saved by transformers), sentence-transformers' CLS pooling
and Normalize (as bge-m3's repository has them), the two heads as `torch.save`d `nn.Linear` state dicts
(FlagEmbedding's format: PyTorch zip pickles), and reference.json: per text the dense vector, the lexical
weights (`{token id: weight}`) and the ColBERT vectors, from FlagEmbedding 1.4.2's M3Embedder
(`FlagEmbedding/inference/embedder/encoder_only/m3.py`, the class BGEM3FlagModel names) with fp16 off.
"""
import importlib.util
import json
import os
import sys
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_models import SEED, TEXTS, save, sentences, small, unigram_tokenizer  # noqa: E402
from make_tiny_models import write_sentence_transformers_files  # noqa: E402


def m3_embedder():
    """FlagEmbedding's M3Embedder. Its package `__init__` files import every model FlagEmbedding has, some of
    which need transformers 4; the M3 embedder's own modules are imported without them."""
    site = os.path.dirname(os.path.dirname(importlib.util.find_spec("transformers").origin))
    for pkg in ["FlagEmbedding", "FlagEmbedding.inference", "FlagEmbedding.inference.embedder",
                "FlagEmbedding.inference.embedder.encoder_only"]:
        m = types.ModuleType(pkg)
        m.__path__ = [os.path.join(site, *pkg.split("."))]
        sys.modules[pkg] = m
    from FlagEmbedding.inference.embedder.encoder_only.m3 import M3Embedder

    return M3Embedder


@torch.no_grad()
def main():
    from transformers import XLMRobertaConfig, XLMRobertaModel

    out_root = Path(sys.argv[1])
    ug = unigram_tokenizer(sentences())
    kw = dict(vocab_size=len(ug), max_position_embeddings=66, pad_token_id=ug.pad_token_id,
              bos_token_id=ug.bos_token_id, eos_token_id=ug.eos_token_id, type_vocab_size=1)
    torch.manual_seed(SEED + 60)
    m = XLMRobertaModel(small(XLMRobertaConfig, **kw), add_pooling_layer=False).eval()
    d = out_root / "bge-m3"
    save(m, ug, d)
    write_sentence_transformers_files(d, pooling="cls", normalize=True, max_seq_length=64)
    h = m.config.hidden_size
    colbert, sparse = torch.nn.Linear(h, h), torch.nn.Linear(h, 1)
    torch.nn.init.normal_(colbert.weight, std=0.3)
    torch.nn.init.normal_(sparse.weight, std=0.3)
    # Most tokens get a positive weight, some none (relu), as trained heads give.
    torch.nn.init.constant_(sparse.bias, 0.8)
    torch.save(colbert.state_dict(), d / "colbert_linear.pt")
    torch.save(sparse.state_dict(), d / "sparse_linear.pt")

    texts = [t.strip() for t in TEXTS]
    model = m3_embedder()(str(d), use_fp16=False, devices="cpu", normalize_embeddings=True)
    out = model.encode(texts, batch_size=4, max_length=64, return_dense=True, return_sparse=True,
                       return_colbert_vecs=True)
    lengths = [len(ug(t, truncation=True, max_length=64)["input_ids"]) for t in texts]
    lexical = [{k: float(v) for k, v in w.items()} for w in out["lexical_weights"]]
    assert any(len(w) < n - 2 for w, n in zip(lexical, lengths)), "relu leaves some tokens without weight"
    reference = {
        "texts": texts,
        "token_counts": lengths,
        "vectors": out["dense_vecs"].tolist(),
        "lexical_weights": lexical,
        "colbert_vecs": [v.tolist() for v in out["colbert_vecs"]],
        "skipped_ids": sorted({ug.cls_token_id, ug.eos_token_id, ug.pad_token_id, ug.unk_token_id}),
    }
    (d / "reference.json").write_text(json.dumps(reference, ensure_ascii=False))
    size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    print(f"bge-m3: {size / 1024:.0f} KiB, {sorted(f.name for f in d.iterdir())}")


if __name__ == "__main__":
    main()
