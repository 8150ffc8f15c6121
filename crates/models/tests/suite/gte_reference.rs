//! GTE against transformers on both backends (scripts/make_encoder_families.py made the fixtures): an embedder
//! as Alibaba ships it (`model_type: new`, its remote code named in `auto_map`), a cross-encoder as
//! transformers 5 saves its port (`model_type: gte`, two token types).

use crate::common;

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

/// gte-large-en-v1.5's and gte-multilingual-base's NTK-scaled rotary positions (scripts/make_gte_ntk.py: the
/// remote code's `NTKScalingRotaryEmbedding` frequencies in transformers' port).
#[test]
fn ntk_scaled_embedder_matches_the_remote_code_on_both_backends() {
    check_embedder("gte-ntk-embed");
}

/// The remote code's mixed NTK variant (`mixed_b`), frequency by frequency.
#[test]
fn mixed_ntk_frequencies_match_the_remote_code() {
    let m = &common::reference("gte-ntk-embed")["mixed"];
    let got = aleph_models::layers::rotary::ntk_inv_freq(
        m["base"].as_f64().unwrap(),
        m["dim"].as_u64().unwrap() as usize,
        m["scaling_factor"].as_f64().unwrap(),
        m["mixed_b"].as_f64(),
    );
    let want = common::floats(&m["inv_freq"]);
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-6 * w.abs(), "{got:?} vs {want:?}");
    }
    assert_eq!(got.len(), want.len());
}
