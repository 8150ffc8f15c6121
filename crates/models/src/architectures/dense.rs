//! The candle linear layer the families not yet on `crate::backend` use.

use candle_core::Tensor;
use candle_nn::VarBuilder;

/// A linear layer with its weight stored transposed (`[in, out]`), ready for `x @ w`.
pub(crate) struct Dense {
    weight_t: Tensor,
    bias: Tensor,
}

impl Dense {
    pub(crate) fn load(vb: VarBuilder, inp: usize, out: usize) -> candle_core::Result<Self> {
        let w = vb.get((out, inp), "weight")?;
        let b = vb.get(out, "bias")?;
        Ok(Dense { weight_t: w.t()?.contiguous()?, bias: b })
    }

    /// Concatenates several layers with the same input into one wider layer.
    pub(crate) fn fuse(parts: Vec<(Tensor, Tensor)>) -> candle_core::Result<Self> {
        let (ws, bs): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
        let w = Tensor::cat(&ws, 0)?;
        let b = Tensor::cat(&bs, 0)?;
        Ok(Dense { weight_t: w.t()?.contiguous()?, bias: b })
    }

    /// `x`: `[rows, in]` → `[rows, out]`.
    pub(crate) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.matmul(&self.weight_t)?.broadcast_add(&self.bias)
    }
}
