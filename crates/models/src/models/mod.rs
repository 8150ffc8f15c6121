//! One file per architecture family, each defined once over [`crate::backend::Ops`] and run on every
//! backend.

pub mod bert;
pub mod clap;
pub(crate) mod clap_fusion;
pub mod clip;
pub mod colpali;
pub mod colqwen2;
pub mod deberta;
pub mod gemma;
pub mod gemma3;
pub mod gte;
pub mod htsat;
pub mod jina_v3;
pub mod llama;
pub mod modernbert;
pub mod qwen2_vl;
pub mod qwen3;
pub mod qwen3_vl;
pub mod siglip;
pub mod splade;
pub mod static_model;
