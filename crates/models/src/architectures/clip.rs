//! CLIP on candle: a vision transformer and a causal text transformer, each followed by a linear
//! projection into one shared space (`CLIPModel` in transformers).
//!
//! Both towers are pre-norm transformers with the same layer layout
//! (`encoder.layers.N.{layer_norm1,self_attn.{q,k,v,out}_proj,layer_norm2,mlp.fc1,mlp.fc2}`).
//! The text tower reads the state of the end-of-text token; the vision tower the class token.

use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{Embedding, LayerNorm, VarBuilder};
use serde::Deserialize;

use super::bert::{Activation, Dense};
use crate::batch::Batch;
use crate::error::{weights, ModelError};
use crate::media::image::Pixels;

/// `CLIPConfig`, with the defaults of `CLIPTextConfig` and `CLIPVisionConfig` (ViT-B/32) where the file
/// omits a field, as transformers reads it: `save_pretrained` drops what equals them.
#[derive(Debug, Clone, Deserialize)]
#[serde(from = "ClipConfigFile")]
pub struct ClipConfig {
    pub text_config: TextConfig,
    pub vision_config: VisionConfig,
    pub projection_dim: Option<usize>,
}

/// What both towers' configs share.
#[derive(Debug, Clone)]
pub struct TowerConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub hidden_act: String,
    pub layer_norm_eps: f64,
}

#[derive(Debug, Clone)]
pub struct TextConfig {
    pub tower: TowerConfig,
    pub vocab_size: usize,
    pub max_position_embeddings: usize,
    /// 2 in checkpoints older than transformers#24773, which pool at the highest token id instead.
    pub eos_token_id: u32,
}

#[derive(Debug, Clone)]
pub struct VisionConfig {
    pub tower: TowerConfig,
    pub image_size: usize,
    pub patch_size: usize,
    pub num_channels: usize,
}

#[derive(Debug, Default, Deserialize)]
struct TowerFile {
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    hidden_act: Option<String>,
    layer_norm_eps: Option<f64>,
}

impl TowerFile {
    /// `(hidden, intermediate, layers, heads)` are the class's; both classes use quick GELU and 1e-5.
    fn resolve(self, (hidden, intermediate, layers, heads): (usize, usize, usize, usize)) -> TowerConfig {
        TowerConfig {
            hidden_size: self.hidden_size.unwrap_or(hidden),
            intermediate_size: self.intermediate_size.unwrap_or(intermediate),
            num_hidden_layers: self.num_hidden_layers.unwrap_or(layers),
            num_attention_heads: self.num_attention_heads.unwrap_or(heads),
            hidden_act: self.hidden_act.unwrap_or_else(|| "quick_gelu".into()),
            layer_norm_eps: self.layer_norm_eps.unwrap_or(1e-5),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
struct TextFile {
    #[serde(flatten)]
    tower: TowerFile,
    vocab_size: Option<usize>,
    max_position_embeddings: Option<usize>,
    eos_token_id: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
struct VisionFile {
    #[serde(flatten)]
    tower: TowerFile,
    image_size: Option<usize>,
    patch_size: Option<usize>,
    num_channels: Option<usize>,
}

#[derive(Debug, Deserialize)]
struct ClipConfigFile {
    #[serde(default)]
    text_config: Option<TextFile>,
    #[serde(default)]
    vision_config: Option<VisionFile>,
    projection_dim: Option<usize>,
}

impl From<ClipConfigFile> for ClipConfig {
    fn from(f: ClipConfigFile) -> Self {
        let text = f.text_config.unwrap_or_default();
        let vision = f.vision_config.unwrap_or_default();
        ClipConfig {
            text_config: TextConfig {
                tower: text.tower.resolve((512, 2048, 12, 8)),
                vocab_size: text.vocab_size.unwrap_or(49408),
                max_position_embeddings: text.max_position_embeddings.unwrap_or(77),
                // The class default since transformers#24773; an explicit 2 still selects the old pooling.
                eos_token_id: text.eos_token_id.unwrap_or(49407),
            },
            vision_config: VisionConfig {
                tower: vision.tower.resolve((768, 3072, 12, 12)),
                image_size: vision.image_size.unwrap_or(224),
                patch_size: vision.patch_size.unwrap_or(32),
                num_channels: vision.num_channels.unwrap_or(3),
            },
            projection_dim: f.projection_dim,
        }
    }
}

/// One pre-norm transformer layer.
struct Layer {
    norm1: LayerNorm,
    qkv: Dense,
    out: Dense,
    norm2: LayerNorm,
    fc1: Dense,
    fc2: Dense,
}

impl Layer {
    fn load(vb: VarBuilder, cfg: &TowerConfig) -> candle_core::Result<Self> {
        let h = cfg.hidden_size;
        let sa = vb.pp("self_attn");
        let part = |name: &str| -> candle_core::Result<(Tensor, Tensor)> {
            Ok((sa.pp(name).get((h, h), "weight")?, sa.pp(name).get(h, "bias")?))
        };
        Ok(Layer {
            norm1: candle_nn::layer_norm(h, cfg.layer_norm_eps, vb.pp("layer_norm1"))?,
            qkv: Dense::fuse(vec![part("q_proj")?, part("k_proj")?, part("v_proj")?])?,
            out: Dense::load(sa.pp("out_proj"), h, h)?,
            norm2: candle_nn::layer_norm(h, cfg.layer_norm_eps, vb.pp("layer_norm2"))?,
            fc1: Dense::load(vb.pp("mlp").pp("fc1"), h, cfg.intermediate_size)?,
            fc2: Dense::load(vb.pp("mlp").pp("fc2"), cfg.intermediate_size, h)?,
        })
    }
}

/// A stack of layers with its attention geometry (SigLIP's towers share the layout).
pub(crate) struct Transformer {
    layers: Vec<Layer>,
    act: Activation,
    heads: usize,
    hidden: usize,
}

impl Transformer {
    pub(crate) fn load(vb: VarBuilder, cfg: &TowerConfig) -> Result<Self, ModelError> {
        if cfg.num_attention_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads) {
            return Err(ModelError::Unsupported(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                cfg.hidden_size, cfg.num_attention_heads
            )));
        }
        let act = Activation::parse(&cfg.hidden_act)?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::load(vb.pp("layers").pp(i), cfg))
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(weights)?;
        Ok(Transformer { layers, act, heads: cfg.num_attention_heads, hidden: cfg.hidden_size })
    }

    /// `x`: `[b * n, hidden]`; `bias`: an additive attention bias broadcastable to `[b, heads, n, n]`.
    pub(crate) fn forward(
        &self,
        mut x: Tensor,
        b: usize,
        n: usize,
        bias: Option<&Tensor>,
    ) -> candle_core::Result<Tensor> {
        let (h, nh) = (self.hidden, self.heads);
        let hd = h / nh;
        for layer in &self.layers {
            let y = layer.norm1.forward(&x)?;
            let qkv = layer.qkv.forward(&y)?.reshape((b, n, 3, nh, hd))?;
            let split = |i: usize| -> candle_core::Result<Tensor> {
                qkv.narrow(2, i, 1)?.squeeze(2)?.transpose(1, 2)?.contiguous()
            };
            let q = (split(0)? * (1.0 / (hd as f64).sqrt()))?;
            let (k, v) = (split(1)?, split(2)?);
            let mut scores = q.matmul(&k.t()?)?;
            if let Some(bias) = bias {
                scores = scores.broadcast_add(bias)?;
            }
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            let ctx = probs.matmul(&v)?.transpose(1, 2)?.reshape((b * n, h))?;
            x = (x + layer.out.forward(&ctx)?)?;
            let y = layer.norm2.forward(&x)?;
            x = (&x + layer.fc2.forward(&self.act.apply(&layer.fc1.forward(&y)?)?)?)?;
        }
        Ok(x)
    }
}

/// Where a sequence's pooled state is read, as transformers picks it: the first end-of-text token.
pub(crate) fn pool_position(ids: &[u32], eos: u32) -> usize {
    if eos == 2 {
        // Legacy configs: the end-of-text token has the highest id in the vocabulary.
        let max = ids.iter().copied().max().unwrap_or(0);
        ids.iter().position(|&t| t == max).unwrap_or(0)
    } else {
        ids.iter().position(|&t| t == eos).unwrap_or(0)
    }
}

/// A projection without bias, stored transposed for `x @ w`.
fn projection(vb: VarBuilder, inp: usize, out: Option<usize>) -> candle_core::Result<Tensor> {
    let w = vb.get_unchecked("weight")?;
    let (o, i) = w.dims2()?;
    if i != inp || out.is_some_and(|out| out != o) {
        candle_core::bail!("{}.weight is [{o}, {i}], expected [{out:?}, {inp}]", vb.prefix());
    }
    w.to_dtype(DType::F32)?.t()?.contiguous()
}

pub struct ClipText {
    token: Embedding,
    positions: Tensor,
    encoder: Transformer,
    final_norm: LayerNorm,
    projection: Tensor,
    eos: u32,
    window: usize,
}

impl ClipText {
    fn load(vb: VarBuilder, proj: VarBuilder, cfg: &TextConfig, dim: Option<usize>) -> Result<Self, ModelError> {
        let h = cfg.tower.hidden_size;
        let emb = vb.pp("embeddings");
        let token = candle_nn::embedding(cfg.vocab_size, h, emb.pp("token_embedding")).map_err(weights)?;
        let positions =
            emb.pp("position_embedding").get((cfg.max_position_embeddings, h), "weight").map_err(weights)?;
        Ok(ClipText {
            token,
            positions,
            encoder: Transformer::load(vb.pp("encoder"), &cfg.tower)?,
            final_norm: candle_nn::layer_norm(h, cfg.tower.layer_norm_eps, vb.pp("final_layer_norm"))
                .map_err(weights)?,
            projection: projection(proj, h, dim).map_err(weights)?,
            eos: cfg.eos_token_id,
            window: cfg.max_position_embeddings,
        })
    }

    /// The longest token sequence the position table allows.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Projected (not normalized) text embeddings, one per sequence.
    pub fn forward(&self, batch: &Batch) -> candle_core::Result<Vec<Vec<f32>>> {
        let (b, l) = (batch.len(), batch.max_len);
        if l > self.window {
            candle_core::bail!("a sequence of {l} tokens exceeds the text window of {}", self.window);
        }
        let dev = self.positions.device().clone();
        let mut ids = vec![0u32; b * l];
        let mut pool = Vec::with_capacity(b);
        for i in 0..b {
            let seq = &batch.input_ids[batch.cu_seqlens[i]..batch.cu_seqlens[i + 1]];
            ids[i * l..i * l + seq.len()].copy_from_slice(seq);
            pool.push((i * l + pool_position(seq, self.eos)) as u32);
        }
        let ids = Tensor::from_vec(ids, (b, l), &dev)?;
        let x = self.token.forward(&ids)?.broadcast_add(&self.positions.narrow(0, 0, l)?)?;
        let h = x.dim(D::Minus1)?;
        // Causal: position t attends to 0..=t, so the padding after a sequence never reaches it.
        let mask: Vec<f32> =
            (0..l).flat_map(|q| (0..l).map(move |k| if k <= q { 0.0 } else { f32::NEG_INFINITY })).collect();
        let mask = Tensor::from_vec(mask, (1, 1, l, l), &dev)?;
        let x = self.encoder.forward(x.reshape((b * l, h))?, b, l, Some(&mask))?;
        let pooled = x.index_select(&Tensor::from_vec(pool, b, &dev)?, 0)?;
        let out = self.final_norm.forward(&pooled)?.matmul(&self.projection)?;
        out.to_dtype(DType::F32)?.to_vec2()
    }
}

pub struct ClipVision {
    patch: Tensor,
    class: Tensor,
    positions: Tensor,
    pre_norm: LayerNorm,
    encoder: Transformer,
    post_norm: LayerNorm,
    projection: Tensor,
    image_size: usize,
    patch_size: usize,
    channels: usize,
}

impl ClipVision {
    fn load(vb: VarBuilder, proj: VarBuilder, cfg: &VisionConfig, dim: Option<usize>) -> Result<Self, ModelError> {
        let (h, p, c) = (cfg.tower.hidden_size, cfg.patch_size, cfg.num_channels);
        if p == 0 || !cfg.image_size.is_multiple_of(p) {
            return Err(ModelError::Unsupported(format!(
                "image_size {} is not a multiple of patch_size {p}",
                cfg.image_size
            )));
        }
        let grid = cfg.image_size / p;
        let emb = vb.pp("embeddings");
        let eps = cfg.tower.layer_norm_eps;
        let load = || -> candle_core::Result<(Tensor, Tensor, Tensor)> {
            // The patch convolution has stride = kernel: a matmul over flattened patches.
            let patch =
                emb.pp("patch_embedding").get((h, c, p, p), "weight")?.reshape((h, c * p * p))?.t()?.contiguous()?;
            let class = emb.get(h, "class_embedding")?;
            let positions = emb.pp("position_embedding").get((grid * grid + 1, h), "weight")?;
            Ok((patch, class, positions))
        };
        let (patch, class, positions) = load().map_err(weights)?;
        Ok(ClipVision {
            patch,
            class,
            positions,
            // (sic) transformers' name for the pre-encoder norm.
            pre_norm: candle_nn::layer_norm(h, eps, vb.pp("pre_layrnorm")).map_err(weights)?,
            encoder: Transformer::load(vb.pp("encoder"), &cfg.tower)?,
            post_norm: candle_nn::layer_norm(h, eps, vb.pp("post_layernorm")).map_err(weights)?,
            projection: projection(proj, h, dim).map_err(weights)?,
            image_size: cfg.image_size,
            patch_size: p,
            channels: c,
        })
    }

    pub fn image_size(&self) -> usize {
        self.image_size
    }

    /// Tokens per image: the patches and the class token.
    pub fn tokens_per_image(&self) -> usize {
        (self.image_size / self.patch_size).pow(2) + 1
    }

    /// Projected (not normalized) image embeddings, one per image.
    pub fn forward(&self, images: &[Pixels]) -> candle_core::Result<Vec<Vec<f32>>> {
        let (s, p, c) = (self.image_size, self.patch_size, self.channels);
        let g = s / p;
        let b = images.len();
        let h = self.positions.dim(1)?;
        let patches = patch_rows(images, s, p, c, &self.patch)?;
        let x = patches.matmul(&self.patch)?.reshape((b, g * g, h))?;
        let class = self.class.reshape((1, 1, h))?.broadcast_as((b, 1, h))?;
        let x = Tensor::cat(&[&class, &x], 1)?.broadcast_add(&self.positions)?;
        let n = g * g + 1;
        let x = self.pre_norm.forward(&x.reshape((b * n, h))?)?;
        let x = self.encoder.forward(x, b, n, None)?;
        let cls = x.reshape((b, n, h))?.narrow(1, 0, 1)?.squeeze(1)?;
        let out = self.post_norm.forward(&cls)?.matmul(&self.projection)?;
        out.to_dtype(DType::F32)?.to_vec2()
    }
}

/// Each image's patches as rows, flattened as the patch convolution's kernel is (`[channel][row][col]`),
/// on the device and in the dtype of `like`: `[images · (s/p)², c·p·p]`.
pub(crate) fn patch_rows(
    images: &[Pixels],
    s: usize,
    p: usize,
    c: usize,
    like: &Tensor,
) -> candle_core::Result<Tensor> {
    let (g, b) = (s / p, images.len());
    let mut data = Vec::with_capacity(b * c * s * s);
    for img in images {
        if (img.height, img.width) != (s, s) || img.data.len() != c * s * s {
            candle_core::bail!("expected {c}x{s}x{s} pixels, got {}x{}", img.height, img.width);
        }
        data.extend_from_slice(&img.data);
    }
    // [b, c, g, p, g, p] → [b, g, g, c, p, p]: each row one patch.
    Tensor::from_vec(data, (b, c, g, p, g, p), like.device())?
        .permute((0, 2, 4, 1, 3, 5))?
        .reshape((b * g * g, c * p * p))?
        .to_dtype(like.dtype())
}

/// Both towers of a `CLIPModel` checkpoint.
pub struct Clip {
    pub text: ClipText,
    pub vision: ClipVision,
    pub dim: usize,
}

impl Clip {
    pub fn load(vb: VarBuilder, cfg: &ClipConfig) -> Result<Self, ModelError> {
        let dim = cfg.projection_dim;
        let text = ClipText::load(vb.pp("text_model"), vb.pp("text_projection"), &cfg.text_config, dim)?;
        let vision = ClipVision::load(vb.pp("vision_model"), vb.pp("visual_projection"), &cfg.vision_config, dim)?;
        let dim = text.projection.dim(1).map_err(weights)?;
        if vision.projection.dim(1).map_err(weights)? != dim {
            return Err(ModelError::Weights("text_projection and visual_projection differ in width".into()));
        }
        Ok(Clip { text, vision, dim })
    }

    pub fn device(&self) -> &Device {
        self.text.positions.device()
    }
}
