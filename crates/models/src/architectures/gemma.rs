//! The Gemma decoder on candle (`GemmaModel`), as PaliGemma runs it for retrieval: token embeddings scaled
//! by √hidden, RMS norms that scale by `1 + w` (in f32), rotary positions, grouped-query attention, a
//! gated MLP, and a final norm. It runs one sequence at a time, attending in both directions: ColPali
//! reads the states of a prompt that is all prefix (PaliGemma's prefix attends bidirectionally).

use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{Embedding, Linear, VarBuilder};
use serde::Deserialize;

use super::bert::Activation;
use crate::error::{weights, ModelError};

/// `GemmaConfig`; hub configs omit what equals the class defaults, so every field has them.
#[derive(Debug, Clone, Deserialize)]
pub struct GemmaConfig {
    #[serde(default = "d256000")]
    pub vocab_size: usize,
    #[serde(default = "d3072")]
    pub hidden_size: usize,
    #[serde(default = "d24576")]
    pub intermediate_size: usize,
    #[serde(default = "d28")]
    pub num_hidden_layers: usize,
    #[serde(default = "d16")]
    pub num_attention_heads: usize,
    #[serde(default = "d16")]
    pub num_key_value_heads: usize,
    #[serde(default = "d256")]
    pub head_dim: usize,
    /// Older configs name the MLP's activation here (and leave `hidden_act` at a stale `gelu`).
    #[serde(default)]
    pub hidden_activation: Option<String>,
    #[serde(default)]
    pub hidden_act: Option<String>,
    #[serde(default = "d8192")]
    pub max_position_embeddings: usize,
    #[serde(default = "eps")]
    pub rms_norm_eps: f64,
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_parameters: Option<RopeParameters>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RopeParameters {
    pub rope_theta: Option<f64>,
    pub rope_type: Option<String>,
}

fn d256000() -> usize {
    256_000
}
fn d3072() -> usize {
    3072
}
fn d24576() -> usize {
    24_576
}
fn d28() -> usize {
    28
}
fn d16() -> usize {
    16
}
fn d256() -> usize {
    256
}
fn d8192() -> usize {
    8192
}
fn eps() -> f64 {
    1e-6
}

impl GemmaConfig {
    fn theta(&self) -> Result<f64, ModelError> {
        if let Some(kind) = self.rope_parameters.as_ref().and_then(|r| r.rope_type.as_deref()) {
            if kind != "default" {
                return Err(ModelError::Unsupported(format!("Gemma rope_type `{kind}`")));
            }
        }
        Ok(self.rope_parameters.as_ref().and_then(|r| r.rope_theta).or(self.rope_theta).unwrap_or(10_000.0))
    }

    fn activation(&self) -> Result<Activation, ModelError> {
        let name = self.hidden_activation.as_deref().or(self.hidden_act.as_deref()).unwrap_or("gelu_pytorch_tanh");
        Activation::parse(name)
    }
}

/// Gemma's RMS norm: `x / rms(x) · (1 + w)`, computed in f32.
struct RmsNorm {
    scale: Tensor,
    eps: f64,
}

impl RmsNorm {
    fn load(vb: VarBuilder, h: usize, eps: f64) -> candle_core::Result<Self> {
        Ok(RmsNorm { scale: (vb.get(h, "weight")?.to_dtype(DType::F32)? + 1.0)?, eps })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let dtype = x.dtype();
        let x = x.to_dtype(DType::F32)?;
        let rms = (x.sqr()?.mean_keepdim(D::Minus1)? + self.eps)?.sqrt()?;
        x.broadcast_div(&rms)?.broadcast_mul(&self.scale)?.to_dtype(dtype)
    }
}

struct Layer {
    input_norm: RmsNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    post_norm: RmsNorm,
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl Layer {
    fn load(vb: VarBuilder, cfg: &GemmaConfig) -> candle_core::Result<Self> {
        let (h, hd, i) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let sa = vb.pp("self_attn");
        let mlp = vb.pp("mlp");
        let lin = candle_nn::linear_no_bias;
        Ok(Layer {
            input_norm: RmsNorm::load(vb.pp("input_layernorm"), h, cfg.rms_norm_eps)?,
            q: lin(h, cfg.num_attention_heads * hd, sa.pp("q_proj"))?,
            k: lin(h, cfg.num_key_value_heads * hd, sa.pp("k_proj"))?,
            v: lin(h, cfg.num_key_value_heads * hd, sa.pp("v_proj"))?,
            o: lin(cfg.num_attention_heads * hd, h, sa.pp("o_proj"))?,
            post_norm: RmsNorm::load(vb.pp("post_attention_layernorm"), h, cfg.rms_norm_eps)?,
            gate: lin(h, i, mlp.pp("gate_proj"))?,
            up: lin(h, i, mlp.pp("up_proj"))?,
            down: lin(i, h, mlp.pp("down_proj"))?,
        })
    }
}

pub struct Gemma {
    embed: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    act: Activation,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    hidden: usize,
    /// `1 / θ^(2j / head_dim)`, as transformers computes it in f32.
    inv_freq: Vec<f32>,
    embed_scale: f64,
}

impl Gemma {
    /// `vb`: the decoder's root (holding `embed_tokens`, `layers`, `norm`).
    pub fn load(vb: VarBuilder, cfg: &GemmaConfig) -> Result<Self, ModelError> {
        let (h, hd) = (cfg.hidden_size, cfg.head_dim);
        if cfg.num_key_value_heads == 0
            || !cfg.num_attention_heads.is_multiple_of(cfg.num_key_value_heads)
            || !hd.is_multiple_of(2)
        {
            return Err(ModelError::Unsupported(format!(
                "Gemma with {} heads over {} key-value heads of width {hd}",
                cfg.num_attention_heads, cfg.num_key_value_heads
            )));
        }
        let theta = cfg.theta()? as f32;
        let inv_freq = (0..hd / 2).map(|j| 1.0 / theta.powf((2 * j) as f32 / hd as f32)).collect();
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::load(vb.pp("layers").pp(i), cfg))
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(weights)?;
        Ok(Gemma {
            embed: candle_nn::embedding(cfg.vocab_size, h, vb.pp("embed_tokens")).map_err(weights)?,
            layers,
            norm: RmsNorm::load(vb.pp("norm"), h, cfg.rms_norm_eps).map_err(weights)?,
            act: cfg.activation()?,
            heads: cfg.num_attention_heads,
            kv_heads: cfg.num_key_value_heads,
            head_dim: hd,
            hidden: h,
            inv_freq,
            // transformers rounds √hidden to the weights' dtype before scaling.
            embed_scale: (h as f32).sqrt() as f64,
        })
    }

    pub fn hidden_size(&self) -> usize {
        self.hidden
    }

    pub fn device(&self) -> &Device {
        self.embed.embeddings().device()
    }

    pub fn dtype(&self) -> DType {
        self.embed.embeddings().dtype()
    }

    /// Scaled token embeddings, `[ids, hidden]`. Ids past the vocabulary (an image placeholder) embed as 0,
    /// as transformers does before it writes the image features over them.
    pub fn embed(&self, ids: &[u32]) -> candle_core::Result<Tensor> {
        let vocab = self.embed.embeddings().dim(0)? as u32;
        let ids: Vec<u32> = ids.iter().map(|&i| if i < vocab { i } else { 0 }).collect();
        let ids = Tensor::new(ids.as_slice(), self.device())?;
        self.embed.forward(&ids)? * self.embed_scale
    }

    /// Final states of one sequence of input embeddings `[n, hidden]`, every position attending to every
    /// other; positions count from `first_position`.
    pub fn forward(&self, x: &Tensor, first_position: usize) -> candle_core::Result<Tensor> {
        let n = x.dim(0)?;
        let (nh, nkv, hd) = (self.heads, self.kv_heads, self.head_dim);
        let (cos, sin) = self.rotary(n, first_position, x.dtype())?;
        let mut x = x.clone();
        for layer in &self.layers {
            let y = layer.input_norm.forward(&x)?;
            let heads = |t: Tensor, k: usize| -> candle_core::Result<Tensor> {
                t.reshape((1, n, k, hd))?.transpose(1, 2)?.contiguous()
            };
            let q = candle_nn::rotary_emb::rope(&heads(layer.q.forward(&y)?, nh)?, &cos, &sin)?;
            let k = candle_nn::rotary_emb::rope(&heads(layer.k.forward(&y)?, nkv)?, &cos, &sin)?;
            let v = heads(layer.v.forward(&y)?, nkv)?;
            // Each key-value head serves `nh / nkv` consecutive query heads.
            let repeat = |t: Tensor| -> candle_core::Result<Tensor> {
                if nkv == nh {
                    return Ok(t);
                }
                t.unsqueeze(2)?.expand((1, nkv, nh / nkv, n, hd))?.reshape((1, nh, n, hd))
            };
            let (k, v) = (repeat(k)?, repeat(v)?);
            let scores = (q.matmul(&k.t()?)? * (1.0 / (hd as f64).sqrt()))?;
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            let ctx = probs.matmul(&v)?.transpose(1, 2)?.reshape((n, nh * hd))?;
            x = (x + layer.o.forward(&ctx)?)?;
            let y = layer.post_norm.forward(&x)?;
            let mlp = layer.down.forward(&(self.act.apply(&layer.gate.forward(&y)?)? * layer.up.forward(&y)?)?)?;
            x = (x + mlp)?;
        }
        self.norm.forward(&x)
    }

    /// `cos` and `sin` of every position's angles, `[n, head_dim / 2]`.
    fn rotary(&self, n: usize, first: usize, dtype: DType) -> candle_core::Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let mut angles = Vec::with_capacity(n * half);
        for pos in first..first + n {
            angles.extend(self.inv_freq.iter().map(|f| pos as f32 * f));
        }
        let angles = Tensor::from_vec(angles, (n, half), self.device())?;
        Ok((angles.cos()?.to_dtype(dtype)?, angles.sin()?.to_dtype(dtype)?))
    }
}
