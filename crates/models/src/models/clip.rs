//! CLIP (`CLIPModel`): a vision transformer and a causal text transformer, each followed by a linear
//! projection into one shared space. Both towers are pre-norm stacks with the same layer layout
//! (`encoder.layers.N.{layer_norm1,self_attn.{q,k,v,out}_proj,layer_norm2,mlp.fc1,mlp.fc2}`), shared with
//! SigLIP. The text tower reads the state of the end-of-text token; the vision tower the class token.

use serde::Deserialize;

use crate::backend::{Activation, AttentionSpec, Norm, Ops, Post};
use crate::batch::Batch;
use crate::error::ModelError;
use crate::layers::block::{pre_norm_stack, PreNormLayer};
use crate::layers::Positional;
use crate::layers::{Mlp, SelfAttention, TextEmbeddings, Weights};
use crate::loader::MappedTensors;
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

/// The pre-norm layers under `encoder.layers` (CLIP's names, which SigLIP shares).
pub(crate) fn load_layers<O: Ops>(
    w: &Weights<O>,
    cfg: &TowerConfig,
    causal: bool,
) -> Result<Vec<PreNormLayer<O>>, ModelError> {
    let (h, i, heads) = (cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads);
    if heads == 0 || !h.is_multiple_of(heads) {
        return Err(ModelError::Unsupported(format!(
            "hidden_size {h} is not a multiple of num_attention_heads {heads}"
        )));
    }
    let act = Activation::parse(&cfg.hidden_act)?;
    let spec = AttentionSpec::new(h, heads, causal);
    (0..cfg.num_hidden_layers)
        .map(|n| {
            let l = w.pp("layers").pp(n);
            let sa = l.pp("self_attn");
            Ok(PreNormLayer {
                norm1: l.pp("layer_norm1").layer_norm(h, cfg.layer_norm_eps)?,
                attention: SelfAttention {
                    qk_norm: None,
                    qkv: sa.linear_cat(&[("q_proj", h), ("k_proj", h), ("v_proj", h)], h, true)?,
                    out: sa.pp("out_proj").linear(h, h, true)?,
                    spec,
                },
                norm2: l.pp("layer_norm2").layer_norm(h, cfg.layer_norm_eps)?,
                mlp: Mlp::plain(
                    l.pp("mlp").pp("fc1").linear(h, i, true)?,
                    l.pp("mlp").pp("fc2").linear(i, h, true)?,
                    act,
                ),
            })
        })
        .collect()
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

/// A bias-free projection whose output width is read from the checkpoint (and checked against `out`).
fn projection<O: Ops>(w: &Weights<O>, inp: usize, out: Option<usize>) -> Result<(O::Linear, usize), ModelError> {
    let t = w.vb().get_unchecked("weight").map_err(crate::error::weights)?;
    let (o, i) = t.dims2().map_err(crate::error::weights)?;
    if i != inp || out.is_some_and(|out| out != o) {
        return Err(ModelError::Weights(format!(
            "{}.weight is [{o}, {i}], expected [{out:?}, {inp}]",
            w.vb().prefix()
        )));
    }
    Ok((w.linear(inp, o, false)?, o))
}

/// `x`'s rows `rows` as host vectors, after a final norm and a linear layer.
fn finish<O: Ops>(
    o: &O,
    x: &O::T,
    rows: &[(u32, u32)],
    norm: &Norm<O::Param>,
    head: &O::Linear,
) -> Result<Vec<Vec<f32>>, ModelError> {
    let mut picked = o.empty()?;
    o.gather_rows(&mut picked, &[x], rows)?;
    o.norm(&mut picked, norm)?;
    let mut y = o.empty()?;
    o.linear_fwd(&picked, head, Post::None, &mut y)?;
    o.download_rows(y)
}

pub struct ClipText<O: Ops> {
    embeddings: TextEmbeddings<O>,
    layers: Vec<PreNormLayer<O>>,
    final_norm: Norm<O::Param>,
    projection: O::Linear,
    dim: usize,
    eos: u32,
}

impl<O: Ops> ClipText<O> {
    fn load(w: &Weights<O>, proj: &Weights<O>, cfg: &TextConfig, dim: Option<usize>) -> Result<Self, ModelError> {
        let h = cfg.tower.hidden_size;
        let emb = w.pp("embeddings");
        let (projection, dim) = projection(proj, h, dim)?;
        Ok(ClipText {
            embeddings: TextEmbeddings::words(&emb.pp("token_embedding"), cfg.vocab_size, h)?.with_positions(
                &emb.pp("position_embedding"),
                cfg.max_position_embeddings,
                0,
            )?,
            layers: load_layers(&w.pp("encoder"), &cfg.tower, true)?,
            final_norm: w.pp("final_layer_norm").layer_norm(h, cfg.tower.layer_norm_eps)?,
            projection,
            dim,
            eos: cfg.eos_token_id,
        })
    }

    /// Projected (not normalized) embeddings, one per sequence.
    pub fn forward(&self, o: &O, batch: &Batch) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut x = self.embeddings.forward(o, batch)?;
        let pooled: Vec<(u32, u32)> = (0..batch.len())
            .map(|s| {
                let ids = &batch.input_ids[batch.cu_seqlens[s]..batch.cu_seqlens[s + 1]];
                (0, (batch.cu_seqlens[s] + pool_position(ids, self.eos)) as u32)
            })
            .collect();
        pre_norm_stack(o, &self.layers, &mut x, &o.seqs(&batch.cu_seqlens)?, Positional::None)?;
        finish(o, &x, &pooled, &self.final_norm, &self.projection)
    }
}

/// A patch convolution whose stride is its kernel, as a linear layer over flattened patches
/// (`[hidden, c·p·p]`), with or without a bias.
pub(crate) fn patch_linear<O: Ops>(
    w: &Weights<O>,
    h: usize,
    c: usize,
    p: usize,
    bias: bool,
) -> Result<O::Linear, ModelError> {
    let t =
        w.vb().get((h, c, p, p), "weight").and_then(|t| t.reshape((h, c * p * p))).map_err(crate::error::weights)?;
    let b = if bias { Some(w.vb().get(h, "bias").map_err(crate::error::weights)?) } else { None };
    w.linear_from(t, b)
}

pub struct ClipVision<O: Ops> {
    patch: O::Linear,
    class: O::Table,
    positions: O::Table,
    pre_norm: Norm<O::Param>,
    layers: Vec<PreNormLayer<O>>,
    post_norm: Norm<O::Param>,
    projection: O::Linear,
    dim: usize,
    hidden: usize,
    image_size: usize,
    patch_size: usize,
    channels: usize,
}

impl<O: Ops> ClipVision<O> {
    fn load(w: &Weights<O>, proj: &Weights<O>, cfg: &VisionConfig, dim: Option<usize>) -> Result<Self, ModelError> {
        let (h, p, c) = (cfg.tower.hidden_size, cfg.patch_size, cfg.num_channels);
        if p == 0 || !cfg.image_size.is_multiple_of(p) {
            return Err(ModelError::Unsupported(format!(
                "image_size {} is not a multiple of patch_size {p}",
                cfg.image_size
            )));
        }
        let g = cfg.image_size / p;
        let emb = w.pp("embeddings");
        let eps = cfg.tower.layer_norm_eps;
        let (projection, dim) = projection(proj, h, dim)?;
        Ok(ClipVision {
            patch: patch_linear(&emb.pp("patch_embedding"), h, c, p, false)?,
            class: emb.table_as(h, "class_embedding", (1, h))?,
            positions: emb.pp("position_embedding").table(g * g + 1, h)?,
            // (sic) transformers' name for the pre-encoder norm.
            pre_norm: w.pp("pre_layrnorm").layer_norm(h, eps)?,
            layers: load_layers(&w.pp("encoder"), &cfg.tower, false)?,
            post_norm: w.pp("post_layernorm").layer_norm(h, eps)?,
            projection,
            dim,
            hidden: h,
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

    /// Projected (not normalized) embeddings, one per image.
    pub fn forward(&self, o: &O, images: &[Pixels]) -> Result<Vec<Vec<f32>>, ModelError> {
        let (s, p, c, h) = (self.image_size, self.patch_size, self.channels, self.hidden);
        let (g, b) = (s / p, images.len());
        let n = g * g + 1;
        let patches = o.upload(b * g * g, c * p * p, flatten_patches(images, s, p, c)?)?;
        let mut embedded = o.empty()?;
        o.linear_fwd(&patches, &self.patch, Post::None, &mut embedded)?;
        let mut class = o.empty()?;
        o.embed(&mut class, h, &[(&self.class, &vec![0; b])])?;
        // Row 0 of each image is the class token, rows 1.. its patches.
        let order: Vec<(u32, u32)> = (0..b)
            .flat_map(|i| std::iter::once((0, i as u32)).chain((0..g * g).map(move |k| (1, (i * g * g + k) as u32))))
            .collect();
        let mut x = o.empty()?;
        o.gather_rows(&mut x, &[&class, &embedded], &order)?;
        let positions: Vec<u32> = (0..b).flat_map(|_| 0..n as u32).collect();
        o.add_rows(&mut x, &self.positions, &positions)?;
        o.norm(&mut x, &self.pre_norm)?;
        let cu: Vec<usize> = (0..=b).map(|i| i * n).collect();
        pre_norm_stack(o, &self.layers, &mut x, &o.seqs(&cu)?, Positional::None)?;
        let cls: Vec<(u32, u32)> = (0..b).map(|i| (0, (i * n) as u32)).collect();
        finish(o, &x, &cls, &self.post_norm, &self.projection)
    }
}

/// Each image's `(s/p)²` patches as rows, flattened as the convolution kernel is laid out:
/// `[channel][row][col]`.
pub(crate) fn flatten_patches(images: &[Pixels], s: usize, p: usize, c: usize) -> Result<Vec<f32>, ModelError> {
    let g = s / p;
    let k = c * p * p;
    let mut patches = vec![0f32; images.len() * g * g * k];
    for (i, img) in images.iter().enumerate() {
        if (img.height, img.width) != (s, s) || img.data.len() != c * s * s {
            return Err(ModelError::Forward(format!("expected {c}x{s}x{s} pixels, got {}x{}", img.height, img.width)));
        }
        for gy in 0..g {
            for gx in 0..g {
                let dst = &mut patches[((i * g + gy) * g + gx) * k..][..k];
                for ch in 0..c {
                    for py in 0..p {
                        let src = &img.data[(ch * s + gy * p + py) * s + gx * p..][..p];
                        dst[(ch * p + py) * p..][..p].copy_from_slice(src);
                    }
                }
            }
        }
    }
    Ok(patches)
}

/// Both towers of a `CLIPModel` checkpoint, with the backend that computes them.
pub struct Clip<O: Ops> {
    ops: O,
    pub text: ClipText<O>,
    pub vision: ClipVision<O>,
    weight_bytes: usize,
}

impl<O: Ops> Clip<O> {
    pub fn load(
        ops: O,
        vb: candle_nn::VarBuilder,
        mapped: Option<std::sync::Arc<MappedTensors>>,
        cfg: &ClipConfig,
    ) -> Result<Self, ModelError> {
        let dim = cfg.projection_dim;
        let w = Weights::new(vb, &ops).with_mapped(mapped);
        let text = ClipText::load(&w.pp("text_model"), &w.pp("text_projection"), &cfg.text_config, dim)?;
        let vision = ClipVision::load(&w.pp("vision_model"), &w.pp("visual_projection"), &cfg.vision_config, dim)?;
        if vision.dim != text.dim {
            return Err(ModelError::Weights("text_projection and visual_projection differ in width".into()));
        }
        let weight_bytes = w.bytes();
        drop(w);
        Ok(Clip { ops, text, vision, weight_bytes })
    }

    /// Width of the shared space.
    pub fn dim(&self) -> usize {
        self.text.dim
    }

    /// Bytes of weights the backend prepared.
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes as u64
    }

    pub fn ops(&self) -> &O {
        &self.ops
    }

    pub fn forward_text(&self, batch: &Batch) -> Result<Vec<Vec<f32>>, ModelError> {
        self.text.forward(&self.ops, batch)
    }

    pub fn forward_images(&self, images: &[Pixels]) -> Result<Vec<Vec<f32>>, ModelError> {
        self.vision.forward(&self.ops, images)
    }
}
