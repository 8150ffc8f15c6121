//! `--dtype bfloat16` on every embedder fixture: weights held in bf16 (fewer bytes than f32) and, where the CPU
//! has AVX512-BF16, multiplied with it; each vector within cosine 0.999 of f32's.

use crate::common;

use common::{check_bf16_close, fixtures};

#[test]
fn every_embedder_stays_close_to_f32_in_bf16() {
    let mut names: Vec<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("-embed"))
        .collect();
    names.sort();
    assert!(names.len() >= 15, "{names:?}");
    names.iter().for_each(|n| check_bf16_close(n));
}
