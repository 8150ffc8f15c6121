//! What every encoder backend produces: one hidden state per real token, packed like the batch.

use std::sync::Arc;

use candle_nn::VarBuilder;

use crate::backend::Ops;
use crate::batch::Batch;
use crate::error::ModelError;
use crate::layers::Weights;
use crate::loader::MappedTensors;
use crate::pooling::{pool_packed, Pooling};

/// Turns a batch into per-token hidden states. Heads (pooling, classifiers) work on the result.
pub trait Encoder: Send + Sync {
    fn hidden_size(&self) -> usize;
    /// Bytes of weights held in memory.
    fn weight_bytes(&self) -> u64;
    fn encode(&self, batch: &Batch) -> Result<TokenStates, ModelError>;
    /// Each sequence's pooled state: on a GPU only these rows leave the device.
    fn encode_pooled(&self, batch: &Batch, pooling: Pooling) -> Result<Vec<Vec<f32>>, ModelError> {
        let states = self.encode(batch)?;
        Ok(pool_packed(&states.data, states.hidden, &batch.cu_seqlens, pooling))
    }
}

/// A text encoder family written over [`Ops`] (BERT, ModernBERT, GTE): [`OnBackend`] makes it an [`Encoder`].
pub trait TokenEncoder<O: Ops>: Send + Sync {
    fn hidden_size(&self) -> usize;
    /// Bytes of weights the backend prepared.
    fn weight_bytes(&self) -> usize;
    /// Every real token's final hidden state, packed like the batch: `[tokens, hidden]`.
    fn forward(&self, o: &O, batch: &Batch) -> Result<O::T, ModelError>;
}

/// A family's encoder with the backend that computes it.
pub struct OnBackend<O: Ops, M> {
    ops: O,
    model: M,
}

impl<O: Ops, M: TokenEncoder<O>> OnBackend<O, M> {
    /// Reads the model with `load` from weights rooted at `vb` (tables read in place from `mapped`, the
    /// same files mapped, where the backend can), prepared by `ops`.
    pub fn load(
        ops: O,
        vb: VarBuilder,
        mapped: Option<Arc<MappedTensors>>,
        load: impl FnOnce(&Weights<O>) -> Result<M, ModelError>,
    ) -> Result<Self, ModelError> {
        let model = load(&Weights::new(vb, &ops).with_mapped(mapped))?;
        Ok(OnBackend { ops, model })
    }
}

impl<O: Ops, M: TokenEncoder<O>> Encoder for OnBackend<O, M> {
    fn hidden_size(&self) -> usize {
        self.model.hidden_size()
    }

    fn weight_bytes(&self) -> u64 {
        self.model.weight_bytes() as u64
    }

    fn encode(&self, batch: &Batch) -> Result<TokenStates, ModelError> {
        let x = self.model.forward(&self.ops, batch)?;
        Ok(TokenStates { hidden: self.model.hidden_size(), data: self.ops.download(x)? })
    }

    fn encode_pooled(&self, batch: &Batch, pooling: Pooling) -> Result<Vec<Vec<f32>>, ModelError> {
        let x = self.model.forward(&self.ops, batch)?;
        self.ops.pool(x, &batch.cu_seqlens, pooling)
    }
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
