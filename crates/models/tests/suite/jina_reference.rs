//! JinaBERT v2 against jina's remote code (jinaai/jina-bert-implementation, run by scripts/make_jinabert.py)
//! on both backends: an embedder as jina-embeddings-v2 ships it (`model_type: bert`, `auto_map` to that code,
//! ALiBi, GeGLU, mean pooling) and a cross-encoder as jina-reranker-v1 does.

use crate::common;

use common::{check_cross_encoder, check_embedder, check_int8_close};

#[test]
fn embedder_matches_the_remote_code_on_both_backends() {
    check_embedder("jina-embed");
}

#[test]
fn cross_encoder_matches_the_remote_code_on_both_backends() {
    check_cross_encoder("jina-rerank");
}

#[test]
fn int8_stays_close_to_f32() {
    check_int8_close("jina-embed");
}

/// ALiBi's slopes as the remote code's `JinaBertEncoder` builds them, powers of two and not.
#[test]
fn alibi_slopes_match_the_remote_code() {
    let alibi = common::reference("jina-embed")["alibi"].clone();
    for entry in alibi.as_array().unwrap() {
        let heads = entry["heads"].as_u64().unwrap() as usize;
        let want = common::floats(&entry["slopes"]);
        assert_eq!(aleph_models::models::bert::alibi_slopes(heads), want, "{heads} heads");
    }
    assert_eq!(alibi.as_array().unwrap().len(), 3);
}
