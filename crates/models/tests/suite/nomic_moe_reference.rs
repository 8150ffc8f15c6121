//! nomic-embed-text-v2-moe's mixture-of-experts layers against nomic's remote code (nomic-ai/nomic-bert-2048,
//! run by scripts/make_nomic_moe.py) on both backends: top-2 of 4 experts on every second layer.

use crate::common;

use common::{check_embedder, check_int8_close};

#[test]
fn moe_embedder_matches_the_remote_code_on_both_backends() {
    check_embedder("nomic-moe-embed");
}

#[test]
fn int8_stays_close_to_f32() {
    check_int8_close("nomic-moe-embed");
}
