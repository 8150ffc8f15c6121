#!/usr/bin/env python3
"""Tiny seeded random CLIP model, real test media, and the outputs transformers computes for them.

Run on a developer machine with torch and Pillow (not in CI; the outputs are committed):
    pip install sentence-transformers pillow
    pip download --no-deps open-clip-torch   # for CLIP's real BPE vocabulary
    python3 scripts/make_tiny_media_models.py tests/fixtures/tiny open_clip_torch-*.whl

Writes `<out>/clip/` (config.json, model.safetensors in float16 as many hub checkpoints are,
tokenizer.json, preprocessor_config.json, reference.json) and `<out>/media/` (the test images).
The reference uses transformers' PIL image processor, the one that reproduces OpenAI CLIP's preprocessing.
"""
import base64
import gzip
import io
import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import torch

SEED = 1234

TEXTS = [
    "a photo of a cat",
    "A DIAGRAM of   two red squares",
    "",
    "Café au lait, naïve façade 🎉",
    "a very long caption " * 40,  # past CLIP's 77-token window: truncated, end token kept
]


def bytes_to_unicode():
    """GPT-2's reversible byte → printable character map, which CLIP's BPE vocabulary is written in."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def clip_tokenizer(wheel):
    """CLIP's tokenizer with the vocabulary OpenAI released (49,408 tokens), as transformers builds it."""
    from transformers import CLIPTokenizer

    with zipfile.ZipFile(wheel) as z:
        raw = gzip.decompress(z.read("open_clip/bpe_simple_vocab_16e6.txt.gz")).decode("utf-8")
    merges = [tuple(m.split()) for m in raw.split("\n")[1 : 49152 - 256 - 2 + 1]]
    vocab = list(bytes_to_unicode().values())
    vocab = vocab + [v + "</w>" for v in vocab] + ["".join(m) for m in merges] + ["<|startoftext|>", "<|endoftext|>"]
    return CLIPTokenizer(vocab={t: i for i, t in enumerate(vocab)}, merges=merges, model_max_length=77)


def test_images(out):
    """Real encoded files: smooth gradients with noise, so resampling and decoding errors show."""
    from PIL import Image

    rng = np.random.default_rng(SEED)

    def pattern(h, w, channels):
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([(x * 255 / max(w - 1, 1)), (y * 255 / max(h - 1, 1)), ((x + y) * 128 / (h + w))], -1)
        noise = rng.normal(0, 25, size=(h, w, 3))
        rgb = np.clip(base + noise, 0, 255).astype(np.uint8)
        if channels == 4:
            alpha = np.clip(x * 255 / max(w - 1, 1), 0, 255).astype(np.uint8)[..., None]
            return np.concatenate([rgb, alpha], -1)
        return rgb

    files = {}
    # Wider than tall, downscaled: the common case.
    Image.fromarray(pattern(48, 64, 3)).save(out / "wide.png")
    files["wide.png"] = "image/png"
    # Taller than wide, 4:4:4 JPEG (decoders agree on it; chroma upsampling is where they differ).
    Image.fromarray(pattern(75, 41, 3)).save(out / "tall.jpg", quality=95, subsampling=0)
    files["tall.jpg"] = "image/jpeg"
    # Smaller than the model's input: upscaled.
    Image.fromarray(pattern(20, 23, 3)).convert("L").save(out / "small-gray.png")
    files["small-gray.png"] = "image/png"
    # Transparency: composited onto white before resizing.
    Image.fromarray(pattern(40, 40, 4), mode="RGBA").save(out / "alpha.png")
    files["alpha.png"] = "image/png"
    return files


def clip(out, wheel, media_dir, media):
    from PIL import Image
    from transformers import CLIPConfig, CLIPModel
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    torch.manual_seed(SEED)
    tok = clip_tokenizer(wheel)
    text = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=77, hidden_act="quick_gelu",
                bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  image_size=32, patch_size=8, hidden_act="quick_gelu")
    cfg = CLIPConfig(text_config=text, vision_config=vision, projection_dim=24)
    model = CLIPModel(cfg).eval()
    # Round the weights to float16 (the file's dtype), then compute the reference in float32 from them.
    model = model.half().float()
    proc = CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})

    model.half().save_pretrained(out, safe_serialization=True)
    model.float()
    tok.save_pretrained(out)
    proc.save_pretrained(out)
    for f in ["vocab.json", "merges.txt"]:  # tokenizer.json holds both
        (out / f).unlink(missing_ok=True)

    images = []
    for name, mime in media.items():
        data = (media_dir / name).read_bytes()
        pixels = proc(images=[Image.open(io.BytesIO(data))], return_tensors="pt")["pixel_values"]
        with torch.no_grad():
            emb = model.get_image_features(pixel_values=pixels)
            emb = emb.pooler_output if hasattr(emb, "pooler_output") else emb
        # What Pillow (libjpeg-turbo for JPEG) decodes, so the preprocessing can be checked apart from
        # the decoder: pure-Rust JPEG decoders round the inverse DCT differently by a level or two.
        rgb = np.array(Image.open(io.BytesIO(data)).convert("RGBA" if name.endswith("alpha.png") else "RGB"))
        images.append({"file": name, "mime": mime, "pixel_values": pixels[0].flatten().tolist(),
                       "decoded": base64.b64encode(rgb.tobytes()).decode(), "shape": list(rgb.shape),
                       "embedding": emb[0].tolist()})

    texts = []
    for t in TEXTS:
        enc = tok([t], truncation=True, return_tensors="pt")
        with torch.no_grad():
            emb = model.get_text_features(**enc)
            emb = emb.pooler_output if hasattr(emb, "pooler_output") else emb
        texts.append({"text": t, "input_ids": enc["input_ids"][0].tolist(), "embedding": emb[0].tolist()})

    (out / "reference.json").write_text(json.dumps({
        "note": "embeddings are transformers' get_*_features outputs, before L2 normalization",
        "images": images, "texts": texts,
    }))


def main():
    root, wheel = Path(sys.argv[1]), Path(sys.argv[2])
    media_dir = root / "media"
    media_dir.mkdir(parents=True, exist_ok=True)
    media = test_images(media_dir)
    d = root / "clip"
    d.mkdir(parents=True, exist_ok=True)
    clip(d, wheel, media_dir, media)
    print("wrote", d, "and", media_dir)


if __name__ == "__main__":
    main()
