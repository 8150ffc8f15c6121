#!/usr/bin/env python3
"""A seeded random checkpoint at a real model's shape, with nothing but Python's standard library (no torch, no
numpy: the GPU machines this runs on may have neither, and no network).

    scripts/make_shaped_model.py SHAPE OUT_DIR

SHAPE: minilm (all-MiniLM-L6-v2: BERT, 6 x 384), bert-base (12 x 768), qwen3-0.6b (Qwen3-Embedding-0.6B: 28 x 1024,
16 query and 8 key/value heads of 128, last-token pooling, bf16 as that checkpoint ships), or tiny-bert / tiny-qwen3
(the same families at a few thousand parameters, for scripts/gpu-check.sh --dry-run).

The tokenizer and sentence-transformers files come from a tiny fixture of the family (tests/fixtures/tiny): only the
vocabulary is small, so the embedding table is; every layer has the real checkpoint's shape. Weights are uniform in
±[2^-7, 2^-5) with a random sign (about 0.02, transformers' initializer range), norms one and biases zero, so the
activations stay in range through every layer. The same SHAPE gives the same bytes.
"""
import json
import random
import shutil
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "fixtures" / "tiny"

SHAPES = {
    "minilm": dict(family="bert", hidden=384, layers=6, heads=12, intermediate=1536),
    "bert-base": dict(family="bert", hidden=768, layers=12, heads=12, intermediate=3072),
    "qwen3-0.6b": dict(family="qwen3", hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128,
                       intermediate=3072, dtype="bfloat16"),
    "tiny-bert": dict(family="bert", hidden=64, layers=2, heads=4, intermediate=128),
    "tiny-qwen3": dict(family="qwen3", hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128,
                       dtype="bfloat16"),
}

# The fixture whose tokenizer (and sentence-transformers modules) each family borrows.
SOURCE = {"bert": "bert-rerank", "qwen3": "qwen3-embed"}


def random_bf16_bytes(rng: random.Random, count: int) -> bytes:
    """`count` bf16 numbers, little-endian: the low byte random (exponent bit 0 and mantissa), the high byte the sign
    and exponent 120 or 121's upper bits: magnitudes in [2^-7, 2^-5)."""
    low = rng.randbytes(count)
    high = rng.randbytes(count).translate(bytes((0x3C | (b & 0x80)) for b in range(256)))
    out = bytearray(2 * count)
    out[0::2] = low
    out[1::2] = high
    return bytes(out)


def constant_bytes(value: float, count: int, dtype: str) -> bytes:
    if dtype == "F32":
        return struct.pack("<f", value) * count
    return struct.pack("<f", value)[2:] * count  # bf16: the upper half of the f32


class Writer:
    """Collects tensors and writes one safetensors file."""

    def __init__(self, dtype: str, seed: int):
        self.dtype = dtype  # "F32" or "BF16"
        self.rng = random.Random(seed)
        self.tensors = []

    def random(self, name, shape):
        n = 1
        for d in shape:
            n *= d
        data = random_bf16_bytes(self.rng, n)
        if self.dtype == "F32":
            # The same numbers widened: each bf16 in the upper half of an f32.
            wide = bytearray(4 * n)
            wide[2::4] = data[0::2]
            wide[3::4] = data[1::2]
            data = bytes(wide)
        self.tensors.append((name, shape, data))

    def const(self, name, shape, value):
        n = 1
        for d in shape:
            n *= d
        self.tensors.append((name, shape, constant_bytes(value, n, self.dtype)))

    def save(self, path: Path):
        header, offset = {}, 0
        for name, shape, data in self.tensors:
            header[name] = {"dtype": self.dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
            offset += len(data)
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(raw)))
            f.write(raw)
            for _, _, data in self.tensors:
                f.write(data)


def bert(s, vocab, w: Writer):
    h, i = s["hidden"], s["intermediate"]
    w.random("embeddings.word_embeddings.weight", (vocab, h))
    w.random("embeddings.position_embeddings.weight", (512, h))
    w.random("embeddings.token_type_embeddings.weight", (2, h))
    w.const("embeddings.LayerNorm.weight", (h,), 1.0)
    w.const("embeddings.LayerNorm.bias", (h,), 0.0)
    for n in range(s["layers"]):
        p = f"encoder.layer.{n}."
        for part in ("query", "key", "value"):
            w.random(p + f"attention.self.{part}.weight", (h, h))
            w.const(p + f"attention.self.{part}.bias", (h,), 0.0)
        w.random(p + "attention.output.dense.weight", (h, h))
        w.const(p + "attention.output.dense.bias", (h,), 0.0)
        w.const(p + "attention.output.LayerNorm.weight", (h,), 1.0)
        w.const(p + "attention.output.LayerNorm.bias", (h,), 0.0)
        w.random(p + "intermediate.dense.weight", (i, h))
        w.const(p + "intermediate.dense.bias", (i,), 0.0)
        w.random(p + "output.dense.weight", (h, i))
        w.const(p + "output.dense.bias", (h,), 0.0)
        w.const(p + "output.LayerNorm.weight", (h,), 1.0)
        w.const(p + "output.LayerNorm.bias", (h,), 0.0)
    return {
        "architectures": ["BertModel"], "model_type": "bert", "hidden_size": h, "num_hidden_layers": s["layers"],
        "num_attention_heads": s["heads"], "intermediate_size": i, "hidden_act": "gelu", "vocab_size": vocab,
        "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0,
        "torch_dtype": "float32",
    }


def qwen3(s, vocab, w: Writer):
    h, i, hd, heads, kv = s["hidden"], s["intermediate"], s["head_dim"], s["heads"], s["kv_heads"]
    w.random("embed_tokens.weight", (vocab, h))
    for n in range(s["layers"]):
        p = f"layers.{n}."
        w.random(p + "self_attn.q_proj.weight", (heads * hd, h))
        w.random(p + "self_attn.k_proj.weight", (kv * hd, h))
        w.random(p + "self_attn.v_proj.weight", (kv * hd, h))
        w.random(p + "self_attn.o_proj.weight", (h, heads * hd))
        w.const(p + "self_attn.q_norm.weight", (hd,), 1.0)
        w.const(p + "self_attn.k_norm.weight", (hd,), 1.0)
        w.const(p + "input_layernorm.weight", (h,), 1.0)
        w.const(p + "post_attention_layernorm.weight", (h,), 1.0)
        w.random(p + "mlp.gate_proj.weight", (i, h))
        w.random(p + "mlp.up_proj.weight", (i, h))
        w.random(p + "mlp.down_proj.weight", (h, i))
    w.const("norm.weight", (h,), 1.0)
    return {
        "architectures": ["Qwen3Model"], "model_type": "qwen3", "hidden_size": h, "num_hidden_layers": s["layers"],
        "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd, "intermediate_size": i,
        "hidden_act": "silu", "vocab_size": vocab, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "tie_word_embeddings": True, "eos_token_id": 0, "torch_dtype": "bfloat16",
    }


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in SHAPES:
        sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(SHAPES)}}} OUT_DIR")
    name, out = sys.argv[1], Path(sys.argv[2])
    s = SHAPES[name]
    source = TINY / SOURCE[s["family"]]
    if out.exists():
        shutil.rmtree(out)
    # The tokenizer and the sentence-transformers modules; config and weights are written below.
    written = {"model.safetensors", "config.json", "reference.json"}
    shutil.copytree(source, out, ignore=lambda d, names: [n for n in names if Path(d) == source and n in written])
    vocab = len(json.loads((source / "tokenizer.json").read_text())["model"]["vocab"])
    writer = Writer("BF16" if s.get("dtype") == "bfloat16" else "F32", seed=sum(map(ord, name)))
    config = (bert if s["family"] == "bert" else qwen3)(s, vocab, writer)
    writer.save(out / "model.safetensors")
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    pooling = out / "1_Pooling" / "config.json"
    if pooling.exists():
        p = json.loads(pooling.read_text())
        p["embedding_dimension"] = s["hidden"]
        pooling.write_text(json.dumps(p, indent=2) + "\n")
    print(f"{name}: {out} ({(out / 'model.safetensors').stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
