//! The Llama-style LLM embedders against sentence-transformers on both backends (scripts/make_llama_family.py):
//! Mistral with a sliding window the texts pass, Qwen2 with q/k/v biases, Llama; last-token pooling and the
//! `query` prompt, as e5-mistral-7b-instruct, gte-Qwen2-instruct and SFR-Embedding are served.

use crate::common;

use aleph_models::{load, Batch, LoadOptions};
use common::{backends, check_embedder, check_int8_close, fixtures, floats, max_diff, reference};

const FAMILIES: [&str; 3] = ["mistral-embed", "qwen2-embed", "llama-embed"];

#[test]
fn embedders_match_sentence_transformers_on_both_backends() {
    FAMILIES.iter().for_each(|f| check_embedder(f));
}

#[test]
fn int8_stays_close_to_f32() {
    FAMILIES.iter().for_each(|f| check_int8_close(f));
}

#[test]
fn the_query_prompt_is_prepended_as_sentence_transformers_does() {
    for fixture in FAMILIES {
        let r = reference(fixture);
        let prompt = r["prompt"].as_str().unwrap();
        for (backend, name) in backends() {
            let loaded = load(&fixtures().join(fixture), &LoadOptions { backend, ..Default::default() }).unwrap();
            let mut batch = Batch::new();
            for t in r["texts"].as_array().unwrap() {
                let e = loaded.tokenizer.encode(&format!("{prompt}{}", t.as_str().unwrap())).unwrap();
                batch.push(&e.ids, &e.type_ids);
            }
            let got = loaded.model.forward(&batch).unwrap().vectors;
            for (i, (g, w)) in got.iter().zip(r["query_vectors"].as_array().unwrap()).enumerate() {
                let d = max_diff(g, &floats(w));
                assert!(d < 1e-4, "{fixture} on {name}, text {i}: {d}");
            }
        }
    }
}
