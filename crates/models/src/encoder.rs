//! What every encoder backend produces: one hidden state per real token, packed like the batch.

use crate::batch::Batch;
use crate::error::ModelError;

/// Turns a batch into per-token hidden states. Heads (pooling, classifiers) work on the result.
pub trait Encoder: Send + Sync {
    fn hidden_size(&self) -> usize;
    /// Bytes of weights held in memory.
    fn weight_bytes(&self) -> u64;
    fn encode(&self, batch: &Batch) -> Result<TokenStates, ModelError>;
}

/// Hidden states for every real token: row `t` of sequence `i` is at
/// `data[(cu_seqlens[i] + t) * hidden..][..hidden]`.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenStates {
    pub hidden: usize,
    pub data: Vec<f32>,
}

impl TokenStates {
    /// The `[len, hidden]` rows of sequence `i`.
    pub fn sequence<'a>(&'a self, batch: &Batch, i: usize) -> &'a [f32] {
        &self.data[batch.cu_seqlens[i] * self.hidden..batch.cu_seqlens[i + 1] * self.hidden]
    }
}
