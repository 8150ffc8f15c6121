#!/usr/bin/env python3
"""Aleph's CPU path against transformers, in one run, per model family at a real checkpoint's shape (random
weights: the speed does not depend on them).

    pip install torch transformers            # a developer machine, not CI
    cargo build --release -p aleph-bench && scripts/fetch-models.sh
    python3 bench/families.py ../shared/data/stsbenchmark.tsv.gz [N] [family ...]

For each family: saves a seeded random model with that checkpoint's config (vocabulary, width, depth) and the
all-MiniLM-L6-v2 WordPiece tokenizer (BERT's uncased 30,522-entry vocabulary) under /tmp/aleph-families, runs
`target/release/compute --corpus-only` on it (f32 and int8 on the CPU kernels), then PyTorch on the same
batches: the first N STS Benchmark sentences in batches of 32, padded per batch, 2 threads. Prints one
markdown row per family.
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import sts  # bench/sts.py, beside this file

ROOT = Path(__file__).resolve().parent.parent
OUT = Path("/tmp/aleph-families")

# name: (checkpoint it stands for, transformers class, config class, config, pooling, Aleph's --pooling)
FAMILIES = {
    "distilbert": ("msmarco-distilbert-base-v4", "DistilBertModel", "DistilBertConfig",
                   dict(vocab_size=30522, dim=768, n_layers=6, n_heads=12, hidden_dim=3072), "mean", "auto"),
    "splade-distilbert": ("opensearch-neural-sparse-encoding-doc-v2-distill", "DistilBertForMaskedLM",
                          "DistilBertConfig", dict(vocab_size=30522, dim=768, n_layers=6, n_heads=12, hidden_dim=3072),
                          "splade", "splade"),
    "modernbert": ("gte-modernbert-base", "ModernBertModel", "ModernBertConfig",
                   dict(vocab_size=50368, hidden_size=768, intermediate_size=1152, num_hidden_layers=22,
                        num_attention_heads=12, pad_token_id=0), "cls", "auto"),
    "gte": ("gte-base-en-v1.5", "GteModel", "GteConfig",
            dict(vocab_size=30528, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, type_vocab_size=0, max_position_embeddings=8192, pad_token_id=0,
                 rope_parameters={"rope_type": "default", "rope_theta": 500000.0}), "cls", "auto"),
    "nomic": ("nomic-embed-text-v1.5", "NomicBertModel", "NomicBertConfig",
              dict(vocab_size=30528, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                   intermediate_size=3072, max_position_embeddings=8192, pad_token_id=0), "mean", "auto"),
    "deberta": ("mxbai-rerank-base-v1 (DeBERTa-v3-base)", "DebertaV2Model", "DebertaV2Config",
                dict(vocab_size=128100, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                     intermediate_size=3072, relative_attention=True, pos_att_type="p2c|c2p", position_buckets=256,
                     norm_rel_ebd="layer_norm", share_att_key=True, position_biased_input=False,
                     max_relative_positions=-1, type_vocab_size=0, pad_token_id=0), "mean", "auto"),
    # jina's remote code (JINA_REMOTE=folder of its modeling_bert.py / configuration_bert.py, transformers 4.x:
    # see scripts/make_jinabert.py); the config then names that code in auto_map, as the hub's does.
    "jina": ("jina-embeddings-v2-base-en", "JinaBertModel", "JinaBertConfig",
             dict(vocab_size=30528, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                  intermediate_size=3072, max_position_embeddings=8192, position_embedding_type="alibi",
                  feed_forward_type="geglu", attn_implementation="torch"), "mean", "auto"),
    # NOMIC_REMOTE=folder of nomic-ai/nomic-bert-2048's code (scripts/make_nomic_moe.py; einops too).
    "nomic-moe": ("nomic-embed-text-v2-moe", "NomicBertModel", "NomicBertConfig",
                  dict(vocab_size=250048, n_embd=768, n_layer=12, n_head=12, n_inner=3072, n_positions=2048,
                       activation_function="gelu", rotary_emb_fraction=1.0, rotary_emb_base=10000,
                       type_vocab_size=1, pad_token_id=1, prenorm=False, num_experts=8, moe_top_k=2,
                       moe_every_n_layers=2, moe_normalize_expert_weights=False, qkv_proj_bias=True,
                       mlp_fc1_bias=True, mlp_fc2_bias=True, causal=False, add_pooling_layer=False,
                       use_flash_attn=False, fused_bias_fc=False, fused_dropout_add_ln=False), "mean", "auto"),
    # JINA_V3_REMOTE=folder of jinaai/xlm-roberta-flash-implementation's code (scripts/make_jina_v3.py;
    # transformers 4.x and einops). Its model loads its tokenizer from `name_or_path` when built.
    "jina-v3": ("jina-embeddings-v3", "XLMRobertaLoRA", "XLMRobertaFlashConfig",
                dict(vocab_size=250002, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                     intermediate_size=4096, max_position_embeddings=8194, rotary_emb_base=20000.0,
                     lora_adaptations=["retrieval.query", "retrieval.passage", "separation", "classification",
                                       "text-matching"],
                     task_instructions={"retrieval.query": "", "retrieval.passage": "", "separation": "",
                                        "classification": "", "text-matching": ""},
                     lora_rank=4, load_trained_adapters=True, use_flash_attn=False,
                     name_or_path=str(ROOT / "models/all-MiniLM-L6-v2")), "mean", "auto"),
    "qwen3": ("Qwen3-Embedding-0.6B", "Qwen3Model", "Qwen3Config",
              dict(vocab_size=151669, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                   num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=32768,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), "last", "last-token"),
    "embeddinggemma": ("embeddinggemma-300m", "Gemma3TextModel", "Gemma3TextConfig",
                       dict(vocab_size=262144, hidden_size=768, intermediate_size=1152, num_hidden_layers=24,
                            num_attention_heads=3, num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256,
                            sliding_window=512, use_bidirectional_attention=True, max_position_embeddings=2048),
                       "mean", "auto"),
    "splade-bert": ("naver/splade-cocondenser-ensembledistil", "BertForMaskedLM", "BertConfig",
                    dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                         intermediate_size=3072), "splade", "splade"),
}


# Families run from their remote code (transformers 4.x on PYTHONPATH): class prefix -> (environment variable
# naming the folder of that code, the fixture script that imports it and knows its auto_map).
REMOTE = {"JinaBert": ("JINA_REMOTE", "make_jinabert"), "NomicBert": ("NOMIC_REMOTE", "make_nomic_moe"),
          "XLMRobertaLoRA": ("JINA_V3_REMOTE", "make_jina_v3")}

# ALEPH_ADAPTER=k runs jina-embeddings-v3's sequences under task adapter k on both sides (Aleph's `--adapter`,
# the remote code's `adapter_mask`); unset, neither uses one.
ADAPTER = os.environ.get("ALEPH_ADAPTER")


def remote(cls):
    """The fixture script of `cls`'s remote code, or None for transformers' own classes."""
    for prefix, (_, script) in REMOTE.items():
        if cls.startswith(prefix):
            sys.path.insert(0, str(ROOT / "scripts"))
            return __import__(script)
    return None


def namespace(cls):
    """Where a family's classes live: transformers, or the remote code (JinaBERT, NomicBERT v2)."""
    script = remote(cls)
    if script is None:
        import transformers

        return transformers
    import types

    env = next(v for p, (v, _) in REMOTE.items() if cls.startswith(p))
    config, modeling = script.remote_code(os.environ[env])
    return types.SimpleNamespace(**{**vars(config), **vars(modeling)})


def make(name):
    import torch

    _, cls, cfg_cls, cfg, _, _ = FAMILIES[name]
    d = OUT / name
    if (d / "config.json").exists():
        return d
    torch.manual_seed(0)
    classes = namespace(cls)
    model = getattr(classes, cls)(getattr(classes, cfg_cls)(**cfg)).eval()
    with torch.no_grad():  # NomicBERT's experts are allocated with torch.empty and never initialised
        for n, p in model.named_parameters():
            if "experts.mlp" in n or "lora_" in n:  # (and LoRA's B starts at zero: make the adapters real)
                torch.nn.init.normal_(p, std=0.02)
    model.save_pretrained(d)
    if remote(cls):
        c = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**c, "auto_map": remote(cls).AUTO_MAP}))
    for f in ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]:
        src = ROOT / "models/all-MiniLM-L6-v2" / f
        if src.exists():
            shutil.copy(src, d / f)
    return d


def aleph(d, corpus, n, pooling):
    out = subprocess.run(
        [str(ROOT / "target/release/compute"), "--model", str(d), "--corpus", corpus, "--sentences", str(n),
         "--corpus-only", "--no-candle", "--no-accuracy", "--pooling", pooling,
         *(["--adapter", ADAPTER] if ADAPTER else [])],
        env={**os.environ, "ALEPH_COMPUTE_THREADS": "2"}, check=True, capture_output=True, text=True).stdout
    rates = dict(re.findall(r"\| (aleph-cpu(?:-int8)?) \| ([\d.]+) \|", out))
    return float(rates["aleph-cpu"]), float(rates["aleph-cpu-int8"])


def pytorch(d, corpus, n, pooling, cls):
    import torch
    import transformers
    from transformers import AutoTokenizer

    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(d)
    sents = [x.strip() for x in sts.sentences(corpus, n)]
    classes = namespace(cls)
    if cls == "XLMRobertaLoRA":  # its from_pretrained reads the config it is handed
        model = classes.XLMRobertaLoRA.from_pretrained(d, config=classes.XLMRobertaFlashConfig.from_pretrained(d))
    else:
        model = getattr(classes, cls).from_pretrained(d)
    model = model.eval()
    import inspect

    accepted = inspect.signature(model.forward).parameters
    names = [k for k in ["input_ids", "attention_mask", "token_type_ids"] if k in accepted]
    if cls == "XLMRobertaLoRA":  # forward(*args, **kwargs), and one token type
        names = ["input_ids", "attention_mask"]
    batches = [{k: v for k, v in tok(sents[i:i + 32], padding=True, truncation=True, max_length=256,
                                     return_tensors="pt").items() if k in names}
               for i in range(0, len(sents), 32)]

    if ADAPTER is not None:
        for b in batches:
            b["adapter_mask"] = torch.full((b["input_ids"].shape[0],), int(ADAPTER), dtype=torch.int32)

    @torch.inference_mode()
    def run():
        for b in batches:
            mask = b["attention_mask"].unsqueeze(-1).float()
            if pooling == "splade":
                logits = model(**b).logits
                (torch.log1p(torch.relu(logits)) * mask).amax(dim=1)
            elif pooling == "last":  # right padding: each sequence's last real token
                h = model(**b).last_hidden_state
                last = b["attention_mask"].sum(dim=1) - 1
                torch.nn.functional.normalize(h[torch.arange(h.shape[0]), last], dim=-1)
            else:
                h = model(**b).last_hidden_state
                torch.nn.functional.normalize((h * mask).sum(1) / mask.sum(1), dim=-1)

    run()
    runs = []
    for _ in range(3):
        t = time.perf_counter()
        run()
        runs.append(time.perf_counter() - t)
    return len(sents) / statistics.median(runs), torch.__version__, transformers.__version__


def main():
    corpus = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    names = sys.argv[3:] or list(FAMILIES)
    print("| family (shape of) | Aleph f32 | Aleph int8 | PyTorch | f32 / PyTorch | int8 / PyTorch |")
    print("|---|---|---|---|---|---|")
    for name in names:
        checkpoint, cls, _, _, pooling, aleph_pooling = FAMILIES[name]
        d = make(name)
        f32, int8 = aleph(d, corpus, n, aleph_pooling)
        torch_rate, tv, trv = pytorch(d, corpus, n, pooling, cls)
        print(f"| {name} ({checkpoint}) | {f32:.1f} | {int8:.1f} | {torch_rate:.1f} | {f32 / torch_rate:.2f}x | "
              f"{int8 / torch_rate:.2f}x |", flush=True)
    print(json.dumps({"sentences": n, "torch": tv, "transformers": trv}))


if __name__ == "__main__":
    main()
