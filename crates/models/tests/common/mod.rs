//! What the reference tests share: the fixtures, JSON numbers, and the backends to run.
#![allow(dead_code)]

use std::path::PathBuf;

use aleph_models::Backend;
use serde_json::Value;

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny")
}

/// `tests/fixtures/tiny/<model>/reference.json`.
pub fn reference(model: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join(model).join("reference.json")).unwrap()).unwrap()
}

pub fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Aleph's CPU kernels and the candle reference path, with the name `/models` reports for each.
pub fn backends() -> [(Backend, &'static str); 2] {
    [(Backend::Auto, "aleph-cpu"), (Backend::Candle, "candle")]
}
