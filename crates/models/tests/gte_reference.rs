//! GTE against transformers on both backends (scripts/make_encoder_families.py made the fixtures): an embedder
//! as Alibaba ships it (`model_type: new`, its remote code named in `auto_map`), a cross-encoder as
//! transformers 5 saves its port (`model_type: gte`, two token types).

mod common;

use common::{check_cross_encoder, check_embedder, check_int8_close};

#[test]
fn embedder_matches_sentence_transformers_on_both_backends() {
    check_embedder("gte-embed");
}

#[test]
fn cross_encoder_matches_transformers_on_both_backends() {
    check_cross_encoder("gte-rerank");
}

#[test]
fn int8_stays_close_to_f32() {
    check_int8_close("gte-embed");
}
