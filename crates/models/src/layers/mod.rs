//! Layers shared by the families in `crate::models`, written once over [`crate::backend::Ops`].

pub mod attention;
pub mod block;
pub mod decoder;
pub mod embeddings;
pub mod mlp;
pub mod moe;
pub mod rotary;
pub mod weights;

pub use attention::{Positional, SelfAttention};
pub use embeddings::TextEmbeddings;
pub use mlp::Mlp;
pub use weights::Weights;

use crate::backend::Ops;
use crate::error::ModelError;

/// The intermediate buffers of one forward pass, reused layer after layer.
pub struct Scratch<O: Ops> {
    pub qkv: O::T,
    pub ctx: O::T,
    pub inter: O::T,
    pub gated: O::T,
}

impl<O: Ops> Scratch<O> {
    pub fn new(o: &O) -> Result<Self, ModelError> {
        Ok(Scratch { qkv: o.empty()?, ctx: o.empty()?, inter: o.empty()?, gated: o.empty()? })
    }
}
