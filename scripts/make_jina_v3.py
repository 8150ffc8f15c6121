#!/usr/bin/env python3
"""A tiny seeded jina-embeddings-v3 (`model_type: xlm-roberta` with an `auto_map` to
jinaai/xlm-roberta-flash-implementation's remote code: XLM-R with rotary positions, post-norm blocks named
`mixer.Wqkv`/`mlp.fc1`/`norm1`…, and a LoRA adapter per task on every linear layer and embedding table), with
the vectors that remote code computes for each task.

Run on a developer machine (not in CI; the outputs are committed). The remote code needs transformers 4 (it
imports `create_position_ids_from_input_ids`, which transformers 5 removed) and einops; flash-attn is NOT
installed, so attention is the remote file's own PyTorch `SelfAttention`, the path it takes on a CPU:
    pip install --target /tmp/tf449 transformers==4.49.0 tokenizers==0.21.0 huggingface-hub==0.29.1 requests
    pip install --target /tmp/jina_deps einops==0.8.2
    PYTHONPATH=/tmp/tf449:/tmp/jina_deps python3 scripts/make_jina_v3.py tests/fixtures/tiny REMOTE_DIR JINA_DIR

REMOTE_DIR holds the .py files of jinaai/xlm-roberta-flash-implementation, unmodified (their git blob ids are
checked below; the copy used: github.com/aoncevay/jina-wrapper at d3188e683a022fbe4ccfcc76af55125331e61032,
folder xlm-roberta-flash-implementation/). JINA_DIR holds jinaai/jina-embeddings-v3's `custom_st.py`,
`modules.json` and `config.json` from the same commit (folder jina-embeddings-v3/): the fixture keeps the
hub's config keys with tiny sizes, its modules.json and custom_st.py. They are imported here as the package
`xlm_roberta_flash` (the modeling files import each other relatively).

Writes jina-v3-embed: XLMRobertaLoRA with 2 blocks, hidden 32, 4 heads, five task adapters of rank 2 (the hub's
rank is 4; the saved config, written by `save_pretrained`, omits every value equal to XLMRobertaFlashConfig's
default: lora_alpha 1, so the scaling alpha/rank is 0.5), rotary base 20000 as the hub's. Weights: the class's
own initialisation with the norms, biases and every LoRA matrix then drawn at random (lora_B of the linears
and lora_A of the embeddings start at zero, which would make every adapter a no-op).

reference.json: `texts`, `vectors`, `token_counts` (no task, as every embedder fixture has them), and for each task (and for none: no adapter, no prompt, as custom_st.Transformer does without a
`task`), the texts with that task's instruction before them (config_sentence_transformers.json's prompts,
which equal config.json's task_instructions), their vectors (mean of the remote model's last hidden states
over the attention mask, then L2-normalized: sentence-transformers' Pooling and Normalize) and token counts,
tokenized as custom_st.Transformer.tokenize does (strip, truncation at max_seq_length 64). Checked here: a
batch mixing tasks (one adapter_mask entry per text) computes each text's own-task vector, each text alone its
batched one, and the saved folder loaded through `AutoModel.from_pretrained(trust_remote_code=True)` (from an
offline hub cache holding the remote files) the same vectors.
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
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_models import SEED, TEXTS, save, sentences, unigram_tokenizer  # noqa: E402

REPO = "jinaai/xlm-roberta-flash-implementation"
REVISION = "2b6bc3f30750b3a9648fe9b63448c09920efe9be"  # a stand-in: the hub is unreachable from here
BLOBS = {
    "block.py": "84cc71978b06655fcdf219ef590682b121591d8e",
    "configuration_xlm_roberta.py": "0a3cd777189fb18c42998119927b825a97e630b1",
    "embedding.py": "b79b3ca1dfa92b76358e566949c82fb39e129107",
    "mha.py": "b835c203eaf0f81b5b3fe1720138f693e223804d",
    "mlp.py": "9cf8f8194689873437f5183391690fac2b928aa0",
    "modeling_lora.py": "3480ab410c94905eaf2ac037464b1ae2e553fec0",
    "modeling_xlm_roberta.py": "65823f1d75c76ec86306a4be97bdff0ce1b26da9",
    "rotary.py": "85ffaa4374c3ed20967e148a892f159b14afc70b",
    "stochastic_depth.py": "637f2575bc49a75382fdf751a6b83d3b91b046ac",
    "xlm_padding.py": "ebfc303df5bc8e90ca8d8ca716db01351d52ad09",
}
CUSTOM_ST_BLOB = "6e7ffe73e9be2fcc814e248c357ed06f4e5e699c"
# jina-embeddings-v3's config.json names the code so (bench/families.py writes it into its random models).
AUTO_MAP = {
    "AutoConfig": f"{REPO}--configuration_xlm_roberta.XLMRobertaFlashConfig",
    "AutoModel": f"{REPO}--modeling_lora.XLMRobertaLoRA",
    "AutoModelForMaskedLM": f"{REPO}--modeling_xlm_roberta.XLMRobertaForMaskedLM",
    "AutoModelForPreTraining": f"{REPO}--modeling_xlm_roberta.XLMRobertaForPreTraining",
}
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
        "max_position_embeddings": 130, "vocab_size": 600, "lora_rank": 2, "initializer_range": 0.2,
        "matryoshka_dimensions": [8, 16, 32]}
MAX_LEN = 64


def git_blob_id(path):
    data = Path(path).read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def remote_code(folder):
    for name, blob in BLOBS.items():
        assert git_blob_id(Path(folder) / name) == blob, f"{name} is not the checked copy"
    name = "xlm_roberta_flash"
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    package = importlib.util.module_from_spec(spec)
    package.__path__ = [str(Path(folder).resolve())]
    sys.modules[name] = package
    return (importlib.import_module(f"{name}.configuration_xlm_roberta"),
            importlib.import_module(f"{name}.modeling_lora"))


def offline_hub_cache(folder, root):
    repo = root / "hub" / ("models--" + REPO.replace("/", "--"))
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    for name in BLOBS:
        shutil.copy(Path(folder) / name, snapshot / name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)


@torch.no_grad()
def randomize(m, pad):
    for name, p in m.named_parameters():
        if "lora_" in name:
            torch.nn.init.normal_(p, std=0.5)
        elif "norm" in name or "emb_ln" in name:
            torch.nn.init.normal_(p, mean=1.0 if name.endswith("weight") else 0.0, std=0.3)
        elif name.endswith(".bias"):
            torch.nn.init.normal_(p, std=0.1)
    m.roberta.embeddings.word_embeddings.parametrizations.weight.original[pad].zero_()


def tokenize(tok, texts):
    # custom_st.Transformer.tokenize: strip, then truncate longest_first at max_seq_length.
    return tok([t.strip() for t in texts], padding=True, truncation="longest_first", max_length=MAX_LEN,
               return_tensors="pt")


@torch.no_grad()
def embed(model, tok, texts, tasks):
    """tasks: one adapter index (or None for all: no adapter) per text."""
    enc = tokenize(tok, texts)
    kw = {} if tasks is None else {"adapter_mask": torch.tensor(tasks, dtype=torch.int32)}
    hidden = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], **kw)[0]
    mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=1), enc["attention_mask"].sum(1).tolist()


@torch.no_grad()
def main():
    torch.set_num_threads(1)
    out_root, remote_dir, jina_dir = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    assert git_blob_id(jina_dir / "custom_st.py") == CUSTOM_ST_BLOB
    cache = Path(tempfile.mkdtemp())
    os.environ.update(HF_HOME=str(cache), HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(cache / "modules"))
    import transformers

    assert transformers.__version__.startswith("4."), "the remote code needs transformers 4 (see the docstring)"
    configuration, modeling = remote_code(remote_dir)

    tok = unigram_tokenizer(sentences())
    tok.model_input_names = tok.init_kwargs["model_input_names"] = ["input_ids", "attention_mask"]
    assert (tok.bos_token_id, tok.pad_token_id, tok.eos_token_id) == (0, 1, 2) and len(tok) == 600
    tok_dir = cache / "tokenizer"
    tok.save_pretrained(tok_dir)

    hub = json.loads((jina_dir / "config.json").read_text())
    hub.pop("_name_or_path")
    cfg = configuration.XLMRobertaFlashConfig(**{**hub, **TINY, "torch_dtype": "float32"})
    cfg._name_or_path = str(tok_dir)  # XLMRobertaModel loads its tokenizer from here
    tasks = cfg.lora_adaptations
    torch.manual_seed(SEED + 110)
    m = modeling.XLMRobertaLoRA(cfg).eval()
    randomize(m, tok.pad_token_id)

    d = out_root / "jina-v3-embed"
    if d.exists():
        shutil.rmtree(d)
    save(m, tok, d)
    # As other transformers versions save it: every value equal to XLMRobertaFlashConfig's default left out.
    saved = json.loads((d / "config.json").read_text())
    defaults = configuration.XLMRobertaFlashConfig().to_dict()
    keep = {"model_type", "architectures", "auto_map", "transformers_version"}
    saved = {k: v for k, v in saved.items()
             if k in keep or (k != "_name_or_path" and (k not in defaults or defaults[k] != v))}
    assert "lora_alpha" not in saved and "position_embedding_type" not in saved
    (d / "config.json").write_text(json.dumps(saved, indent=2))
    shutil.copy(jina_dir / "custom_st.py", d / "custom_st.py")
    shutil.copy(jina_dir / "modules.json", d / "modules.json")
    (d / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": MAX_LEN, "do_lower_case": False}))
    (d / "1_Pooling").mkdir()
    (d / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}, indent=2))
    (d / "2_Normalize").mkdir()
    prompts = dict(cfg.task_instructions)
    (d / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": prompts, "default_prompt_name": None, "similarity_fn_name": "cosine"}, indent=2))

    from safetensors import safe_open

    with safe_open(str(d / "model.safetensors"), "pt") as f:
        names = sorted(f.keys())
    assert "roberta.encoder.layers.0.mixer.Wqkv.parametrizations.weight.0.lora_A" in names, names[:8]

    texts = list(TEXTS)
    cases = {"": (texts, None)}
    for i, task in enumerate(tasks):
        cases[task] = ([prompts[task] + t for t in texts], [i] * len(texts))
    reference = {"tasks": tasks, "cases": {}}
    for task, (inputs, mask) in cases.items():
        vectors, lengths = embed(m, tok, inputs, mask)
        for t, v, k in zip(inputs, vectors, mask or [None] * len(inputs)):
            alone, _ = embed(m, tok, [t], None if k is None else [k])
            torch.testing.assert_close(alone[0], v, rtol=0, atol=1e-5)
        reference["cases"][task] = {"inputs": [t.strip() for t in inputs], "vectors": vectors.tolist(),
                                    "token_counts": lengths}
    # The adapters matter, and differ from each other.
    base = torch.tensor(reference["cases"][""]["vectors"])
    for task in tasks:
        other = embed(m, tok, texts, [tasks.index(task)] * len(texts))[0]
        assert (other * base).sum(1).min() < 0.99, f"adapter {task} changes nothing"
    # One batch mixing tasks: every text gets its own task's vector.
    mixed = [(cases[tasks[j % len(tasks)]][0][j], j % len(tasks)) for j in range(len(texts))]
    vectors, _ = embed(m, tok, [t for t, _ in mixed], [k for _, k in mixed])
    for j, (v, (_, k)) in enumerate(zip(vectors, mixed)):
        torch.testing.assert_close(v, torch.tensor(reference["cases"][tasks[k]]["vectors"][j]), rtol=0, atol=1e-5)

    offline_hub_cache(remote_dir, cache)
    from transformers import AutoModel

    conf = json.loads((d / "config.json").read_text())
    assert conf["auto_map"] == AUTO_MAP
    auto = AutoModel.from_pretrained(str(d), trust_remote_code=True).eval()
    assert type(auto).__name__ == "XLMRobertaLoRA", type(auto)
    for task, case in reference["cases"].items():
        mask = None if not task else [tasks.index(task)] * len(texts)
        got, _ = embed(auto, tok, cases[task][0], mask)
        torch.testing.assert_close(got, torch.tensor(case["vectors"]), rtol=0, atol=1e-6)
    shutil.rmtree(cache)

    # The no-task case under the keys every embedder's reference has (the suites that walk all fixtures).
    plain = reference["cases"][""]
    reference = {"texts": plain["inputs"], "vectors": plain["vectors"], "token_counts": plain["token_counts"],
                 **reference}
    (d / "reference.json").write_text(json.dumps(reference, ensure_ascii=False, indent=1))
    size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    print(f"{d.name}: {size / 1024:.0f} KiB, {sorted(f.name for f in d.iterdir())}")
    print(json.dumps(saved, indent=1))


if __name__ == "__main__":
    main()
