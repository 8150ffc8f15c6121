//! Aleph's serving engine: everything between a parsed request and a model's forward pass.
//!
//! Per served model a [`ModelHandle`] owns a bounded queue, a batcher thread that cuts batches by a
//! token budget, and an inference thread that owns the model. Tokenization and image decoding run on a
//! shared [`TokenizerPool`] of OS threads, never on the async runtime. Nothing here knows about HTTP.

mod batcher;
pub mod cache;
pub mod error;
mod handle;
pub mod load;
pub mod outputs;
mod prepared;
mod queue;
pub mod registry;
mod scheduler;
pub mod spec;
mod tokenize;
pub mod usage;
mod warmup;
mod worker;

pub use error::EngineError;
pub use handle::{HandleConfig, Input, ModelHandle, ModelStats, RunOptions, RunResult};
pub use outputs::{EmbedSpec, Embedded, Embedding, LabelScore, Normalization};
pub use registry::{human_bytes, LoadRefused, Memory, MemoryBudget, ModelEntry, ModelRegistry, ModelState};
pub use scheduler::{ComputeScheduler, ComputeSlot, YieldPoint};
pub use tokenize::TokenizerPool;
