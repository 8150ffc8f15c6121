//! SigLIP on candle (`SiglipModel`). The vision tower is CLIP's pre-norm layers without the class token
//! and the pre-encoder norm, a patch convolution with a bias, and a final layer norm; PaliGemma (and so
//! ColPali) reads every patch's final state, SigLIP pools them with an attention probe (`head`). The text
//! tower attends in both directions over texts padded to its full window (as SigLIP was trained: no
//! attention mask) and pools the last position through a linear head.

use candle_core::{DType, Module, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use super::bert::Activation;
use super::clip::{patch_rows, TowerConfig, Transformer};
use crate::batch::Batch;
use crate::error::{weights, ModelError};
use crate::media::image::Pixels;

/// What both towers' configs share. Hub configs omit what equals the class defaults, so every field has them.
#[derive(Debug, Clone, Deserialize)]
pub struct SiglipTower {
    #[serde(default = "d768")]
    pub hidden_size: usize,
    #[serde(default = "d3072")]
    pub intermediate_size: usize,
    #[serde(default = "d12")]
    pub num_hidden_layers: usize,
    #[serde(default = "d12")]
    pub num_attention_heads: usize,
    #[serde(default = "gelu_tanh")]
    pub hidden_act: String,
    #[serde(default = "eps")]
    pub layer_norm_eps: f64,
}

/// `SiglipVisionConfig`.
#[derive(Debug, Clone, Deserialize)]
pub struct SiglipVisionConfig {
    #[serde(flatten)]
    pub tower: SiglipTower,
    #[serde(default = "d3")]
    pub num_channels: usize,
    #[serde(default = "d224")]
    pub image_size: usize,
    #[serde(default = "d16")]
    pub patch_size: usize,
    #[serde(default = "yes")]
    pub vision_use_head: bool,
}

/// `SiglipTextConfig`.
#[derive(Debug, Clone, Deserialize)]
pub struct SiglipTextConfig {
    #[serde(flatten)]
    pub tower: SiglipTower,
    #[serde(default = "d32000")]
    pub vocab_size: usize,
    #[serde(default = "d64")]
    pub max_position_embeddings: usize,
    #[serde(default = "one")]
    pub pad_token_id: u32,
    /// Width of the pooled text vector; the hidden size when absent.
    pub projection_size: Option<usize>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SiglipConfig {
    pub text_config: SiglipTextConfig,
    pub vision_config: SiglipVisionConfig,
}

fn yes() -> bool {
    true
}
fn d32000() -> usize {
    32_000
}
fn d64() -> usize {
    64
}
fn one() -> u32 {
    1
}
fn d768() -> usize {
    768
}
fn d3072() -> usize {
    3072
}
fn d12() -> usize {
    12
}
fn d3() -> usize {
    3
}
fn d224() -> usize {
    224
}
fn d16() -> usize {
    16
}
fn gelu_tanh() -> String {
    "gelu_pytorch_tanh".into()
}
fn eps() -> f64 {
    1e-6
}

impl SiglipTower {
    /// The layer stack's geometry, as CLIP's `Transformer` takes it.
    pub(crate) fn layers(&self) -> TowerConfig {
        TowerConfig {
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: self.num_attention_heads,
            hidden_act: self.hidden_act.clone(),
            layer_norm_eps: self.layer_norm_eps,
        }
    }
}

pub struct SiglipVision {
    /// The patch convolution (stride = kernel) as a matmul over flattened patches: `[c·p·p, hidden]`.
    patch: Tensor,
    patch_bias: Tensor,
    positions: Tensor,
    encoder: Transformer,
    post_norm: LayerNorm,
    image_size: usize,
    patch_size: usize,
    channels: usize,
}

impl SiglipVision {
    /// `vb`: the tower's root (holding `embeddings`, `encoder`, `post_layernorm`).
    pub fn load(vb: VarBuilder, cfg: &SiglipVisionConfig) -> Result<Self, ModelError> {
        let (h, p, c) = (cfg.tower.hidden_size, cfg.patch_size, cfg.num_channels);
        if p == 0 || !cfg.image_size.is_multiple_of(p) {
            return Err(ModelError::Unsupported(format!(
                "image_size {} is not a multiple of patch_size {p}",
                cfg.image_size
            )));
        }
        let grid = cfg.image_size / p;
        let emb = vb.pp("embeddings");
        let load = || -> candle_core::Result<(Tensor, Tensor, Tensor)> {
            let conv = emb.pp("patch_embedding");
            let patch = conv.get((h, c, p, p), "weight")?.reshape((h, c * p * p))?.t()?.contiguous()?;
            let bias = conv.get(h, "bias")?;
            let positions = emb.pp("position_embedding").get((grid * grid, h), "weight")?;
            Ok((patch, bias, positions))
        };
        let (patch, patch_bias, positions) = load().map_err(weights)?;
        Ok(SiglipVision {
            patch,
            patch_bias,
            positions,
            encoder: Transformer::load(vb.pp("encoder"), &cfg.tower.layers())?,
            post_norm: candle_nn::layer_norm(h, cfg.tower.layer_norm_eps, vb.pp("post_layernorm")).map_err(weights)?,
            image_size: cfg.image_size,
            patch_size: p,
            channels: c,
        })
    }

    pub fn image_size(&self) -> usize {
        self.image_size
    }

    /// Patches per image: the tower's sequence length.
    pub fn tokens_per_image(&self) -> usize {
        (self.image_size / self.patch_size).pow(2)
    }

    /// Final states of every patch: `[b, patches, hidden]`.
    pub fn forward(&self, images: &[Pixels]) -> candle_core::Result<Tensor> {
        let (s, p, c) = (self.image_size, self.patch_size, self.channels);
        let g = s / p;
        let b = images.len();
        let h = self.positions.dim(1)?;
        let patches = patch_rows(images, s, p, c, &self.patch)?;
        let x = patches.matmul(&self.patch)?.broadcast_add(&self.patch_bias)?.reshape((b, g * g, h))?;
        let n = g * g;
        let x = x.broadcast_add(&self.positions)?.reshape((b * n, h))?;
        let x = self.encoder.forward(x, b, n, None)?;
        self.post_norm.forward(&x)?.reshape((b, n, h))
    }
}

/// Multihead attention pooling (`SiglipMultiheadAttentionPoolingHead`): a learned probe attends over the
/// patches (torch's `nn.MultiheadAttention`), then a residual MLP.
struct PoolingHead {
    probe: Tensor,
    /// `in_proj` split into query, key and value.
    q: Linear,
    kv: Linear,
    out: Linear,
    norm: LayerNorm,
    fc1: Linear,
    fc2: Linear,
    act: Activation,
    heads: usize,
}

impl PoolingHead {
    fn load(vb: VarBuilder, cfg: &SiglipVisionConfig) -> candle_core::Result<Self> {
        let (h, i) = (cfg.tower.hidden_size, cfg.tower.intermediate_size);
        let att = vb.pp("attention");
        let w = att.get((3 * h, h), "in_proj_weight")?;
        let b = att.get(3 * h, "in_proj_bias")?;
        let mlp = vb.pp("mlp");
        Ok(PoolingHead {
            probe: vb.get((1, 1, h), "probe")?.reshape((1, h))?,
            q: Linear::new(w.narrow(0, 0, h)?, Some(b.narrow(0, 0, h)?)),
            kv: Linear::new(w.narrow(0, h, 2 * h)?, Some(b.narrow(0, h, 2 * h)?)),
            out: candle_nn::linear(h, h, att.pp("out_proj"))?,
            norm: candle_nn::layer_norm(h, cfg.tower.layer_norm_eps, vb.pp("layernorm"))?,
            fc1: candle_nn::linear(h, i, mlp.pp("fc1"))?,
            fc2: candle_nn::linear(i, h, mlp.pp("fc2"))?,
            act: Activation::parse(&cfg.tower.hidden_act).map_err(|e| candle_core::Error::Msg(e.to_string()))?,
            heads: cfg.tower.num_attention_heads,
        })
    }

    /// `x`: `[b, n, h]` → `[b, h]`.
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (b, n, h) = x.dims3()?;
        let (nh, hd) = (self.heads, h / self.heads);
        let q = (self.q.forward(&self.probe)? * (1.0 / (hd as f64).sqrt()))?.reshape((1, nh, 1, hd))?;
        let kv = self.kv.forward(&x.reshape((b * n, h))?)?.reshape((b, n, 2, nh, hd))?;
        let k = kv.narrow(2, 0, 1)?.squeeze(2)?.transpose(1, 2)?.contiguous()?;
        let v = kv.narrow(2, 1, 1)?.squeeze(2)?.transpose(1, 2)?.contiguous()?;
        let scores = q.broadcast_as((b, nh, 1, hd))?.contiguous()?.matmul(&k.t()?)?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let ctx = probs.matmul(&v)?.reshape((b, h))?;
        let y = self.out.forward(&ctx)?;
        let z = self.fc2.forward(&self.act.apply(&self.fc1.forward(&self.norm.forward(&y)?)?)?)?;
        y + z
    }
}

pub struct SiglipText {
    token: Embedding,
    positions: Tensor,
    encoder: Transformer,
    final_norm: LayerNorm,
    head: Linear,
    window: usize,
    pad: u32,
}

impl SiglipText {
    /// `pad`: the id texts are padded with (the tokenizer's padding token).
    fn load(vb: VarBuilder, cfg: &SiglipTextConfig, pad: u32) -> Result<Self, ModelError> {
        let h = cfg.tower.hidden_size;
        let load = || -> candle_core::Result<(Embedding, Tensor, LayerNorm, Linear)> {
            let emb = vb.pp("embeddings");
            Ok((
                candle_nn::embedding(cfg.vocab_size, h, emb.pp("token_embedding"))?,
                emb.pp("position_embedding").get((cfg.max_position_embeddings, h), "weight")?,
                candle_nn::layer_norm(h, cfg.tower.layer_norm_eps, vb.pp("final_layer_norm"))?,
                candle_nn::linear(h, cfg.projection_size.unwrap_or(h), vb.pp("head"))?,
            ))
        };
        let (token, positions, final_norm, head) = load().map_err(weights)?;
        let encoder = Transformer::load(vb.pp("encoder"), &cfg.tower.layers())?;
        Ok(SiglipText { token, positions, encoder, final_norm, head, window: cfg.max_position_embeddings, pad })
    }

    pub fn window(&self) -> usize {
        self.window
    }

    /// Pooled (not normalized) text embeddings: each text padded to the window, the last position's state.
    pub fn forward(&self, batch: &Batch) -> candle_core::Result<Vec<Vec<f32>>> {
        let (b, n) = (batch.len(), self.window);
        let mut ids = vec![self.pad; b * n];
        for i in 0..b {
            let seq = &batch.input_ids[batch.cu_seqlens[i]..batch.cu_seqlens[i + 1]];
            let len = seq.len().min(n);
            ids[i * n..i * n + len].copy_from_slice(&seq[..len]);
        }
        let h = self.positions.dim(1)?;
        let ids = Tensor::from_vec(ids, (b, n), self.positions.device())?;
        let x = self.token.forward(&ids)?.broadcast_add(&self.positions)?.reshape((b * n, h))?;
        let x = self.encoder.forward(x, b, n, None)?;
        let last = x.reshape((b, n, h))?.narrow(1, n - 1, 1)?.squeeze(1)?;
        self.head.forward(&self.final_norm.forward(&last)?)?.to_dtype(DType::F32)?.to_vec2()
    }
}

/// Both towers of a `SiglipModel` checkpoint.
pub struct Siglip {
    pub text: SiglipText,
    pub vision: SiglipVision,
    head: PoolingHead,
    pub dim: usize,
}

impl Siglip {
    pub fn load(vb: VarBuilder, cfg: &SiglipConfig, pad: u32) -> Result<Self, ModelError> {
        if !cfg.vision_config.vision_use_head {
            return Err(ModelError::Unsupported("SigLIP without the vision pooling head (vision_use_head)".into()));
        }
        let text = SiglipText::load(vb.pp("text_model"), &cfg.text_config, pad)?;
        let vision = SiglipVision::load(vb.pp("vision_model"), &cfg.vision_config)?;
        let head = PoolingHead::load(vb.pp("vision_model").pp("head"), &cfg.vision_config).map_err(weights)?;
        let dim = cfg.text_config.projection_size.unwrap_or(cfg.text_config.tower.hidden_size);
        if dim != cfg.vision_config.tower.hidden_size {
            return Err(ModelError::Weights(format!(
                "the text head gives {dim}-d vectors, the vision tower {}-d",
                cfg.vision_config.tower.hidden_size
            )));
        }
        Ok(Siglip { text, vision, head, dim })
    }

    /// Pooled (not normalized) image embeddings.
    pub fn forward_images(&self, images: &[Pixels]) -> candle_core::Result<Vec<Vec<f32>>> {
        let states = self.vision.forward(images)?;
        self.head.forward(&states)?.to_dtype(DType::F32)?.to_vec2()
    }
}
