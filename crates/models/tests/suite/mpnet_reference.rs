//! MPNet against transformers: the relative-position buckets, a tiny seeded embedder (sentence-transformers'
//! mean pooling) and cross-encoder, on both backends (scripts/make_mpnet_reference.py made the fixtures).

use crate::common;

use aleph_models::models::bert::relative_bucket;
use common::{check_cross_encoder, check_embedder, check_int8_close, reference};

#[test]
fn buckets_match_transformers() {
    let r = reference("mpnet-embed");
    let offsets = r["bucket_offsets"].as_array().unwrap();
    let buckets = r["buckets"].as_array().unwrap();
    for (d, b) in offsets.iter().zip(buckets) {
        let d = d.as_i64().unwrap();
        assert_eq!(relative_bucket(d), b.as_u64().unwrap() as usize, "offset {d}");
    }
}

#[test]
fn embedder_matches_sentence_transformers_on_both_backends() {
    check_embedder("mpnet-embed");
}

#[test]
fn cross_encoder_matches_transformers_on_both_backends() {
    check_cross_encoder("mpnet-rerank");
}

#[test]
fn int8_stays_close_to_f32() {
    check_int8_close("mpnet-embed");
}
