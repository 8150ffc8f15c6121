#!/usr/bin/env python3
"""A tiny seeded random ColQwen2 (`ColQwen2ForRetrieval`: Qwen2-VL's vision tower + Qwen2 decoder + projection)
and the per-token vectors transformers computes for test images and queries.

Run on a developer machine with torch and Pillow (not in CI; the outputs are committed):
    python3 scripts/make_tiny_colqwen2.py tests/fixtures/tiny

Writes `<out>/colqwen2/`: config.json, model.safetensors, tokenizer.json (a small byte-level BPE trained on the
STS sentences with Qwen2-VL's special tokens), processor configs, and reference.json with, per input, the token
ids, the image's grid and pixel values, and the multi-vector output (one 16-d vector per token). Images are the
CLIP fixture's test images (`<out>/media/`) at their own aspect ratios (Qwen2-VL's dynamic resolution).
"""
import json
import sys
from pathlib import Path

import torch

SEED = 2468

QUERIES = ["What is the revenue in 2023?", "two red squares", "", "Café au lait, naïve façade 🎉"]
IMAGES = ["wide.png", "tall.jpg", "alpha.png", "small-gray.png"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
            "<|video_pad|>"]


def qwen_like_tokenizer(corpus):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=700, special_tokens=SPECIALS,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   padding_side="right")


def main():
    from PIL import Image
    from transformers import ColQwen2Config, ColQwen2ForRetrieval, ColQwen2Processor, Qwen2VLConfig
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_tiny_models import sentences

    root = Path(sys.argv[1])
    out = root / "colqwen2"
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)

    tok = qwen_like_tokenizer([t + "\n" if i % 3 == 0 else t for i, t in enumerate(sentences())])
    patch, merge = 4, 2
    factor = patch * merge
    ip = Qwen2VLImageProcessorPil(size={"shortest_edge": 4 * factor * factor, "longest_edge": 24 * factor * factor},
                                  patch_size=patch, merge_size=merge, temporal_patch_size=2)
    processor = ColQwen2Processor(image_processor=ip, tokenizer=tok)
    vision = dict(depth=2, embed_dim=32, hidden_size=48, num_heads=4, mlp_ratio=2, patch_size=patch,
                  temporal_patch_size=2, spatial_merge_size=merge, in_channels=3, hidden_act="quick_gelu")
    text = dict(vocab_size=len(tok), hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 2, 2]})
    vlm = Qwen2VLConfig(vision_config=vision, text_config=text,
                        image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"),
                        video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
                        vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"))
    cfg = ColQwen2Config(vlm_config=vlm.to_dict(), embedding_dim=16)
    model = ColQwen2ForRetrieval(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1 and "weight" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p))
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)

    media = root / "media"
    ref_images = []
    for name in IMAGES:
        batch = processor.process_images(images=[Image.open(media / name)], return_tensors="pt")
        with torch.no_grad():
            emb = model(**batch).embeddings[0]
        mask = batch["attention_mask"][0].bool()
        t, h, w = batch["image_grid_thw"][0].tolist()
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
        "note": "ColQwen2ForRetrieval embeddings (L2-normalized, one per token), each input processed alone by "
                "ColQwen2Processor; pixel_values are the processor's flattened patches; scores: MaxSim query × image",
        "image_token_id": processor.image_token_id,
        "images": ref_images, "queries": ref_queries, "scores": scores,
    }))
    print("wrote", out)


if __name__ == "__main__":
    main()
