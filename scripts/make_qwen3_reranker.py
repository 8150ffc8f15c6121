#!/usr/bin/env python3
"""A tiny seeded Qwen3-Reranker (a `Qwen3ForCausalLM` checkpoint, as Qwen/Qwen3-Reranker-0.6B ships it), with the
scores its model card computes.

Run on a developer machine with torch (not in CI; the outputs are committed):
    pip install transformers
    python3 scripts/make_qwen3_reranker.py tests/fixtures/tiny

The model card's scoring, as written there: the pair is `<Instruct>: {instruction}\\n<Query>: {query}\\n<Document>:
{doc}`, tokenized on its own and put between the tokenized system prefix and the assistant suffix (three
tokenizations, concatenated: not one of the joined string); the score is the softmax over the last position's
logits of "no" and "yes", taking "yes". The tokenizer is make_tiny_colqwen2's byte-level BPE, trained with "yes"
and "no" as words of their own so that both are single tokens as in Qwen's vocabulary; it adds no special tokens,
as Qwen3's does not.

Writes qwen3-rerank (untied lm_head, as the 4B and 8B rerankers; 0.6B ties it) with reference.json: query,
documents, the default instruction's scores and logit differences (yes − no), a second instruction's scores, and
token counts; and qwen3-seqcls, a `Qwen3ForSequenceClassification` with one label (the form converted
Qwen3-Reranker checkpoints take: a `score` row on the last token), with its logits for the same prompts.
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_colqwen2 import qwen_like_tokenizer  # noqa: E402
from make_tiny_models import DOCS, QUERY, SEED, save, sentences  # noqa: E402

PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
          "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
OTHER_INSTRUCTION = "Given a question, find the passage in French"


def format_instruction(instruction, query, doc):
    return f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}"


def prompts(tok, instruction, query, docs):
    prefix, suffix = tok.encode(PREFIX, add_special_tokens=False), tok.encode(SUFFIX, add_special_tokens=False)
    pairs = [format_instruction(instruction, query, d) for d in docs]
    return [prefix + tok(p, add_special_tokens=True)["input_ids"] + suffix for p in pairs]


@torch.no_grad()
def scores(model, tok, instruction, query, docs):
    ids = prompts(tok, instruction, query, docs)
    yes, no = tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("no")
    out, diffs = [], []
    for seq in ids:  # one at a time: no padding to reason about
        logits = model(input_ids=torch.tensor([seq])).logits[0, -1]
        pair = torch.stack([logits[no], logits[yes]])
        out.append(torch.nn.functional.log_softmax(pair, dim=0)[1].exp().item())
        diffs.append((logits[yes] - logits[no]).item())
    return out, diffs, [len(s) for s in ids]


def main():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.set_num_threads(1)
    out_root = Path(sys.argv[1])
    corpus = ["yes", "no", "yes\nno", "no\nyes"] * 2000 + sentences()
    tok = qwen_like_tokenizer(corpus)
    tok.padding_side = "left"
    assert tok.convert_tokens_to_ids("yes") != tok.unk_token_id and len(tok.tokenize("yes")) == 1
    assert tok.convert_tokens_to_ids("no") != tok.unk_token_id and len(tok.tokenize("no")) == 1
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                      initializer_range=0.2, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                      tie_word_embeddings=False, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"))
    torch.manual_seed(SEED + 91)
    model = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                torch.nn.init.normal_(p, mean=1.0, std=0.3)
    d = out_root / "qwen3-rerank"
    save(model, tok, d)
    docs = [d.strip() for d in DOCS]  # the servers strip texts (Infinity does)
    s, diffs, lengths = scores(model, tok, DEFAULT_INSTRUCTION, QUERY, docs)
    other, _, _ = scores(model, tok, OTHER_INSTRUCTION, QUERY, docs)
    assert max(s) - min(s) > 0.05, f"the scores should differ between documents: {s}"
    (d / "reference.json").write_text(json.dumps({
        "query": QUERY, "documents": docs, "scores": s, "logit_differences": diffs, "token_counts": lengths,
        "instruction": DEFAULT_INSTRUCTION, "other_instruction": OTHER_INSTRUCTION, "other_scores": other},
        ensure_ascii=False, indent=1))
    size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    print(f"qwen3-rerank: {size / 1024:.0f} KiB, scores {s}")

    from transformers import Qwen3ForSequenceClassification

    torch.manual_seed(SEED + 92)
    cfg.num_labels, cfg.pad_token_id = 1, tok.pad_token_id
    cls = Qwen3ForSequenceClassification(cfg).eval()
    with torch.no_grad():
        for name, p in cls.named_parameters():
            if "norm" in name:
                torch.nn.init.normal_(p, mean=1.0, std=0.3)
        logits = [cls(input_ids=torch.tensor([seq])).logits[0].tolist()
                  for seq in prompts(tok, DEFAULT_INSTRUCTION, QUERY, docs)]
    d = out_root / "qwen3-seqcls"
    save(cls, tok, d)
    (d / "reference.json").write_text(json.dumps({"query": QUERY, "documents": docs, "logits": logits,
                                                  "token_counts": lengths}, ensure_ascii=False, indent=1))
    print(f"qwen3-seqcls: logits {logits}")


if __name__ == "__main__":
    main()
