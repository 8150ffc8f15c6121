//! The memory budget's estimate before a load (`min_weight_bytes`, from the checkpoint's headers) is a lower
//! bound of what the load then holds, on both backends and at every dtype the family takes, and close to it
//! for a real encoder on the CPU kernels.

use std::path::PathBuf;

use aleph_models::{load, min_weight_bytes, DType, LoadOptions};

use crate::common::{backends, fixtures};

/// (estimate, held) per backend that loads `dir` at `dtype`, the CPU kernels first.
fn check(dir: &std::path::Path, dtype: DType) -> Vec<(u64, u64)> {
    let estimate = min_weight_bytes(dir, dtype).unwrap();
    let mut pairs = Vec::new();
    for (backend, name) in backends() {
        if dtype != DType::Auto && name == "candle" {
            continue;
        }
        let held = match load(dir, &LoadOptions { backend, dtype, ..Default::default() }) {
            Ok(loaded) => loaded.info.weight_bytes,
            // Families without that dtype refuse it (refusals.rs tests the refusals).
            Err(aleph_models::ModelError::InvalidOption(_)) if dtype != DType::Auto => continue,
            Err(e) => panic!("{}: {dtype:?} on {name}: {e}", dir.display()),
        };
        assert!(estimate <= held, "{}: {dtype:?} on {name}: estimated {estimate}, held {held}", dir.display());
        pairs.push((estimate, held));
    }
    pairs
}

#[test]
fn the_estimate_never_passes_what_a_load_holds() {
    for fixture in ["bert-rerank", "xlmr-embed", "mpnet-embed", "qwen3-embed", "qwen3-rerank", "gemma3-embed", "clip"] {
        let dir = fixtures().join(fixture);
        for dtype in [DType::Auto, DType::Int8, DType::BFloat16] {
            check(&dir, dtype);
        }
    }
}

/// all-MiniLM-L6-v2 (`scripts/fetch-models.sh`): the layers are nearly all of it, so the estimate is close.
#[test]
fn the_estimate_is_close_for_a_real_encoder() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2");
    assert!(dir.join("model.safetensors").is_file(), "{} is missing: run scripts/fetch-models.sh", dir.display());
    // On the CPU kernels (candle holds the whole mapped file, the token table too).
    let (estimate, held) = check(&dir, DType::Auto)[0];
    assert!(estimate as f64 >= 0.9 * held as f64, "estimated {estimate} of {held} held");
}
