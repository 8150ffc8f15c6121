//! EmbeddingGemma's shape against sentence-transformers on both backends (scripts/make_gemma3.py): Gemma 3's
//! decoder attending both ways, local layers within a window and their own rotary base, sandwich norms, mean
//! pooling, two Dense layers and Normalize, the `query` task prompt.

use crate::common;

use common::{check_embedder, check_int8_close, check_prompted};

#[test]
fn embedder_matches_sentence_transformers_on_both_backends() {
    check_embedder("gemma3-embed");
}

#[test]
fn int8_stays_close_to_f32() {
    check_int8_close("gemma3-embed");
}

#[test]
fn the_query_prompt_is_prepended_as_sentence_transformers_does() {
    check_prompted("gemma3-embed");
}
