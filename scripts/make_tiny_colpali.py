#!/usr/bin/env python3
"""A tiny seeded random ColPali (`ColPaliForRetrieval`: SigLIP vision tower + Gemma decoder + projection) and
the per-token vectors transformers computes for test images and queries.

Run on a developer machine with torch and Pillow (not in CI; the outputs are committed):
    python3 scripts/make_tiny_colpali.py tests/fixtures/tiny

Writes `<out>/colpali/`: config.json, model.safetensors, tokenizer.json (a small BPE trained on the STS
sentences, in Gemma's layout: `<pad> <eos> <bos> <unk>`, spaces as ▁), processor and image-processor configs,
and reference.json with, per input, the token ids and the multi-vector output (one 16-d vector per token of
attention mask 1, as `ColPaliForRetrieval` returns them). Images are the CLIP fixture's test images
(`<out>/media/`), preprocessed by transformers' PIL SigLIP image processor.
"""
import json
import sys
from pathlib import Path

import numpy as np
import torch

SEED = 4321

QUERIES = [
    "What is the revenue in 2023?",
    "two red squares",
    "",
    "Café au lait, naïve façade 🎉",
]
IMAGES = ["wide.png", "tall.jpg", "alpha.png", "small-gray.png"]


def gemma_like_tokenizer(corpus):
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Replace("▁", " ")
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=600, special_tokens=specials))
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                       special_tokens=[("<bos>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
                                   pad_token="<pad>", padding_side="right")


def main():
    from PIL import Image
    from transformers import ColPaliConfig, ColPaliForRetrieval, ColPaliProcessor, GemmaConfig, PaliGemmaConfig
    from transformers import SiglipVisionConfig
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_tiny_models import sentences

    root = Path(sys.argv[1])
    out = root / "colpali"
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)

    # Some lines end in a newline, as ColPali's prompts do, so "\n" gets a token as in Gemma's vocabulary.
    tok = gemma_like_tokenizer([t + "\n" if i % 3 == 0 else t for i, t in enumerate(sentences())])
    image_size, patch = 32, 8
    seq = (image_size // patch) ** 2
    ip = SiglipImageProcessorPil(size={"height": image_size, "width": image_size}, resample=3,
                                 image_mean=[0.5] * 3, image_std=[0.5] * 3)
    ip.image_seq_length = seq
    processor = ColPaliProcessor(image_processor=ip, tokenizer=tok)
    vocab = len(processor.tokenizer)  # the base vocabulary, <image>, and PaliGemma's <loc>/<seg> tokens

    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                image_size=image_size, patch_size=patch, hidden_act="gelu_pytorch_tanh",
                                layer_norm_eps=1e-6, vision_use_head=False, projection_dim=48)
    text = GemmaConfig(vocab_size=vocab, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=1, head_dim=16, hidden_act="gelu_pytorch_tanh",
                       hidden_activation="gelu_pytorch_tanh", max_position_embeddings=512, rms_norm_eps=1e-6,
                       pad_token_id=0, bos_token_id=2, eos_token_id=1)
    vlm = PaliGemmaConfig(vision_config=vision.to_dict(), text_config=text.to_dict(),
                          image_token_index=processor.image_token_id, projection_dim=48, hidden_size=48)
    cfg = ColPaliConfig(vlm_config=vlm.to_dict(), embedding_dim=16)
    model = ColPaliForRetrieval(cfg).eval()
    # RMSNorm weights start at zero (scale 1 + w): give them values so a missing `1 +` shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.copy_(0.3 * torch.randn_like(p))

    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)

    media = root / "media"
    images = [Image.open(media / f) for f in IMAGES]
    ref_images = []
    for name, img in zip(IMAGES, images):
        batch = processor.process_images(images=[img], return_tensors="pt")
        with torch.no_grad():
            emb = model(**batch).embeddings[0]
        mask = batch["attention_mask"][0].bool()
        ref_images.append({"file": name, "input_ids": batch["input_ids"][0].tolist(),
                           "pixel_values": batch["pixel_values"][0].flatten().tolist(),
                           "embeddings": emb[mask].tolist()})
    # A batch of all images at once gives the same vectors (each sequence attends only to itself).
    batch = processor.process_images(images=images, return_tensors="pt")
    with torch.no_grad():
        emb = model(**batch).embeddings
    for i, r in enumerate(ref_images):
        assert np.allclose(emb[i][batch["attention_mask"][i].bool()].numpy(), np.array(r["embeddings"]), atol=1e-5)

    ref_queries = []
    for q in QUERIES:
        batch = processor.process_queries(text=[q], return_tensors="pt")
        with torch.no_grad():
            emb = model(**batch).embeddings[0]
        mask = batch["attention_mask"][0].bool()
        ref_queries.append({"text": q, "input_ids": batch["input_ids"][0].tolist(), "embeddings": emb[mask].tolist()})
    # MaxSim of each query against each image (sum over query tokens of the best image token).
    scores = [[float((torch.tensor(q["embeddings"]) @ torch.tensor(d["embeddings"]).T).max(dim=1).values.sum())
               for d in ref_images] for q in ref_queries]
    (out / "reference.json").write_text(json.dumps({
        "note": "ColPaliForRetrieval embeddings (L2-normalized, one per token of attention mask 1), "
                "each input processed alone by ColPaliProcessor; scores: MaxSim query × image",
        "image_token_id": processor.image_token_id,
        "images": ref_images, "queries": ref_queries, "scores": scores,
    }))
    print("wrote", out)


if __name__ == "__main__":
    main()
