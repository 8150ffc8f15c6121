#!/usr/bin/env python3
"""Tiny seeded JinaBERT v2 models (jina-embeddings-v2-*, jina-reranker-v1-*: `model_type: bert` with an
`auto_map` to jinaai/jina-bert-implementation; symmetric ALiBi instead of position embeddings, a GEGLU
feed-forward), with the outputs jina's own remote code computes for them.

Run on a developer machine (not in CI; the outputs are committed). The remote code is written for transformers 4
(it imports `transformers.onnx`, `find_pruneable_heads_and_indices`, ... which transformers 5 removed), so it runs
here, unmodified, on transformers 4.49 put ahead of everything else:
    pip install --target /tmp/tf449 transformers==4.49.0 tokenizers==0.21.0 huggingface-hub==0.29.1 requests
    PYTHONPATH=/tmp/tf449 python3 scripts/make_jinabert.py tests/fixtures/tiny REMOTE_DIR

Where the code came from (the hub is unreachable here): the copy vendored in github.com/jonathanlys01/d5p4,
`src/jina_ref/{modeling_bert,configuration_bert}.py` at commit bd0bb96af91a7887e4272e8f60cf533c6370970c (its
forward math is line for line that of a second, independent copy, github.com/veya2ztn/sci-bert-finetune
`models/jinabert/` at e39c6b94c6c3d90f7c3ce29c3411b3b015822e58; d5p4 only drops the TensorFlow weight loader and
reflows lines); with the loader put back, its line numbers match links into revision f3ec4cf7de7e of
jinaai/jina-bert-implementation.

REMOTE_DIR holds `modeling_bert.py` and `configuration_bert.py` of jinaai/jina-bert-implementation (imported here
as the package `jina_bert_implementation`, as transformers' dynamic modules import them: modeling_bert.py does
`from .configuration_bert import JinaBertConfig`).

Writes
- jina-embed: JinaBertModel (feed_forward_type geglu, 4 heads, max_position_embeddings 128, two token types) as
  jina-embeddings-v2-base-en ships it: root-level tensor names (no `bert.` prefix, no pooler), config.json with
  `architectures: ["JinaBertForMaskedLM"]`, `emb_pooler: "mean"` and the auto_map to the remote code, and
  sentence-transformers files for mean pooling without Normalize. Its reference.json has the vectors (mean of
  the last hidden states over the attention mask, as sentence-transformers' Pooling computes it; checked here
  against the remote class's own `encode`, which pools the same way), and the ALiBi slopes and biases
  `JinaBertEncoder.rebuild_alibi_tensor` builds for 4, 6 and 12 heads (6 and 12 are not powers of two);
- jina-rerank: JinaBertForSequenceClassification (1 label, geglu) as jina-reranker-v1-turbo-en ships it (`bert.`
  prefix, tanh pooler on the first token, `classifier`), with the logits for (query, document) pairs.

Weights are the remote class's own initialisation (normal(0, initializer_range), zero biases, unit norms) with
the norms and the linear biases then drawn at random, so that loading them is tested too. The tokenizer is
make_tiny_models' WordPiece one, saved by transformers 4.49 (so with special_tokens_map.json).
"""
import importlib
import importlib.machinery
import importlib.util
import json
import sys
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_models import (  # noqa: E402
    DOCS, QUERY, SEED, TEXTS, pair_logits, save, sentences, wordpiece_tokenizer, write_sentence_transformers_files)

REPO = "jinaai/jina-bert-implementation"
AUTO_MAP = {
    "AutoConfig": f"{REPO}--configuration_bert.JinaBertConfig",
    "AutoModelForMaskedLM": f"{REPO}--modeling_bert.JinaBertForMaskedLM",
    "AutoModel": f"{REPO}--modeling_bert.JinaBertModel",
    "AutoModelForSequenceClassification": f"{REPO}--modeling_bert.JinaBertForSequenceClassification",
}
MAX_POS = 128
CONFIG_KEYS = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
               "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
               "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id", "position_embedding_type",
               "use_cache", "classifier_dropout", "feed_forward_type", "emb_pooler"]


def remote_code(folder):
    """modeling_bert and configuration_bert of `folder`, imported as the package jina_bert_implementation."""
    name = "jina_bert_implementation"
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    package = importlib.util.module_from_spec(spec)
    package.__path__ = [str(Path(folder).resolve())]
    sys.modules[name] = package
    return importlib.import_module(f"{name}.configuration_bert"), importlib.import_module(f"{name}.modeling_bert")


def randomize(m):
    for name, p in m.named_parameters():
        if "LayerNorm" in name or "layernorm" in name:
            torch.nn.init.normal_(p, mean=1.0 if name.endswith("weight") else 0.0, std=0.3)
        elif name.endswith(".bias"):
            torch.nn.init.normal_(p, std=0.1)


def hub_config(d, architectures, **extra):
    """The saved config.json rewritten as the hub repositories have it: the remote code in auto_map."""
    c = json.loads((d / "config.json").read_text())
    cfg = {"_name_or_path": REPO, "architectures": architectures, "auto_map": AUTO_MAP, "model_type": "bert"}
    cfg.update({k: c[k] for k in CONFIG_KEYS})
    cfg.update(extra)
    cfg.update({"torch_dtype": "float32", "transformers_version": c["transformers_version"]})
    (d / "config.json").write_text(json.dumps(cfg, indent=2))


def alibi(encoder_cls, heads, size=4):
    """Slopes and the [heads, size, size] bias the remote JinaBertEncoder.rebuild_alibi_tensor builds."""
    encoder = types.SimpleNamespace(num_attention_heads=heads)
    bias = encoder_cls.rebuild_alibi_tensor(encoder, size=size)[0]
    slopes = -bias[:, 0, 1]
    assert torch.equal(bias, -slopes[:, None, None] * (torch.arange(size)[None, :] - torch.arange(size)[:, None])
                       .abs()[None].float()), "the bias is -slope * |i - j|"
    return {"heads": heads, "slopes": slopes.tolist(), "bias": bias.tolist()}


def mean_pool(hidden, mask):
    # sentence-transformers' Pooling(pooling_mode="mean"), as the remote JinaBertModel.mean_pooling too.
    mask = mask.unsqueeze(-1).expand(hidden.size()).to(hidden.dtype)
    return torch.sum(hidden * mask, 1) / torch.clamp(mask.sum(1), min=1e-9)


@torch.no_grad()
def main():
    torch.set_num_threads(1)
    import transformers

    assert transformers.__version__.startswith("4."), "the remote code needs transformers 4 (see the docstring)"
    out_root, (configuration, modeling) = Path(sys.argv[1]), remote_code(sys.argv[2])
    JinaBertConfig = configuration.JinaBertConfig

    wp = wordpiece_tokenizer(sentences())
    small = dict(vocab_size=len(wp), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=48, max_position_embeddings=MAX_POS, type_vocab_size=2, initializer_range=0.2,
                 pad_token_id=wp.pad_token_id, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                 position_embedding_type="alibi", feed_forward_type="geglu")

    # --- embedder: JinaBertModel + mean pooling ---
    torch.manual_seed(SEED + 80)
    m = modeling.JinaBertModel(JinaBertConfig(**small), add_pooling_layer=False).eval()
    randomize(m)
    assert m.config.attn_implementation == "torch" and not hasattr(m.embeddings, "position_embeddings")
    d = out_root / "jina-embed"
    save(m, wp, d)
    hub_config(d, ["JinaBertForMaskedLM"], emb_pooler="mean")
    write_sentence_transformers_files(d, pooling="mean", normalize=False, max_seq_length=64)
    texts = [t.strip() for t in TEXTS]
    enc = wp(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
    vectors = mean_pool(m(**enc).last_hidden_state, enc["attention_mask"])
    lengths = enc["attention_mask"].sum(dim=1).tolist()
    assert max(lengths) == 64 and min(lengths) == 2

    # The saved folder through the remote class (emb_pooler "mean" loads the folder's tokenizer), its own encode.
    loaded = modeling.JinaBertModel.from_pretrained(str(d)).eval()
    own = loaded.encode(texts, max_length=64, convert_to_tensor=True)
    torch.testing.assert_close(own, vectors, rtol=0, atol=1e-5)
    # The eager attention (attn_implementation None) computes the same as the SDPA path the config selects.
    eager = modeling.JinaBertModel(JinaBertConfig(**small, attn_implementation=None), add_pooling_layer=False).eval()
    eager.load_state_dict(m.state_dict())
    torch.testing.assert_close(mean_pool(eager(**enc).last_hidden_state, enc["attention_mask"]), vectors,
                               rtol=0, atol=1e-5)
    reference = {"texts": texts, "vectors": vectors.tolist(), "token_counts": lengths,
                 "alibi": [alibi(modeling.JinaBertEncoder, h) for h in (4, 6, 12)]}
    (d / "reference.json").write_text(json.dumps(reference, ensure_ascii=False, indent=1))

    # --- reranker: JinaBertForSequenceClassification, 1 label ---
    torch.manual_seed(SEED + 81)
    m = modeling.JinaBertForSequenceClassification(JinaBertConfig(num_labels=1, **small)).eval()
    randomize(m)
    d = out_root / "jina-rerank"
    save(m, wp, d)
    c = json.loads((d / "config.json").read_text())
    hub_config(d, ["JinaBertForSequenceClassification"], id2label=c["id2label"], label2id=c["label2id"])
    logits, lengths = pair_logits(m, wp, QUERY, DOCS)
    loaded = modeling.JinaBertForSequenceClassification.from_pretrained(str(d)).eval()
    torch.testing.assert_close(torch.tensor(pair_logits(loaded, wp, QUERY, DOCS)[0]), torch.tensor(logits),
                               rtol=0, atol=1e-5)
    (d / "reference.json").write_text(json.dumps({"query": QUERY, "documents": DOCS, "logits": logits,
                                                   "token_counts": lengths}, ensure_ascii=False, indent=1))

    for name in ["jina-embed", "jina-rerank"]:
        p = out_root / name
        size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        print(f"{name}: {size / 1024:.0f} KiB, {sorted(f.name for f in p.iterdir())}")


if __name__ == "__main__":
    main()
