//! SigLIP (`SiglipModel`). The vision tower is CLIP's pre-norm layers without the class token and the
//! pre-encoder norm, a patch convolution with a bias, and a final layer norm; PaliGemma (and so ColPali)
//! reads every patch's final state, SigLIP pools them with an attention probe (`head`). The text tower
//! attends in both directions over texts padded to its full window (as SigLIP was trained: no attention
//! mask) and pools the last position through a linear head.

use candle_core::Device;
use serde::Deserialize;

use super::clip::{flatten_patches, load_layers, patch_linear, TowerConfig};
use crate::backend::{Activation, AttentionSpec, Norm, Ops, Post};
use crate::batch::Batch;
use crate::error::{weights, ModelError};
use crate::layers::block::{pre_norm_stack, PreNormLayer};
use crate::layers::Positional;
use crate::layers::{Mlp, Scratch, Weights};
use crate::loader::MappedTensors;
use crate::media::image::Pixels;

/// What both towers' configs share. Hub configs omit what equals the class defaults, so every field has them.
#[derive(Debug, Clone, Deserialize)]
pub struct SiglipTower {
    #[serde(default = "crate::config::n::<768>")]
    pub hidden_size: usize,
    #[serde(default = "crate::config::n::<3072>")]
    pub intermediate_size: usize,
    #[serde(default = "crate::config::n::<12>")]
    pub num_hidden_layers: usize,
    #[serde(default = "crate::config::n::<12>")]
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
    #[serde(default = "crate::config::n::<3>")]
    pub num_channels: usize,
    #[serde(default = "crate::config::n::<224>")]
    pub image_size: usize,
    #[serde(default = "crate::config::n::<16>")]
    pub patch_size: usize,
    #[serde(default = "yes")]
    pub vision_use_head: bool,
}

/// `SiglipTextConfig`.
#[derive(Debug, Clone, Deserialize)]
pub struct SiglipTextConfig {
    #[serde(flatten)]
    pub tower: SiglipTower,
    #[serde(default = "crate::config::n::<32_000>")]
    pub vocab_size: usize,
    #[serde(default = "crate::config::n::<64>")]
    pub max_position_embeddings: usize,
    #[serde(default = "crate::config::n32::<1>")]
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
fn gelu_tanh() -> String {
    "gelu_pytorch_tanh".into()
}
fn eps() -> f64 {
    1e-6
}

impl SiglipTower {
    /// The layer stack's geometry, as CLIP's layers take it.
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

pub struct SiglipVision<O: Ops> {
    patch: O::Linear,
    positions: O::Table,
    layers: Vec<PreNormLayer<O>>,
    post_norm: Norm<O::Param>,
    hidden: usize,
    image_size: usize,
    patch_size: usize,
    channels: usize,
}

impl<O: Ops> SiglipVision<O> {
    /// `w`: the tower's root (holding `embeddings`, `encoder`, `post_layernorm`).
    pub fn load(w: &Weights<O>, cfg: &SiglipVisionConfig) -> Result<Self, ModelError> {
        let (h, p, c) = (cfg.tower.hidden_size, cfg.patch_size, cfg.num_channels);
        if p == 0 || !cfg.image_size.is_multiple_of(p) {
            return Err(ModelError::Unsupported(format!(
                "image_size {} is not a multiple of patch_size {p}",
                cfg.image_size
            )));
        }
        let g = cfg.image_size / p;
        let emb = w.pp("embeddings");
        Ok(SiglipVision {
            patch: patch_linear(&emb.pp("patch_embedding"), h, c, p, true)?,
            positions: emb.pp("position_embedding").table(g * g, h)?,
            layers: load_layers(&w.pp("encoder"), &cfg.tower.layers(), false)?,
            post_norm: w.pp("post_layernorm").layer_norm(h, cfg.tower.layer_norm_eps)?,
            hidden: h,
            image_size: cfg.image_size,
            patch_size: p,
            channels: c,
        })
    }

    pub fn image_size(&self) -> usize {
        self.image_size
    }

    pub fn hidden_size(&self) -> usize {
        self.hidden
    }

    /// Patches per image: the tower's sequence length.
    pub fn tokens_per_image(&self) -> usize {
        (self.image_size / self.patch_size).pow(2)
    }

    /// Final states of every patch, packed image after image: `[images · patches, hidden]`.
    pub fn forward(&self, o: &O, images: &[Pixels]) -> Result<O::T, ModelError> {
        let (s, p, c) = (self.image_size, self.patch_size, self.channels);
        let (n, b) = (self.tokens_per_image(), images.len());
        let patches = o.upload(b * n, c * p * p, flatten_patches(images, s, p, c)?)?;
        let mut x = o.empty()?;
        o.linear_fwd(&patches, &self.patch, Post::None, &mut x)?;
        let positions: Vec<u32> = (0..b).flat_map(|_| 0..n as u32).collect();
        o.add_rows(&mut x, &self.positions, &positions)?;
        let cu: Vec<usize> = (0..=b).map(|i| i * n).collect();
        pre_norm_stack(o, &self.layers, &mut x, &o.seqs(&cu)?, Positional::None)?;
        o.norm(&mut x, &self.post_norm)?;
        Ok(x)
    }
}

/// Multihead attention pooling (`SiglipMultiheadAttentionPoolingHead`): a learned probe attends over the
/// patches (torch's `nn.MultiheadAttention`), then a residual MLP. The probe is a constant, so its
/// (scaled) query is computed once at load.
struct PoolingHead<O: Ops> {
    query: O::Table,
    kv: O::Linear,
    out: O::Linear,
    norm: Norm<O::Param>,
    mlp: Mlp<O>,
    spec: AttentionSpec,
}

impl<O: Ops> PoolingHead<O> {
    fn load(w: &Weights<O>, cfg: &SiglipVisionConfig) -> Result<Self, ModelError> {
        let (h, i, heads) = (cfg.tower.hidden_size, cfg.tower.intermediate_size, cfg.tower.num_attention_heads);
        let att = w.pp("attention");
        let in_w = att.vb().get((3 * h, h), "in_proj_weight").map_err(weights)?;
        let in_b = att.vb().get(3 * h, "in_proj_bias").map_err(weights)?;
        let probe = w.vb().get((1, 1, h), "probe").map_err(weights)?;
        let scale = 1.0 / ((h / heads.max(1)) as f64).sqrt();
        let query = (|| {
            let (wq, bq) = (in_w.narrow(0, 0, h)?, in_b.narrow(0, 0, h)?);
            let q = probe.reshape((1, h))?.to_device(&Device::Cpu)?.matmul(&wq.to_device(&Device::Cpu)?.t()?)?;
            (q.broadcast_add(&bq.to_device(&Device::Cpu)?)? * scale)?.reshape((1, h))
        })()
        .map_err(weights)?;
        let kv = (|| Ok::<_, candle_core::Error>((in_w.narrow(0, h, 2 * h)?, in_b.narrow(0, h, 2 * h)?)))()
            .map_err(weights)?;
        let mlp = w.pp("mlp");
        let mut spec = AttentionSpec::new(h, heads, false);
        // The query is scaled already.
        spec.scale = 1.0;
        Ok(PoolingHead {
            query: w.table_from(query)?,
            kv: att.linear_from(kv.0, Some(kv.1))?,
            out: att.pp("out_proj").linear(h, h, true)?,
            norm: w.pp("layernorm").layer_norm(h, cfg.tower.layer_norm_eps)?,
            mlp: Mlp::plain(
                mlp.pp("fc1").linear(h, i, true)?,
                mlp.pp("fc2").linear(i, h, true)?,
                Activation::parse(&cfg.tower.hidden_act)?,
            ),
            spec,
        })
    }

    /// `x`: the packed patch states of `b` images of `n` patches → `[b, hidden]`.
    fn forward(&self, o: &O, x: &O::T, b: usize, n: usize) -> Result<O::T, ModelError> {
        let h = o.dims(x).1;
        let mut kv = o.empty()?;
        o.linear_fwd(x, &self.kv, Post::None, &mut kv)?;
        let mut q = o.empty()?;
        o.embed(&mut q, h, &[(&self.query, &vec![0; b])])?;
        let cu: Vec<usize> = (0..=b).map(|i| i * n).collect();
        let mut ctx = o.empty()?;
        o.pooled_attention(&q, &kv, &o.seqs(&cu)?, &self.spec, &mut ctx)?;
        let mut y = o.empty()?;
        o.linear_fwd(&ctx, &self.out, Post::None, &mut y)?;
        let mut normed = o.empty()?;
        o.norm_to(&y, &self.norm, &mut normed)?;
        let mut out = o.empty()?;
        self.mlp.forward(o, &normed, &y, &mut Scratch::new(o)?, &mut out)?;
        Ok(out)
    }
}

pub struct SiglipText<O: Ops> {
    token: O::Table,
    positions: O::Table,
    layers: Vec<PreNormLayer<O>>,
    final_norm: Norm<O::Param>,
    head: O::Linear,
    hidden: usize,
    window: usize,
    pad: u32,
}

impl<O: Ops> SiglipText<O> {
    /// `pad`: the id texts are padded with (the tokenizer's padding token).
    fn load(w: &Weights<O>, cfg: &SiglipTextConfig, pad: u32) -> Result<Self, ModelError> {
        let h = cfg.tower.hidden_size;
        if pad as usize >= cfg.vocab_size {
            return Err(ModelError::Unsupported(format!("padding token id {pad} is outside the vocabulary")));
        }
        let emb = w.pp("embeddings");
        Ok(SiglipText {
            token: emb.pp("token_embedding").table(cfg.vocab_size, h)?,
            positions: emb.pp("position_embedding").table(cfg.max_position_embeddings, h)?,
            layers: load_layers(&w.pp("encoder"), &cfg.tower.layers(), false)?,
            final_norm: w.pp("final_layer_norm").layer_norm(h, cfg.tower.layer_norm_eps)?,
            head: w.pp("head").linear(h, cfg.projection_size.unwrap_or(h), true)?,
            hidden: h,
            window: cfg.max_position_embeddings,
            pad,
        })
    }

    /// Pooled (not normalized) embeddings: each text padded to the window, the last position's state.
    pub fn forward(&self, o: &O, batch: &Batch) -> Result<Vec<Vec<f32>>, ModelError> {
        let (n, b) = (self.window, batch.len());
        let mut ids = vec![self.pad; b * n];
        for i in 0..b {
            let seq = &batch.input_ids[batch.cu_seqlens[i]..batch.cu_seqlens[i + 1]];
            if seq.len() > n {
                return Err(ModelError::Forward(format!("{} tokens exceed the window of {n}", seq.len())));
            }
            ids[i * n..i * n + seq.len()].copy_from_slice(seq);
        }
        let positions: Vec<u32> = (0..b).flat_map(|_| 0..n as u32).collect();
        let mut x = o.empty()?;
        o.embed(&mut x, self.hidden, &[(&self.token, &ids), (&self.positions, &positions)])?;
        let cu: Vec<usize> = (0..=b).map(|i| i * n).collect();
        pre_norm_stack(o, &self.layers, &mut x, &o.seqs(&cu)?, Positional::None)?;
        let last: Vec<(u32, u32)> = (0..b).map(|i| (0, ((i + 1) * n - 1) as u32)).collect();
        let mut pooled = o.empty()?;
        o.gather_rows(&mut pooled, &[&x], &last)?;
        o.norm(&mut pooled, &self.final_norm)?;
        let mut y = o.empty()?;
        o.linear_fwd(&pooled, &self.head, Post::None, &mut y)?;
        o.download_rows(y)
    }
}

/// Both towers of a `SiglipModel` checkpoint, with the backend that computes them.
pub struct Siglip<O: Ops> {
    ops: O,
    pub text: SiglipText<O>,
    pub vision: SiglipVision<O>,
    head: PoolingHead<O>,
    pub dim: usize,
    weight_bytes: usize,
}

impl<O: Ops> Siglip<O> {
    pub fn load(
        ops: O,
        vb: candle_nn::VarBuilder,
        mapped: Option<std::sync::Arc<MappedTensors>>,
        cfg: &SiglipConfig,
        pad: u32,
    ) -> Result<Self, ModelError> {
        if !cfg.vision_config.vision_use_head {
            return Err(ModelError::Unsupported("SigLIP without the vision pooling head (vision_use_head)".into()));
        }
        let dim = cfg.text_config.projection_size.unwrap_or(cfg.text_config.tower.hidden_size);
        if dim != cfg.vision_config.tower.hidden_size {
            return Err(ModelError::Weights(format!(
                "the text head gives {dim}-d vectors, the vision tower {}-d",
                cfg.vision_config.tower.hidden_size
            )));
        }
        let w = Weights::new(vb, &ops).with_mapped(mapped);
        let text = SiglipText::load(&w.pp("text_model"), &cfg.text_config, pad)?;
        let vision = SiglipVision::load(&w.pp("vision_model"), &cfg.vision_config)?;
        let head = PoolingHead::load(&w.pp("vision_model").pp("head"), &cfg.vision_config)?;
        let weight_bytes = w.bytes();
        drop(w);
        Ok(Siglip { ops, text, vision, head, dim, weight_bytes })
    }

    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes as u64
    }

    pub fn ops(&self) -> &O {
        &self.ops
    }

    pub fn forward_text(&self, batch: &Batch) -> Result<Vec<Vec<f32>>, ModelError> {
        self.text.forward(&self.ops, batch)
    }

    /// Pooled (not normalized) image embeddings.
    pub fn forward_images(&self, images: &[Pixels]) -> Result<Vec<Vec<f32>>, ModelError> {
        let states = self.vision.forward(&self.ops, images)?;
        let pooled = self.head.forward(&self.ops, &states, images.len(), self.vision.tokens_per_image())?;
        self.ops.download_rows(pooled)
    }
}
