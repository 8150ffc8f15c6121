//! SigLIP's vision tower on candle (`SiglipVisionModel`): CLIP's pre-norm layers without the class token
//! and the pre-encoder norm, a patch convolution with a bias, and a final layer norm. PaliGemma (and so
//! ColPali) reads every patch's final state.

use candle_core::{Module, Tensor};
use candle_nn::{LayerNorm, VarBuilder};
use serde::Deserialize;

use super::clip::{TowerConfig, Transformer};
use crate::error::{weights, ModelError};
use crate::media::image::Pixels;

/// `SiglipVisionConfig`; hub configs omit what equals the class defaults, so every field has them.
#[derive(Debug, Clone, Deserialize)]
pub struct SiglipVisionConfig {
    #[serde(default = "d768")]
    pub hidden_size: usize,
    #[serde(default = "d3072")]
    pub intermediate_size: usize,
    #[serde(default = "d12")]
    pub num_hidden_layers: usize,
    #[serde(default = "d12")]
    pub num_attention_heads: usize,
    #[serde(default = "d3")]
    pub num_channels: usize,
    #[serde(default = "d224")]
    pub image_size: usize,
    #[serde(default = "d16")]
    pub patch_size: usize,
    #[serde(default = "gelu_tanh")]
    pub hidden_act: String,
    #[serde(default = "eps")]
    pub layer_norm_eps: f64,
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

impl SiglipVisionConfig {
    fn tower(&self) -> TowerConfig {
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
        let (h, p, c) = (cfg.hidden_size, cfg.patch_size, cfg.num_channels);
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
            encoder: Transformer::load(vb.pp("encoder"), &cfg.tower())?,
            post_norm: candle_nn::layer_norm(h, cfg.layer_norm_eps, vb.pp("post_layernorm")).map_err(weights)?,
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
        let mut data = Vec::with_capacity(b * c * s * s);
        for img in images {
            if (img.height, img.width) != (s, s) || img.data.len() != c * s * s {
                candle_core::bail!("expected {c}x{s}x{s} pixels, got {}x{}", img.height, img.width);
            }
            data.extend_from_slice(&img.data);
        }
        let dev = self.positions.device().clone();
        let h = self.positions.dim(1)?;
        // [b, c, g, p, g, p] → [b, g, g, c, p, p]: each row one patch, flattened as the kernel is.
        let patches = Tensor::from_vec(data, (b, c, g, p, g, p), &dev)?
            .permute((0, 2, 4, 1, 3, 5))?
            .reshape((b * g * g, c * p * p))?
            .to_dtype(self.patch.dtype())?;
        let x = patches.matmul(&self.patch)?.broadcast_add(&self.patch_bias)?.reshape((b, g * g, h))?;
        let n = g * g;
        let x = x.broadcast_add(&self.positions)?.reshape((b * n, h))?;
        let x = self.encoder.forward(x, b, n, None)?;
        self.post_norm.forward(&x)?.reshape((b, n, h))
    }
}
