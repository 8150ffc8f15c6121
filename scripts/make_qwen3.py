#!/usr/bin/env python3
"""A tiny seeded Qwen3 embedder as Qwen3-Embedding ships it (a Qwen3 decoder; sentence-transformers' last-token
Pooling and Normalize; a `query` prompt in config_sentence_transformers.json), with the vectors
sentence-transformers computes for it.

Run on a developer machine with torch (not in CI; the outputs are committed):
    pip install sentence-transformers
    python3 scripts/make_qwen3.py tests/fixtures/tiny

Writes qwen3-embed: Qwen3Model (2 layers, 4 query heads over 2 key-value heads, head_dim 16 wider than
hidden / heads as Qwen3's configs allow, rope_theta 1e6), its RMS norms (q_norm and k_norm included) drawn at
random so that loading them is tested; a byte-level BPE tokenizer (make_tiny_colqwen2's) that appends
<|endoftext|> to every text, as Qwen3-Embedding's does, so the last token pooled is that one. reference.json: the
texts, their vectors, the vectors with the `query` prompt, the prompt and the token counts.
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_colqwen2 import qwen_like_tokenizer  # noqa: E402
from make_tiny_models import SEED, TEXTS, save, sentences  # noqa: E402

QUERY_PROMPT = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"


def with_eos(tokenizer):
    """Appends <|endoftext|> to every sequence, as Qwen3-Embedding's tokenizer.json does."""
    from tokenizers import processors

    eos = "<|endoftext|>"
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A:0 {eos}:0", pair=f"$A:0 $B:1 {eos}:1",
        special_tokens=[(eos, tokenizer.convert_tokens_to_ids(eos))])
    return tokenizer


@torch.no_grad()
def main():
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import Qwen3Config, Qwen3Model

    torch.set_num_threads(1)
    out_root = Path(sys.argv[1])
    tok = with_eos(qwen_like_tokenizer(sentences()))
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                      initializer_range=0.2, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                      eos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"))  # no padding_idx: a trained eos row
    torch.manual_seed(SEED + 90)
    model = Qwen3Model(cfg).eval()
    for name, p in model.named_parameters():
        if "norm" in name:
            torch.nn.init.normal_(p, mean=1.0, std=0.3)
    tmp = out_root / "_tmp_qwen3"
    save(model, tok, tmp)
    st = SentenceTransformer(modules=[Transformer(str(tmp), max_seq_length=64),
                                      Pooling(32, pooling_mode="lasttoken"), Normalize()],
                             prompts={"query": QUERY_PROMPT, "document": ""}, device="cpu")
    d = out_root / "qwen3-embed"
    st.save(str(d), create_model_card=False)
    st = SentenceTransformer(str(d), device="cpu")
    texts = [t.strip() for t in TEXTS]
    vectors = st.encode(texts, convert_to_numpy=True).tolist()
    query_vectors = st.encode(texts, prompt_name="query", convert_to_numpy=True).tolist()
    lengths = [len(tok(t, truncation=True, max_length=64)["input_ids"]) for t in texts]
    (d / "reference.json").write_text(json.dumps({"texts": texts, "vectors": vectors, "token_counts": lengths,
                                                  "prompt": QUERY_PROMPT, "query_vectors": query_vectors},
                                                 ensure_ascii=False, indent=1))
    import shutil

    shutil.rmtree(tmp)
    (d / "README.md").unlink(missing_ok=True)
    size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    print(f"qwen3-embed: {size / 1024:.0f} KiB, {sorted(f.name for f in d.iterdir())}")


if __name__ == "__main__":
    main()
