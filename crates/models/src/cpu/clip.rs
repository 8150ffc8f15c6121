//! CLIP's towers on Aleph's CPU kernels: a pre-norm transformer over packed sequences (causal for
//! text), patch embedding as one GEMM, projections as packed GEMMs. Same weights and names as the
//! candle reference in `architectures/clip.rs`.

use candle_nn::VarBuilder;

use super::gemm::{Epilogue, MatRef};
use super::layers::{attention, host, norm_rows, Act, Dense, Norm};
use super::{ops, Isa};
use crate::architectures::clip::{pool_position, ClipConfig, TextConfig, TowerConfig, VisionConfig};
use crate::batch::Batch;
use crate::error::{weights, ModelError};
use crate::media::image::Pixels;

struct Layer {
    norm1: Norm,
    qkv: Dense,
    out: Dense,
    norm2: Norm,
    fc1: Dense,
    fc2: Dense,
}

/// A stack of pre-norm layers: `x += attn(ln1(x)); x += mlp(ln2(x))` (SigLIP's towers share it).
pub(crate) struct PreNorm {
    layers: Vec<Layer>,
    act: Act,
    pub hidden: usize,
    heads: usize,
    inter: usize,
    pub eps: f32,
    pub isa: Isa,
}

impl PreNorm {
    pub(crate) fn load(vb: VarBuilder, cfg: &TowerConfig) -> Result<Self, ModelError> {
        let act = Act::parse(&cfg.hidden_act)?;
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        if cfg.num_attention_heads == 0 || !h.is_multiple_of(cfg.num_attention_heads) {
            return Err(ModelError::Unsupported(format!("hidden_size {h} with {} heads", cfg.num_attention_heads)));
        }
        let layers = (0..cfg.num_hidden_layers)
            .map(|n| {
                let vb = vb.pp("layers").pp(n);
                let sa = vb.pp("self_attn");
                let mut w = Vec::with_capacity(3 * h * h);
                let mut b = Vec::with_capacity(3 * h);
                for name in ["q_proj", "k_proj", "v_proj"] {
                    w.extend(host(sa.pp(name).get((h, h), "weight")?)?);
                    b.extend(host(sa.pp(name).get(h, "bias")?)?);
                }
                Ok(Layer {
                    norm1: Norm::load(vb.pp("layer_norm1"), h)?,
                    qkv: Dense::new(&w, b, h, 3 * h, false),
                    out: Dense::load(sa.pp("out_proj"), h, h, false)?,
                    norm2: Norm::load(vb.pp("layer_norm2"), h)?,
                    fc1: Dense::load(vb.pp("mlp").pp("fc1"), h, i, false)?,
                    fc2: Dense::load(vb.pp("mlp").pp("fc2"), i, h, false)?,
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(weights)?;
        Ok(PreNorm {
            layers,
            act,
            hidden: h,
            heads: cfg.num_attention_heads,
            inter: i,
            eps: cfg.layer_norm_eps as f32,
            isa: Isa::get(),
        })
    }

    /// `x`: `[tokens, hidden]`, sequences packed as `cu_seqlens` says.
    pub(crate) fn forward(&self, x: &mut [f32], cu_seqlens: &[usize], causal: bool) {
        let (h, t) = (self.hidden, x.len() / self.hidden);
        let mut normed = vec![0f32; t * h];
        let mut qkv = vec![0f32; t * 3 * h];
        let mut ctx = vec![0f32; t * h];
        let mut mid = vec![0f32; t * h];
        let mut inter = vec![0f32; t * self.inter];
        for layer in &self.layers {
            normed.copy_from_slice(x);
            norm_rows(self.isa, &mut normed, &layer.norm1, h, self.eps);
            let nm = MatRef { data: &normed, rows: t, cols: h, ld: h };
            layer.qkv.forward(nm, &mut qkv, 3 * h, Epilogue::Bias(&layer.qkv.b));
            attention(self.isa, &qkv, &mut ctx, cu_seqlens, h, self.heads, causal);
            let cm = MatRef { data: &ctx, rows: t, cols: h, ld: h };
            layer.out.forward(cm, &mut mid, h, Epilogue::BiasResidual(&layer.out.b, x));
            normed.copy_from_slice(&mid);
            norm_rows(self.isa, &mut normed, &layer.norm2, h, self.eps);
            let nm = MatRef { data: &normed, rows: t, cols: h, ld: h };
            layer.fc1.forward(nm, &mut inter, self.inter, self.act.epilogue(&layer.fc1.b));
            self.act.finish(self.isa, &mut inter);
            let im = MatRef { data: &inter, rows: t, cols: self.inter, ld: self.inter };
            layer.fc2.forward(im, x, h, Epilogue::BiasResidual(&layer.fc2.b, &mid));
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        let norm = |n: &Norm| 4 * (n.gamma.len() + n.beta.len());
        self.layers
            .iter()
            .map(|l| l.qkv.bytes() + l.out.bytes() + l.fc1.bytes() + l.fc2.bytes() + norm(&l.norm1) + norm(&l.norm2))
            .sum()
    }
}

/// A bias-free projection `[out, in]` as a packed dense layer; `None` for `out` reads it from the weight.
fn projection(vb: VarBuilder, inp: usize) -> candle_core::Result<Dense> {
    let w = vb.get_unchecked("weight")?;
    let (out, k) = w.dims2()?;
    if k != inp {
        candle_core::bail!("{}.weight is [{out}, {k}], expected [_, {inp}]", vb.prefix());
    }
    Ok(Dense::new(&host(w)?, vec![0.0; out], inp, out, false))
}

/// Runs `rows` through a final norm and a projection: `[rows, out]` vectors.
fn finish(isa: Isa, mut rows: Vec<f32>, norm: &Norm, proj: &Dense, h: usize, eps: f32) -> Vec<Vec<f32>> {
    let n = rows.len() / h;
    norm_rows(isa, &mut rows, norm, h, eps);
    let out = proj.b.len();
    let mut y = vec![0f32; n * out];
    proj.forward(MatRef { data: &rows, rows: n, cols: h, ld: h }, &mut y, out, Epilogue::None);
    y.chunks(out).map(<[f32]>::to_vec).collect()
}

pub struct FastClipText {
    token: Vec<f32>,
    positions: Vec<f32>,
    encoder: PreNorm,
    final_norm: Norm,
    projection: Dense,
    eos: u32,
    window: usize,
}

impl FastClipText {
    fn load(vb: VarBuilder, proj: VarBuilder, cfg: &TextConfig) -> Result<Self, ModelError> {
        let h = cfg.tower.hidden_size;
        let emb = vb.pp("embeddings");
        let load = || -> candle_core::Result<(Vec<f32>, Vec<f32>, Norm, Dense)> {
            Ok((
                host(emb.pp("token_embedding").get((cfg.vocab_size, h), "weight")?)?,
                host(emb.pp("position_embedding").get((cfg.max_position_embeddings, h), "weight")?)?,
                Norm::load(vb.pp("final_layer_norm"), h)?,
                projection(proj, h)?,
            ))
        };
        let (token, positions, final_norm, projection) = load().map_err(weights)?;
        Ok(FastClipText {
            token,
            positions,
            encoder: PreNorm::load(vb.pp("encoder"), &cfg.tower)?,
            final_norm,
            projection,
            eos: cfg.eos_token_id,
            window: cfg.max_position_embeddings,
        })
    }

    /// Projected (not normalized) embeddings, one per sequence.
    pub fn forward(&self, batch: &Batch) -> Result<Vec<Vec<f32>>, ModelError> {
        let h = self.encoder.hidden;
        let mut x = vec![0f32; batch.total_tokens() * h];
        let mut pooled_rows = Vec::with_capacity(batch.len());
        for s in 0..batch.len() {
            let start = batch.cu_seqlens[s];
            let ids = &batch.input_ids[start..batch.cu_seqlens[s + 1]];
            if ids.len() > self.window {
                return Err(ModelError::Forward(format!("{} tokens exceed the window of {}", ids.len(), self.window)));
            }
            for (t, &id) in ids.iter().enumerate() {
                embed_token(&mut x[(start + t) * h..(start + t + 1) * h], id, t, &self.token, &self.positions)?;
            }
            pooled_rows.push(start + pool_position(ids, self.eos));
        }
        self.encoder.forward(&mut x, &batch.cu_seqlens, true);
        let pooled: Vec<f32> = pooled_rows.iter().flat_map(|&r| x[r * h..(r + 1) * h].iter().copied()).collect();
        Ok(finish(self.encoder.isa, pooled, &self.final_norm, &self.projection, h, self.encoder.eps))
    }
}

pub struct FastClipVision {
    patch: Dense,
    class: Vec<f32>,
    positions: Vec<f32>,
    pre_norm: Norm,
    encoder: PreNorm,
    post_norm: Norm,
    projection: Dense,
    image_size: usize,
    patch_size: usize,
    channels: usize,
}

impl FastClipVision {
    fn load(vb: VarBuilder, proj: VarBuilder, cfg: &VisionConfig) -> Result<Self, ModelError> {
        let (h, p, c) = (cfg.tower.hidden_size, cfg.patch_size, cfg.num_channels);
        if p == 0 || !cfg.image_size.is_multiple_of(p) {
            return Err(ModelError::Unsupported(format!("image_size {} with patch_size {p}", cfg.image_size)));
        }
        let g = cfg.image_size / p;
        let emb = vb.pp("embeddings");
        let w = emb.pp("patch_embedding").get((h, c, p, p), "weight").and_then(host).map_err(weights)?;
        let patch = Dense::new(&w, vec![0.0; h], c * p * p, h, false);
        let class = emb.get(h, "class_embedding").and_then(host).map_err(weights)?;
        let positions = emb.pp("position_embedding").get((g * g + 1, h), "weight").and_then(host).map_err(weights)?;
        let pre_norm = Norm::load(vb.pp("pre_layrnorm"), h).map_err(weights)?;
        let post_norm = Norm::load(vb.pp("post_layernorm"), h).map_err(weights)?;
        let projection = projection(proj, h).map_err(weights)?;
        Ok(FastClipVision {
            patch,
            class,
            positions,
            pre_norm,
            encoder: PreNorm::load(vb.pp("encoder"), &cfg.tower)?,
            post_norm,
            projection,
            image_size: cfg.image_size,
            patch_size: p,
            channels: c,
        })
    }

    /// Projected (not normalized) embeddings, one per image.
    pub fn forward(&self, images: &[Pixels]) -> Result<Vec<Vec<f32>>, ModelError> {
        let (s, p, c, h) = (self.image_size, self.patch_size, self.channels, self.encoder.hidden);
        let g = s / p;
        let n = g * g + 1;
        let b = images.len();
        let k = c * p * p;
        let patches = flatten_patches(images, s, p, c)?;
        // Row 0 of each image is the class token; rows 1.. its patches.
        let mut x = vec![0f32; b * n * h];
        let mut embedded = vec![0f32; b * g * g * h];
        self.patch.forward(
            MatRef { data: &patches, rows: b * g * g, cols: k, ld: k },
            &mut embedded,
            h,
            Epilogue::None,
        );
        for i in 0..b {
            let img = &mut x[i * n * h..(i + 1) * n * h];
            img[..h].copy_from_slice(&self.class);
            img[h..].copy_from_slice(&embedded[i * g * g * h..(i + 1) * g * g * h]);
            ops::add_assign(img, &self.positions);
        }
        let isa = self.encoder.isa;
        norm_rows(isa, &mut x, &self.pre_norm, h, self.encoder.eps);
        let cu: Vec<usize> = (0..=b).map(|i| i * n).collect();
        self.encoder.forward(&mut x, &cu, false);
        let cls: Vec<f32> = (0..b).flat_map(|i| x[i * n * h..i * n * h + h].iter().copied()).collect();
        Ok(finish(isa, cls, &self.post_norm, &self.projection, h, self.encoder.eps))
    }
}

/// `row = token[id] + positions[t]` (tables `[_, row.len()]`); an id outside the vocabulary is an error.
pub(crate) fn embed_token(
    row: &mut [f32],
    id: u32,
    t: usize,
    token: &[f32],
    positions: &[f32],
) -> Result<(), ModelError> {
    let (h, id) = (row.len(), id as usize);
    if id >= token.len() / h {
        return Err(ModelError::Forward(format!("token id {id} is outside the vocabulary")));
    }
    row.copy_from_slice(&token[id * h..(id + 1) * h]);
    ops::add_assign(row, &positions[t * h..(t + 1) * h]);
    Ok(())
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

/// Both towers on the CPU path.
pub struct FastClip {
    pub text: FastClipText,
    pub vision: FastClipVision,
}

impl FastClip {
    pub fn load(vb: VarBuilder, cfg: &ClipConfig) -> Result<Self, ModelError> {
        let clip = FastClip {
            text: FastClipText::load(vb.pp("text_model"), vb.pp("text_projection"), &cfg.text_config)?,
            vision: FastClipVision::load(vb.pp("vision_model"), vb.pp("visual_projection"), &cfg.vision_config)?,
        };
        if clip.vision.projection.b.len() != clip.dim() {
            return Err(ModelError::Weights("text_projection and visual_projection differ in width".into()));
        }
        Ok(clip)
    }

    /// Width of the shared space.
    pub fn dim(&self) -> usize {
        self.text.projection.b.len()
    }

    pub fn weight_bytes(&self) -> u64 {
        let t = &self.text;
        let v = &self.vision;
        let floats = t.token.len() + t.positions.len() + v.class.len() + v.positions.len();
        (4 * floats
            + t.encoder.bytes()
            + v.encoder.bytes()
            + t.projection.bytes()
            + v.projection.bytes()
            + v.patch.bytes()) as u64
    }
}
