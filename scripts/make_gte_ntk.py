#!/usr/bin/env python3
"""A tiny seeded GTE embedder with NTK-scaled rotary positions, as gte-large-en-v1.5 and gte-multilingual-base
configure them (`rope_scaling: {"type": "ntk", "factor": ...}`), with the outputs their remote code computes.

Run on a developer machine with torch (not in CI; the outputs are committed):
    pip install sentence-transformers
    python3 scripts/make_gte_ntk.py tests/fixtures/tiny REMOTE_ROTARY.py

REMOTE_ROTARY.py holds the `RotaryEmbedding` and `NTKScalingRotaryEmbedding` classes of Alibaba-NLP/new-impl's
modeling.py (GTE's remote code) as that file has them. The remote model as a whole does not run on
transformers 5 (scripts/make_encoder_families.py says why), so the reference is transformers 5.24's port of it
(transformers/models/gte: the same layers and tensor names) with the port's inverse frequencies replaced by those
the remote NTKScalingRotaryEmbedding computes, as NewEmbeddings builds it from `rope_scaling`. Both compute
cos/sin as `position · inv_freq` in f32.

Writes tests/fixtures/tiny/gte-ntk-embed (factor 2, CLS pooling + Normalize, the remote code's config) with
reference.json: the vectors, and the remote class's inverse frequencies for a mixed-NTK case (`mixed_b`), which
no released checkpoint uses but the remote code reads.
"""
import importlib.util
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_encoder_families import PreTrainedTokenizerFast_without_types  # noqa: E402
from make_tiny_models import SEED, TEXTS, save, sentences, wordpiece_tokenizer  # noqa: E402

THETA, FACTOR, MAX_POS = 160000.0, 2.0, 128


def remote_rotary(path):
    spec = importlib.util.spec_from_file_location("new_impl_rotary", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.NTKScalingRotaryEmbedding


@torch.no_grad()
def main():
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import GteConfig, GteModel
    from transformers.models.gte.modeling_gte import GteRotaryEmbedding

    out_root, ntk = Path(sys.argv[1]), remote_rotary(sys.argv[2])
    wp = wordpiece_tokenizer(sentences())
    nt = PreTrainedTokenizerFast_without_types(wp)
    small = dict(vocab_size=len(wp), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=48, max_position_embeddings=MAX_POS, initializer_range=0.2,
                 pad_token_id=wp.pad_token_id, hidden_dropout_prob=0.0, type_vocab_size=0,
                 rope_parameters={"rope_type": "default", "rope_theta": THETA})
    torch.manual_seed(SEED + 70)
    tmp = out_root / "_tmp"
    save(GteModel(GteConfig(**small)).eval(), nt, tmp)
    st = SentenceTransformer(modules=[Transformer(str(tmp), max_seq_length=64), Pooling(32, pooling_mode="cls"),
                                      Normalize()], device="cpu")
    head_dim = 32 // 4
    scaled = ntk(head_dim, max_position_embeddings=MAX_POS, base=THETA, scaling_factor=FACTOR).inv_freq
    rotaries = [m for m in st.modules() if isinstance(m, GteRotaryEmbedding)]
    assert rotaries and not torch.equal(rotaries[0].inv_freq, scaled), "the scaling changes the frequencies"
    for m in rotaries:
        m.inv_freq.copy_(scaled)
        m.original_inv_freq.copy_(scaled)
    texts = [t.strip() for t in TEXTS]
    vectors = st.encode(texts, convert_to_numpy=True).tolist()
    d = out_root / "gte-ntk-embed"
    st.save(str(d), create_model_card=False)
    c = json.loads((d / "config.json").read_text())
    remote = {"architectures": ["NewModel"], "model_type": "new",
              "auto_map": {"AutoConfig": "Alibaba-NLP/new-impl--configuration.NewConfig",
                           "AutoModel": "Alibaba-NLP/new-impl--modeling.NewModel"},
              "rope_theta": THETA, "rope_scaling": {"type": "ntk", "factor": FACTOR},
              "layer_norm_type": "layer_norm", "position_embedding_type": "rope", "pack_qkv": True,
              "unpad_inputs": False, "use_memory_efficient_attention": False, "logn_attention_scale": False,
              "logn_attention_clip1": False}
    for k in ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "hidden_act", "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "pad_token_id",
              "initializer_range", "hidden_dropout_prob", "attention_probs_dropout_prob"]:
        remote[k] = c[k]
    (d / "config.json").write_text(json.dumps(remote, indent=2))
    lengths = [len(nt(t, truncation=True, max_length=64)["input_ids"]) for t in texts]
    mixed = dict(dim=16, max_position_embeddings=512, base=10000.0, scaling_factor=8.0, mixed_b=0.75)
    reference = {"texts": texts, "vectors": vectors, "token_counts": lengths,
                 "mixed": {**mixed, "inv_freq": ntk(**mixed).inv_freq.tolist()}}
    (d / "reference.json").write_text(json.dumps(reference, ensure_ascii=False, indent=1))

    import shutil

    shutil.rmtree(tmp)
    (d / "README.md").unlink(missing_ok=True)
    size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    print(f"gte-ntk-embed: {size / 1024:.0f} KiB, {sorted(f.name for f in d.iterdir())}")


if __name__ == "__main__":
    main()
