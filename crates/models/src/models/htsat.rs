//! CLAP's HTSAT audio encoder: a Swin transformer over the log-mel spectrogram folded into a square
//! image, defined once over [`Ops`]. A (shifted) window's rows are gathered into window order, attend
//! within their window with a learned relative-position bias, and go home onto the residual; patch
//! merging gathers each 2 × 2 neighbourhood into one row. Feature fusion (`enable_fusion`) blends a
//! second patch path in on the host (see `clap_fusion`).

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::Deserialize;

use super::clap_fusion::Fusion;
use crate::backend::{Activation, AttentionSpec, Norm, Ops, Post};
use crate::error::{weights, ModelError};
use crate::layers::{Mlp, Scratch, Weights};
use crate::media::audio::AudioFeatures;

/// An int or a pair, as transformers accepts for patch sizes.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
pub enum Pair {
    One(usize),
    Two([usize; 2]),
}

impl Pair {
    fn square(self) -> Option<usize> {
        match self {
            Pair::One(n) => Some(n),
            Pair::Two([a, b]) if a == b => Some(a),
            Pair::Two(_) => None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct AudioConfig {
    #[serde(default = "crate::config::n::<8>")]
    pub window_size: usize,
    #[serde(default = "crate::config::n::<64>")]
    pub num_mel_bins: usize,
    #[serde(default = "crate::config::n::<256>")]
    pub spec_size: usize,
    #[serde(default = "d4")]
    pub patch_size: Pair,
    #[serde(default = "d4x4")]
    pub patch_stride: Pair,
    #[serde(default = "crate::config::n::<768>")]
    pub hidden_size: usize,
    #[serde(default = "default_depths")]
    pub depths: Vec<usize>,
    #[serde(default = "default_heads")]
    pub num_attention_heads: Vec<usize>,
    #[serde(default)]
    pub enable_fusion: bool,
    #[serde(default)]
    pub fusion_type: Option<String>,
    #[serde(default = "crate::config::n::<4>")]
    pub aff_block_r: usize,
    #[serde(default = "crate::config::n::<1>")]
    pub patch_embed_input_channels: usize,
    #[serde(default = "crate::config::n::<96>")]
    pub patch_embeds_hidden_size: usize,
    #[serde(default = "yes")]
    pub enable_patch_layer_norm: bool,
    #[serde(default = "yes")]
    pub flatten_patch_embeds: bool,
    #[serde(default = "yes")]
    pub qkv_bias: bool,
    #[serde(default = "eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "four")]
    pub mlp_ratio: f64,
    #[serde(default = "gelu")]
    pub hidden_act: String,
    #[serde(default = "relu")]
    pub projection_hidden_act: String,
}

impl AudioConfig {
    /// `ClapAudioConfig()`: HTSAT-unfused's geometry.
    pub(crate) fn class_default() -> Self {
        serde_json::from_value(serde_json::json!({})).expect("every audio field has a default")
    }
}

fn default_depths() -> Vec<usize> {
    vec![2, 2, 6, 2]
}
fn default_heads() -> Vec<usize> {
    vec![4, 8, 16, 32]
}
fn d4() -> Pair {
    Pair::One(4)
}
fn d4x4() -> Pair {
    Pair::Two([4, 4])
}
fn four() -> f64 {
    4.0
}
fn yes() -> bool {
    true
}
fn eps() -> f64 {
    1e-5
}
fn gelu() -> String {
    "gelu".into()
}
fn relu() -> String {
    "relu".into()
}

/// The spectrogram-to-image step both backends share: batch norm per mel bin, the time axis
/// stretched to the image width (bicubic, corners aligned, as torch), and the spectrogram folded into
/// a `spec_size²` image.
pub(crate) struct SpecImage {
    bn_scale: Vec<f32>,
    bn_shift: Vec<f32>,
    pub spec_size: usize,
    freq_ratio: usize,
    mels: usize,
}

impl SpecImage {
    pub fn load(bn: &VarBuilder, cfg: &AudioConfig) -> candle_core::Result<Self> {
        let m = cfg.num_mel_bins;
        let (w, b) = (bn.get(m, "weight")?.to_vec1::<f32>()?, bn.get(m, "bias")?.to_vec1::<f32>()?);
        let (mean, var) = (bn.get(m, "running_mean")?.to_vec1::<f32>()?, bn.get(m, "running_var")?.to_vec1::<f32>()?);
        // Eval-mode batch norm as one multiply-add per mel bin (BatchNorm2d's eps is 1e-5).
        let bn_scale: Vec<f32> = w.iter().zip(&var).map(|(w, v)| w / (v + 1e-5).sqrt()).collect();
        let bn_shift = b.iter().zip(&mean).zip(&bn_scale).map(|((b, m), s)| b - m * s).collect();
        Ok(SpecImage { bn_scale, bn_shift, spec_size: cfg.spec_size, freq_ratio: cfg.spec_size / m.max(1), mels: m })
    }

    /// Channel `channel` of the features as a `[spec_size, spec_size]` image, row-major.
    pub fn image(&self, f: &AudioFeatures, channel: usize) -> Result<Vec<f32>, ModelError> {
        let width = self.spec_size * self.freq_ratio;
        let height = self.spec_size / self.freq_ratio;
        if f.mels != self.mels
            || f.mels != height
            || f.frames > width
            || f.frames == 0
            || channel >= f.channels
            || f.data.len() != f.channels * f.frames * f.mels
        {
            return Err(ModelError::Forward(format!(
                "features of {}x{}x{} do not fit the {width}x{height} spectrogram this model takes",
                f.channels, f.frames, f.mels
            )));
        }
        let normed: Vec<f32> = f.data[channel * f.frames * f.mels..][..f.frames * f.mels]
            .chunks_exact(f.mels)
            .flat_map(|row| row.iter().enumerate().map(|(m, v)| v * self.bn_scale[m] + self.bn_shift[m]))
            .collect();
        let stretched = if f.frames < width { bicubic_rows(&normed, f.frames, width, f.mels) } else { normed };
        // [width, mels] → [ratio, width/ratio, mels] → [ratio, mels, width/ratio] → [ratio·mels, width/ratio].
        let chunk = width / self.freq_ratio;
        let mut image = vec![0f32; self.spec_size * self.spec_size];
        for r in 0..self.freq_ratio {
            for m in 0..self.mels {
                for t in 0..chunk {
                    image[(r * self.mels + m) * chunk + t] = stretched[(r * chunk + t) * self.mels + m];
                }
            }
        }
        Ok(image)
    }
}

/// Checks what both backends support; returns the patch size.
pub(crate) fn check_audio_config(cfg: &AudioConfig) -> Result<usize, ModelError> {
    // transformers builds only the AFF block, whatever fusion_type names, except that `channel_map` widens
    // the patch convolution to four channels its forward pass never feeds.
    if cfg.enable_fusion && cfg.fusion_type.as_deref() == Some("channel_map") {
        return Err(ModelError::Unsupported("CLAP feature fusion of type `channel_map`".into()));
    }
    let p = cfg
        .patch_size
        .square()
        .filter(|p| Some(*p) == cfg.patch_stride.square())
        .ok_or_else(|| ModelError::Unsupported("CLAP patch size and stride must be equal and square".into()))?;
    let freq_ratio = cfg.spec_size / cfg.num_mel_bins.max(1);
    if cfg.patch_embed_input_channels != 1
        || !cfg.flatten_patch_embeds
        || freq_ratio == 0
        || !cfg.spec_size.is_multiple_of(p)
        || cfg.depths.is_empty()
        || cfg.depths.len() != cfg.num_attention_heads.len()
        || (cfg.patch_embeds_hidden_size << (cfg.depths.len() - 1)) != cfg.hidden_size
    {
        return Err(ModelError::Unsupported("this HTSAT configuration".into()));
    }
    Ok(p)
}

/// The window and shift of a stage whose grid is `side` wide: a grid no larger than the window is one
/// unshifted window.
pub(crate) fn stage_window(side: usize, window: usize) -> Result<(usize, usize), ModelError> {
    let (w, shift) = if side <= window { (side, 0) } else { (window, window / 2) };
    if !side.is_multiple_of(w) {
        return Err(ModelError::Unsupported(format!("a {side}x{side} grid with window {w}")));
    }
    Ok((w, shift))
}

/// Index into the relative-position table for tokens `i`, `j` of a `window`-wide window, for a table
/// sized for `full`-wide windows.
pub(crate) fn relative_index(i: usize, j: usize, window: usize, full: usize) -> usize {
    let dh = (i / window) as isize - (j / window) as isize + full as isize - 1;
    let dw = (i % window) as isize - (j % window) as isize + full as isize - 1;
    dh as usize * (2 * full - 1) + dw as usize
}

/// Cyclic-shift region labels: tokens of a shifted window attend only within their label.
pub(crate) fn shift_label(y: usize, x: usize, h: usize, w: usize, window: usize, shift: usize) -> usize {
    let region = |i: usize, len: usize| (i >= len - window) as usize + (i >= len - shift) as usize;
    region(y, h) * 3 + region(x, w)
}
/// One Swin block: (shifted) window attention with a learned relative-position bias, then an MLP.
struct SwinBlock<O: Ops> {
    norm1: Norm<O::Param>,
    qkv: O::Linear,
    out: O::Linear,
    /// `[heads · n, n]` for `n = window²`.
    bias: O::Param,
    norm2: Norm<O::Param>,
    mlp: Mlp<O>,
    spec: AttentionSpec,
    window: usize,
    shift: usize,
}

impl<O: Ops> SwinBlock<O> {
    fn load(
        w: &Weights<O>,
        dim: usize,
        heads: usize,
        window: usize,
        shift: usize,
        cfg: &AudioConfig,
    ) -> Result<Self, ModelError> {
        let sa = w.pp("attention").pp("self");
        // The table is sized for the configured window; a stage smaller than it uses a smaller window and
        // the matching part of the table.
        let full = cfg.window_size;
        let table = sa
            .vb()
            .get(((2 * full - 1) * (2 * full - 1), heads), "relative_position_bias_table")
            .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
            .map_err(weights)?;
        let n = window * window;
        let mut bias = vec![0f32; heads * n * n];
        for i in 0..n {
            for j in 0..n {
                let r = relative_index(i, j, window, full);
                for head in 0..heads {
                    bias[(head * n + i) * n + j] = table[r * heads + head];
                }
            }
        }
        let bias = Tensor::from_vec(bias, (heads * n, n), &candle_core::Device::Cpu).map_err(weights)?;
        let hidden = (dim as f64 * cfg.mlp_ratio) as usize;
        Ok(SwinBlock {
            norm1: w.pp("layernorm_before").layer_norm(dim, cfg.layer_norm_eps)?,
            qkv: sa.linear_cat(&[("query", dim), ("key", dim), ("value", dim)], dim, cfg.qkv_bias)?,
            out: w.pp("attention").pp("output").pp("dense").linear(dim, dim, true)?,
            bias: w.param_from(bias)?,
            norm2: w.pp("layernorm_after").layer_norm(dim, cfg.layer_norm_eps)?,
            mlp: Mlp::plain(
                w.pp("intermediate").pp("dense").linear(dim, hidden, true)?,
                w.pp("output").pp("dense").linear(hidden, dim, true)?,
                Activation::parse(&cfg.hidden_act)?,
            ),
            spec: AttentionSpec::new(dim, heads, false),
            window,
            shift,
        })
    }

    /// `x`: `b` grids of `side²` tokens, in place.
    fn forward(&self, o: &O, x: &mut O::T, b: usize, side: usize, scratch: &mut Scratch<O>) -> Result<(), ModelError> {
        let (ws, shift) = (self.window, self.shift);
        let (n, per_side) = (ws * ws, side / ws);
        // Window order: row k of the gathered matrix is token (y, x) of the cyclically shifted grid.
        let tokens = b * side * side;
        let mut order = Vec::with_capacity(tokens);
        let mut home = vec![(0u32, 0u32); tokens];
        let mut labels = Vec::with_capacity(if shift > 0 { tokens } else { 0 });
        for img in 0..b {
            for wy in 0..per_side {
                for wx in 0..per_side {
                    for t in 0..n {
                        let (ys, xs) = (wy * ws + t / ws, wx * ws + t % ws);
                        let (y, xx) = ((ys + shift) % side, (xs + shift) % side);
                        let src = (img * side + y) * side + xx;
                        home[src] = (0, order.len() as u32);
                        order.push((0, src as u32));
                        if shift > 0 {
                            labels.push(shift_label(ys, xs, side, side, ws, shift) as u32);
                        }
                    }
                }
            }
        }
        let mut win = o.empty()?;
        o.gather_rows(&mut win, &[&*x], &order)?;
        let mut normed = o.empty()?;
        o.norm_to(&win, &self.norm1, &mut normed)?;
        o.linear_fwd(&normed, &self.qkv, Post::None, &mut scratch.qkv)?;
        let groups = (shift > 0).then_some(&labels[..]);
        o.window_attention(&scratch.qkv, n, &self.spec, &self.bias, groups, &mut scratch.ctx)?;
        let mut mid = o.empty()?;
        o.linear_fwd(&scratch.ctx, &self.out, Post::Residual(&win), &mut mid)?;
        // Undo the shift and the windowing: each row goes home.
        o.gather_rows(&mut win, &[&mid], &home)?;
        o.norm_to(&win, &self.norm2, &mut normed)?;
        self.mlp.forward(o, &normed, &win, scratch, x)
    }
}

/// Halves the grid: each 2 × 2 neighbourhood concatenated ((0,0), (1,0), (0,1), (1,1), as transformers
/// orders them), normalized, projected to twice the width.
struct PatchMerging<O: Ops> {
    norm: Norm<O::Param>,
    reduction: O::Linear,
}

impl<O: Ops> PatchMerging<O> {
    fn forward(&self, o: &O, x: &mut O::T, b: usize, side: usize, c: usize) -> Result<(), ModelError> {
        let half = side / 2;
        let mut order = Vec::with_capacity(b * side * side);
        for img in 0..b {
            for y in 0..half {
                for xx in 0..half {
                    for (dy, dx) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                        order.push((0, ((img * side + 2 * y + dy) * side + 2 * xx + dx) as u32));
                    }
                }
            }
        }
        let mut cat = o.empty()?;
        o.gather_rows(&mut cat, &[&*x], &order)?;
        o.reshape(&mut cat, b * half * half, 4 * c)?;
        o.norm(&mut cat, &self.norm)?;
        o.linear_fwd(&cat, &self.reduction, Post::None, x)
    }
}

struct Stage<O: Ops> {
    blocks: Vec<SwinBlock<O>>,
    merge: Option<PatchMerging<O>>,
    /// Grid side at this stage.
    side: usize,
    dim: usize,
}

pub struct ClapAudio<O: Ops> {
    spec: SpecImage,
    patch: O::Linear,
    fusion: Option<Fusion>,
    patch_norm: Option<Norm<O::Param>>,
    stages: Vec<Stage<O>>,
    norm: Norm<O::Param>,
    proj1: O::Linear,
    proj2: O::Linear,
    projection_act: Activation,
    patch_size: usize,
    dim0: usize,
    dim: usize,
}

impl<O: Ops> ClapAudio<O> {
    /// `w`: the checkpoint's `audio_model`, `proj` its `audio_projection`.
    pub fn load(w: &Weights<O>, proj: &Weights<O>, cfg: &AudioConfig) -> Result<Self, ModelError> {
        let p = check_audio_config(cfg)?;
        let enc = w.pp("audio_encoder");
        let spec = SpecImage::load(&enc.pp("batch_norm").vb().clone(), cfg).map_err(weights)?;
        let d0 = cfg.patch_embeds_hidden_size;
        let pe = enc.pp("patch_embed");
        let conv = pe.pp("proj");
        let pw = conv.vb().get((d0, 1, p, p), "weight").and_then(|t| t.reshape((d0, p * p))).map_err(weights)?;
        let pb = conv.vb().get(d0, "bias").map_err(weights)?;
        let patch = conv.linear_from(pw, Some(pb))?;
        let fusion =
            if cfg.enable_fusion { Some(Fusion::load(pe.vb().clone(), cfg, p).map_err(weights)?) } else { None };
        let patch_norm =
            if cfg.enable_patch_layer_norm { Some(pe.pp("norm").layer_norm(d0, cfg.layer_norm_eps)?) } else { None };
        let mut stages = Vec::new();
        let mut side = cfg.spec_size / p;
        for (i, (&depth, &heads)) in cfg.depths.iter().zip(&cfg.num_attention_heads).enumerate() {
            let dim = d0 << i;
            let (window, shift) = stage_window(side, cfg.window_size)?;
            let st = enc.pp("layers").pp(i);
            let blocks = (0..depth)
                .map(|j| {
                    SwinBlock::load(&st.pp("blocks").pp(j), dim, heads, window, if j % 2 == 0 { 0 } else { shift }, cfg)
                })
                .collect::<Result<Vec<_>, ModelError>>()?;
            let merge = if i + 1 < cfg.depths.len() {
                let ds = st.pp("downsample");
                Some(PatchMerging {
                    norm: ds.pp("norm").layer_norm(4 * dim, cfg.layer_norm_eps)?,
                    reduction: ds.pp("reduction").linear(4 * dim, 2 * dim, false)?,
                })
            } else {
                None
            };
            stages.push(Stage { blocks, merge, side, dim });
            side /= 2;
        }
        let last = cfg.hidden_size;
        let out = proj.pp("linear1").vb().get_unchecked("bias").and_then(|b| b.dim(0)).map_err(weights)?;
        Ok(ClapAudio {
            spec,
            patch,
            fusion,
            patch_norm,
            stages,
            norm: enc.pp("norm").layer_norm(last, cfg.layer_norm_eps)?,
            proj1: proj.pp("linear1").linear(last, out, true)?,
            proj2: proj.pp("linear2").linear(out, out, true)?,
            projection_act: Activation::parse(&cfg.projection_hidden_act)?,
            patch_size: p,
            dim0: d0,
            dim: out,
        })
    }

    /// Width of the shared space.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Tokens the first stage attends over, per clip: what a clip costs in a batch.
    pub fn tokens_per_clip(&self) -> usize {
        (self.spec.spec_size / self.patch_size).pow(2)
    }

    /// Projected (not normalized) audio embeddings, one per clip.
    pub fn forward(&self, o: &O, clips: &[AudioFeatures]) -> Result<Vec<Vec<f32>>, ModelError> {
        let (s, p, d0) = (self.spec.spec_size, self.patch_size, self.dim0);
        let (g, b) = (s / p, clips.len());
        let mut patches = vec![0f32; b * g * g * p * p];
        for (i, clip) in clips.iter().enumerate() {
            let image = self.spec.image(clip, 0)?;
            for gy in 0..g {
                for gx in 0..g {
                    let dst = &mut patches[((i * g + gy) * g + gx) * p * p..][..p * p];
                    for py in 0..p {
                        dst[py * p..(py + 1) * p].copy_from_slice(&image[(gy * p + py) * s + gx * p..][..p]);
                    }
                }
            }
        }
        let mut x = o.empty()?;
        o.linear_fwd(&o.upload(b * g * g, p * p, patches)?, &self.patch, Post::None, &mut x)?;
        if let Some(fusion) = &self.fusion {
            let mut tokens = o.download(x)?;
            for (grid, clip) in tokens.chunks_exact_mut(g * g * d0).zip(clips) {
                let [c1, c2, c3] = Fusion::crop_images(&self.spec, clip)?;
                fusion.fuse(grid, [&c1, &c2, &c3]);
            }
            x = o.upload(b * g * g, d0, tokens)?;
        }
        if let Some(norm) = &self.patch_norm {
            o.norm(&mut x, norm)?;
        }
        let mut scratch = Scratch::new(o)?;
        for stage in &self.stages {
            for block in &stage.blocks {
                block.forward(o, &mut x, b, stage.side, &mut scratch)?;
            }
            if let Some(merge) = &stage.merge {
                merge.forward(o, &mut x, b, stage.side, stage.dim)?;
            }
        }
        o.norm(&mut x, &self.norm)?;
        // The pooled vector is the mean over every token of the final grid.
        let c = o.dims(&x).1;
        let states = o.host(&x)?;
        let tokens = states.len() / (b * c).max(1);
        let mut pooled = vec![0f32; b * c];
        for (i, clip) in states.chunks(tokens * c).enumerate() {
            let dst = &mut pooled[i * c..(i + 1) * c];
            for row in clip.chunks(c) {
                dst.iter_mut().zip(row).for_each(|(d, v)| *d += v);
            }
            dst.iter_mut().for_each(|v| *v /= tokens as f32);
        }
        let mut mid = o.empty()?;
        o.linear_fwd(&o.upload(b, c, pooled)?, &self.proj1, Post::Act(self.projection_act), &mut mid)?;
        let mut out = o.empty()?;
        o.linear_fwd(&mid, &self.proj2, Post::None, &mut out)?;
        o.download_rows(out)
    }
}

/// torch's `interpolate(mode="bicubic", align_corners=True)` along rows: `[rows, cols]` → `[out, cols]`.
fn bicubic_rows(x: &[f32], rows: usize, out: usize, cols: usize) -> Vec<f32> {
    const A: f32 = -0.75;
    let near = |t: f32| ((A + 2.0) * t - (A + 3.0)) * t * t + 1.0;
    let far = |t: f32| ((A * t - 5.0 * A) * t + 8.0 * A) * t - 4.0 * A;
    let scale = if out > 1 { (rows - 1) as f32 / (out - 1) as f32 } else { 0.0 };
    let mut y = Vec::with_capacity(out * cols);
    for i in 0..out {
        let real = scale * i as f32;
        let base = real.floor();
        let t = real - base;
        let w = [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)];
        let idx = |k: isize| (base as isize + k).clamp(0, rows as isize - 1) as usize;
        let src = [idx(-1), idx(0), idx(1), idx(2)];
        for c in 0..cols {
            y.push(
                w[0] * x[src[0] * cols + c]
                    + w[1] * x[src[1] * cols + c]
                    + w[2] * x[src[2] * cols + c]
                    + w[3] * x[src[3] * cols + c],
            );
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bicubic_with_aligned_corners_keeps_the_ends_and_lines() {
        let x: Vec<f32> = (0..5).map(|i| i as f32 * 2.0).collect();
        let y = bicubic_rows(&x, 5, 9, 1);
        assert_eq!(y[0], 0.0);
        assert_eq!(y[8], 8.0);
        // Cubic convolution reproduces a straight line away from the clamped edges.
        assert!((y[4] - 4.0).abs() < 1e-6 && (y[3] - 3.0).abs() < 1e-6, "{y:?}");
    }
}
