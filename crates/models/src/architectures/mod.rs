//! One architecture per file. Each turns a [`crate::Batch`] into per-token hidden states.

pub mod bert;
pub mod clap;
pub(crate) mod clap_fusion;
pub mod clip;
pub mod colpali;
pub mod colqwen2;
pub(crate) mod decoder;
pub mod gemma;
pub mod qwen2_vl;
pub mod siglip;
