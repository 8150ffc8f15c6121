#!/usr/bin/env python3
"""Tiny seeded Llama-style LLM embedders with the vectors sentence-transformers computes for them: Mistral
(e5-mistral-7b-instruct's family: every layer attends within a sliding window, here 5 tokens so that the fixture's
texts pass it), Qwen2 (gte-Qwen2-instruct's: biases on q, k and v) and Llama (SFR-Embedding's base), each as a
`*Model` with sentence-transformers' last-token Pooling and Normalize, and a `query` prompt.

Run on a developer machine with torch (not in CI; the outputs are committed):
    pip install sentence-transformers
    python3 scripts/make_llama_family.py tests/fixtures/tiny

Writes mistral-embed, qwen2-embed and llama-embed (2 layers, 4 query heads over 2 key-value heads, RMS norms
drawn at random), each with make_qwen3's byte-level BPE tokenizer that appends <|endoftext|>, and reference.json:
texts, vectors, the vectors with the query prompt, the prompt and token counts.
"""
import json
import shutil
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_qwen3 import QUERY_PROMPT, with_eos  # noqa: E402
from make_tiny_colqwen2 import qwen_like_tokenizer  # noqa: E402
from make_tiny_models import SEED, TEXTS, save, sentences  # noqa: E402


def families():
    from transformers import LlamaConfig, LlamaModel, MistralConfig, MistralModel, Qwen2Config, Qwen2Model

    common = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.2,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return [("mistral-embed", MistralModel, MistralConfig(sliding_window=5, **common), SEED + 95),
            ("qwen2-embed", Qwen2Model, Qwen2Config(**{**common, "rope_parameters": {"rope_type": "default",
                                                                                     "rope_theta": 1e6}}), SEED + 96),
            ("llama-embed", LlamaModel, LlamaConfig(**common), SEED + 97)]


def seeded(model_cls, cfg, seed):
    """`model_cls(cfg)` drawn from `seed`, with RMS norms around 1 and biases drawn too, so that both count."""
    torch.manual_seed(seed)
    model = model_cls(cfg).eval()
    for pname, p in model.named_parameters():
        if "norm" in pname:
            torch.nn.init.normal_(p, mean=1.0, std=0.3)
        elif pname.endswith(".bias"):
            torch.nn.init.normal_(p, std=0.2)
    return model


@torch.no_grad()
def main():
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    torch.set_num_threads(1)
    out_root = Path(sys.argv[1])
    tok = with_eos(qwen_like_tokenizer(sentences()))
    texts = [t.strip() for t in TEXTS]
    for name, model_cls, cfg, seed in families():
        cfg.vocab_size = len(tok)
        cfg.eos_token_id = tok.convert_tokens_to_ids("<|endoftext|>")
        model = seeded(model_cls, cfg, seed)
        tmp = out_root / f"_tmp_{name}"
        save(model, tok, tmp)
        st = SentenceTransformer(modules=[Transformer(str(tmp), max_seq_length=64),
                                          Pooling(32, pooling_mode="lasttoken"), Normalize()],
                                 prompts={"query": QUERY_PROMPT}, device="cpu")
        d = out_root / name
        st.save(str(d), create_model_card=False)
        st = SentenceTransformer(str(d), device="cpu")
        vectors = st.encode(texts, convert_to_numpy=True).tolist()
        query_vectors = st.encode(texts, prompt_name="query", convert_to_numpy=True).tolist()
        lengths = [len(tok(t, truncation=True, max_length=64)["input_ids"]) for t in texts]
        assert max(lengths) > 5, "some text must pass Mistral's window"
        (d / "reference.json").write_text(json.dumps({"texts": texts, "vectors": vectors, "token_counts": lengths,
                                                      "prompt": QUERY_PROMPT, "query_vectors": query_vectors},
                                                     ensure_ascii=False, indent=1))
        shutil.rmtree(tmp)
        (d / "README.md").unlink(missing_ok=True)
        size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
        print(f"{name}: {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
