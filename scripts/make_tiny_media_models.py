#!/usr/bin/env python3
"""Tiny seeded random CLIP and CLAP models, real test media, and the outputs transformers computes for them.

Run on a developer machine with torch and Pillow (not in CI; the outputs are committed):
    pip install sentence-transformers pillow
    pip download --no-deps open-clip-torch   # for CLIP's real BPE vocabulary
    python3 scripts/make_tiny_media_models.py tests/fixtures/tiny open_clip_torch-*.whl

Writes `<out>/clip/` (config.json, model.safetensors in float16 as many hub checkpoints are,
tokenizer.json, preprocessor_config.json, reference.json), `<out>/clap/` (the same for an HTSAT + RoBERTa
CLAP) and `<out>/media/` (the test images and audio clips).
The CLIP reference uses transformers' PIL image processor, the one that reproduces OpenAI CLIP's
preprocessing. The CLAP reference uses ClapFeatureExtractor; where Aleph goes further than transformers
(other sample rates, stereo, clips longer than the window) the reference states the step it adds:
`scipy.signal.resample_poly` to the model's rate, the mean of the channels, the centre window.
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


AUDIO_TEXTS = ["a dog barking", "Rain on a tin roof, then thunder.", "", "music " * 200]


def test_audio(out):
    """Clips as soundfile writes them: (file, how Aleph must read it to reach the model's rate)."""
    import soundfile as sf

    rng = np.random.default_rng(SEED + 1)

    def chirp(rate, seconds, channels=1):
        t = np.arange(int(rate * seconds)) / rate
        x = 0.4 * np.sin(2 * np.pi * (300 + 900 * t) * t) + 0.05 * rng.normal(size=t.size)
        x = np.clip(x, -1, 1)
        if channels == 2:
            x = np.stack([x, np.roll(x, 100) * 0.5], axis=1)
        return x

    sf.write(out / "chirp-48k.wav", chirp(48000, 1.3), 48000, subtype="PCM_16")
    sf.write(out / "chirp-48k.flac", sf.read(out / "chirp-48k.wav")[0], 48000, subtype="PCM_16")
    sf.write(out / "long-stereo-48k.wav", chirp(48000, 3.1, channels=2), 48000, subtype="PCM_16")
    sf.write(out / "speech-16k.wav", chirp(16000, 0.9), 16000, subtype="PCM_16")
    # Lossy copies of the chirp: no reference (decoders differ), they must land near the WAV's embedding.
    wav = sf.read(out / "chirp-48k.wav")[0]
    sf.write(out / "chirp-48k.ogg", wav, 48000, format="OGG", subtype="VORBIS")
    sf.write(out / "chirp-48k.mp3", wav, 48000, format="MP3", subtype="MPEG_LAYER_III")
    return ["chirp-48k.wav", "chirp-48k.flac", "long-stereo-48k.wav", "speech-16k.wav"]


def bpe_tokenizer(corpus):
    """A byte-level BPE tokenizer in RoBERTa's layout (<s> A </s>), trained on the STS sentences."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=700, special_tokens=specials,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=False)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>", mask_token="<mask>", model_max_length=64)


def clap(out, media_dir, clips):
    import soundfile as sf
    from scipy.signal import resample_poly
    from transformers import ClapConfig, ClapFeatureExtractor, ClapModel

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_tiny_models import sentences

    torch.manual_seed(SEED)
    tok = bpe_tokenizer(sentences())
    text = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=66, type_vocab_size=1, pad_token_id=1, projection_dim=24)
    audio = dict(num_mel_bins=16, spec_size=64, patch_size=4, patch_stride=[4, 4], window_size=4,
                 patch_embeds_hidden_size=16, depths=[2, 2], num_attention_heads=[2, 4], hidden_size=32,
                 projection_dim=24, enable_fusion=False)
    cfg = ClapConfig(text_config=text, audio_config=audio, projection_dim=24)
    model = ClapModel(cfg).eval()
    # Non-trivial batch-norm statistics, so a missing normalization shows.
    with torch.no_grad():
        bn = model.audio_model.audio_encoder.batch_norm
        bn.running_mean.copy_(torch.randn(16) * 5 - 40)
        bn.running_var.copy_(torch.rand(16) * 30 + 5)
    fe = ClapFeatureExtractor(feature_size=16, sampling_rate=48000, hop_length=480, max_length_s=2,
                              fft_window_size=1024, frequency_min=50, frequency_max=14000,
                              truncation="rand_trunc", padding="repeatpad")
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    fe.save_pretrained(out)

    rate, window = fe.sampling_rate, fe.nb_max_samples
    clips_ref = []
    for name in clips:
        x, sr = sf.read(media_dir / name, dtype="float64", always_2d=True)
        x = x.mean(axis=1)  # mono
        if sr != rate:
            g = np.gcd(sr, rate)
            x = resample_poly(x, rate // g, sr // g)
        if len(x) > window:  # the centre window, where transformers would crop at random
            start = (len(x) - window) // 2
            x = x[start:start + window]
        feats = fe(x, sampling_rate=rate, return_tensors="pt")
        with torch.no_grad():
            emb = model.get_audio_features(**feats).pooler_output
        clips_ref.append({"file": name, "sampling_rate": sr, "input_features": feats["input_features"][0].flatten().tolist(),
                          "embedding": emb[0].tolist()})

    texts = []
    for t in AUDIO_TEXTS:
        enc = tok([t], truncation=True, return_tensors="pt")
        with torch.no_grad():
            emb = model.get_text_features(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).pooler_output
        texts.append({"text": t, "input_ids": enc["input_ids"][0].tolist(), "embedding": emb[0].tolist()})
    (out / "reference.json").write_text(json.dumps({
        "note": "embeddings are transformers' get_*_features outputs (L2-normalized)",
        "clips": clips_ref, "texts": texts,
    }))


def clap_fused(out, media_dir, clips):
    """A CLAP with feature fusion (`enable_fusion`, truncation `fusion`): the AFF block and the crop path.

    transformers picks each of the three crops at random within its third of the offsets and, when no clip
    in a batch is longer than the window, marks one at random as longer. Aleph takes the middle offset of
    each third and runs every clip as transformers runs a clip alone (always through the crop path); the
    reference makes the same choices: `np.random.choice` returns the middle element, one clip per call.
    """
    import soundfile as sf
    from scipy.signal import resample_poly
    from transformers import ClapConfig, ClapFeatureExtractor, ClapModel

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_tiny_models import sentences

    torch.manual_seed(SEED + 7)
    tok = bpe_tokenizer(sentences())
    text = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=66, type_vocab_size=1, pad_token_id=1, projection_dim=24)
    # Fusion squeezes the whole spectrogram to 64 mel bins (hard-coded in transformers), so 64 mels; a
    # 128-wide image with frequency ratio 2 holds the 201 frames of a 2 s window.
    audio = dict(num_mel_bins=64, spec_size=128, patch_size=4, patch_stride=[4, 4], window_size=4,
                 patch_embeds_hidden_size=16, depths=[2, 2], num_attention_heads=[2, 4], hidden_size=32,
                 projection_dim=24, enable_fusion=True, fusion_type="aff_2d", aff_block_r=4)
    cfg = ClapConfig(text_config=text, audio_config=audio, projection_dim=24)
    model = ClapModel(cfg).eval()
    # Non-trivial batch-norm statistics everywhere, so a missing or misfolded normalization shows.
    with torch.no_grad():
        for m in model.audio_model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n) * (5 if n == 64 else 0.3) - (40 if n == 64 else 0))
                m.running_var.copy_(torch.rand(n) * (30 if n == 64 else 1) + (5 if n == 64 else 0.5))
                m.weight.copy_(1 + 0.2 * torch.randn(n))
                m.bias.copy_(0.1 * torch.randn(n))
    fe = ClapFeatureExtractor(feature_size=64, sampling_rate=48000, hop_length=480, max_length_s=2,
                              fft_window_size=1024, frequency_min=50, frequency_max=14000,
                              truncation="fusion", padding="repeatpad")
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    fe.save_pretrained(out)

    np.random.choice = lambda a: a[len(a) // 2]  # the middle of each third, as Aleph takes
    rate = fe.sampling_rate
    clips_ref = []
    for name in clips:
        x, sr = sf.read(media_dir / name, dtype="float64", always_2d=True)
        x = x.mean(axis=1)  # mono
        if sr != rate:
            g = np.gcd(sr, rate)
            x = resample_poly(x, rate // g, sr // g)
        feats = fe(x, sampling_rate=rate, return_tensors="pt")  # one clip: is_longer is True
        assert bool(feats["is_longer"][0][0])
        with torch.no_grad():
            emb = model.get_audio_features(**feats).pooler_output
        clips_ref.append({"file": name, "sampling_rate": sr, "longer_than_window": len(x) > fe.nb_max_samples,
                          # dB values to 1e-5, to keep the file small
                          "input_features": [round(v, 5) for v in feats["input_features"][0].flatten().tolist()],
                          "embedding": emb[0].tolist()})
    texts = []
    for t in AUDIO_TEXTS:
        enc = tok([t], truncation=True, return_tensors="pt")
        with torch.no_grad():
            emb = model.get_text_features(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).pooler_output
        texts.append({"text": t, "input_ids": enc["input_ids"][0].tolist(), "embedding": emb[0].tolist()})
    (out / "reference.json").write_text(json.dumps({
        "note": "embeddings are transformers' get_*_features outputs (L2-normalized); input_features are the "
                "four fusion channels; crops at the middle offset of each third, each clip run alone",
        "clips": clips_ref, "texts": texts,
    }))


def siglip(out, media_dir, media):
    """A SigLIP (`SiglipModel`): vision tower with attention-pooling head, bidirectional text tower pooled at
    its last position. Texts are padded to the full 64 positions without an attention mask, as SigLIP was
    trained and as its model card prescribes (`padding="max_length"`; the tokenizer returns no mask).
    The tokenizer is a small BPE in Gemma's layout, as SigLIP 2's fixed-resolution checkpoints ship."""
    from PIL import Image
    from transformers import SiglipConfig, SiglipModel
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_tiny_colpali import gemma_like_tokenizer
    from make_tiny_models import sentences

    torch.manual_seed(SEED + 11)
    tok = gemma_like_tokenizer(sentences())
    tok.model_input_names = ["input_ids"]
    tok.model_max_length = 64
    text = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=64, hidden_act="gelu_pytorch_tanh",
                pad_token_id=tok.pad_token_id, projection_size=32)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  image_size=32, patch_size=8, hidden_act="gelu_pytorch_tanh")
    model = SiglipModel(SiglipConfig(text_config=text, vision_config=vision)).eval()
    proc = SiglipImageProcessorPil(size={"height": 32, "width": 32}, resample=3, image_mean=[0.5] * 3,
                                   image_std=[0.5] * 3)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    proc.save_pretrained(out)

    images = []
    for name, mime in media.items():
        data = (media_dir / name).read_bytes()
        pixels = proc(images=[Image.open(io.BytesIO(data))], return_tensors="pt")["pixel_values"]
        with torch.no_grad():
            emb = model.get_image_features(pixel_values=pixels).pooler_output
        images.append({"file": name, "pixel_values": pixels[0].flatten().tolist(), "embedding": emb[0].tolist()})
    texts = []
    for t in TEXTS:
        enc = tok([t], padding="max_length", max_length=64, truncation=True, return_tensors="pt")
        assert "attention_mask" not in enc
        with torch.no_grad():
            emb = model.get_text_features(**enc).pooler_output
        texts.append({"text": t, "input_ids": enc["input_ids"][0].tolist(), "embedding": emb[0].tolist()})
    (out / "reference.json").write_text(json.dumps({
        "note": "embeddings are transformers' get_*_features outputs, before L2 normalization; texts padded "
                "to 64 positions without an attention mask",
        "images": images, "texts": texts,
    }))


IMAGE_FILES = ["wide.png", "tall.jpg", "small-gray.png", "alpha.png"]
AUDIO_FILES = ["chirp-48k.wav", "chirp-48k.flac", "long-stereo-48k.wav", "speech-16k.wav"]


def main():
    """Arguments: the output folder, the open-clip-torch wheel, then the parts to make (default: all)."""
    root, wheel = Path(sys.argv[1]), Path(sys.argv[2])
    parts = sys.argv[3:] or ["clip", "clap", "clap-fused", "siglip"]
    media_dir = root / "media"
    media_dir.mkdir(parents=True, exist_ok=True)
    if "clip" in parts:
        media = test_images(media_dir)
        d = root / "clip"
        d.mkdir(parents=True, exist_ok=True)
        clip(d, wheel, media_dir, media)
    if "clap" in parts:
        clips = test_audio(media_dir)
        assert clips == AUDIO_FILES
        d = root / "clap"
        d.mkdir(parents=True, exist_ok=True)
        clap(d, media_dir, clips)
    if "clap-fused" in parts:
        d = root / "clap-fused"
        d.mkdir(parents=True, exist_ok=True)
        clap_fused(d, media_dir, [f for f in AUDIO_FILES if f != "chirp-48k.flac"])
    if "siglip" in parts:
        d = root / "siglip"
        d.mkdir(parents=True, exist_ok=True)
        media = {f: "image/jpeg" if f.endswith(".jpg") else "image/png" for f in IMAGE_FILES}
        siglip(d, media_dir, media)
    print("wrote", ", ".join(parts), "under", root)


if __name__ == "__main__":
    main()
