//! ModernBERT against transformers and sentence-transformers on both backends
//! (scripts/make_encoder_families.py made the fixtures): global and sliding-window layers with their own
//! rotary bases, a GeGLU MLP, an embedder with CLS pooling and a cross-encoder with mean
//! `classifier_pooling`.

use crate::common;

use common::{check_cross_encoder, check_embedder, check_int8_close};

#[test]
fn embedder_matches_sentence_transformers_on_both_backends() {
    check_embedder("modernbert-embed");
}

#[test]
fn cross_encoder_matches_transformers_on_both_backends() {
    check_cross_encoder("modernbert-rerank");
}

#[test]
fn int8_stays_close_to_f32() {
    check_int8_close("modernbert-embed");
}
