//! What a checkpoint asks for and a backend does not implement is refused at load, on every backend,
//! naming the field and its value; what one backend runs, the other runs the same.

use crate::common;

use std::path::{Path, PathBuf};

use aleph_models::{load, Batch, LoadOptions};
use common::{backends, fixtures, max_diff};
use serde_json::Value;

/// A copy of a tiny fixture with `edit` applied to its config.json.
fn variant(fixture: &str, name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let src = fixtures().join(fixture);
    let dir = std::env::temp_dir().join(format!("aleph-refusal-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        if name != "config.json" && name != "modules.json" {
            // Module folders (1_Pooling, ...) are shared; files are copied so a test may change them.
            if path.is_dir() {
                std::os::unix::fs::symlink(&path, dir.join(name)).unwrap();
            } else {
                std::fs::copy(&path, dir.join(name)).unwrap();
            }
        }
    }
    if src.join("modules.json").exists() {
        std::fs::copy(src.join("modules.json"), dir.join("modules.json")).unwrap();
    }
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    dir
}

fn load_error(dir: &Path, opts: &LoadOptions) -> String {
    match load(dir, opts) {
        Ok(_) => panic!("{} loaded on {:?}", dir.display(), opts.backend),
        Err(e) => e.to_string(),
    }
}

#[test]
fn relative_position_embeddings_are_refused_on_every_backend() {
    for kind in ["relative_key", "relative_key_query"] {
        let dir = variant("bert-classify", kind, |c| c["position_embedding_type"] = Value::from(kind));
        for (backend, name) in backends() {
            let e = load_error(&dir, &LoadOptions { backend, ..Default::default() });
            assert!(e.contains("position_embedding_type") && e.contains(kind), "{name}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn unknown_activations_are_refused_and_relu_silu_tanh_run_on_both_backends() {
    // transformers' ACT2FN has `mish`; Aleph does not compute it.
    let dir = variant("bert-classify", "mish", |c| c["hidden_act"] = Value::from("mish"));
    for (backend, name) in backends() {
        let e = load_error(&dir, &LoadOptions { backend, ..Default::default() });
        assert!(e.contains("hidden_act") && e.contains("mish"), "{name}: {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);

    for act in ["relu", "silu", "tanh"] {
        let dir = variant("bert-classify", act, |c| c["hidden_act"] = Value::from(act));
        let outputs: Vec<Vec<Vec<f32>>> = backends()
            .iter()
            .map(|(backend, _)| {
                let loaded = load(&dir, &LoadOptions { backend: *backend, ..Default::default() }).unwrap();
                let mut batch = Batch::new();
                for text in ["a short one", "and a somewhat longer sentence than that"] {
                    let e = loaded.tokenizer.encode(text).unwrap();
                    batch.push(&e.ids, &e.type_ids);
                }
                loaded.model.forward(&batch).unwrap().vectors
            })
            .collect();
        for (cpu, candle) in outputs[0].iter().zip(&outputs[1]) {
            assert!(max_diff(cpu, candle) < 1e-4, "{act}: {cpu:?} vs {candle:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn sentence_transformers_modules_aleph_does_not_run_are_refused() {
    let dir = variant("xlmr-embed", "dense-module", |_| {});
    let mut modules: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("modules.json")).unwrap()).unwrap();
    modules.insert(
        2,
        serde_json::json!({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}),
    );
    std::fs::write(dir.join("modules.json"), Value::from(modules).to_string()).unwrap();
    for (backend, name) in backends() {
        let e = load_error(&dir, &LoadOptions { backend, ..Default::default() });
        assert!(e.contains("Dense") && e.contains("2_Dense"), "{name}: {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);

    // Two pooling modes at once: sentence-transformers concatenates them.
    let dir = variant("xlmr-embed", "two-poolings", |_| {});
    std::fs::remove_file(dir.join("1_Pooling")).unwrap();
    std::fs::create_dir(dir.join("1_Pooling")).unwrap();
    let pooling = serde_json::json!({"word_embedding_dimension": 32, "pooling_mode_cls_token": true,
                                     "pooling_mode_mean_tokens": true});
    std::fs::write(dir.join("1_Pooling/config.json"), pooling.to_string()).unwrap();
    let e = load_error(&dir, &LoadOptions::default());
    assert!(e.contains("pooling"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rope_variants_are_refused_on_the_decoders() {
    let dir = variant("colpali", "rope-scaling", |c| {
        c["vlm_config"]["text_config"]["rope_scaling"] = serde_json::json!({"type": "linear", "factor": 2.0});
    });
    for (backend, name) in backends() {
        let e = load_error(&dir, &LoadOptions { backend, ..Default::default() });
        assert!(e.contains("rope_scaling") && e.contains("linear"), "{name}: {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Gemma 3 variants EmbeddingGemma does not use: soft-capped attention logits, a scaled global rotary
/// embedding (Gemma 3 4B's `linear`), a layer type other than full and sliding, transformers 5.5's generic
/// `is_causal: false` (whose masks are not `use_bidirectional_attention`'s).
#[test]
fn gemma3_variants_are_refused_on_every_backend() {
    type Edit = fn(&mut Value);
    let edits: [(&str, Edit, &str); 4] = [
        ("softcap", |c| c["attn_logit_softcapping"] = serde_json::json!(50.0), "attn_logit_softcapping"),
        (
            "rope-linear",
            |c| c["rope_parameters"]["full_attention"] = serde_json::json!({"rope_type": "linear", "factor": 8.0}),
            "linear",
        ),
        ("chunked", |c| c["layer_types"][1] = serde_json::json!("chunked_attention"), "layer_types[1]"),
        ("is-causal", |c| c["is_causal"] = serde_json::json!(false), "is_causal"),
    ];
    for (name, edit, what) in edits {
        let dir = variant("gemma3-embed", name, edit);
        for (backend, b) in backends() {
            let e = load_error(&dir, &LoadOptions { backend, ..Default::default() });
            assert!(e.contains(what), "{name} on {b}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// JinaBERT variants its code has and Aleph does not run: a feed-forward other than BERT's, GeGLU or ReGLU
/// (the code itself refuses `glu` and `swiglu`), a position table beside ALiBi, and jina's qk-post-norm code.
#[test]
fn jina_bert_variants_are_refused_on_every_backend() {
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit, &str); 3] = [
        ("jina-swiglu", |c| c["feed_forward_type"] = Value::from("swiglu"), "feed_forward_type `swiglu`"),
        ("jina-absolute", |c| c["position_embedding_type"] = Value::from("absolute"), "`absolute`"),
        (
            "jina-qk-post-norm",
            |c| {
                c["auto_map"]["AutoModel"] =
                    Value::from("jinaai/jina-bert-v2-qk-post-norm--modeling_bert.JinaBertModel")
            },
            "jina-bert-v2-qk-post-norm",
        ),
    ];
    for (name, edit, want) in cases {
        let dir = variant("jina-embed", name, edit);
        for (backend, label) in backends() {
            let e = load_error(&dir, &LoadOptions { backend, trust_remote_code: true, ..Default::default() });
            assert!(e.contains(want), "{name} on {label}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// NomicBERT v2's experts as only megablocks computes them (renormalized top-k weights), experts without
/// their counts, and the remote code's sigmoid-gated `glu`.
#[test]
fn nomic_expert_variants_aleph_does_not_run_are_refused() {
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit, &str); 3] = [
        (
            "nomic-moe-normalized",
            |c| c["moe_normalize_expert_weights"] = Value::from(true),
            "moe_normalize_expert_weights",
        ),
        (
            "nomic-moe-no-top-k",
            |c| {
                c.as_object_mut().unwrap().remove("moe_top_k");
            },
            "moe_top_k",
        ),
        ("nomic-glu", |c| c["activation_function"] = Value::from("glu"), "`glu`"),
    ];
    for (name, edit, want) in cases {
        let dir = variant("nomic-moe-embed", name, edit);
        for (backend, label) in backends() {
            let e = load_error(&dir, &LoadOptions { backend, ..Default::default() });
            assert!(e.contains(want), "{name} on {label}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// gte-Qwen2's code reads `is_causal`, which transformers' Qwen2Config does not define: trusting that code
/// without the field, which way the model attends is unknown, so it is refused on every backend.
#[test]
fn gte_qwen2_code_without_is_causal_is_refused_on_every_backend() {
    let dir = variant("gte-qwen2-embed", "gte-qwen2-no-is-causal", |c| {
        c.as_object_mut().unwrap().remove("is_causal");
    });
    for (backend, name) in backends() {
        let e = load_error(&dir, &LoadOptions { backend, trust_remote_code: true, ..Default::default() });
        assert!(e.contains("is_causal") && e.contains("modeling_qwen"), "{name}: {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// jina-embeddings-v3's code with what Aleph does not build (absolute or ALiBi positions, interleaved rotary
/// halves), or asked to rerank, is refused on every backend, naming it.
#[test]
fn jina_v3_variants_it_does_not_build_are_refused_on_every_backend() {
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit, &str); 3] = [
        ("jina-v3-absolute", |c| c["position_embedding_type"] = Value::from("absolute"), "`absolute`"),
        ("jina-v3-interleaved", |c| c["rotary_emb_interleaved"] = Value::from(true), "interleaved"),
        (
            "jina-v3-rerank",
            |c| c["architectures"] = serde_json::json!(["XLMRobertaForSequenceClassification"]),
            "reranker or classifier",
        ),
    ];
    for (name, edit, want) in cases {
        let dir = variant("jina-v3-embed", name, edit);
        for (backend, label) in backends() {
            let e = load_error(&dir, &LoadOptions { backend, ..Default::default() });
            assert!(e.contains(want), "{name} on {label}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A ColQwen whose language model is neither Qwen2-VL nor Qwen2.5-VL is refused, naming what it is.
#[test]
fn a_colqwen_over_another_vlm_is_refused_naming_it() {
    let dir = variant("colqwen25", "colqwen-qwen3-vl", |c| c["vlm_config"]["model_type"] = Value::from("qwen3_vl"));
    for (backend, label) in backends() {
        let e = load_error(&dir, &LoadOptions { backend, ..Default::default() });
        assert!(e.contains("qwen3_vl") && e.contains("qwen2_5_vl"), "{label}: {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Qwen3-VL's language model: a scaled rotary embedding or upper-layer sliding windows in `text_config` are
/// refused on every backend, naming the field, as for Qwen3.
#[test]
fn qwen3_vl_text_variants_are_refused_on_every_backend() {
    type Edit = fn(&mut Value);
    let yarn: Edit = |c| c["text_config"]["rope_parameters"]["rope_type"] = "yarn".into();
    let window: Edit = |c| c["text_config"]["use_sliding_window"] = true.into();
    let cases = [("q3vl-yarn", yarn, "rope type"), ("q3vl-window", window, "use_sliding_window")];
    for (name, edit, field) in cases {
        let dir = variant("qwen3-vl-embed", name, edit);
        for (backend, label) in backends() {
            let e = load_error(&dir, &LoadOptions { backend, ..Default::default() });
            assert!(e.contains("Qwen3-VL") && e.contains(field), "{name} on {label}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
