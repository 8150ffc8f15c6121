//! The feed-forward block, added to a residual: `down(act(up(x)))`, or gated as Llama-style and GLU
//! families have it, `down(act(gate(x)) · up(x))` with gate and up fused into one GEMM (`[2·inter, hidden]`,
//! gate rows first).

use crate::backend::{Activation, Ops, Post};
use crate::error::ModelError;

use super::Scratch;

pub struct Mlp<O: Ops> {
    /// `up`, or `gate` and `up` stacked when `gated`.
    pub up: O::Linear,
    pub down: O::Linear,
    pub act: Activation,
    pub gated: bool,
}

impl<O: Ops> Mlp<O> {
    pub fn plain(up: O::Linear, down: O::Linear, act: Activation) -> Self {
        Mlp { up, down, act, gated: false }
    }

    pub fn gated(gate_up: O::Linear, down: O::Linear, act: Activation) -> Self {
        Mlp { up: gate_up, down, act, gated: true }
    }

    /// `out = residual + down(…)`.
    pub fn forward(
        &self,
        o: &O,
        x: &O::T,
        residual: &O::T,
        scratch: &mut Scratch<O>,
        out: &mut O::T,
    ) -> Result<(), ModelError> {
        self.run(o, x, Post::Residual(residual), scratch, out)
    }

    /// `out = down(…)` with no residual (Gemma 3 normalizes it before adding).
    pub fn project(&self, o: &O, x: &O::T, scratch: &mut Scratch<O>, out: &mut O::T) -> Result<(), ModelError> {
        self.run(o, x, Post::None, scratch, out)
    }

    fn run(
        &self,
        o: &O,
        x: &O::T,
        post: Post<'_, O::T>,
        scratch: &mut Scratch<O>,
        out: &mut O::T,
    ) -> Result<(), ModelError> {
        if self.gated {
            o.linear_fwd(x, &self.up, Post::None, &mut scratch.inter)?;
            o.glu(&scratch.inter, self.act, &mut scratch.gated)?;
            o.linear_fwd(&scratch.gated, &self.down, post, out)
        } else {
            o.linear_fwd(x, &self.up, Post::Act(self.act), &mut scratch.inter)?;
            o.linear_fwd(&scratch.inter, &self.down, post, out)
        }
    }
}
