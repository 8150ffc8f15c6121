#!/usr/bin/env python3
"""A tiny seeded EmbeddingGemma (a `Gemma3TextModel` with bidirectional attention; sentence-transformers' mean
Pooling, two bias-free Dense layers with the identity activation, Normalize; EmbeddingGemma's task prompts) with
the vectors sentence-transformers computes for it.

Run on a developer machine with torch (not in CI; the outputs are committed):
    pip install sentence-transformers
    python3 scripts/make_gemma3.py tests/fixtures/tiny

Writes gemma3-embed: 4 layers (local, local, global, local, so both kinds and their two rotary bases are used),
2 query heads over 1 key-value head of width 24 (wider than hidden / heads, as EmbeddingGemma's 256), a
query_pre_attn_scalar that is not head_dim, and sliding_window 10 (transformers keeps |i - j| < 10 // 2 + 1 on
the local layers): the fixture's longer texts pass it. Every RMS norm (sandwich, query/key and final) is drawn at
random so that loading each is tested. The tokenizer is make_tiny_colpali's BPE in Gemma's layout, with <bos>
before and <eos> after every text as EmbeddingGemma's. reference.json: texts, vectors, the vectors with the
`query` prompt, the prompt and the token counts.
"""
import json
import shutil
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_colpali import gemma_like_tokenizer  # noqa: E402
from make_tiny_models import SEED, TEXTS, save, sentences  # noqa: E402

QUERY_PROMPT = "task: search result | query: "
DOCUMENT_PROMPT = "title: none | text: "


def with_bos_eos(tokenizer):
    """<bos> $A <eos>, as EmbeddingGemma's tokenizer.json has it."""
    from tokenizers import processors

    bos, eos = "<bos>", "<eos>"
    ids = [(t, tokenizer.convert_tokens_to_ids(t)) for t in (bos, eos)]
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} $B:1 {eos}:1", special_tokens=ids)
    return tokenizer


@torch.no_grad()
def main():
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import Gemma3TextConfig, Gemma3TextModel

    torch.set_num_threads(1)
    out_root = Path(sys.argv[1])
    tok = with_bos_eos(gemma_like_tokenizer(sentences()))
    cfg = Gemma3TextConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, head_dim=24, query_pre_attn_scalar=20, max_position_embeddings=128,
        initializer_range=0.2, sliding_window=10, use_bidirectional_attention=True,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        pad_token_id=0, bos_token_id=2, eos_token_id=1)
    torch.manual_seed(SEED + 100)
    model = Gemma3TextModel(cfg).eval()
    for name, p in model.named_parameters():
        if "norm" in name:  # Gemma's norms scale by 1 + w: draw w around 0
            torch.nn.init.normal_(p, mean=0.0, std=0.3)
    tmp = out_root / "_tmp_gemma3"
    save(model, tok, tmp)
    up = Dense(32, 64, bias=False, activation_function=torch.nn.Identity())
    down = Dense(64, 32, bias=False, activation_function=torch.nn.Identity())
    for dense in (up, down):
        torch.nn.init.normal_(dense.linear.weight, std=0.3)
    st = SentenceTransformer(modules=[Transformer(str(tmp), max_seq_length=64), Pooling(32, pooling_mode="mean"),
                                      up, down, Normalize()],
                             prompts={"query": QUERY_PROMPT, "document": DOCUMENT_PROMPT}, device="cpu")
    d = out_root / "gemma3-embed"
    shutil.rmtree(d, ignore_errors=True)
    st.save(str(d), create_model_card=False)
    st = SentenceTransformer(str(d), device="cpu")
    texts = [t.strip() for t in TEXTS]
    vectors = st.encode(texts, convert_to_numpy=True).tolist()
    query_vectors = st.encode(texts, prompt_name="query", convert_to_numpy=True).tolist()
    lengths = [len(tok(t, truncation=True, max_length=64)["input_ids"]) for t in texts]
    assert max(lengths) > 10, "some text must be longer than the local window"
    (d / "reference.json").write_text(json.dumps({"texts": texts, "vectors": vectors, "token_counts": lengths,
                                                  "prompt": QUERY_PROMPT, "query_vectors": query_vectors},
                                                 ensure_ascii=False, indent=1))
    shutil.rmtree(tmp)
    (d / "README.md").unlink(missing_ok=True)
    size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    print(f"gemma3-embed: {size / 1024:.0f} KiB, {sorted(f.name for f in d.iterdir())}")


if __name__ == "__main__":
    main()
