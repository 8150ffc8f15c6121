//! The weight-free debug engine (`--engine debug`), like Infinity's `debugengine`: vectors derived
//! from the input bytes at no compute cost, for HTTP-overhead benchmarks and fault-injection tests.
//!
//! Inputs steer it: a batch holding an input that contains `__fail__` returns an error, `__panic__`
//! panics, and `__slow__` sleeps [`SLOW_BATCH`] before answering.

use std::time::Duration;

use crate::batch::{Batch, Output};
use crate::error::ModelError;
use crate::loader::{LoadedModel, Model, ModelInfo, Task};
use crate::pooling::{l2_normalize, Pooling};
use crate::tokenizer::TextTokenizer;

pub const DEBUG_DIM: usize = 32;
pub const DEBUG_WINDOW: usize = 512;
pub const SLOW_BATCH: Duration = Duration::from_millis(400);

pub struct DebugModel;

/// A debug "model" with its byte tokenizer.
pub fn load_debug() -> LoadedModel {
    LoadedModel {
        model: std::sync::Arc::new(DebugModel),
        tokenizer: TextTokenizer::bytes(DEBUG_WINDOW),
        images: None,
        audio: None,
        info: ModelInfo {
            normalize: true,
            ..ModelInfo::new(
                Task::Embed,
                crate::loader::Compute::Debug,
                "DebugEngine".into(),
                DEBUG_DIM,
                DEBUG_WINDOW,
                Pooling::Mean,
            )
        },
    }
}

fn contains(ids: &[u32], marker: &str) -> bool {
    let needle: Vec<u32> = marker.bytes().map(|b| b as u32 + 3).collect();
    ids.windows(needle.len()).any(|w| w == needle.as_slice())
}

/// A deterministic unit vector from the ids (FNV-style mixing per component).
pub fn debug_vector(ids: &[u32]) -> Vec<f32> {
    let mut v: Vec<f32> = (0..DEBUG_DIM as u64)
        .map(|k| {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            for &id in ids {
                h = (h ^ id as u64).wrapping_mul(0x0100_0000_01b3);
            }
            ((h >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect();
    l2_normalize(&mut v);
    v
}

impl Model for DebugModel {
    fn forward(&self, batch: &Batch) -> Result<Output, ModelError> {
        let seqs: Vec<&[u32]> =
            (0..batch.len()).map(|i| &batch.input_ids[batch.cu_seqlens[i]..batch.cu_seqlens[i + 1]]).collect();
        if seqs.iter().any(|s| contains(s, "__panic__")) {
            panic!("debug engine: __panic__ in the batch");
        }
        if seqs.iter().any(|s| contains(s, "__fail__")) {
            return Err(ModelError::Forward("debug engine: __fail__ in the batch".into()));
        }
        if seqs.iter().any(|s| contains(s, "__slow__")) {
            std::thread::sleep(SLOW_BATCH);
        }
        Ok(Output { vectors: seqs.into_iter().map(debug_vector).collect() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch_of(texts: &[&str]) -> Batch {
        let tok = TextTokenizer::bytes(DEBUG_WINDOW);
        let mut b = Batch::new();
        for t in texts {
            let e = tok.encode(t).unwrap();
            b.push(&e.ids, &e.type_ids);
        }
        b
    }

    #[test]
    fn vectors_depend_on_input_only() {
        let out = DebugModel.forward(&batch_of(&["a", "b", "a"])).unwrap().vectors;
        assert_eq!(out[0], out[2]);
        assert_ne!(out[0], out[1]);
        assert_eq!(out[0].len(), DEBUG_DIM);
    }

    #[test]
    fn markers_inject_faults() {
        assert!(DebugModel.forward(&batch_of(&["ok", "x __fail__ y"])).is_err());
        let panicked = std::panic::catch_unwind(|| DebugModel.forward(&batch_of(&["__panic__"])));
        assert!(panicked.is_err());
    }
}
