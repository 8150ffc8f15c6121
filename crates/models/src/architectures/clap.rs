//! CLAP on candle (`ClapModel` in transformers): an HTSAT audio encoder (a Swin transformer over the
//! log-mel spectrogram folded into a square image) and a RoBERTa text encoder, each followed by a
//! two-layer projection into one shared space.
//!
//! Checkpoints with feature fusion (`enable_fusion`) add a second patch path (see `clap_fusion`).

use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{LayerNorm, VarBuilder};
use serde::Deserialize;

use super::clap_fusion::Fusion;
use super::dense::Dense;
use crate::backend::Activation;
use crate::error::{weights, ModelError};
use crate::media::audio::AudioFeatures;
use crate::models::bert::{BertClass, BertConfig, BertConfigFile};
use crate::models::clap_text::ClapText;

/// `ClapConfig`, with transformers' defaults where the file omits a field: the text tower's are
/// `ClapTextConfig`'s (a RoBERTa: `pad_token_id` 1, one token type, 514 positions), not BERT's.
#[derive(Debug, Clone, Deserialize)]
#[serde(from = "ClapConfigFile")]
pub struct ClapConfig {
    pub text_config: BertConfig,
    pub audio_config: AudioConfig,
}

#[derive(Deserialize)]
struct ClapConfigFile {
    #[serde(default)]
    text_config: Option<BertConfigFile>,
    #[serde(default)]
    audio_config: Option<AudioConfig>,
    /// transformers' `ClapConfig.__init__` writes this onto both towers' configs, over their own values.
    #[serde(default = "relu")]
    projection_hidden_act: String,
}

impl From<ClapConfigFile> for ClapConfig {
    fn from(f: ClapConfigFile) -> Self {
        let mut audio_config = f.audio_config.unwrap_or_else(AudioConfig::class_default);
        audio_config.projection_hidden_act = f.projection_hidden_act;
        ClapConfig { text_config: f.text_config.unwrap_or_default().resolve(BertClass::ClapText), audio_config }
    }
}

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
    #[serde(default = "d8")]
    pub window_size: usize,
    #[serde(default = "d64")]
    pub num_mel_bins: usize,
    #[serde(default = "d256")]
    pub spec_size: usize,
    #[serde(default = "d4")]
    pub patch_size: Pair,
    #[serde(default = "d4x4")]
    pub patch_stride: Pair,
    #[serde(default = "d768")]
    pub hidden_size: usize,
    #[serde(default = "default_depths")]
    pub depths: Vec<usize>,
    #[serde(default = "default_heads")]
    pub num_attention_heads: Vec<usize>,
    #[serde(default)]
    pub enable_fusion: bool,
    #[serde(default)]
    pub fusion_type: Option<String>,
    #[serde(default = "d4usize")]
    pub aff_block_r: usize,
    #[serde(default = "d1")]
    pub patch_embed_input_channels: usize,
    #[serde(default = "d96")]
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
    fn class_default() -> Self {
        serde_json::from_value(serde_json::json!({})).expect("every audio field has a default")
    }
}

fn d768() -> usize {
    768
}
fn default_depths() -> Vec<usize> {
    vec![2, 2, 6, 2]
}
fn default_heads() -> Vec<usize> {
    vec![4, 8, 16, 32]
}
fn d1() -> usize {
    1
}
fn d4usize() -> usize {
    4
}
fn d4() -> Pair {
    Pair::One(4)
}
fn d4x4() -> Pair {
    Pair::Two([4, 4])
}
fn d8() -> usize {
    8
}
fn d64() -> usize {
    64
}
fn d96() -> usize {
    96
}
fn d256() -> usize {
    256
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

/// `linear2(act(linear1(x)))`.
struct Projection {
    linear1: Dense,
    act: Activation,
    linear2: Dense,
}

impl Projection {
    fn load(vb: VarBuilder, inp: usize, out: usize, act: &str) -> Result<Self, ModelError> {
        Ok(Projection {
            linear1: Dense::load(vb.pp("linear1"), inp, out).map_err(weights)?,
            act: Activation::parse(act)?,
            linear2: Dense::load(vb.pp("linear2"), out, out).map_err(weights)?,
        })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.linear2.forward(&self.act.apply(&self.linear1.forward(x)?)?)
    }
}

/// One Swin block: (shifted) window attention with a learned relative-position bias, then an MLP.
struct SwinBlock {
    norm1: LayerNorm,
    qkv: Dense,
    out: Dense,
    /// `[heads, n, n]` for `n = window²`.
    position_bias: Tensor,
    norm2: LayerNorm,
    fc1: Dense,
    fc2: Dense,
    heads: usize,
    window: usize,
    shift: usize,
}

impl SwinBlock {
    fn load(
        vb: VarBuilder,
        dim: usize,
        heads: usize,
        window: usize,
        shift: usize,
        cfg: &AudioConfig,
    ) -> candle_core::Result<Self> {
        let sa = vb.pp("attention").pp("self");
        let part = |name: &str| -> candle_core::Result<(Tensor, Tensor)> {
            let w = sa.pp(name).get((dim, dim), "weight")?;
            let b =
                if cfg.qkv_bias { sa.pp(name).get(dim, "bias")? } else { Tensor::zeros(dim, DType::F32, vb.device())? };
            Ok((w, b))
        };
        // The table is sized for the configured window; a stage smaller than it uses a smaller window
        // and the matching part of the table.
        let full = cfg.window_size;
        let table = sa.get(((2 * full - 1) * (2 * full - 1), heads), "relative_position_bias_table")?;
        let n = window * window;
        let index: Vec<u32> = (0..n * n).map(|ij| relative_index(ij / n, ij % n, window, full) as u32).collect();
        let index = Tensor::from_vec(index, n * n, vb.device())?;
        let position_bias = table.index_select(&index, 0)?.reshape((n, n, heads))?.permute((2, 0, 1))?.contiguous()?;
        let hidden = (dim as f64 * cfg.mlp_ratio) as usize;
        Ok(SwinBlock {
            norm1: candle_nn::layer_norm(dim, cfg.layer_norm_eps, vb.pp("layernorm_before"))?,
            qkv: Dense::fuse(vec![part("query")?, part("key")?, part("value")?])?,
            out: Dense::load(vb.pp("attention").pp("output").pp("dense"), dim, dim)?,
            position_bias,
            norm2: candle_nn::layer_norm(dim, cfg.layer_norm_eps, vb.pp("layernorm_after"))?,
            fc1: Dense::load(vb.pp("intermediate").pp("dense"), dim, hidden)?,
            fc2: Dense::load(vb.pp("output").pp("dense"), hidden, dim)?,
            heads,
            window,
            shift,
        })
    }

    /// The shifted-window mask: tokens that the cyclic shift brought together from different regions
    /// of the image do not attend to each other. `[windows, n, n]`.
    fn shift_mask(&self, h: usize, w: usize, dev: &Device) -> candle_core::Result<Tensor> {
        let (ws, s) = (self.window, self.shift);
        let (nh, nw) = (h / ws, w / ws);
        let n = ws * ws;
        let mut mask = Vec::with_capacity(nh * nw * n * n);
        for wy in 0..nh {
            for wx in 0..nw {
                let label = |t: usize| shift_label(wy * ws + t / ws, wx * ws + t % ws, h, w, ws, s);
                for i in 0..n {
                    for j in 0..n {
                        mask.push(if label(i) == label(j) { 0f32 } else { -100.0 });
                    }
                }
            }
        }
        Tensor::from_vec(mask, (nh * nw, n, n), dev)
    }

    /// `x`: `[b, h * w, c]`.
    fn forward(&self, x: &Tensor, h: usize, w: usize, act: Activation) -> candle_core::Result<Tensor> {
        let (b, _, c) = x.dims3()?;
        let (ws, nh) = (self.window, self.heads);
        let hd = c / nh;
        let mut y = self.norm1.forward(x)?.reshape((b, h, w, c))?;
        if self.shift > 0 {
            y = y.roll(-(self.shift as i32), 1)?.roll(-(self.shift as i32), 2)?;
        }
        let windows = (h / ws) * (w / ws);
        let n = ws * ws;
        let y =
            y.reshape((b, h / ws, ws, w / ws, ws, c))?.permute((0, 1, 3, 2, 4, 5))?.reshape((b * windows * n, c))?;
        let qkv = self.qkv.forward(&y)?.reshape((b * windows, n, 3, nh, hd))?;
        let split = |i: usize| -> candle_core::Result<Tensor> {
            qkv.narrow(2, i, 1)?.squeeze(2)?.transpose(1, 2)?.contiguous()
        };
        let q = (split(0)? * (1.0 / (hd as f64).sqrt()))?;
        let (k, v) = (split(1)?, split(2)?);
        let mut scores = q.matmul(&k.t()?)?.broadcast_add(&self.position_bias.unsqueeze(0)?)?;
        if self.shift > 0 {
            let mask = self.shift_mask(h, w, x.device())?.reshape((1, windows, 1, n, n))?;
            scores = scores.reshape((b, windows, nh, n, n))?.broadcast_add(&mask)?.reshape((b * windows, nh, n, n))?;
        }
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let ctx = probs.matmul(&v)?.transpose(1, 2)?.reshape((b * windows * n, c))?;
        let mut y = self
            .out
            .forward(&ctx)?
            .reshape((b, h / ws, w / ws, ws, ws, c))?
            .permute((0, 1, 3, 2, 4, 5))?
            .reshape((b, h, w, c))?;
        if self.shift > 0 {
            y = y.roll(self.shift as i32, 1)?.roll(self.shift as i32, 2)?;
        }
        let x = (x + y.reshape((b, h * w, c))?)?.reshape((b * h * w, c))?;
        let m = self.fc2.forward(&act.apply(&self.fc1.forward(&self.norm2.forward(&x)?)?)?)?;
        (x + m)?.reshape((b, h * w, c))
    }
}

/// Halves the grid: each 2 × 2 neighbourhood concatenated, normalized, projected to twice the width.
struct PatchMerging {
    norm: LayerNorm,
    reduction: Tensor,
}

impl PatchMerging {
    fn load(vb: VarBuilder, dim: usize, eps: f64) -> candle_core::Result<Self> {
        Ok(PatchMerging {
            norm: candle_nn::layer_norm(4 * dim, eps, vb.pp("norm"))?,
            reduction: vb.pp("reduction").get((2 * dim, 4 * dim), "weight")?.t()?.contiguous()?,
        })
    }

    fn forward(&self, x: &Tensor, h: usize, w: usize) -> candle_core::Result<Tensor> {
        let (b, _, c) = x.dims3()?;
        // [b, h/2, 2(row), w/2, 2(col), c]; transformers concatenates (row, col) as (0,0), (1,0), (0,1), (1,1).
        let x = x
            .reshape((b, h / 2, 2, w / 2, 2, c))?
            .permute((0, 1, 3, 4, 2, 5))?
            .reshape((b * (h / 2) * (w / 2), 4 * c))?;
        self.norm.forward(&x)?.matmul(&self.reduction)?.reshape((b, (h / 2) * (w / 2), 2 * c))
    }
}

struct Stage {
    blocks: Vec<SwinBlock>,
    merge: Option<PatchMerging>,
    /// Grid side at this stage.
    side: usize,
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
    pub fn load(bn: VarBuilder, cfg: &AudioConfig) -> candle_core::Result<Self> {
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
pub struct ClapAudio {
    spec: SpecImage,
    patch: Tensor,
    patch_bias: Tensor,
    fusion: Option<Fusion>,
    patch_norm: Option<LayerNorm>,
    stages: Vec<Stage>,
    norm: LayerNorm,
    projection: Projection,
    act: Activation,
    patch_size: usize,
    dim0: usize,
}

impl ClapAudio {
    fn load(vb: VarBuilder, proj: VarBuilder, cfg: &AudioConfig, projection_dim: usize) -> Result<Self, ModelError> {
        let p = check_audio_config(cfg)?;
        let enc = vb.pp("audio_encoder");
        let spec = SpecImage::load(enc.pp("batch_norm"), cfg).map_err(weights)?;
        let d0 = cfg.patch_embeds_hidden_size;
        let pe = enc.pp("patch_embed");
        let patch = pe.pp("proj").get((d0, 1, p, p), "weight").and_then(|t| t.reshape((d0, p * p))?.t()?.contiguous());
        let patch = patch.map_err(weights)?;
        let patch_bias = pe.pp("proj").get(d0, "bias").map_err(weights)?;
        let fusion = if cfg.enable_fusion { Some(Fusion::load(pe.clone(), cfg, p).map_err(weights)?) } else { None };
        let patch_norm = if cfg.enable_patch_layer_norm {
            Some(candle_nn::layer_norm(d0, cfg.layer_norm_eps, pe.pp("norm")).map_err(weights)?)
        } else {
            None
        };
        let mut stages = Vec::new();
        let mut side = cfg.spec_size / p;
        for (i, (&depth, &heads)) in cfg.depths.iter().zip(&cfg.num_attention_heads).enumerate() {
            let dim = d0 << i;
            let (window, shift_size) = stage_window(side, cfg.window_size)?;
            let st = enc.pp("layers").pp(i);
            let blocks = (0..depth)
                .map(|j| {
                    let shift = if j % 2 == 0 { 0 } else { shift_size };
                    SwinBlock::load(st.pp("blocks").pp(j), dim, heads, window, shift, cfg)
                })
                .collect::<candle_core::Result<Vec<_>>>()
                .map_err(weights)?;
            let merge = if i + 1 < cfg.depths.len() {
                Some(PatchMerging::load(st.pp("downsample"), dim, cfg.layer_norm_eps).map_err(weights)?)
            } else {
                None
            };
            stages.push(Stage { blocks, merge, side });
            side /= 2;
        }
        let last = cfg.hidden_size;
        Ok(ClapAudio {
            spec,
            patch,
            patch_bias,
            fusion,
            patch_norm,
            stages,
            norm: candle_nn::layer_norm(last, cfg.layer_norm_eps, enc.pp("norm")).map_err(weights)?,
            projection: Projection::load(proj, last, projection_dim, &cfg.projection_hidden_act)?,
            act: Activation::parse(&cfg.hidden_act)?,
            patch_size: p,
            dim0: d0,
        })
    }

    /// Tokens the first stage attends over, per clip: what a clip costs in a batch.
    pub fn tokens_per_clip(&self) -> usize {
        (self.spec.spec_size / self.patch_size).pow(2)
    }

    /// Projected (not normalized) audio embeddings, one per clip.
    pub fn forward(&self, clips: &[AudioFeatures]) -> Result<Vec<Vec<f32>>, ModelError> {
        let (s, p) = (self.spec.spec_size, self.patch_size);
        let g = s / p;
        let b = clips.len();
        let mut data = Vec::with_capacity(b * s * s);
        let mut crops = Vec::new();
        for c in clips {
            data.extend(self.spec.image(c, 0)?);
            if self.fusion.is_some() {
                crops.push(Fusion::crop_images(&self.spec, c)?);
            }
        }
        let dev = self.patch.device().clone();
        let run = || -> candle_core::Result<Vec<Vec<f32>>> {
            let patches =
                Tensor::from_vec(data, (b, g, p, g, p), &dev)?.permute((0, 1, 3, 2, 4))?.reshape((b * g * g, p * p))?;
            let mut x = patches.matmul(&self.patch)?.broadcast_add(&self.patch_bias)?;
            if let Some(fusion) = &self.fusion {
                let mut tokens = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
                for (clip, [c1, c2, c3]) in tokens.chunks_exact_mut(g * g * self.dim0).zip(&crops) {
                    fusion.fuse(clip, [c1, c2, c3]);
                }
                x = Tensor::from_vec(tokens, (b * g * g, self.dim0), &dev)?.to_dtype(x.dtype())?;
            }
            if let Some(norm) = &self.patch_norm {
                x = norm.forward(&x)?;
            }
            let mut x = x.reshape((b, g * g, self.dim0))?;
            for stage in &self.stages {
                for block in &stage.blocks {
                    x = block.forward(&x, stage.side, stage.side, self.act)?;
                }
                if let Some(merge) = &stage.merge {
                    x = merge.forward(&x, stage.side, stage.side)?;
                }
            }
            // The pooled vector is the mean over every token of the final grid.
            let pooled = self.norm.forward(&x)?.mean(1)?;
            self.projection.forward(&pooled)?.to_dtype(DType::F32)?.to_vec2()
        };
        Ok(run()?)
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

/// Both towers of a `ClapModel` checkpoint.
pub struct Clap {
    pub text: ClapText<crate::backend::candle::Candle>,
    pub audio: ClapAudio,
    pub dim: usize,
}

impl Clap {
    pub fn load(vb: VarBuilder, cfg: &ClapConfig) -> Result<Self, ModelError> {
        let proj = vb.pp("audio_projection").pp("linear2").get_unchecked("bias").map_err(weights)?;
        let dim = proj.dim(D::Minus1).map_err(weights)?;
        let act = cfg.audio_config.projection_hidden_act.clone();
        Ok(Clap {
            text: ClapText::load(
                crate::backend::candle::Candle::new(vb.device().clone()),
                vb.pp("text_model"),
                vb.pp("text_projection"),
                &cfg.text_config,
                &act,
            )?,
            audio: ClapAudio::load(vb.pp("audio_model"), vb.pp("audio_projection"), &cfg.audio_config, dim)?,
            dim,
        })
    }
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
