//! Qwen2-VL on candle, as ColQwen2 runs it: the vision tower (patches of two identical frames embedded by a
//! 3-D convolution, 2-D rotary attention over the whole image, a merger of 2×2 patch blocks into one token)
//! and the Qwen2 decoder (RMS norms, rotary positions, grouped-query causal attention, a SiLU-gated MLP).
//!
//! ColQwen2 hands the decoder embeddings rather than token ids, so transformers gives every token the same
//! position on the three M-RoPE axes (0, 1, 2, …): M-RoPE then equals ordinary RoPE, which this file runs.

use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use super::bert::Activation;
use super::decoder::{causal_mask, inv_freq, rotary, GatedMlp, SelfAttention};
use crate::error::{weights, ModelError};
use crate::media::image::Pixels;

#[derive(Debug, Clone, Deserialize)]
pub struct RopeParameters {
    pub rope_theta: Option<f64>,
}

/// `Qwen2VLVisionConfig`; hub configs omit what equals the class defaults, so every field has them.
#[derive(Debug, Clone, Deserialize)]
pub struct VisionConfig {
    #[serde(default = "d32")]
    pub depth: usize,
    #[serde(default = "d1280")]
    pub embed_dim: usize,
    /// Width of the merged tokens (the decoder's hidden size).
    #[serde(default = "d3584")]
    pub hidden_size: usize,
    #[serde(default = "d16")]
    pub num_heads: usize,
    #[serde(default = "d4f")]
    pub mlp_ratio: f64,
    #[serde(default = "d14")]
    pub patch_size: usize,
    #[serde(default = "d2")]
    pub temporal_patch_size: usize,
    #[serde(default = "d2")]
    pub spatial_merge_size: usize,
    #[serde(default = "d3")]
    pub in_channels: usize,
    #[serde(default = "quick_gelu")]
    pub hidden_act: String,
    pub rope_parameters: Option<RopeParameters>,
}

/// `Qwen2VLTextConfig`.
#[derive(Debug, Clone, Deserialize)]
pub struct TextConfig {
    #[serde(default = "d152064")]
    pub vocab_size: usize,
    #[serde(default = "d8192")]
    pub hidden_size: usize,
    #[serde(default = "d29568")]
    pub intermediate_size: usize,
    #[serde(default = "d80")]
    pub num_hidden_layers: usize,
    #[serde(default = "d64")]
    pub num_attention_heads: usize,
    #[serde(default = "d8")]
    pub num_key_value_heads: usize,
    #[serde(default = "silu")]
    pub hidden_act: String,
    #[serde(default = "d32768")]
    pub max_position_embeddings: usize,
    #[serde(default = "eps")]
    pub rms_norm_eps: f64,
    pub rope_theta: Option<f64>,
    pub rope_parameters: Option<RopeParameters>,
}

fn d32() -> usize {
    32
}
fn d1280() -> usize {
    1280
}
fn d3584() -> usize {
    3584
}
fn d16() -> usize {
    16
}
fn d4f() -> f64 {
    4.0
}
fn d14() -> usize {
    14
}
fn d2() -> usize {
    2
}
fn d3() -> usize {
    3
}
fn quick_gelu() -> String {
    "quick_gelu".into()
}
fn d152064() -> usize {
    152_064
}
fn d8192() -> usize {
    8192
}
fn d29568() -> usize {
    29_568
}
fn d80() -> usize {
    80
}
fn d64() -> usize {
    64
}
fn d8() -> usize {
    8
}
fn silu() -> String {
    "silu".into()
}
fn d32768() -> usize {
    32_768
}
/// `Qwen2VLTextConfig`'s `rms_norm_eps` (the vision tower's norms use a fixed 1e-6).
fn eps() -> f64 {
    1e-5
}

fn layer_norm(vb: VarBuilder, h: usize) -> candle_core::Result<LayerNorm> {
    candle_nn::layer_norm(h, 1e-6, vb)
}

struct VisionBlock {
    norm1: LayerNorm,
    qkv: Linear,
    proj: Linear,
    norm2: LayerNorm,
    fc1: Linear,
    fc2: Linear,
}

pub struct Qwen2VlVision {
    patch: Linear,
    blocks: Vec<VisionBlock>,
    merge_norm: LayerNorm,
    merge_fc1: Linear,
    merge_fc2: Linear,
    act: Activation,
    heads: usize,
    dim: usize,
    patch_size: usize,
    temporal: usize,
    merge: usize,
    channels: usize,
    /// Per axis (rows, columns): the rotary frequencies of a quarter of each head.
    inv_freq: Vec<f32>,
}

impl Qwen2VlVision {
    pub fn load(vb: VarBuilder, cfg: &VisionConfig) -> Result<Self, ModelError> {
        let (d, p, t, c) = (cfg.embed_dim, cfg.patch_size, cfg.temporal_patch_size, cfg.in_channels);
        if cfg.num_heads == 0 || !d.is_multiple_of(cfg.num_heads) || !(d / cfg.num_heads).is_multiple_of(4) {
            return Err(ModelError::Unsupported(format!("Qwen2-VL vision width {d} over {} heads", cfg.num_heads)));
        }
        let mlp = (d as f64 * cfg.mlp_ratio) as usize;
        let merged = d * cfg.spatial_merge_size * cfg.spatial_merge_size;
        let load = || -> candle_core::Result<Qwen2VlVision> {
            let w = vb.pp("patch_embed").pp("proj").get((d, c, t, p, p), "weight")?.reshape((d, c * t * p * p))?;
            let blocks = (0..cfg.depth)
                .map(|i| {
                    let b = vb.pp("blocks").pp(i);
                    Ok(VisionBlock {
                        norm1: layer_norm(b.pp("norm1"), d)?,
                        qkv: candle_nn::linear(d, 3 * d, b.pp("attn").pp("qkv"))?,
                        proj: candle_nn::linear(d, d, b.pp("attn").pp("proj"))?,
                        norm2: layer_norm(b.pp("norm2"), d)?,
                        fc1: candle_nn::linear(d, mlp, b.pp("mlp").pp("fc1"))?,
                        fc2: candle_nn::linear(mlp, d, b.pp("mlp").pp("fc2"))?,
                    })
                })
                .collect::<candle_core::Result<Vec<_>>>()?;
            let m = vb.pp("merger");
            Ok(Qwen2VlVision {
                patch: Linear::new(w, None),
                blocks,
                merge_norm: layer_norm(m.pp("ln_q"), d)?,
                merge_fc1: candle_nn::linear(merged, merged, m.pp("mlp").pp(0))?,
                merge_fc2: candle_nn::linear(merged, cfg.hidden_size, m.pp("mlp").pp(2))?,
                act: Activation::GeluErf,
                heads: cfg.num_heads,
                dim: d,
                patch_size: p,
                temporal: t,
                merge: cfg.spatial_merge_size,
                channels: c,
                inv_freq: Vec::new(),
            })
        };
        let mut vision = load().map_err(weights)?;
        vision.act = Activation::parse(&cfg.hidden_act)?;
        let theta = cfg.rope_parameters.as_ref().and_then(|r| r.rope_theta).unwrap_or(10_000.0);
        vision.inv_freq = inv_freq(theta, d / cfg.num_heads / 2);
        Ok(vision)
    }

    /// Side lengths images must be multiples of.
    pub fn factor(&self) -> usize {
        self.patch_size * self.merge
    }

    /// Merged tokens of one image: `[tokens, hidden]`.
    pub fn forward(&self, img: &Pixels) -> candle_core::Result<Tensor> {
        let (p, m, c, t) = (self.patch_size, self.merge, self.channels, self.temporal);
        let (gh, gw) = (img.height / p, img.width / p);
        if img.height == 0
            || img.width == 0
            || !img.height.is_multiple_of(p * m)
            || !img.width.is_multiple_of(p * m)
            || img.data.len() != c * img.height * img.width
        {
            candle_core::bail!("a {}x{} image is not a multiple of {}", img.height, img.width, p * m);
        }
        // Patches in 2×2-block order (the merger's), each `[channel][frame][row][col]` with the frame repeated;
        // and each patch's (row, column) for the rotary angles.
        let n = gh * gw;
        let k = c * t * p * p;
        let mut rows = Vec::with_capacity(n * k);
        let mut angles = Vec::with_capacity(n * 2 * self.inv_freq.len());
        for by in 0..gh / m {
            for bx in 0..gw / m {
                for my in 0..m {
                    for mx in 0..m {
                        let (y, x) = (by * m + my, bx * m + mx);
                        for ch in 0..c {
                            for _ in 0..t {
                                for py in 0..p {
                                    let start = (ch * img.height + y * p + py) * img.width + x * p;
                                    rows.extend_from_slice(&img.data[start..start + p]);
                                }
                            }
                        }
                        angles.extend(self.inv_freq.iter().map(|f| y as f32 * f));
                        angles.extend(self.inv_freq.iter().map(|f| x as f32 * f));
                    }
                }
            }
        }
        let dev = self.patch.weight().device();
        let dtype = self.patch.weight().dtype();
        let mut x = self.patch.forward(&Tensor::from_vec(rows, (n, k), dev)?.to_dtype(dtype)?)?;
        let angles = Tensor::from_vec(angles, (n, 2 * self.inv_freq.len()), dev)?;
        let (cos, sin) = (angles.cos()?.to_dtype(dtype)?, angles.sin()?.to_dtype(dtype)?);
        let (nh, hd) = (self.heads, self.dim / self.heads);
        for b in &self.blocks {
            let qkv = b.qkv.forward(&b.norm1.forward(&x)?)?.reshape((n, 3, nh, hd))?;
            let part = |i: usize| -> candle_core::Result<Tensor> {
                qkv.narrow(1, i, 1)?.squeeze(1)?.transpose(0, 1)?.unsqueeze(0)?.contiguous()
            };
            let q = candle_nn::rotary_emb::rope(&part(0)?, &cos, &sin)?;
            let k = candle_nn::rotary_emb::rope(&part(1)?, &cos, &sin)?;
            let v = part(2)?;
            let scores = (q.matmul(&k.t()?)? * (1.0 / (hd as f64).sqrt()))?;
            let ctx = candle_nn::ops::softmax_last_dim(&scores)?.matmul(&v)?;
            let ctx = ctx.squeeze(0)?.transpose(0, 1)?.reshape((n, self.dim))?;
            x = (x + b.proj.forward(&ctx)?)?;
            let y = b.fc2.forward(&self.act.apply(&b.fc1.forward(&b.norm2.forward(&x)?)?)?)?;
            x = (x + y)?;
        }
        let merged = self.merge_norm.forward(&x)?.reshape((n / (m * m), self.dim * m * m))?;
        self.merge_fc2.forward(&Activation::GeluErf.apply(&self.merge_fc1.forward(&merged)?)?)
    }
}

/// Qwen2's RMS norm: `w · x / rms(x)`, computed in f32.
struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    fn load(vb: VarBuilder, h: usize, eps: f64) -> candle_core::Result<Self> {
        Ok(RmsNorm { weight: vb.get(h, "weight")?, eps })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let dtype = x.dtype();
        let x = x.to_dtype(DType::F32)?;
        let rms = (x.sqr()?.mean_keepdim(D::Minus1)? + self.eps)?.sqrt()?;
        x.broadcast_div(&rms)?.to_dtype(dtype)?.broadcast_mul(&self.weight)
    }
}

struct Layer {
    input_norm: RmsNorm,
    attn: SelfAttention,
    post_norm: RmsNorm,
    mlp: GatedMlp,
}

pub struct Qwen2 {
    embed: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    inv_freq: Vec<f32>,
}

impl Qwen2 {
    /// `vb`: the decoder's root (holding `embed_tokens`, `layers`, `norm`).
    pub fn load(vb: VarBuilder, cfg: &TextConfig) -> Result<Self, ModelError> {
        let (h, nh, nkv) = (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads);
        if nh == 0 || nkv == 0 || !h.is_multiple_of(nh) || !nh.is_multiple_of(nkv) || cfg.hidden_act != "silu" {
            return Err(ModelError::Unsupported(format!(
                "Qwen2 with {nh} heads over {nkv} key-value heads and `{}`",
                cfg.hidden_act
            )));
        }
        let (hd, eps) = (h / nh, cfg.rms_norm_eps);
        let load = || -> candle_core::Result<(Embedding, Vec<Layer>, RmsNorm)> {
            let layers = (0..cfg.num_hidden_layers)
                .map(|n| {
                    let l = vb.pp("layers").pp(n);
                    Ok(Layer {
                        input_norm: RmsNorm::load(l.pp("input_layernorm"), h, eps)?,
                        attn: SelfAttention::load(l.pp("self_attn"), h, nh, nkv, hd, true)?,
                        post_norm: RmsNorm::load(l.pp("post_attention_layernorm"), h, eps)?,
                        mlp: GatedMlp::load(l.pp("mlp"), h, cfg.intermediate_size, Activation::Silu)?,
                    })
                })
                .collect::<candle_core::Result<Vec<_>>>()?;
            Ok((
                candle_nn::embedding(cfg.vocab_size, h, vb.pp("embed_tokens"))?,
                layers,
                RmsNorm::load(vb.pp("norm"), h, eps)?,
            ))
        };
        let (embed, layers, norm) = load().map_err(weights)?;
        let theta = cfg.rope_parameters.as_ref().and_then(|r| r.rope_theta).or(cfg.rope_theta).unwrap_or(1_000_000.0);
        Ok(Qwen2 { embed, layers, norm, inv_freq: inv_freq(theta, hd) })
    }

    pub fn device(&self) -> &Device {
        self.embed.embeddings().device()
    }

    pub fn dtype(&self) -> DType {
        self.embed.embeddings().dtype()
    }

    /// Token embeddings, `[ids, hidden]`; ids past the vocabulary embed as 0 (placeholders overwritten later).
    pub fn embed(&self, ids: &[u32]) -> candle_core::Result<Tensor> {
        let vocab = self.embed.embeddings().dim(0)? as u32;
        let ids: Vec<u32> = ids.iter().map(|&i| if i < vocab { i } else { 0 }).collect();
        self.embed.forward(&Tensor::new(ids.as_slice(), self.device())?)
    }

    /// Final states of one sequence of input embeddings `[n, hidden]`, causal, positions 0, 1, 2, …
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let n = x.dim(0)?;
        let (cos, sin) = rotary(&self.inv_freq, n, 0, self.device(), x.dtype())?;
        let mask = causal_mask(n, self.device(), x.dtype())?;
        let mut x = x.clone();
        for layer in &self.layers {
            x = (&x + layer.attn.forward(&layer.input_norm.forward(&x)?, &cos, &sin, Some(&mask))?)?;
            x = (&x + layer.mlp.forward(&layer.post_norm.forward(&x)?)?)?;
        }
        self.norm.forward(&x)
    }
}
