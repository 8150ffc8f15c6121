"""Tiny model2vec static models and their reference outputs, made with the real model2vec (`pip install
model2vec`; no torch): a seeded random table over the tiny BERT fixture's 600-token WordPiece vocabulary, saved
with `StaticModel.save_pretrained`, and `StaticModel.encode`'s vectors for texts that exercise its rules
(no special tokens, unknown tokens dropped, the character pre-cut and token truncation, empty texts).

    python scripts/make_static_models.py   # writes tests/fixtures/tiny/model2vec{,-raw}
"""
import json
import pathlib

import numpy as np
from model2vec import StaticModel
from tokenizers import Tokenizer

import model2vec

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = ROOT / "tests/fixtures/tiny"

TEXTS = [
    "I love this movie",
    "The quick brown fox jumps over the lazy dog",
    "émoji 🙂 and ünknown ßymbols ©",
    "",
    "   ",
    "a " * 40 + "long text that is cut",
    "Paris, France; hello world!",
]


def make(name: str, normalize: bool, max_length, dim: int, seed: int):
    tokenizer = Tokenizer.from_file(str(TINY / "bert-classify/tokenizer.json"))
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((vocab, dim)).astype(np.float32)
    model = StaticModel(vectors, tokenizer, normalize=normalize, max_length=max_length)
    out = TINY / name
    model.save_pretrained(str(out))
    loaded = StaticModel.from_pretrained(str(out))
    embeddings = loaded.encode(TEXTS)
    ids = loaded.tokenize(TEXTS)
    (out / "reference.json").write_text(json.dumps({
        "model2vec": model2vec.__version__,
        "texts": TEXTS,
        "embeddings": embeddings.astype(np.float64).tolist(),
        "token_counts": [len(i) for i in ids],
        "normalize": normalize,
        "max_length": max_length,
    }, indent=1))
    for junk in ("README.md",):
        (out / junk).unlink(missing_ok=True)


if __name__ == "__main__":
    make("model2vec", normalize=True, max_length=8, dim=16, seed=7)
    make("model2vec-raw", normalize=False, max_length=None, dim=12, seed=8)
