//! Model-level reference tests: one test binary (one link instead of one per file), a module per subject.

mod common;

mod bf16_parity;
mod bge_m3_reference;
mod candle_precision;
mod clap_reference;
mod clip_reference;
mod colpali_reference;
mod colqwen2_reference;
mod deberta_reference;
mod distilbert_reference;
mod gemma3_reference;
mod gte_reference;
mod jina_reference;
mod jina_v3_reference;
mod llama_reference;
mod mapped_tables;
mod minimized_configs;
mod modernbert_reference;
mod mpnet_reference;
mod mxbai_reference;
mod nomic_moe_reference;
mod nomic_reference;
mod qwen3_reference;
mod qwen3_vl_reference;
mod refusals;
mod siglip_reference;
mod weight_estimate;
