#!/usr/bin/env python3
"""Tiny seeded DeBERTa-v2/v3 models with the outputs transformers and sentence-transformers compute for them.

Run on a developer machine with torch (not in CI; the outputs are committed):
    pip install sentence-transformers
    python3 scripts/make_deberta.py tests/fixtures/tiny

Writes
- deberta-rerank: DebertaV2ForSequenceClassification (1 label) configured as mxbai-rerank-base-v1 and the
  DeBERTa-v3 cross-encoders are: relative attention with both c2p and p2c, `share_att_key`, log buckets
  (`position_buckets` 8 here, so that most pairs reach the logarithmic range), layer-normed relative
  embeddings, no absolute positions, no token types; logits on (query, document) pairs;
- deberta-classify: the same with three labels, on single texts;
- deberta-embed: DebertaV2Model in DeBERTa-v2's other configuration: separate `pos_key_proj` /
  `pos_query_proj`, absolute positions added to the input, two token types, no buckets (offsets clamped at
  `max_relative_positions` 6), no norm on the relative embeddings, c2p only (so the scale is 1/√(2d)); through
  sentence-transformers' mean pooling and Normalize.
Both use a SentencePiece-style Unigram tokenizer with DeBERTa-v3's special tokens and pair template.
"""
import json
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_models import DOCS, QUERY, SEED, TEXTS, pair_logits, save, sentences, text_logits  # noqa: E402


def deberta_tokenizer(corpus):
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.Nmt(), normalizers.NFKC()])
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    specials = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
    tok.train_from_iterator(corpus, trainers.UnigramTrainer(vocab_size=500, special_tokens=specials, unk_token="[UNK]"))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=64,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )


def config(tok, **kw):
    from transformers import DebertaV2Config

    base = dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                max_position_embeddings=64, initializer_range=0.2, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0, pooler_dropout=0.0, pad_token_id=tok.pad_token_id)
    base.update(kw)
    return DebertaV2Config(**base)


V3 = dict(relative_attention=True, pos_att_type="p2c|c2p", share_att_key=True, position_buckets=8,
          norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0, max_relative_positions=-1)


def randomize_norms(m):
    for name, p in m.named_parameters():
        if "LayerNorm" in name:
            torch.nn.init.normal_(p, mean=1.0 if name.endswith("weight") else 0.0, std=0.3)


@torch.no_grad()
def main():
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import DebertaV2ForSequenceClassification, DebertaV2Model

    out_root = Path(sys.argv[1])
    tok = deberta_tokenizer(sentences())
    texts = [t.strip() for t in TEXTS]

    torch.manual_seed(SEED + 50)
    m = DebertaV2ForSequenceClassification(config(tok, num_labels=1, **V3)).eval()
    randomize_norms(m)
    d = out_root / "deberta-rerank"
    save(m, tok, d)
    logits, lengths = pair_logits(m, tok, QUERY, DOCS)
    assert max(lengths) > 8, "some pairs reach the logarithmic buckets"
    (d / "reference.json").write_text(json.dumps({"query": QUERY, "documents": DOCS, "logits": logits,
                                                   "token_counts": lengths}, ensure_ascii=False, indent=1))

    torch.manual_seed(SEED + 51)
    labels = {0: "contradiction", 1: "entailment", 2: "neutral"}
    m = DebertaV2ForSequenceClassification(config(tok, num_labels=3, id2label=labels,
                                                  label2id={v: k for k, v in labels.items()}, **V3)).eval()
    randomize_norms(m)
    d = out_root / "deberta-classify"
    save(m, tok, d)
    logits, lengths = text_logits(m, tok, TEXTS)
    (d / "reference.json").write_text(json.dumps({"texts": TEXTS, "logits": logits, "token_counts": lengths},
                                                  ensure_ascii=False, indent=1))

    torch.manual_seed(SEED + 52)
    tmp = out_root / "_tmp"
    m = DebertaV2Model(config(tok, relative_attention=True, pos_att_type=["c2p"], max_relative_positions=6,
                              type_vocab_size=2)).eval()
    randomize_norms(m)
    save(m, tok, tmp)
    st = SentenceTransformer(modules=[Transformer(str(tmp), max_seq_length=64), Pooling(32, pooling_mode="mean"),
                                      Normalize()], device="cpu")
    d = out_root / "deberta-embed"
    st.save(str(d), create_model_card=False)
    st = SentenceTransformer(str(d), device="cpu")
    vectors = st.encode(texts, convert_to_numpy=True).tolist()
    lengths = [len(tok(t, truncation=True, max_length=64)["input_ids"]) for t in texts]
    (d / "reference.json").write_text(json.dumps({"texts": texts, "vectors": vectors, "token_counts": lengths},
                                                  ensure_ascii=False, indent=1))

    import shutil

    shutil.rmtree(tmp)
    for name in ["deberta-rerank", "deberta-classify", "deberta-embed"]:
        p = out_root / name
        (p / "README.md").unlink(missing_ok=True)
        size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        print(f"{name}: {size / 1024:.0f} KiB, {sorted(f.name for f in p.iterdir())}")


if __name__ == "__main__":
    main()
