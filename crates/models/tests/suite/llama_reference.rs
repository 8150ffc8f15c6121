//! The Llama-style LLM embedders against sentence-transformers on both backends (scripts/make_llama_family.py):
//! Mistral with a sliding window the texts pass, Qwen2 with q/k/v biases, Llama; last-token pooling and the
//! `query` prompt, as e5-mistral-7b-instruct, gte-Qwen2-instruct and SFR-Embedding are served.

use crate::common;

use common::{check_embedder, check_int8_close, check_prompted};

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
