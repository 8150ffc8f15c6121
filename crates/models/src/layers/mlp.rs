//! The two-layer feed-forward block: `fc2(act(fc1(x)))` added to a residual.

use crate::backend::{Activation, Ops, Post};
use crate::error::ModelError;

use super::Scratch;

pub struct Mlp<O: Ops> {
    pub fc1: O::Linear,
    pub fc2: O::Linear,
    pub act: Activation,
}

impl<O: Ops> Mlp<O> {
    /// `out = residual + fc2(act(fc1(x)))`.
    pub fn forward(
        &self,
        o: &O,
        x: &O::T,
        residual: &O::T,
        scratch: &mut Scratch<O>,
        out: &mut O::T,
    ) -> Result<(), ModelError> {
        o.linear_fwd(x, &self.fc1, Post::Act(self.act), &mut scratch.inter)?;
        o.linear_fwd(&scratch.inter, &self.fc2, Post::Residual(residual), out)
    }
}

/// The gated MLP of Llama-style decoders: `down(act(gate(x)) · up(x))` added to a residual, with gate and
/// up fused into one GEMM (`gate_up`: `[2·inter, hidden]`, gate rows first).
pub struct GatedMlp<O: Ops> {
    pub gate_up: O::Linear,
    pub down: O::Linear,
    pub act: Activation,
}

impl<O: Ops> GatedMlp<O> {
    pub fn forward(
        &self,
        o: &O,
        x: &O::T,
        residual: &O::T,
        scratch: &mut Scratch<O>,
        out: &mut O::T,
    ) -> Result<(), ModelError> {
        o.linear_fwd(x, &self.gate_up, Post::None, &mut scratch.inter)?;
        o.glu(&scratch.inter, self.act, &mut scratch.gated)?;
        o.linear_fwd(&scratch.gated, &self.down, Post::Residual(residual), out)
    }
}

/// Either feed-forward block, for layer types shared by encoders and decoders.
pub enum FeedForward<O: Ops> {
    Plain(Mlp<O>),
    Gated(GatedMlp<O>),
}

impl<O: Ops> FeedForward<O> {
    pub fn forward(
        &self,
        o: &O,
        x: &O::T,
        residual: &O::T,
        scratch: &mut Scratch<O>,
        out: &mut O::T,
    ) -> Result<(), ModelError> {
        match self {
            FeedForward::Plain(m) => m.forward(o, x, residual, scratch, out),
            FeedForward::Gated(m) => m.forward(o, x, residual, scratch, out),
        }
    }
}
