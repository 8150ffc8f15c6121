//! The pre-norm transformer layer (CLIP, SigLIP, ViTs, decoders): `x += attn(n1(x)); x += mlp(n2(x))`.

use crate::backend::{Norm, Ops};
use crate::error::ModelError;

use super::{Mlp, Positional, Scratch, SelfAttention};

pub struct PreNormLayer<O: Ops> {
    pub norm1: Norm<O::Param>,
    pub attention: SelfAttention<O>,
    pub norm2: Norm<O::Param>,
    pub mlp: Mlp<O>,
}

/// Runs `layers` over `x` (`[tokens, hidden]`, packed as `seqs`), in place.
pub fn pre_norm_stack<O: Ops>(
    o: &O,
    layers: &[PreNormLayer<O>],
    x: &mut O::T,
    seqs: &O::Seqs,
    positional: Positional<'_, O>,
) -> Result<(), ModelError> {
    let mut scratch = Scratch::new(o)?;
    let (mut normed, mut mid) = (o.empty()?, o.empty()?);
    for l in layers {
        o.norm_to(x, &l.norm1, &mut normed)?;
        l.attention.forward(o, &normed, x, seqs, positional, &mut scratch, &mut mid)?;
        o.norm_to(&mid, &l.norm2, &mut normed)?;
        l.mlp.forward(o, &normed, &mid, &mut scratch, x)?;
    }
    Ok(())
}
