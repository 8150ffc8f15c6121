#!/usr/bin/env python3
"""A tiny seeded mxbai-rerank-v2 (a `Qwen2ForCausalLM` checkpoint, as mixedbread-ai/mxbai-rerank-base-v2 ships it),
with the scores mixedbread's own package computes for it.

Run on a developer machine with torch (not in CI; the outputs are committed):
    pip install torch accelerate && pip install --no-deps mxbai-rerank==0.1.6 batched
    pip install --target /tmp/tf457 transformers==4.57.6   # mxbai-rerank calls prepare_for_model, gone in 5
    PYTHONPATH=/tmp/tf457 python3 scripts/make_mxbai_rerank.py tests/fixtures/tiny

The reference is `mxbai_rerank.MxbaiRerankV2.predict` (PyPI mxbai-rerank 0.1.6, mixedbread's package): Qwen's chat
prefix, the query (after `instruction: ...\\n` when one is given), "\\n", the document, "\\n", its task prompt and
the assistant suffix, each tokenized on its own; the score is the last position's logit of "1" minus that of "0".
The tokenizer is make_tiny_colqwen2's byte-level BPE ("0" and "1" are single tokens, as in Qwen's vocabulary).

Writes mxbai-rerank-v2 (embeddings tied to the LM head, as Qwen2.5-0.5B and so mxbai-rerank-base-v2) with a
model card whose front matter says `pipeline_tag: text-ranking`, and reference.json: query, documents, the logit
differences without an instruction and with one, and token counts.
"""
import json
import shutil
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_colqwen2 import qwen_like_tokenizer  # noqa: E402
from make_tiny_models import DOCS, QUERY, SEED, save, sentences  # noqa: E402

INSTRUCTION = "Find the passage that answers the question"
CARD = """---
library_name: transformers
pipeline_tag: text-ranking
---
A tiny random stand-in for mixedbread-ai/mxbai-rerank-base-v2, for Aleph's tests.
"""


def main():
    from mxbai_rerank import MxbaiRerankV2
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.set_num_threads(1)
    out_root = Path(sys.argv[1])
    tok = qwen_like_tokenizer(sentences())
    for digit in ("0", "1"):
        assert len(tok(digit, add_special_tokens=False)["input_ids"]) == 1
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      initializer_range=0.2, rope_theta=1000000.0, tie_word_embeddings=True, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"))
    torch.manual_seed(SEED + 101)
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                torch.nn.init.normal_(p, mean=1.0, std=0.3)
    d = out_root / "mxbai-rerank-v2"
    shutil.rmtree(d, ignore_errors=True)
    save(model, tok, d)
    (d / "README.md").write_text(CARD)
    reranker = MxbaiRerankV2(str(d), device="cpu", torch_dtype=torch.float32)
    docs = [doc.strip() for doc in DOCS]  # the servers strip texts (Infinity does)
    plain = reranker.predict([QUERY] * len(docs), docs).tolist()
    instructed = reranker.predict([QUERY] * len(docs), docs, instruction=INSTRUCTION).tolist()
    lengths = reranker.prepare_inputs([QUERY] * len(docs), docs)["attention_mask"].sum(dim=1).tolist()
    assert max(plain) - min(plain) > 0.1, f"the scores should differ between documents: {plain}"
    (d / "reference.json").write_text(json.dumps({
        "query": QUERY, "documents": docs, "logit_differences": plain, "instruction": INSTRUCTION,
        "instructed_logit_differences": instructed, "token_counts": lengths}, ensure_ascii=False, indent=1))
    size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    print(f"mxbai-rerank-v2: {size / 1024:.0f} KiB, logit differences {plain}, instructed {instructed}")


if __name__ == "__main__":
    main()
