//! The pre-norm transformer layer (CLIP, SigLIP, ViTs, decoders): `x += attn(n1(x)); x += mlp(n2(x))`, and
//! Gemma 3's sandwiched form of it.

use crate::backend::{Norm, Ops};
use crate::error::ModelError;

use super::{Mlp, Positional, Scratch, SelfAttention};

/// Gemma 3's post-attention and post-feed-forward norms.
pub type SandwichNorms<P> = (Norm<P>, Norm<P>);

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
    let mut buffers = LayerBuffers::new(o)?;
    for l in layers {
        l.forward(o, x, seqs, positional, &mut buffers)?;
    }
    Ok(())
}

/// What a stack of layers reuses from one layer to the next.
pub struct LayerBuffers<O: Ops> {
    pub scratch: Scratch<O>,
    pub normed: O::T,
    pub mid: O::T,
}

impl<O: Ops> LayerBuffers<O> {
    pub fn new(o: &O) -> Result<Self, ModelError> {
        Ok(LayerBuffers { scratch: Scratch::new(o)?, normed: o.empty()?, mid: o.empty()? })
    }
}

impl<O: Ops> PreNormLayer<O> {
    /// `x += attn(n1(x)); x += mlp(n2(x))`, in place.
    pub fn forward(
        &self,
        o: &O,
        x: &mut O::T,
        seqs: &O::Seqs,
        positional: Positional<'_, O>,
        b: &mut LayerBuffers<O>,
    ) -> Result<(), ModelError> {
        o.norm_to(x, &self.norm1, &mut b.normed)?;
        self.attention.forward(o, &b.normed, x, seqs, positional, &mut b.scratch, &mut b.mid)?;
        o.norm_to(&b.mid, &self.norm2, &mut b.normed)?;
        self.mlp.forward(o, &b.normed, &b.mid, &mut b.scratch, x)
    }

    /// Gemma 3's sandwich: `x += post_attn(attn(n1(x))); x += post_ff(mlp(n2(x)))`, in place.
    pub fn forward_sandwiched(
        &self,
        o: &O,
        x: &mut O::T,
        seqs: &O::Seqs,
        positional: Positional<'_, O>,
        (post_attn, post_ff): &SandwichNorms<O::Param>,
        b: &mut LayerBuffers<O>,
    ) -> Result<(), ModelError> {
        o.norm_to(x, &self.norm1, &mut b.normed)?;
        self.attention.project(o, &b.normed, seqs, positional, &mut b.scratch, &mut b.mid)?;
        o.add_norm(&mut b.mid, post_attn, x)?;
        o.norm_to(x, &self.norm2, &mut b.normed)?;
        self.mlp.project(o, &b.normed, &mut b.scratch, &mut b.mid)?;
        o.add_norm(&mut b.mid, post_ff, x)
    }
}
