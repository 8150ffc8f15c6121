#!/usr/bin/env python3
"""References for MPNet: the real all-mpnet-base-v2 through sentence-transformers, and tiny seeded MPNet models.

Run on a developer machine with torch (not in CI; the outputs are committed):
    pip install sentence-transformers
    scripts/fetch-models.sh
    python3 scripts/make_mpnet_reference.py models/all-mpnet-base-v2 tests/fixtures

Writes
- mpnet/reference.json: sentence-transformers' vector for each sentence of tests/fixtures/minilm/sentences.json
  (stripped, as Aleph embeds them), token counts, and the STS Benchmark test split's Spearman correlation of
  cosine similarity with the gold scores (`sts_test_spearman`, over `../shared/data/stsbenchmark.tsv.gz`);
- tiny/mpnet-embed and tiny/mpnet-rerank: seeded random MPNetModel (sentence-transformers files, mean pooling)
  and MPNetForSequenceClassification, with the outputs transformers computes, and the relative-position buckets
  of transformers' `MPNetEncoder.relative_position_bucket` for offsets -600..600.
"""
import gzip
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_models import (DOCS, QUERY, SEED, TEXTS, pair_logits, save, sentences, small,  # noqa: E402
                              unigram_tokenizer, write_sentence_transformers_files)

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "data" / "stsbenchmark.tsv.gz"


def sts_test_pairs():
    pairs = []
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) >= 7 and cols[0] == "test":
                pairs.append((cols[6], cols[7], float(cols[5])))
    return pairs


def real_model(model_dir, out):
    from scipy.stats import spearmanr
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir), device="cpu")
    texts = [s.strip() for s in json.loads((ROOT / "tests/fixtures/minilm/sentences.json").read_text())]
    vectors = model.encode(texts, batch_size=8, convert_to_numpy=True)
    counts = [len(model.tokenizer(t, truncation=True, max_length=model.max_seq_length)["input_ids"]) for t in texts]
    pairs = sts_test_pairs()
    a = model.encode([p[0] for p in pairs], batch_size=32, convert_to_numpy=True, normalize_embeddings=True)
    b = model.encode([p[1] for p in pairs], batch_size=32, convert_to_numpy=True, normalize_embeddings=True)
    spearman = float(spearmanr((a * b).sum(axis=1), [p[2] for p in pairs]).correlation)
    out.mkdir(parents=True, exist_ok=True)
    (out / "reference.json").write_text(json.dumps({
        "max_seq_length": model.max_seq_length, "token_counts": counts,
        "vectors": [[round(float(x), 8) for x in v] for v in vectors],
        "sts_test_pairs": len(pairs), "sts_test_spearman": spearman,
    }) + "\n")
    print(f"all-mpnet-base-v2: {len(texts)} sentences, STS-B test Spearman {spearman:.5f} over {len(pairs)} pairs")


@torch.no_grad()
def tiny_models(out_root):
    from sentence_transformers import SentenceTransformer
    from transformers import MPNetConfig, MPNetForSequenceClassification, MPNetModel
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    ug = unigram_tokenizer(sentences())
    assert ug.pad_token_id == 1, "MPNet numbers positions after padding_idx 1"
    kw = dict(vocab_size=len(ug), max_position_embeddings=66, pad_token_id=1, bos_token_id=ug.bos_token_id,
              eos_token_id=ug.eos_token_id, relative_attention_num_buckets=32)
    offsets = list(range(-600, 601))
    buckets = MPNetEncoder.relative_position_bucket(torch.tensor(offsets)).tolist()

    torch.manual_seed(SEED + 20)
    m = MPNetModel(small(MPNetConfig, **kw), add_pooling_layer=False).eval()
    # Random relative-position biases big enough to matter (the default init is tiny).
    torch.nn.init.normal_(m.encoder.relative_attention_bias.weight, std=1.0)
    d = out_root / "mpnet-embed"
    save(m, ug, d)
    write_sentence_transformers_files(d, pooling="mean", normalize=True, max_seq_length=64)
    st = SentenceTransformer(str(d), device="cpu")
    texts = [t.strip() for t in TEXTS]
    vectors = st.encode(texts, convert_to_numpy=True).tolist()
    lengths = [len(ug(t, truncation=True, max_length=64)["input_ids"]) for t in texts]
    (d / "reference.json").write_text(json.dumps({"texts": texts, "vectors": vectors, "token_counts": lengths,
                                                   "bucket_offsets": offsets, "buckets": buckets},
                                                  ensure_ascii=False, indent=1))

    torch.manual_seed(SEED + 21)
    m = MPNetForSequenceClassification(small(MPNetConfig, num_labels=1, **kw)).eval()
    torch.nn.init.normal_(m.mpnet.encoder.relative_attention_bias.weight, std=1.0)
    d = out_root / "mpnet-rerank"
    save(m, ug, d)
    logits, lengths = pair_logits(m, ug, QUERY, DOCS)
    (d / "reference.json").write_text(json.dumps({"query": QUERY, "documents": DOCS, "logits": logits,
                                                   "token_counts": lengths}, ensure_ascii=False, indent=1))


def main():
    model_dir, fixtures = Path(sys.argv[1]), Path(sys.argv[2])
    tiny_models(fixtures / "tiny")
    real_model(model_dir, fixtures / "mpnet")


if __name__ == "__main__":
    main()
