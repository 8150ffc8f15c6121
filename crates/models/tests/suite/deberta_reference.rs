//! DeBERTa-v2/v3 against transformers and sentence-transformers on both backends (scripts/make_deberta.py
//! made the fixtures): disentangled attention in DeBERTa-v3's configuration (c2p and p2c through shared
//! key/query projections, log-bucketed offsets, normed relative embeddings) for a cross-encoder and a
//! classifier, and in DeBERTa-v2's other one (separate position projections, absolute positions, clamped
//! offsets, c2p only) for an embedder.

use crate::common;

use common::{check_classifier, check_cross_encoder, check_embedder, check_int8_close};

#[test]
fn cross_encoder_matches_transformers_on_both_backends() {
    check_cross_encoder("deberta-rerank");
}

#[test]
fn classifier_matches_transformers_on_both_backends() {
    check_classifier("deberta-classify", &["contradiction", "entailment", "neutral"]);
}

#[test]
fn embedder_matches_sentence_transformers_on_both_backends() {
    check_embedder("deberta-embed");
}

#[test]
fn int8_stays_close_to_f32() {
    check_int8_close("deberta-embed");
}
