#!/usr/bin/env python3
"""Tiny seeded random Qwen3-VL-Embedding and Qwen3-VL-Reranker checkpoints (`Qwen3VLForConditionalGeneration`,
`model_type: qwen3_vl`, as Qwen/Qwen3-VL-Embedding-2B and Qwen3-VL-Reranker-2B ship), with what their reference
code computes for texts.

The reference is QwenLM/Qwen3-VL-Embedding's `Qwen3VLEmbedder` and `Qwen3VLReranker` (src/models/, commit
8ce3aab), followed step by step for text inputs:
- embedder: the conversation [system: instruction (a '.' appended unless it ends in Unicode punctuation; default
  "Represent the user's input."), user: text], rendered by the chat template with add_generation_prompt=True,
  tokenized with right padding (truncation at 8192), run through `Qwen3VLModel` in one padded batch, the last
  real token's state taken and L2-normalized;
- reranker: [system: the judge prompt, user: "<Instruct>: {instruction}", "<Query>:", query, "\\n<Document>:",
  document], rendered the same way, one pair per forward pass, score = sigmoid(h_last · (lm_head[yes] −
  lm_head[no])).
The chat template is Qwen3-VL-Instruct's (tests/fixtures/tiny/qwen3-vl-embed/chat_template.jinja, as
xorbitsai/inference 7ecec16 carries it for Qwen/Qwen3-VL-2B-Instruct; the embedding notebook's printed prompt
matches its rendering). The tokenizer is make_tiny_colqwen2's byte-level BPE with Qwen's special tokens, trained
with "yes" and "no" as single tokens. config.json leaves out every value equal to its class default.

Run on a developer machine with torch (not in CI; the outputs are committed):
    python3 scripts/make_qwen3_vl.py tests/fixtures/tiny
"""
import json
import sys
import unicodedata
from pathlib import Path

import torch

SEED = 3571
TEMPLATE = Path(__file__).resolve().parent.parent / "tests/fixtures/tiny/qwen3-vl-embed/chat_template.jinja"
DEFAULT_INSTRUCTION = "Represent the user's input."
QUERY_INSTRUCTION = "Retrieve images or text relevant to the user's query."
RERANK_SYSTEM = ('Judge whether the Document meets the requirements based on the Query and the Instruct provided. '
                 'Note that the answer can only be "yes" or "no".')
RERANK_INSTRUCTION = "Given a search query, retrieve relevant candidates that answer the query."
# (text, instruction): None is the default instruction.
EMBED_INPUTS = [
    ("The quick brown fox jumps over the lazy dog.", None),
    ("what is the capital of france", QUERY_INSTRUCTION),
    ("Paris is the capital and most populous city of France.", None),
    ("hello", "Find the passage about cooking"),
    ("Café au lait, naïve façade 🎉", None),
    (("A man is playing a guitar. " * 12).strip(), None),  # the servers strip texts (Infinity does)
]
QUERY = "what is the capital of france"
DOCS = ["Paris is the capital and most populous city of France.", "The cat sat on the mat.",
        "France is a country in Western Europe; its capital is Paris.", "Berlin is the capital of Germany."]


def minimized(config_cls, values):
    defaults = config_cls().to_dict()
    keep = {"model_type"}
    return {k: v for k, v in values.items() if k in keep or k not in defaults or defaults[k] != v}


def punctuated(instruction):
    instruction = instruction.strip()
    if instruction and not unicodedata.category(instruction[-1]).startswith("P"):
        instruction += "."
    return instruction


def embed_conversation(text, instruction):
    return [{"role": "system", "content": [{"type": "text", "text": punctuated(instruction) if instruction
                                            else DEFAULT_INSTRUCTION}]},
            {"role": "user", "content": [{"type": "text", "text": text}]}]


def rerank_conversation(query, doc, instruction):
    return [{"role": "system", "content": [{"type": "text", "text": RERANK_SYSTEM}]},
            {"role": "user", "content": [{"type": "text", "text": "<Instruct>: " + instruction},
                                         {"type": "text", "text": "<Query>:"}, {"type": "text", "text": query},
                                         {"type": "text", "text": "\n<Document>:"}, {"type": "text", "text": doc}]}]


def build(tok, seed, out, card=None):
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig, Qwen3VLVisionConfig

    text = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=2048,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3],
                                 "mrope_interleaved": True})
    vision = dict(depth=2, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32, patch_size=8,
                  num_position_embeddings=16, deepstack_visual_indexes=[0, 1])
    cfg = Qwen3VLConfig(text_config=text, vision_config=vision,
                        image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"),
                        video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
                        vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"),
                        vision_end_token_id=tok.convert_tokens_to_ids("<|vision_end|>"))
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif p.dim() == 2:
                p.copy_(0.2 * torch.randn_like(p))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    (out / "generation_config.json").unlink(missing_ok=True)
    saved = json.loads((out / "config.json").read_text())
    saved["text_config"] = minimized(Qwen3VLTextConfig, saved["text_config"])
    saved["vision_config"] = minimized(Qwen3VLVisionConfig, saved["vision_config"])
    saved = minimized(Qwen3VLConfig, saved) | {"text_config": saved["text_config"],
                                                "vision_config": saved["vision_config"]}
    (out / "config.json").write_text(json.dumps(saved, indent=2))
    if card:
        (out / "README.md").write_text(card)
    reloaded = Qwen3VLForConditionalGeneration.from_pretrained(out).eval()
    for (a, pa), (b, pb) in zip(model.state_dict().items(), reloaded.state_dict().items()):
        assert a == b and torch.equal(pa, pb), a
    return reloaded


@torch.no_grad()
def main():
    from transformers import PreTrainedTokenizerFast

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_tiny_colqwen2 import qwen_like_tokenizer
    from make_tiny_models import sentences

    torch.set_num_threads(1)
    root = Path(sys.argv[1])
    template = TEMPLATE.read_text()
    tok = qwen_like_tokenizer(["yes", "no", "yes\nno", "no\nyes"] * 2000 + sentences())
    tok.chat_template = template
    assert len(tok.tokenize("yes")) == 1 and len(tok.tokenize("no")) == 1

    # The embedder.
    out = root / "qwen3-vl-embed"
    model = build(tok, SEED, out)
    tok = PreTrainedTokenizerFast.from_pretrained(out, padding_side="right")
    prompts = [tok.apply_chat_template(embed_conversation(t, i), add_generation_prompt=True, tokenize=False)
               for t, i in EMBED_INPUTS]
    assert prompts[0] == ("<|im_start|>system\nRepresent the user's input.<|im_end|>\n<|im_start|>user\nThe quick "
                          "brown fox jumps over the lazy dog.<|im_end|>\n<|im_start|>assistant\n"), prompts[0]
    batch = tok(prompts, truncation=True, max_length=8192, padding=True, return_tensors="pt")
    hidden = model.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    last = batch["attention_mask"].sum(dim=1) - 1
    vectors = torch.nn.functional.normalize(hidden[torch.arange(len(prompts)), last], p=2, dim=-1)
    # Each alone gives the same vector (no padding).
    for k, p in enumerate(prompts):
        ids = tok(p, return_tensors="pt")["input_ids"]
        alone = torch.nn.functional.normalize(model.model(input_ids=ids).last_hidden_state[0, -1], dim=-1)
        torch.testing.assert_close(alone, vectors[k], rtol=0, atol=1e-5)
    suffix = "<|im_end|>\n<|im_start|>assistant\n"
    assert all(p.endswith(suffix) for p in prompts)
    (out / "reference.json").write_text(json.dumps({
        "note": "Qwen3VLEmbedder on text: chat-framed, last token, L2-normalized; instruction null = the default. "
                "texts/vectors: each input as the engine sends it (the frame before the text; the tokenizer adds "
                "the generation prompt after it) and its vector, for the suites over every fixture",
        "texts": [p[:-len(suffix)] for p in prompts], "vectors": vectors.tolist(),
        "inputs": [{"text": t, "instruction": i, "prompt": p, "input_ids": ids[m.bool()].tolist(), "embedding": v}
                   for (t, i), p, ids, m, v in zip(EMBED_INPUTS, prompts, batch["input_ids"],
                                                   batch["attention_mask"], vectors.tolist())]},
        ensure_ascii=False, indent=1))
    print("qwen3-vl-embed:", vectors.shape)

    # The reranker.
    out = root / "qwen3-vl-rerank"
    card = "---\npipeline_tag: text-ranking\nlibrary_name: transformers\n---\n\nA tiny random Qwen3-VL-Reranker.\n"
    model = build(tok, SEED + 1, out, card)
    vocab = tok.get_vocab()
    head = model.lm_head.weight
    w = head[vocab["yes"]] - head[vocab["no"]]
    ref = {}
    for name, instruction in [("default", RERANK_INSTRUCTION), ("other", "Find the document in French")]:
        scores, diffs, counts = [], [], []
        for doc in DOCS:
            prompt = tok.apply_chat_template(rerank_conversation(QUERY, doc, instruction), add_generation_prompt=True,
                                             tokenize=False)
            ids = tok(prompt, return_tensors="pt", truncation=False)["input_ids"]
            h = model.model(input_ids=ids).last_hidden_state[0, -1]
            diffs.append(float(h @ w))
            scores.append(float(torch.sigmoid(h @ w)))
            counts.append(ids.shape[1])
        ref[name] = {"instruction": instruction, "scores": scores, "logit_differences": diffs,
                     "token_counts": counts}
    assert max(ref["default"]["scores"]) - min(ref["default"]["scores"]) > 0.05, ref
    (out / "reference.json").write_text(json.dumps({"query": QUERY, "documents": DOCS, **ref,
                                                    "logit_differences": ref["default"]["logit_differences"]},
                                                   indent=1))
    print("qwen3-vl-rerank:", ref["default"]["scores"])


if __name__ == "__main__":
    main()
