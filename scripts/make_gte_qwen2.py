#!/usr/bin/env python3
"""A tiny seeded gte-Qwen2-instruct-shaped embedder with the vectors sentence-transformers computes for it.

gte-Qwen2-1.5B/7B-instruct ship their own code: `modeling_qwen.Qwen2Model` (config.json `auto_map`) and
`tokenization_qwen.Qwen2TokenizerFast` (tokenizer_config.json `auto_map`). What that code computes, as the
published files and TEI's implementation of them show:
  - the model is transformers' Qwen2 attending as config.json's `is_causal` says; gte-Qwen2 says `false`
    (bidirectional). transformers 5.5 and later read the same field in their own Qwen2 (masking_utils'
    `create_causal_mask` falls back to a bidirectional mask), which is what computes the reference here;
  - the tokenizer ends every sequence with <|endoftext|>, which gte-Qwen2's tokenizer.json leaves out;
  - sentence-transformers pools the last token and normalizes, with a `query` instruction prompt.

Run on a developer machine with torch (not in CI; the outputs are committed):
    pip install sentence-transformers          # transformers >= 5.5
    python3 scripts/make_gte_qwen2.py tests/fixtures/tiny

Writes gte-qwen2-embed with reference.json: texts, `vectors` and `query_vectors` as the remote code computes
them (eos appended, bidirectional), `plain_vectors` as transformers' own classes compute them without remote
code (no eos: tokenizer.json as it is; still bidirectional, from `is_causal`), the prompt and token counts.
"""
import json
import shutil
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_llama_family import seeded  # noqa: E402
from make_qwen3 import QUERY_PROMPT  # noqa: E402
from make_tiny_colqwen2 import qwen_like_tokenizer  # noqa: E402
from make_tiny_models import SEED, TEXTS, save, sentences  # noqa: E402

EOS = "<|endoftext|>"
MODEL_CODE = {"AutoModel": "modeling_qwen.Qwen2Model", "AutoModelForCausalLM": "modeling_qwen.Qwen2ForCausalLM",
              "AutoModelForSequenceClassification": "modeling_qwen.Qwen2ForSequenceClassification"}
TOKENIZER_CODE = {"AutoTokenizer": ["tokenization_qwen.Qwen2Tokenizer", "tokenization_qwen.Qwen2TokenizerFast"]}


def appending_eos(tokenizer):
    """What gte-Qwen2's tokenization_qwen does: `A <eos>` for one text, `A <eos> B <eos>` for a pair."""
    from tokenizers import processors

    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A:0 {EOS}:0", pair=f"$A:0 {EOS}:0 $B:1 {EOS}:1",
        special_tokens=[(EOS, tokenizer.convert_tokens_to_ids(EOS))])
    return tokenizer


def gte_tokenizer():
    """The byte-level BPE of the other Qwen fixtures, with gte-Qwen2's eos (<|endoftext|>, which it appends)."""
    tokenizer = qwen_like_tokenizer(sentences())
    tokenizer.eos_token = EOS
    return tokenizer


def encoder(path, tokenizer_path=None):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    args = {"tokenizer_name_or_path": str(tokenizer_path)} if tokenizer_path else {}
    return SentenceTransformer(modules=[Transformer(str(path), max_seq_length=64, **args),
                                        Pooling(32, pooling_mode="lasttoken"), Normalize()],
                               prompts={"query": QUERY_PROMPT}, device="cpu")


@torch.no_grad()
def main():
    from transformers import Qwen2Config, Qwen2Model

    torch.set_num_threads(1)
    out_root = Path(sys.argv[1])
    plain = gte_tokenizer()
    texts = [t.strip() for t in TEXTS]
    cfg = Qwen2Config(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.2,
                      rope_parameters={"rope_type": "default", "rope_theta": 1e6}, vocab_size=len(plain),
                      eos_token_id=plain.convert_tokens_to_ids(EOS), is_causal=False)
    model = seeded(Qwen2Model, cfg, SEED + 98)

    tmp = out_root / "_tmp_gte_qwen2"
    save(model, plain, tmp / "plain")
    save(model, appending_eos(gte_tokenizer()), tmp / "eos")
    remote = encoder(tmp / "eos")
    vectors = remote.encode(texts, convert_to_numpy=True).tolist()
    query_vectors = remote.encode(texts, prompt_name="query", convert_to_numpy=True).tolist()
    counts = [len(remote.tokenize([t])["input_ids"][0]) for t in texts]
    plain_vectors = encoder(tmp / "plain").encode(texts, convert_to_numpy=True).tolist()

    # The fixture must tell both ways of attending apart, and tell the eos's presence.
    causal = json.loads((tmp / "eos" / "config.json").read_text())
    causal["is_causal"] = True
    (tmp / "eos" / "config.json").write_text(json.dumps(causal))
    causal_vectors = encoder(tmp / "eos").encode(texts, convert_to_numpy=True)
    assert abs(causal_vectors - torch.tensor(vectors).numpy()).max() > 1e-2, "is_causal changed nothing"
    assert abs(torch.tensor(plain_vectors) - torch.tensor(vectors)).max() > 1e-2, "the eos changed nothing"

    d = out_root / "gte-qwen2-embed"
    shutil.rmtree(d, ignore_errors=True)
    encoder(tmp / "plain").save(str(d), create_model_card=False)
    config = json.loads((d / "config.json").read_text())
    assert config.get("is_causal") is False, "save_pretrained dropped is_causal"
    config["auto_map"] = MODEL_CODE
    (d / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tok_config = json.loads((d / "tokenizer_config.json").read_text())
    tok_config["auto_map"] = TOKENIZER_CODE
    (d / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2) + "\n")
    (d / "reference.json").write_text(json.dumps({"texts": texts, "vectors": vectors, "token_counts": counts,
                                                  "prompt": QUERY_PROMPT, "query_vectors": query_vectors,
                                                  "plain_vectors": plain_vectors}, ensure_ascii=False, indent=1))
    shutil.rmtree(tmp)
    (d / "README.md").unlink(missing_ok=True)
    size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    print(f"gte-qwen2-embed: {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
