//! What the decoder-only towers (Gemma for ColPali, Qwen2 for ColQwen2) share: rotary angles, grouped-query
//! self-attention over one sequence, and the gated MLP. Their norms differ (Gemma scales by `1 + w`) and
//! stay with each model.

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Linear, VarBuilder};

use super::bert::Activation;

/// `1 / θ^(2j / dim)` for `j < dim / 2`, in f32 as transformers computes it.
pub(crate) fn inv_freq(theta: f64, dim: usize) -> Vec<f32> {
    let theta = theta as f32;
    (0..dim / 2).map(|j| 1.0 / theta.powf((2 * j) as f32 / dim as f32)).collect()
}

/// `cos` and `sin` of positions `first..first + n` times `inv_freq`: `[n, inv_freq.len()]` each.
pub(crate) fn rotary(
    inv_freq: &[f32],
    n: usize,
    first: usize,
    dev: &Device,
    dtype: DType,
) -> candle_core::Result<(Tensor, Tensor)> {
    let angles: Vec<f32> = (first..first + n).flat_map(|pos| inv_freq.iter().map(move |f| pos as f32 * f)).collect();
    let angles = Tensor::from_vec(angles, (n, inv_freq.len()), dev)?;
    Ok((angles.cos()?.to_dtype(dtype)?, angles.sin()?.to_dtype(dtype)?))
}

/// `0` on and below the diagonal, `-inf` above: an additive causal mask `[n, n]`.
pub(crate) fn causal_mask(n: usize, dev: &Device, dtype: DType) -> candle_core::Result<Tensor> {
    let mask: Vec<f32> =
        (0..n).flat_map(|i| (0..n).map(move |j| if j <= i { 0.0 } else { f32::NEG_INFINITY })).collect();
    Tensor::from_vec(mask, (n, n), dev)?.to_dtype(dtype)
}

/// Rotary grouped-query self-attention: `heads` query heads over `kv_heads` key-value heads of `head_dim`.
pub(crate) struct SelfAttention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

impl SelfAttention {
    /// `vb`: the layer's `self_attn`; `qkv_bias`: whether q, k and v carry biases (o never does).
    pub fn load(
        vb: VarBuilder,
        hidden: usize,
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        qkv_bias: bool,
    ) -> candle_core::Result<Self> {
        let lin = |inp: usize, out: usize, name: &str| {
            if qkv_bias {
                candle_nn::linear(inp, out, vb.pp(name))
            } else {
                candle_nn::linear_no_bias(inp, out, vb.pp(name))
            }
        };
        Ok(SelfAttention {
            q: lin(hidden, heads * head_dim, "q_proj")?,
            k: lin(hidden, kv_heads * head_dim, "k_proj")?,
            v: lin(hidden, kv_heads * head_dim, "v_proj")?,
            o: candle_nn::linear_no_bias(heads * head_dim, hidden, vb.pp("o_proj"))?,
            heads,
            kv_heads,
            head_dim,
        })
    }

    /// `y`: one sequence's normed states `[n, hidden]`; `cos`/`sin`: `[n, head_dim / 2]`; `mask`: additive
    /// `[n, n]`, or none for attention in both directions.
    pub fn forward(
        &self,
        y: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Tensor>,
    ) -> candle_core::Result<Tensor> {
        let n = y.dim(0)?;
        let (nh, nkv, hd) = (self.heads, self.kv_heads, self.head_dim);
        let heads = |t: Tensor, k: usize| -> candle_core::Result<Tensor> {
            t.reshape((1, n, k, hd))?.transpose(1, 2)?.contiguous()
        };
        let q = candle_nn::rotary_emb::rope(&heads(self.q.forward(y)?, nh)?, cos, sin)?;
        let k = candle_nn::rotary_emb::rope(&heads(self.k.forward(y)?, nkv)?, cos, sin)?;
        let v = heads(self.v.forward(y)?, nkv)?;
        // Each key-value head serves `nh / nkv` consecutive query heads.
        let repeat = |t: Tensor| -> candle_core::Result<Tensor> {
            if nkv == nh {
                return Ok(t);
            }
            t.unsqueeze(2)?.expand((1, nkv, nh / nkv, n, hd))?.reshape((1, nh, n, hd))
        };
        let (k, v) = (repeat(k)?, repeat(v)?);
        let mut scores = (q.matmul(&k.t()?)? * (1.0 / (hd as f64).sqrt()))?;
        if let Some(mask) = mask {
            scores = scores.broadcast_add(mask)?;
        }
        let ctx = candle_nn::ops::softmax_last_dim(&scores)?.matmul(&v)?.transpose(1, 2)?.reshape((n, nh * hd))?;
        self.o.forward(&ctx)
    }
}

/// `down(act(gate(x)) · up(x))`, without biases.
pub(crate) struct GatedMlp {
    gate: Linear,
    up: Linear,
    down: Linear,
    act: Activation,
}

impl GatedMlp {
    pub fn load(vb: VarBuilder, hidden: usize, inter: usize, act: Activation) -> candle_core::Result<Self> {
        Ok(GatedMlp {
            gate: candle_nn::linear_no_bias(hidden, inter, vb.pp("gate_proj"))?,
            up: candle_nn::linear_no_bias(hidden, inter, vb.pp("up_proj"))?,
            down: candle_nn::linear_no_bias(inter, hidden, vb.pp("down_proj"))?,
            act,
        })
    }

    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.down.forward(&(self.act.apply(&self.gate.forward(x)?)? * self.up.forward(x)?)?)
    }
}
