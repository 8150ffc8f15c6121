"""Tiny sentence-transformers `StaticEmbedding` models and their reference outputs, made with the real
sentence-transformers (`pip install sentence-transformers`, which pulls torch): a seeded random table over the
tiny BERT fixture's 600-token WordPiece vocabulary, wrapped in a `SentenceTransformer` and saved with `save`, and
`encode`'s vectors for texts that exercise its rules (no special tokens, unknown tokens kept in the mean, no
truncation beyond what `tokenizer.json` itself says, prompts prepended, an empty bag's zero vector).

    python scripts/make_st_static.py   # writes tests/fixtures/tiny/st-static{,-legacy}

`st-static` is sentence-transformers 6's layout (the module at the root, then `1_Normalize`, named prompts);
`st-static-legacy` is the layout of the models on the hub (`0_StaticEmbedding/`, `sentence_transformers.models`
type names), with a token cut of 10 set in its `tokenizer.json` and no `Normalize`.
"""
import json
import pathlib
import shutil

import numpy as np
import sentence_transformers
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Normalize, StaticEmbedding
from tokenizers import Tokenizer

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = ROOT / "tests/fixtures/tiny"

TEXTS = [
    "I love this movie",
    "The quick brown fox jumps over the lazy dog",
    "émoji 🙂 and ünknown ßymbols ©",
    "",
    "   ",
    "a " * 40 + "long text that is not cut",
    "Paris, France; hello world!",
]


def tokenizer(truncate_at=None) -> Tokenizer:
    tok = Tokenizer.from_file(str(TINY / "bert-classify/tokenizer.json"))
    tok.no_padding()
    if truncate_at is None:
        tok.no_truncation()
    else:
        tok.enable_truncation(truncate_at)
    return tok


def references(model: SentenceTransformer, out: pathlib.Path, prompt_names):
    loaded = SentenceTransformer(str(out), device="cpu")
    module = loaded[0]
    ref = {
        "sentence_transformers": sentence_transformers.__version__,
        "texts": TEXTS,
        "embeddings": loaded.encode(TEXTS, convert_to_numpy=True).astype(np.float64).tolist(),
        "token_counts": [len(e.ids) for e in module.tokenizer.encode_batch(TEXTS, add_special_tokens=False)],
        "prompted": {},
        "normalize": any(type(m).__name__ == "Normalize" for m in loaded),
    }
    for name in prompt_names:
        prompt = loaded.prompts[name]
        ref["prompted"][name] = {
            "embeddings": loaded.encode(TEXTS, prompt_name=name, convert_to_numpy=True).astype(np.float64).tolist(),
            "token_counts": [
                len(e.ids)
                for e in module.tokenizer.encode_batch([prompt + t for t in TEXTS], add_special_tokens=False)
            ],
        }
    (out / "reference.json").write_text(json.dumps(ref, indent=1))
    (out / "README.md").unlink(missing_ok=True)


def current_layout():
    tok = tokenizer()
    table = np.random.default_rng(11).standard_normal((tok.get_vocab_size(True), 16)).astype(np.float32)
    model = SentenceTransformer(
        modules=[StaticEmbedding(tok, embedding_weights=table), Normalize()],
        prompts={"query": "query: ", "document": ""},
        device="cpu",
    )
    out = TINY / "st-static"
    shutil.rmtree(out, ignore_errors=True)
    model.save(str(out))
    references(model, out, ["query"])


def legacy_layout():
    tok = tokenizer(truncate_at=10)
    table = np.random.default_rng(12).standard_normal((tok.get_vocab_size(True), 12)).astype(np.float32)
    model = SentenceTransformer(modules=[StaticEmbedding(tok, embedding_weights=table)], device="cpu")
    out = TINY / "st-static-legacy"
    shutil.rmtree(out, ignore_errors=True)
    model.save(str(out))
    # The hub's static models (sentence-transformers 3-5): the module in its own folder, the old type names.
    module = out / "0_StaticEmbedding"
    module.mkdir()
    for name in ("model.safetensors", "tokenizer.json"):
        (out / name).rename(module / name)
    modules = [{"idx": 0, "name": "0", "path": "0_StaticEmbedding", "type": "sentence_transformers.models.StaticEmbedding"}]
    (out / "modules.json").write_text(json.dumps(modules, indent=2))
    references(model, out, [])


if __name__ == "__main__":
    current_layout()
    legacy_layout()
