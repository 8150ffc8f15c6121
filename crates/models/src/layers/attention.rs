//! Self-attention as every family here runs it: one fused query/key/value projection, rotary positions
//! where the family has them, attention by the backend, then the output projection added to a residual.

use crate::backend::{AttentionSpec, Disentangled, Norm, Ops, Post, RelativeBias, ScoreBias};
use crate::error::ModelError;

use super::Scratch;

/// How a family tells attention where tokens are, beyond their embeddings.
pub enum Positional<'a, O: Ops> {
    None,
    /// Each row's rotary `(cos, sin)`.
    Rotary(&'a O::T, &'a O::T),
    /// A bias by relative offset (MPNet).
    Relative(RelativeBias<'a>),
    /// Content-by-position terms (DeBERTa).
    Disentangled(Disentangled<'a, O::Param>),
}

impl<O: Ops> Clone for Positional<'_, O> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<O: Ops> Copy for Positional<'_, O> {}

/// The query heads' norm and the key heads'.
pub type HeadNorms<P> = (Norm<P>, Norm<P>);

pub struct SelfAttention<O: Ops> {
    /// Per-head RMS norms of queries and keys, before positions (Qwen3, Gemma 3).
    pub qk_norm: Option<HeadNorms<O::Param>>,
    pub qkv: O::Linear,
    pub out: O::Linear,
    pub spec: AttentionSpec,
}

impl<O: Ops> SelfAttention<O> {
    /// `out = residual + out_proj(attention(qkv(x)))`, positions as `positional` says.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        o: &O,
        x: &O::T,
        residual: &O::T,
        seqs: &O::Seqs,
        positional: Positional<'_, O>,
        scratch: &mut Scratch<O>,
        out: &mut O::T,
    ) -> Result<(), ModelError> {
        self.context(o, x, seqs, positional, scratch)?;
        o.linear_fwd(&scratch.ctx, &self.out, Post::Residual(residual), out)
    }

    /// `out = out_proj(attention(qkv(x)))` with no residual (Gemma 3 normalizes it before adding).
    pub fn project(
        &self,
        o: &O,
        x: &O::T,
        seqs: &O::Seqs,
        positional: Positional<'_, O>,
        scratch: &mut Scratch<O>,
        out: &mut O::T,
    ) -> Result<(), ModelError> {
        self.context(o, x, seqs, positional, scratch)?;
        o.linear_fwd(&scratch.ctx, &self.out, Post::None, out)
    }

    /// The attended values, before the output projection, into `scratch.ctx`.
    fn context(
        &self,
        o: &O,
        x: &O::T,
        seqs: &O::Seqs,
        positional: Positional<'_, O>,
        scratch: &mut Scratch<O>,
    ) -> Result<(), ModelError> {
        o.linear_fwd(x, &self.qkv, Post::None, &mut scratch.qkv)?;
        if let Some((q, k)) = &self.qk_norm {
            o.head_norm(&mut scratch.qkv, &self.spec, q, k)?;
        }
        let mut bias = ScoreBias::None;
        match positional {
            Positional::None => {}
            Positional::Rotary(cos, sin) => o.rotary(&mut scratch.qkv, &self.spec, cos, sin)?,
            Positional::Relative(b) => bias = ScoreBias::Relative(b),
            Positional::Disentangled(d) => bias = ScoreBias::Disentangled(d),
        }
        o.attention(&scratch.qkv, seqs, &self.spec, bias, &mut scratch.ctx)
    }
}
