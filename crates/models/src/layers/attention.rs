//! Self-attention as every family here runs it: one fused query/key/value projection, rotary positions
//! where the family has them, attention by the backend, then the output projection added to a residual.

use crate::backend::{AttentionSpec, Ops, Post};
use crate::error::ModelError;

use super::Scratch;

pub struct SelfAttention<O: Ops> {
    pub qkv: O::Linear,
    pub out: O::Linear,
    pub spec: AttentionSpec,
}

impl<O: Ops> SelfAttention<O> {
    /// `out = residual + out_proj(attention(rotary(qkv(x))))`; `rotary`: each row's `(cos, sin)`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        o: &O,
        x: &O::T,
        residual: &O::T,
        seqs: &O::Seqs,
        rotary: Option<(&O::T, &O::T)>,
        scratch: &mut Scratch<O>,
        out: &mut O::T,
    ) -> Result<(), ModelError> {
        o.linear_fwd(x, &self.qkv, Post::None, &mut scratch.qkv)?;
        if let Some((cos, sin)) = rotary {
            o.rotary(&mut scratch.qkv, &self.spec, cos, sin)?;
        }
        o.attention(&scratch.qkv, seqs, &self.spec, &mut scratch.ctx)?;
        o.linear_fwd(&scratch.ctx, &self.out, Post::Residual(residual), out)
    }
}
