//! Qwen3 as Qwen3-Embedding runs it, against sentence-transformers on both backends (scripts/make_qwen3.py):
//! grouped-query causal attention with per-head query/key norms, last-token pooling, the `query` prompt.

use crate::common;

use aleph_models::{load, Batch, LoadOptions};
use common::{backends, check_embedder, check_int8_close, fixtures, floats, max_diff, reference};

#[test]
fn embedder_matches_sentence_transformers_on_both_backends() {
    check_embedder("qwen3-embed");
}

#[test]
fn int8_stays_close_to_f32() {
    check_int8_close("qwen3-embed");
}

/// sentence-transformers puts the prompt before the text, then tokenizes: the same text with its prompt.
#[test]
fn the_query_prompt_is_prepended_as_sentence_transformers_does() {
    let r = reference("qwen3-embed");
    let prompt = r["prompt"].as_str().unwrap();
    let texts: Vec<&str> = r["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    for (backend, name) in backends() {
        let loaded = load(&fixtures().join("qwen3-embed"), &LoadOptions { backend, ..Default::default() }).unwrap();
        assert_eq!(loaded.info.prompts.get("query"), Ok(prompt));
        let mut batch = Batch::new();
        for t in &texts {
            let e = loaded.tokenizer.encode(&format!("{prompt}{t}")).unwrap();
            batch.push(&e.ids, &e.type_ids);
        }
        let got = loaded.model.forward(&batch).unwrap().vectors;
        for (i, (g, w)) in got.iter().zip(r["query_vectors"].as_array().unwrap()).enumerate() {
            let d = max_diff(g, &floats(w));
            assert!(d < 1e-4, "{name}, text {i}: {d}");
        }
    }
}
