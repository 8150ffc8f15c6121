#!/usr/bin/env python3
"""Images/s and audio clips/s: Aleph's server beside transformers in-process, same models, same files, one run.

    cargo build --release -p aleph-server
    python3 bench/media_compare.py            # needs torch, transformers, pillow, soundfile

The models have the real architectures' shapes (openai/clip-vit-base-patch32, google/siglip-base-patch16-224,
laion/clap-htsat-unfused)
with seeded random weights: the hubs are unreachable here, and speed does not depend on the values.
The text towers' vocabularies are the test fixtures' (CLIP's real one; a small BPE for CLAP), which does
not touch image or audio speed. Aleph and Infinity (when its venv from ../shared/peers/run-infinity.sh is
there, or INFINITY=/path/to/infinity_emb) are measured over HTTP with data URIs, decoding and preprocessing
included, each server alone; transformers runs the processor and the model in-process on the same batches,
torch with as many threads as cores.
"""
import base64
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "tiny"
PORT = 7995
BATCH = int(os.environ.get("BATCH", "8"))
REQUESTS = int(os.environ.get("REQUESTS", "12"))
CONCURRENCY = int(os.environ.get("CONCURRENCY", "2"))
REPEATS = 3


def make_clip(out: Path):
    from transformers import CLIPConfig, CLIPModel
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    torch.manual_seed(0)
    cfg = CLIPConfig(
        text_config=dict(vocab_size=49408, hidden_size=512, intermediate_size=2048, num_hidden_layers=12,
                         num_attention_heads=8, max_position_embeddings=77, bos_token_id=49406, eos_token_id=49407),
        vision_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                           image_size=224, patch_size=32),
        projection_dim=512)
    model = CLIPModel(cfg).eval()
    model.save_pretrained(out)
    CLIPImageProcessorPil().save_pretrained(out)
    for f in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(FIX / "clip" / f, out / f)
    return model, CLIPImageProcessorPil()


def make_siglip(out: Path):
    from transformers import SiglipConfig, SiglipModel
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    torch.manual_seed(0)
    cfg = SiglipConfig(text_config=dict(vocab_size=32000), vision_config=dict(image_size=224, patch_size=16))
    model = SiglipModel(cfg).eval()
    model.save_pretrained(out)
    proc = SiglipImageProcessorPil(size={"height": 224, "width": 224}, resample=3, image_mean=[0.5] * 3,
                                   image_std=[0.5] * 3)
    proc.save_pretrained(out)
    shutil.copy(FIX / "siglip" / "tokenizer.json", out / "tokenizer.json")
    # The generic fast tokenizer class, which the transformers version Infinity pins also knows.
    tc = json.loads((FIX / "siglip" / "tokenizer_config.json").read_text())
    tc["tokenizer_class"] = "PreTrainedTokenizerFast"
    (out / "tokenizer_config.json").write_text(json.dumps(tc))
    return model, proc


def make_clap(out: Path):
    from transformers import ClapConfig, ClapFeatureExtractor, ClapModel

    torch.manual_seed(0)
    cfg = ClapConfig(text_config=dict(vocab_size=700), audio_config=dict(enable_fusion=False), projection_dim=512)
    model = ClapModel(cfg).eval()
    model.save_pretrained(out)
    fe = ClapFeatureExtractor(truncation="rand_trunc", padding="repeatpad")
    fe.save_pretrained(out)
    for f in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(FIX / "clap" / f, out / f)
    return model, fe


def images():
    """Photos-sized PNG and JPEG files (640x480 and 500x375), made here."""
    from PIL import Image
    import io

    rng = np.random.default_rng(0)
    files = []
    for i, (w, h, fmt) in enumerate([(640, 480, "PNG"), (500, 375, "JPEG")] * 4):
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([x * 255 / w, y * 255 / h, (x + y) * 128 / (w + h)], -1) + rng.normal(0, 20, (h, w, 3))
        buf = io.BytesIO()
        Image.fromarray(np.clip(base, 0, 255).astype(np.uint8)).save(buf, fmt)
        files.append((buf.getvalue(), "image/png" if fmt == "PNG" else "image/jpeg"))
    return files


def clips():
    """7-second 48 kHz mono WAV clips (shorter than CLAP's 10 s window: repeat-padded)."""
    import io
    import soundfile as sf

    rng = np.random.default_rng(1)
    files = []
    for i in range(8):
        t = np.arange(48000 * 7) / 48000
        x = 0.3 * np.sin(2 * np.pi * (200 + 50 * i + 300 * t) * t) + 0.05 * rng.normal(size=t.size)
        buf = io.BytesIO()
        sf.write(buf, x, 48000, format="WAV", subtype="PCM_16")
        files.append((buf.getvalue(), "audio/wav"))
    return files


def post(body):
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}/embeddings", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    assert len(out["data"]) == len(body["input"])


INFINITY = os.environ.get("INFINITY", str(Path.home() / ".cache/aleph-peers/infinity-venv/bin/infinity_emb"))


def server_rate(cmd, label, files, modality):
    log = open(f"/tmp/media-bench-{label}-{modality}.log", "w")
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=1)
                break
            except Exception:
                if proc.poll() is not None:
                    sys.exit(f"{label} exited; see /tmp/media-bench-{label}-{modality}.log")
                time.sleep(0.05)
        ready = time.time() - t0
        uris = [f"data:{mime};base64,{base64.b64encode(b).decode()}" for b, mime in files]
        body = {"input": uris[:BATCH], "modality": modality}
        post(body)  # warm
        rates = []
        for _ in range(REPEATS):
            t = time.time()
            with ThreadPoolExecutor(CONCURRENCY) as ex:
                list(ex.map(lambda _: post(body), range(REQUESTS)))
            rates.append(REQUESTS * BATCH / (time.time() - t))
        rss = int(open(f"/proc/{proc.pid}/status").read().split("VmHWM:")[1].split()[0]) / 1024
        return statistics.median(rates), ready, rss
    finally:
        proc.terminate()
        proc.wait()


def aleph_rate(model_dir: Path, files, modality):
    aleph = ROOT / "target" / "release" / "aleph"
    cmd = [str(aleph), "v2", "--model-id", str(model_dir), "--port", str(PORT), "--batch-size", str(BATCH)]
    return server_rate(cmd, "aleph", files, modality)


def infinity_rate(model_dir: Path, files, modality):
    if not Path(INFINITY).exists():
        return None
    cmd = [INFINITY, "v2", "--model-id", str(model_dir), "--port", str(PORT), "--batch-size", str(BATCH),
           "--engine", "torch", "--device", "cpu"]
    try:
        return server_rate(cmd, "infinity", files, modality)
    except (SystemExit, OSError) as e:  # a model Infinity cannot serve: reported, not fatal
        print(f"infinity: {e}", file=sys.stderr)
        return None


def line(what, aleph, hf, infinity):
    rate, ready, rss = aleph
    out = {"what": what, "aleph": round(rate, 1), "transformers": round(hf, 1), "aleph/transformers": round(rate / hf, 2),
           "aleph_ready_s": round(ready, 2), "aleph_peak_rss_mb": round(rss)}
    if infinity:
        out.update({"infinity": round(infinity[0], 1), "aleph/infinity": round(rate / infinity[0], 2),
                    "infinity_ready_s": round(infinity[1], 2), "infinity_peak_rss_mb": round(infinity[2])})
    return out


def torch_rate(fn, n_items):
    fn()  # warm
    rates = []
    for _ in range(REPEATS):
        t = time.time()
        for _ in range(REQUESTS):
            fn()
        rates.append(REQUESTS * n_items / (time.time() - t))
    return statistics.median(rates)


def main():
    import io
    from PIL import Image
    import soundfile as sf

    torch.set_num_threads(os.cpu_count())
    work = Path(tempfile.mkdtemp(prefix="aleph-media-bench-"))
    results = []

    parts = os.environ.get("PARTS", "clip,siglip,clap").split(",")
    imgs = images()
    for part, make, what in [("clip", make_clip, "CLIP ViT-B/32 images/s"),
                             ("siglip", make_siglip, "SigLIP B/16-224 images/s")]:
        if part not in parts:
            continue
        model_dir = work / f"{part}-shape"
        model, proc = make(model_dir)
        aleph = aleph_rate(model_dir, imgs, "image")
        infinity = infinity_rate(model_dir, imgs, "image")

        def hf_images():
            pics = [Image.open(io.BytesIO(b)).convert("RGB") for b, _ in imgs[:BATCH]]
            with torch.no_grad():
                model.get_image_features(**proc(images=pics, return_tensors="pt"))

        results.append(line(what, aleph, torch_rate(hf_images, BATCH), infinity))
        del model
    if "clap" not in parts:
        shutil.rmtree(work)
        for r in results:
            print(json.dumps(r))
        return

    clap_dir = work / "clap-htsat-unfused-shape"
    model, fe = make_clap(clap_dir)
    wavs = clips()
    aleph = aleph_rate(clap_dir, wavs, "audio")
    infinity = infinity_rate(clap_dir, wavs, "audio")

    def hf_audio():
        xs = [sf.read(io.BytesIO(b))[0] for b, _ in wavs[:BATCH]]
        with torch.no_grad():
            model.get_audio_features(**fe(xs, sampling_rate=48000, return_tensors="pt"))

    results.append(line("CLAP HTSAT clips/s (7 s, 48 kHz)", aleph, torch_rate(hf_audio, BATCH), infinity))
    shutil.rmtree(work)
    for r in results:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
