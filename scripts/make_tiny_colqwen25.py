#!/usr/bin/env python3
"""A tiny seeded random ColQwen2.5 (`ColQwen2ForRetrieval` over Qwen2.5-VL: `vlm_config.model_type` `qwen2_5_vl`,
the layout of the `-hf` conversions of vidore/colqwen2.5-v0.2) and the per-token vectors transformers computes for
test images and queries.

Qwen2.5-VL's vision tower differs from Qwen2-VL's: RMS norms, a SiLU-gated MLP with biases, an RMS-normed merger,
and attention within windows of `window_size` pixels on every block but `fullatt_block_indexes`. The tiny tower
has windows of 2×2 merged tokens (16 pixels) and full attention on its middle block only, and the test images give
grids whose last window row and column are partial.

Run on a developer machine with torch and Pillow (not in CI; the outputs are committed):
    python3 scripts/make_tiny_colqwen25.py tests/fixtures/tiny

Writes `<out>/colqwen25/` as make_tiny_colqwen2.py writes colqwen2/ (same tokenizer recipe, processor and
reference layout), its config.json with every value equal to its class's default left out.
"""
import json
import sys
from pathlib import Path

import torch

SEED = 2469

QUERIES = ["What is the revenue in 2023?", "two red squares", "", "Café au lait, naïve façade 🎉"]
IMAGES = ["wide.png", "tall.jpg", "alpha.png", "small-gray.png"]


def minimized(config_cls, values):
    """`values` without the entries equal to `config_cls`'s defaults (as other transformers versions save)."""
    defaults = config_cls().to_dict()
    keep = {"model_type"}
    return {k: v for k, v in values.items() if k in keep or k not in defaults or defaults[k] != v}


def main():
    from PIL import Image
    from transformers import ColQwen2Config, ColQwen2ForRetrieval, ColQwen2Processor, Qwen2_5_VLConfig
    from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import (Qwen2_5_VLTextConfig,
                                                                          Qwen2_5_VLVisionConfig)
    try:  # transformers 5.2x's name for the PIL processor; 5.0-5.3 call it Qwen2VLImageProcessor
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    except ImportError:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import \
            Qwen2VLImageProcessor as Qwen2VLImageProcessorPil

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_tiny_colqwen2 import qwen_like_tokenizer
    from make_tiny_models import sentences

    root = Path(sys.argv[1])
    out = root / "colqwen25"
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)

    tok = qwen_like_tokenizer([t + "\n" if i % 3 == 0 else t for i, t in enumerate(sentences())])
    patch, merge = 4, 2
    factor = patch * merge
    ip = Qwen2VLImageProcessorPil(size={"shortest_edge": 4 * factor * factor, "longest_edge": 24 * factor * factor},
                                  patch_size=patch, merge_size=merge, temporal_patch_size=2)
    processor = ColQwen2Processor(image_processor=ip, tokenizer=tok)
    vision = dict(depth=3, hidden_size=32, out_hidden_size=48, intermediate_size=40, num_heads=4, patch_size=patch,
                  temporal_patch_size=2, spatial_merge_size=merge, in_channels=3, hidden_act="silu",
                  window_size=2 * factor, fullatt_block_indexes=[1])
    text = dict(vocab_size=len(tok), hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 2, 2]})
    vlm = Qwen2_5_VLConfig(vision_config=vision, text_config=text,
                           image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"),
                           video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
                           vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"))
    cfg = ColQwen2Config(vlm_config=vlm.to_dict(), embedding_dim=16)
    model = ColQwen2ForRetrieval(cfg).eval()
    visual = getattr(model.vlm, "model", model.vlm).visual
    assert type(visual).__name__ == "Qwen2_5_VisionTransformerPretrainedModel"
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ("norm" in name or "ln_q" in name) and p.dim() == 1 and "weight" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    saved = json.loads((out / "config.json").read_text())
    v = saved["vlm_config"]
    v["vision_config"] = minimized(Qwen2_5_VLVisionConfig, v["vision_config"])
    v["text_config"] = minimized(Qwen2_5_VLTextConfig, v["text_config"])
    (out / "config.json").write_text(json.dumps(saved, indent=2))
    reloaded = ColQwen2ForRetrieval.from_pretrained(out).eval()

    media = root / "media"
    ref_images = []
    for name in IMAGES:
        batch = processor.process_images(images=[Image.open(media / name)], return_tensors="pt")
        with torch.no_grad():
            emb = model(**batch).embeddings[0]
            again = reloaded(**batch).embeddings[0]
        torch.testing.assert_close(again, emb, rtol=0, atol=1e-6)
        mask = batch["attention_mask"][0].bool()
        t, h, w = batch["image_grid_thw"][0].tolist()
        print(name, "grid", (t, h, w), "merged", (h // merge, w // merge))
        ref_images.append({"file": name, "grid_thw": [t, h, w], "input_ids": batch["input_ids"][0].tolist(),
                           "pixel_values": batch["pixel_values"][0].flatten().tolist(),
                           "embeddings": emb[mask].tolist()})
    ref_queries = []
    for q in QUERIES:
        batch = processor.process_queries(text=[q], return_tensors="pt")
        with torch.no_grad():
            emb = model(**batch).embeddings[0]
        mask = batch["attention_mask"][0].bool()
        ref_queries.append({"text": q, "input_ids": batch["input_ids"][0].tolist(), "embeddings": emb[mask].tolist()})
    scores = [[float((torch.tensor(q["embeddings"]) @ torch.tensor(d["embeddings"]).T).max(dim=1).values.sum())
               for d in ref_images] for q in ref_queries]
    (out / "reference.json").write_text(json.dumps({
        "note": "ColQwen2ForRetrieval over Qwen2.5-VL: embeddings (L2-normalized, one per token), each input "
                "processed alone by ColQwen2Processor; pixel_values are the processor's flattened patches; scores: "
                "MaxSim query × image",
        "image_token_id": tok.convert_tokens_to_ids("<|image_pad|>"),
        "images": ref_images, "queries": ref_queries, "scores": scores,
    }))
    print("wrote", out)


if __name__ == "__main__":
    main()
