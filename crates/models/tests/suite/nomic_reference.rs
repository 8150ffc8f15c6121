//! NomicBERT against transformers on both backends (scripts/make_encoder_families.py made the fixtures): an
//! embedder as nomic-ai ships it (`model_type: nomic_bert`, the remote code's config names, `auto_map`), a
//! cross-encoder as transformers 5 saves its port.

use crate::common;

use common::{check_cross_encoder, check_embedder, check_int8_close};

#[test]
fn embedder_matches_sentence_transformers_on_both_backends() {
    check_embedder("nomic-embed");
}

#[test]
fn cross_encoder_matches_transformers_on_both_backends() {
    check_cross_encoder("nomic-rerank");
}

#[test]
fn int8_stays_close_to_f32() {
    check_int8_close("nomic-embed");
}
