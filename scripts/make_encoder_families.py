#!/usr/bin/env python3
"""Tiny seeded DistilBERT models, SPLADE sparse encoders and checkpoints saved as PyTorch pickles, with the
outputs transformers and sentence-transformers compute for them.

Run on a developer machine with torch (not in CI; the outputs are committed):
    pip install sentence-transformers
    python3 scripts/make_encoder_families.py tests/fixtures/tiny

Writes
- distilbert-embed: DistilBertModel through sentence-transformers' Transformer, Pooling (cls), Dense
  (32 -> 16, tanh) and Normalize modules, saved by `SentenceTransformer.save` (its current file formats);
- distilbert-classify: DistilBertForSequenceClassification (3 labels) whose weights are PyTorch pickles in two
  shards with `pytorch_model.bin.index.json`, as transformers 4.x wrote checkpoints before safetensors;
- distilbert-splade: DistilBertForMaskedLM as a sentence-transformers SparseEncoder (Transformer fill-mask +
  SpladePooling max), saved by `SparseEncoder.save`;
- modernbert-embed: ModernBertModel (3 layers: global, local, global; a local window of 8 tokens, shorter than
  most texts) through sentence-transformers with CLS pooling and Normalize;
- modernbert-rerank: ModernBertForSequenceClassification (1 label, `classifier_pooling: mean`) on (query,
  document) pairs;
- gte-embed: a GTE embedder as Alibaba's remote code ships it (`model_type: new`, `auto_map` to
  Alibaba-NLP/new-impl, no token types, rope_theta 500000, CLS pooling + Normalize); gte-rerank: a
  GteForSequenceClassification as transformers 5 saves it (`model_type: gte`, two token types). Their references
  are transformers 5.24's own port of that code (transformers/models/gte, which saves and loads the remote
  code's tensor names; its conversion_mapping.py renames only the `new.` prefix): the remote code itself
  (modeling.py of Alibaba-NLP/new-impl) does not run on transformers 5;
- nomic-embed: a NomicBERT embedder as nomic-ai ships it (`model_type: nomic_bert`, the remote code's GPT-2-style
  config names and `auto_map` to nomic-ai/nomic-bert-2048, rotary base 1000, SwiGLU, no biases, mean pooling +
  Normalize); nomic-rerank: NomicBertForSequenceClassification as transformers 5 saves it. References from
  transformers 5.24's port (transformers/models/nomic_bert), which saves and reads the remote code's tensor names;
- bert-splade: BertForMaskedLM as a plain transformers folder with one `pytorch_model.bin` (the tied decoder
  weight stored twice, as old checkpoints have it), the way naver's SPLADE repositories ship; its reference is
  sentence-transformers' SparseEncoder on that folder (which assumes SPLADE max pooling).
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_models import SEED, TEXTS, save, sentences, text_logits, wordpiece_tokenizer  # noqa: E402


def distil_config(**kw):
    from transformers import DistilBertConfig

    base = dict(dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64, initializer_range=0.2,
                dropout=0.0, attention_dropout=0.0, seq_classif_dropout=0.0)
    base.update(kw)
    return DistilBertConfig(**base)


def bert_config(**kw):
    from transformers import BertConfig

    base = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                initializer_range=0.2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                max_position_embeddings=64)
    base.update(kw)
    return BertConfig(**base)


def save_pickles(model, tokenizer, out, shards=1, tied=()):
    """`torch.save` of the state dict, as transformers < 4.35 saved checkpoints; `tied` names extra keys that
    old files carry for tied weights (the same tensor under a second name)."""
    out.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if "position_ids" not in k}
    for name, source in tied:
        state[name] = state[source]
    keys = sorted(state)
    if shards == 1:
        torch.save(state, out / "pytorch_model.bin")
        return
    per = (len(keys) + shards - 1) // shards
    weight_map, total = {}, 0
    for s in range(shards):
        name = f"pytorch_model-{s + 1:05d}-of-{shards:05d}.bin"
        part = {k: state[k] for k in keys[s * per:(s + 1) * per]}
        torch.save(part, out / name)
        weight_map.update({k: name for k in part})
        total += sum(v.numel() * v.element_size() for v in part.values())
    (out / "pytorch_model.bin.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))


def sparse_reference(encoder, texts, tokenizer):
    dense = encoder.encode(texts, convert_to_tensor=True, convert_to_sparse_tensor=False)
    vectors = []
    for v in dense:
        nz = torch.nonzero(v).flatten().tolist()
        vectors.append({"indices": nz, "values": [float(v[i]) for i in nz]})
    lengths = [len(tokenizer(t, truncation=True, max_length=64)["input_ids"]) for t in texts]
    return {"texts": texts, "sparse": vectors, "vocab": int(dense.shape[1]), "token_counts": lengths}


@torch.no_grad()
def modernbert(out_root, wp, texts, tmp):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import ModernBertConfig, ModernBertForSequenceClassification, ModernBertModel

    from make_tiny_models import DOCS, QUERY, pair_logits

    def config(**kw):
        # Biases on norms and the attention, unlike the real checkpoints, so that loading them is tested too;
        # distinct rotary bases per layer type.
        base = dict(vocab_size=len(wp), hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                    num_attention_heads=4, max_position_embeddings=128, local_attention=8,
                    global_attn_every_n_layers=2, initializer_range=0.2, pad_token_id=wp.pad_token_id,
                    bos_token_id=wp.cls_token_id, eos_token_id=wp.sep_token_id, cls_token_id=wp.cls_token_id,
                    sep_token_id=wp.sep_token_id,
                    rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                                     "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
        base.update(kw)
        return ModernBertConfig(**base)

    def randomize_norms(m):
        for name, p in m.named_parameters():
            if "norm" in name:
                torch.nn.init.normal_(p, mean=1.0 if name.endswith("weight") else 0.0, std=0.3)

    torch.manual_seed(SEED + 40)
    m = ModernBertModel(config(norm_bias=True, attention_bias=True)).eval()
    randomize_norms(m)
    save(m, wp, tmp)
    st = SentenceTransformer(modules=[Transformer(str(tmp), max_seq_length=64), Pooling(32, pooling_mode="cls"),
                                      Normalize()], device="cpu")
    d = out_root / "modernbert-embed"
    st.save(str(d), create_model_card=False)
    st = SentenceTransformer(str(d), device="cpu")
    vectors = st.encode(texts, convert_to_numpy=True).tolist()
    lengths = [len(wp(t, truncation=True, max_length=64)["input_ids"]) for t in texts]
    assert max(lengths) > 8, "some texts are longer than the local window"
    (d / "reference.json").write_text(json.dumps({"texts": texts, "vectors": vectors, "token_counts": lengths},
                                                  ensure_ascii=False, indent=1))

    torch.manual_seed(SEED + 41)
    m = ModernBertForSequenceClassification(config(num_labels=1, classifier_pooling="mean", mlp_bias=True,
                                                   classifier_bias=True)).eval()
    randomize_norms(m)
    d = out_root / "modernbert-rerank"
    save(m, wp, d)
    logits, lengths = pair_logits(m, wp, QUERY, DOCS)
    (d / "reference.json").write_text(json.dumps({"query": QUERY, "documents": DOCS, "logits": logits,
                                                   "token_counts": lengths}, ensure_ascii=False, indent=1))


@torch.no_grad()
def gte(out_root, texts, tmp):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import GteConfig, GteForSequenceClassification, GteModel

    from make_tiny_models import DOCS, QUERY, pair_logits

    wp = wordpiece_tokenizer(sentences())  # with segment ids: the reranker has two token types
    small = dict(vocab_size=len(wp), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=48, max_position_embeddings=128, initializer_range=0.2, pad_token_id=wp.pad_token_id,
                 hidden_dropout_prob=0.0)

    torch.manual_seed(SEED + 50)
    m = GteModel(GteConfig(type_vocab_size=0, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                           **small)).eval()
    nt = PreTrainedTokenizerFast_without_types(wp)
    save(m, nt, tmp)
    st = SentenceTransformer(modules=[Transformer(str(tmp), max_seq_length=64), Pooling(32, pooling_mode="cls"),
                                      Normalize()], device="cpu")
    d = out_root / "gte-embed"
    st.save(str(d), create_model_card=False)
    vectors = SentenceTransformer(str(d), device="cpu").encode(texts, convert_to_numpy=True).tolist()
    # The folder as Alibaba's repositories ship it: NewConfig's fields, the remote code in auto_map.
    c = json.loads((d / "config.json").read_text())
    remote = {"architectures": ["NewModel"], "model_type": "new",
              "auto_map": {"AutoConfig": "Alibaba-NLP/new-impl--configuration.NewConfig",
                           "AutoModel": "Alibaba-NLP/new-impl--modeling.NewModel"},
              "rope_theta": 500000.0, "layer_norm_type": "layer_norm", "position_embedding_type": "rope",
              "pack_qkv": True, "unpad_inputs": False, "use_memory_efficient_attention": False,
              "logn_attention_scale": False, "logn_attention_clip1": False, "rope_scaling": None}
    for k in ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "hidden_act", "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "pad_token_id",
              "initializer_range", "hidden_dropout_prob", "attention_probs_dropout_prob"]:
        remote[k] = c[k]
    (d / "config.json").write_text(json.dumps(remote, indent=2))
    lengths = [len(nt(t, truncation=True, max_length=64)["input_ids"]) for t in texts]
    (d / "reference.json").write_text(json.dumps({"texts": texts, "vectors": vectors, "token_counts": lengths},
                                                  ensure_ascii=False, indent=1))

    torch.manual_seed(SEED + 51)
    m = GteForSequenceClassification(GteConfig(num_labels=1, type_vocab_size=2, **small)).eval()
    d = out_root / "gte-rerank"
    save(m, wp, d)
    logits, lengths = pair_logits(m, wp, QUERY, DOCS)
    (d / "reference.json").write_text(json.dumps({"query": QUERY, "documents": DOCS, "logits": logits,
                                                   "token_counts": lengths}, ensure_ascii=False, indent=1))


@torch.no_grad()
def nomic(out_root, texts, tmp):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import NomicBertConfig, NomicBertForSequenceClassification, NomicBertModel

    from make_tiny_models import DOCS, QUERY, pair_logits

    wp = wordpiece_tokenizer(sentences())
    small = dict(vocab_size=len(wp), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=48, max_position_embeddings=128, initializer_range=0.2,
                 pad_token_id=wp.pad_token_id)

    def randomize_norms(m):
        for name, p in m.named_parameters():
            if "norm" in name or "emb_ln" in name or "LayerNorm" in name:
                torch.nn.init.normal_(p, mean=1.0 if name.endswith("weight") else 0.0, std=0.3)

    torch.manual_seed(SEED + 60)
    m = NomicBertModel(NomicBertConfig(**small)).eval()
    randomize_norms(m)
    save(m, wp, tmp)
    st = SentenceTransformer(modules=[Transformer(str(tmp), max_seq_length=64), Pooling(32, pooling_mode="mean"),
                                      Normalize()], device="cpu")
    d = out_root / "nomic-embed"
    st.save(str(d), create_model_card=False)
    vectors = SentenceTransformer(str(d), device="cpu").encode(texts, convert_to_numpy=True).tolist()
    # The config as nomic-embed-text-v1.5 ships it: the remote code's names and flags.
    c = json.loads((d / "config.json").read_text())
    remote = {"architectures": ["NomicBertModel"], "model_type": "nomic_bert",
              "auto_map": {"AutoConfig": "nomic-ai/nomic-bert-2048--configuration_hf_nomic_bert.NomicBertConfig",
                           "AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel"},
              "activation_function": "swiglu", "bos_token_id": None, "eos_token_id": None, "causal": False,
              "dense_seq_output": True, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "resid_pdrop": 0.0,
              "fused_bias_fc": True, "fused_dropout_add_ln": True, "initializer_range": 0.2,
              "layer_norm_epsilon": c["layer_norm_eps"], "max_trained_positions": 2048, "mlp_fc1_bias": False,
              "mlp_fc2_bias": False, "n_embd": 32, "n_head": 4, "n_inner": 48, "n_layer": 2, "n_positions": 128,
              "pad_vocab_size_multiple": 1, "parallel_block": False, "parallel_block_tied_norm": False,
              "prenorm": False, "qkv_proj_bias": False, "reorder_and_upcast_attn": False, "rotary_emb_base": 1000,
              "rotary_emb_fraction": 1.0, "rotary_emb_interleaved": False, "rotary_emb_scale_base": None,
              "rotary_scaling_factor": None, "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True,
              "summary_activation": None, "summary_first_dropout": 0.0, "summary_proj_to_labels": True,
              "summary_type": "cls_index", "summary_use_proj": True, "type_vocab_size": 2, "use_cache": True,
              "use_flash_attn": True, "use_rms_norm": False, "use_xentropy": True, "vocab_size": c["vocab_size"]}
    assert c["rope_parameters"]["rope_theta"] == 1000.0 and c["hidden_act"] == "silu"
    (d / "config.json").write_text(json.dumps(remote, indent=2))
    lengths = [len(wp(t, truncation=True, max_length=64)["input_ids"]) for t in texts]
    (d / "reference.json").write_text(json.dumps({"texts": texts, "vectors": vectors, "token_counts": lengths},
                                                  ensure_ascii=False, indent=1))

    torch.manual_seed(SEED + 61)
    m = NomicBertForSequenceClassification(NomicBertConfig(num_labels=1, **small)).eval()
    randomize_norms(m)
    d = out_root / "nomic-rerank"
    save(m, wp, d)
    logits, lengths = pair_logits(m, wp, QUERY, DOCS)
    (d / "reference.json").write_text(json.dumps({"query": QUERY, "documents": DOCS, "logits": logits,
                                                   "token_counts": lengths}, ensure_ascii=False, indent=1))


def PreTrainedTokenizerFast_without_types(tok):
    import copy

    t = copy.deepcopy(tok)
    t.model_input_names = ["input_ids", "attention_mask"]
    return t


@torch.no_grad()
def main():
    from sentence_transformers import SentenceTransformer, SparseEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from sentence_transformers.sparse_encoder.modules import SpladePooling
    from transformers import (BertForMaskedLM, DistilBertForMaskedLM, DistilBertForSequenceClassification,
                              DistilBertModel)

    out_root = Path(sys.argv[1])
    wp = wordpiece_tokenizer(sentences())
    # DistilBERT's tokenizers return no segment ids (its forward takes none).
    wp.model_input_names = ["input_ids", "attention_mask"]
    kw = dict(vocab_size=len(wp), pad_token_id=wp.pad_token_id)
    texts = [t.strip() for t in TEXTS]
    tmp = out_root / "_tmp"

    # --- DistilBERT embedder with a Dense projection ---
    torch.manual_seed(SEED + 30)
    save(DistilBertModel(distil_config(**kw)).eval(), wp, tmp)
    dense = Dense(32, 16, activation_function=torch.nn.Tanh())
    torch.nn.init.normal_(dense.linear.weight, std=0.3)
    torch.nn.init.normal_(dense.linear.bias, std=0.3)
    st = SentenceTransformer(modules=[Transformer(str(tmp), max_seq_length=64), Pooling(32, pooling_mode="cls"),
                                      dense, Normalize()], device="cpu")
    d = out_root / "distilbert-embed"
    st.save(str(d), create_model_card=False)
    st = SentenceTransformer(str(d), device="cpu")
    vectors = st.encode(texts, convert_to_numpy=True).tolist()
    unnormalized = st.encode(texts, convert_to_numpy=True, output_value="sentence_embedding",
                             normalize_embeddings=False)
    lengths = [len(wp(t, truncation=True, max_length=64)["input_ids"]) for t in texts]
    (d / "reference.json").write_text(json.dumps({"texts": texts, "vectors": vectors, "token_counts": lengths,
                                                   "dim": len(vectors[0]),
                                                   "unit": bool(abs(float((unnormalized[0] ** 2).sum()) - 1) < 1e-5)},
                                                  ensure_ascii=False, indent=1))

    # --- DistilBERT classifier, pickled in two shards ---
    torch.manual_seed(SEED + 31)
    labels = {0: "negative", 1: "neutral", 2: "positive"}
    m = DistilBertForSequenceClassification(distil_config(num_labels=3, id2label=labels,
                                                          label2id={v: k for k, v in labels.items()}, **kw)).eval()
    d = out_root / "distilbert-classify"
    save_pickles(m, wp, d, shards=2)
    m.config.architectures = ["DistilBertForSequenceClassification"]
    m.config.save_pretrained(d)
    logits, lengths = text_logits(m, wp, TEXTS)
    (d / "reference.json").write_text(json.dumps({"texts": TEXTS, "logits": logits, "token_counts": lengths},
                                                  ensure_ascii=False, indent=1))

    # --- DistilBERT SPLADE through sentence-transformers' SparseEncoder ---
    torch.manual_seed(SEED + 32)
    save(DistilBertForMaskedLM(distil_config(**kw)).eval(), wp, tmp)
    enc = SparseEncoder(modules=[Transformer(str(tmp), transformer_task="fill-mask", max_seq_length=64),
                                 SpladePooling("max")], device="cpu")
    d = out_root / "distilbert-splade"
    enc.save(str(d), create_model_card=False)
    enc = SparseEncoder(str(d), device="cpu")
    (d / "reference.json").write_text(json.dumps(sparse_reference(enc, texts, wp), ensure_ascii=False))

    # --- BERT SPLADE as a plain transformers folder with a pickled checkpoint ---
    torch.manual_seed(SEED + 33)
    wp_bert = wordpiece_tokenizer(sentences())
    m = BertForMaskedLM(bert_config(vocab_size=len(wp_bert), pad_token_id=wp_bert.pad_token_id)).eval()
    d = out_root / "bert-splade"
    save_pickles(m, wp_bert, d, tied=[("cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight"),
                                      ("cls.predictions.decoder.bias", "cls.predictions.bias")])
    m.config.architectures = ["BertForMaskedLM"]
    m.config.save_pretrained(d)
    enc = SparseEncoder(str(d), device="cpu")
    enc.max_seq_length = 64
    (d / "reference.json").write_text(json.dumps(sparse_reference(enc, texts, wp_bert), ensure_ascii=False))

    modernbert(out_root, wp, texts, tmp)
    gte(out_root, texts, tmp)
    nomic(out_root, texts, tmp)

    import shutil

    shutil.rmtree(tmp)
    for name in ["distilbert-embed", "distilbert-classify", "distilbert-splade", "bert-splade", "modernbert-embed",
                 "modernbert-rerank", "gte-embed", "gte-rerank", "nomic-embed", "nomic-rerank"]:
        p = out_root / name
        (p / "README.md").unlink(missing_ok=True)
        size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        print(f"{name}: {size / 1024:.0f} KiB, {sorted(f.name for f in p.iterdir())}")


if __name__ == "__main__":
    main()
