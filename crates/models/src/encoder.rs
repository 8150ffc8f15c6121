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
    /// Drops the padding rows of a `[b, max_len, hidden]` rectangle.
    pub fn from_padded(padded: &[f32], batch: &Batch, hidden: usize) -> Self {
        let l = batch.max_len;
        let mut data = Vec::with_capacity(batch.total_tokens() * hidden);
        for i in 0..batch.len() {
            let n = batch.seq_len(i);
            data.extend_from_slice(&padded[i * l * hidden..(i * l + n) * hidden]);
        }
        TokenStates { hidden, data }
    }

    /// The `[len, hidden]` rows of sequence `i`.
    pub fn sequence<'a>(&'a self, batch: &Batch, i: usize) -> &'a [f32] {
        &self.data[batch.cu_seqlens[i] * self.hidden..batch.cu_seqlens[i + 1] * self.hidden]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpads_rows() {
        let mut b = Batch::new();
        b.push(&[1, 2], &[0, 0]);
        b.push(&[3], &[0]);
        // 2 sequences × max_len 2 × hidden 1: [a0 a1] [b0 pad]
        let t = TokenStates::from_padded(&[1.0, 2.0, 3.0, 99.0], &b, 1);
        assert_eq!(t.data, vec![1.0, 2.0, 3.0]);
        assert_eq!(t.sequence(&b, 1), &[3.0]);
    }
}
