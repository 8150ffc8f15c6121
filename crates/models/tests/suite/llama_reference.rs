//! The Llama-style LLM embedders against sentence-transformers on both backends (scripts/make_llama_family.py):
//! Mistral with a sliding window the texts pass, Qwen2 with q/k/v biases, Llama; last-token pooling and the
//! `query` prompt, as e5-mistral-7b-instruct, gte-Qwen2-instruct and SFR-Embedding are served.

use aleph_models::{load, LoadOptions};

use crate::common;

use common::{
    backends, check_embedder, check_embedder_with, check_int8_close, check_prompted, check_prompted_with, fixtures,
    floats, max_diff, reference, text_batch,
};

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
    FAMILIES.iter().for_each(|f| check_prompted(f));
}

/// gte-Qwen2-instruct under its own code (scripts/make_gte_qwen2.py): bidirectional, as its config's `is_causal:
/// false` says, and every sequence ending in the `<|endoftext|>` its tokenizer code appends.
#[test]
fn gte_qwen2_under_its_own_code_matches_on_both_backends() {
    let trusting = LoadOptions { trust_remote_code: true, ..Default::default() };
    check_embedder_with("gte-qwen2-embed", &trusting);
    check_prompted_with("gte-qwen2-embed", &trusting);
    check_int8_close("gte-qwen2-embed");
}

/// Without trust the tokenizer's code is ignored (no eos, as transformers' own tokenizer class reads
/// tokenizer.json), while `is_causal: false` still holds: transformers' own Qwen2 reads it too.
#[test]
fn gte_qwen2_without_trust_runs_transformers_own_classes() {
    let r = reference("gte-qwen2-embed");
    let texts: Vec<&str> = r["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let with_eos: Vec<u64> = r["token_counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
    // An empty text is no tokens at all without the eos; sentence-transformers pools it to zeros.
    let kept: Vec<usize> = (0..texts.len()).filter(|&i| !texts[i].is_empty()).collect();
    for (backend, name) in backends() {
        let loaded = load(&fixtures().join("gte-qwen2-embed"), &LoadOptions { backend, ..Default::default() }).unwrap();
        let batch = text_batch(&loaded, &kept.iter().map(|&i| texts[i]).collect::<Vec<_>>());
        let window = loaded.tokenizer.window();
        for (row, &i) in kept.iter().enumerate() {
            let want = if with_eos[i] as usize >= window { window } else { with_eos[i] as usize - 1 };
            assert_eq!(batch.seq_len(row), want, "text {i}: tokens without the eos");
        }
        let got = loaded.model.forward(&batch).unwrap().vectors;
        for (g, &i) in got.iter().zip(&kept) {
            let d = max_diff(g, &floats(&r["plain_vectors"][i]));
            assert!(d < 1e-4, "gte-qwen2-embed on {name} without trust, text {i}: vectors differ by {d}");
        }
    }
}
