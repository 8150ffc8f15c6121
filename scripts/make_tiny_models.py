#!/usr/bin/env python3
"""Tiny seeded random models and their reference outputs, for architectures with no real weights here.

Run on a developer machine with torch (not in CI; the outputs are committed):
    pip install sentence-transformers
    python3 scripts/make_tiny_models.py tests/fixtures/tiny

Each model folder gets the files transformers saves (config.json, model.safetensors, tokenizer.json, ...)
plus `reference.json` with inputs and the outputs transformers / sentence-transformers compute for them.
Tokenizers are trained here on the STS Benchmark sentences: a WordPiece one (BERT-style) and a Unigram
(sentencepiece-style, as XLM-R's) one.
"""
import gzip
import json
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

SEED = 1234
CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "stsbenchmark.tsv.gz"

QUERY = "what is the capital of france"
DOCS = [
    "Paris is the capital and most populous city of France.",
    "The cat sat on the mat.",
    "France is a country in Western Europe; its capital is Paris.",
    "Berlin is the capital of Germany.",
    "",
    "A man is playing a guitar. " * 30,  # longer than the window: the longer side is truncated first
    "Café au lait, naïve façade 🎉",
]
TEXTS = [
    "I love this movie",
    "This is terrible",
    "It was fine, I guess.",
    "",
    "A woman is slicing an onion. " * 30,
    "Ünïcödé and emoji 🙂",
]


def sentences():
    out = []
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) >= 7:
                out.extend(cols[6:8])
    return out


def wordpiece_tokenizer(corpus):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(corpus, trainers.WordPieceTrainer(vocab_size=600, special_tokens=specials))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=64,
        # As BertTokenizerFast: cross-encoders need the segment ids.
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )


def unigram_tokenizer(corpus):
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.Nmt(), normalizers.NFKC()])
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok.train_from_iterator(corpus, trainers.UnigramTrainer(vocab_size=600, special_tokens=specials, unk_token="<unk>"))
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    # As XLM-R's own tokenizer.json: RobertaProcessing (it marks the second segment 1, which XLM-R, with
    # one token type, never sees: its tokenizer does not return token_type_ids).
    tok.post_processor = processors.RobertaProcessing(("</s>", eos), ("<s>", bos))
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
        cls_token="<s>", sep_token="</s>", mask_token="<mask>", model_max_length=64,
    )


def small(cfg_cls, **kw):
    base = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                initializer_range=0.2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    base.update(kw)
    return cfg_cls(**base)


def write_sentence_transformers_files(out, pooling="mean", normalize=True, max_seq_length=64):
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (out / "modules.json").write_text(json.dumps(modules, indent=2))
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}))
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 32, "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False}))
    if normalize:
        (out / "2_Normalize").mkdir(exist_ok=True)


def save(model, tokenizer, out):
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    for junk in ["generation_config.json"]:
        (out / junk).unlink(missing_ok=True)


@torch.no_grad()
def pair_logits(model, tokenizer, query, docs):
    enc = tokenizer([query] * len(docs), docs, padding=True, truncation=True, max_length=64, return_tensors="pt")
    return model(**enc).logits.tolist(), enc["attention_mask"].sum(dim=1).tolist()


@torch.no_grad()
def text_logits(model, tokenizer, texts):
    enc = tokenizer(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
    return model(**enc).logits.tolist(), enc["attention_mask"].sum(dim=1).tolist()


def main():
    out_root = Path(sys.argv[1])
    from transformers import (BertConfig, BertForSequenceClassification, XLMRobertaConfig,
                              XLMRobertaForSequenceClassification, XLMRobertaModel)

    corpus = sentences()
    wp, ug = wordpiece_tokenizer(corpus), unigram_tokenizer(corpus)
    bert_kw = dict(vocab_size=wp.vocab_size if hasattr(wp, "vocab_size") else len(wp), max_position_embeddings=64,
                   pad_token_id=wp.pad_token_id)
    xlmr_kw = dict(vocab_size=len(ug), max_position_embeddings=66, pad_token_id=ug.pad_token_id,
                   bos_token_id=ug.bos_token_id, eos_token_id=ug.eos_token_id, type_vocab_size=1)

    # --- BERT cross-encoder (1 label: a reranker) ---
    torch.manual_seed(SEED)
    m = BertForSequenceClassification(small(BertConfig, num_labels=1, **bert_kw)).eval()
    d = out_root / "bert-rerank"
    save(m, wp, d)
    logits, lengths = pair_logits(m, wp, QUERY, DOCS)
    (d / "reference.json").write_text(json.dumps({"query": QUERY, "documents": DOCS, "logits": logits,
                                                   "token_counts": lengths}, ensure_ascii=False, indent=1))

    # --- BERT classifier (3 labels, softmax) ---
    torch.manual_seed(SEED + 1)
    labels = {0: "negative", 1: "neutral", 2: "positive"}
    m = BertForSequenceClassification(small(BertConfig, num_labels=3, id2label=labels,
                                            label2id={v: k for k, v in labels.items()}, **bert_kw)).eval()
    d = out_root / "bert-classify"
    save(m, wp, d)
    logits, lengths = text_logits(m, wp, TEXTS)
    (d / "reference.json").write_text(json.dumps({"texts": TEXTS, "logits": logits, "token_counts": lengths,
                                                   "problem_type": None}, ensure_ascii=False, indent=1))

    # --- BERT multi-label classifier (sigmoid) ---
    torch.manual_seed(SEED + 2)
    labels = {0: "toxic", 1: "obscene", 2: "threat", 3: "insult"}
    m = BertForSequenceClassification(small(BertConfig, num_labels=4, id2label=labels,
                                            label2id={v: k for k, v in labels.items()},
                                            problem_type="multi_label_classification", **bert_kw)).eval()
    d = out_root / "bert-multilabel"
    save(m, wp, d)
    logits, lengths = text_logits(m, wp, TEXTS)
    (d / "reference.json").write_text(json.dumps({"texts": TEXTS, "logits": logits, "token_counts": lengths,
                                                   "problem_type": "multi_label_classification"},
                                                  ensure_ascii=False, indent=1))

    # --- XLM-RoBERTa cross-encoder (1 label) ---
    torch.manual_seed(SEED + 3)
    m = XLMRobertaForSequenceClassification(small(XLMRobertaConfig, num_labels=1, **xlmr_kw)).eval()
    d = out_root / "xlmr-rerank"
    save(m, ug, d)
    logits, lengths = pair_logits(m, ug, QUERY, DOCS)
    (d / "reference.json").write_text(json.dumps({"query": QUERY, "documents": DOCS, "logits": logits,
                                                   "token_counts": lengths}, ensure_ascii=False, indent=1))

    # --- XLM-RoBERTa embedder, mean pooling, normalized (sentence-transformers) ---
    torch.manual_seed(SEED + 4)
    m = XLMRobertaModel(small(XLMRobertaConfig, **xlmr_kw), add_pooling_layer=False).eval()
    d = out_root / "xlmr-embed"
    save(m, ug, d)
    write_sentence_transformers_files(d, pooling="mean", normalize=True, max_seq_length=64)
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(d), device="cpu")
    vectors = st.encode([t.strip() for t in TEXTS], convert_to_numpy=True).tolist()
    lengths = [len(ug(t.strip(), truncation=True, max_length=64)["input_ids"]) for t in TEXTS]
    (d / "reference.json").write_text(json.dumps({"texts": TEXTS, "vectors": vectors, "token_counts": lengths},
                                                  ensure_ascii=False, indent=1))
    # --- ColBERT: a BERT encoder plus a bias-free projection (`linear.weight`), as colbert-ir's HF_ColBERT ---
    torch.manual_seed(SEED + 5)
    from transformers import BertModel

    enc = BertModel(small(BertConfig, **bert_kw), add_pooling_layer=False).eval()
    proj = torch.nn.Linear(32, 16, bias=False)
    torch.nn.init.normal_(proj.weight, std=0.3)
    d = out_root / "colbert"
    d.mkdir(parents=True, exist_ok=True)
    from safetensors.torch import save_file

    tensors = {f"bert.{k}": v.contiguous() for k, v in enc.state_dict().items() if "position_ids" not in k}
    tensors["linear.weight"] = proj.weight.detach().contiguous()
    save_file(tensors, str(d / "model.safetensors"))
    cfg = enc.config.to_dict()
    cfg["architectures"] = ["HF_ColBERT"]
    (d / "config.json").write_text(json.dumps(cfg, indent=2, default=str))
    wp.save_pretrained(d)

    @torch.no_grad()
    def colbert_vectors(texts):
        out = []
        for t in texts:
            e = wp(t, truncation=True, max_length=64, return_tensors="pt")
            h = enc(**e).last_hidden_state[0]
            out.append(torch.nn.functional.normalize(proj(h), p=2, dim=-1).tolist())
        return out

    query, docs = QUERY, [doc.strip() for doc in DOCS]
    qv, dv = colbert_vectors([query])[0], colbert_vectors(docs)
    maxsim = [float((torch.tensor(qv) @ torch.tensor(v).T).max(dim=1).values.sum()) if v else 0.0 for v in dv]
    (d / "reference.json").write_text(json.dumps({
        "texts": [t.strip() for t in TEXTS], "vectors": colbert_vectors([t.strip() for t in TEXTS]),
        "query": query, "documents": docs, "query_vectors": qv, "maxsim": maxsim,
    }, ensure_ascii=False))

    for p in sorted(out_root.iterdir()):
        size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        print(f"{p.name}: {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
