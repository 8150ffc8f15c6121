//! The server over HTTP, spawned as a binary: one test binary (one link instead of one per file), a module per subject.

mod common;

mod admin;
mod api_keys;
mod bad_input;
mod bench;
mod clap;
mod clip;
mod cohere;
mod colbert;
mod colpali;
mod compat;
mod corpus;
mod encoder_families;
mod engine;
mod eval;
mod fuzz_seeds;
mod http_api;
mod hub_download;
mod jina_v3;
mod memory_budget;
mod openai_client;
mod parity;
mod qwen3_vl;
mod rerank_classify;
mod siglip;
mod static_models;
mod tei;
mod vllm;
