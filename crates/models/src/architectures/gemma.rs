//! The Gemma decoder on candle (`GemmaModel`), as PaliGemma runs it for retrieval: token embeddings scaled
//! by √hidden, RMS norms that scale by `1 + w` (in f32), rotary positions, grouped-query attention, a
//! gated MLP, and a final norm. It runs one sequence at a time, attending in both directions: ColPali
//! reads the states of a prompt that is all prefix (PaliGemma's prefix attends bidirectionally).

use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{Embedding, VarBuilder};
use serde::Deserialize;

use super::bert::Activation;
use super::decoder::{inv_freq, rotary, GatedMlp, SelfAttention};
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
    /// transformers 4's name for a RoPE variant; only plain RoPE is implemented.
    #[serde(default)]
    pub rope_scaling: Option<serde_json::Value>,
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
        if let Some(scaling) = self.rope_scaling.as_ref().filter(|v| !v.is_null()) {
            let kind = scaling.get("rope_type").or_else(|| scaling.get("type")).and_then(|t| t.as_str());
            if kind != Some("default") {
                return Err(ModelError::Unsupported(format!("Gemma rope_scaling `{scaling}` (only plain RoPE)")));
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
    attn: SelfAttention,
    post_norm: RmsNorm,
    mlp: GatedMlp,
}

pub struct Gemma {
    embed: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
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
        let act = cfg.activation()?;
        let (nh, nkv, eps) = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.rms_norm_eps);
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| {
                let l = vb.pp("layers").pp(i);
                Ok(Layer {
                    input_norm: RmsNorm::load(l.pp("input_layernorm"), h, eps)?,
                    attn: SelfAttention::load(l.pp("self_attn"), h, nh, nkv, hd, false)?,
                    post_norm: RmsNorm::load(l.pp("post_attention_layernorm"), h, eps)?,
                    mlp: GatedMlp::load(l.pp("mlp"), h, cfg.intermediate_size, act)?,
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(weights)?;
        Ok(Gemma {
            embed: candle_nn::embedding(cfg.vocab_size, h, vb.pp("embed_tokens")).map_err(weights)?,
            layers,
            norm: RmsNorm::load(vb.pp("norm"), h, eps).map_err(weights)?,
            hidden: h,
            inv_freq: inv_freq(cfg.theta()?, hd),
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
        let (cos, sin) = rotary(&self.inv_freq, x.dim(0)?, first_position, self.device(), x.dtype())?;
        let mut x = x.clone();
        for layer in &self.layers {
            x = (&x + layer.attn.forward(&layer.input_norm.forward(&x)?, &cos, &sin, None)?)?;
            x = (&x + layer.mlp.forward(&layer.post_norm.forward(&x)?)?)?;
        }
        self.norm.forward(&x)
    }
}
