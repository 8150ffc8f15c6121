//! Model loading and compute for Aleph.
//!
//! This crate knows nothing of queues or HTTP. It turns a model folder (local, cached or downloaded by
//! [`hub`]) into a [`LoadedModel`]: a tokenizer, a description of what the model can do, and a
//! [`Model`] that runs one [`Batch`] at a time.

pub mod backend;
pub mod batch;
pub mod chat_template;
pub mod config;
pub mod cpu;
pub mod debug;
pub mod encoder;
pub mod error;
pub mod heads;
pub mod hub;
pub mod layers;
pub mod loader;
pub mod media;
pub mod models;
pub mod pooling;
pub mod quantize;
pub mod st_config;
pub mod tokenizer;

pub use batch::{read_sparse_pairs, sparse_pairs, Batch, Output, OutputKind};
pub use error::ModelError;
pub use loader::{
    gpu_available, gpu_memory_bytes, gpu_status, load, min_weight_bytes, AttentionKernel, Backend, Compute, DType,
    Device, GpuStatus, LoadOptions, LoadedModel, Model, ModelInfo, ModelTask, RerankTemplate, Task,
};
pub use media::audio::{AudioFeatures, AudioProcessor};
pub use media::image::{ImageProcessor, Pixels};
pub use media::MediaError;
pub use pooling::{Pooling, PoolingChoice};
pub use tokenizer::{Encoded, PairTemplate, TextTokenizer};
