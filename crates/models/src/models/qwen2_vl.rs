//! Qwen2-VL and Qwen2.5-VL, as ColQwen2 and ColQwen2.5 run them: the vision tower (patches of two identical
//! frames embedded by a 3-D convolution, 2-D rotary attention, a merger of 2×2 patch blocks into one token)
//! and the Qwen2 decoder (RMS norms, rotary positions, grouped-query causal attention, a SiLU-gated MLP).
//!
//! Qwen2.5-VL's tower has RMS norms, a SiLU-gated MLP with biases, an RMS-normed merger, and attends within
//! windows of `window_size` pixels (whole images on `fullatt_block_indexes`). Its patches are laid out window
//! by window, so a window is a run of rows (a sequence to the attention), and the merged tokens are put back
//! in raster order at the end, as transformers' `window_index` and its inverse do.
//!
//! ColQwen2 hands the decoder embeddings rather than token ids, so transformers gives every token the same
//! position on the three M-RoPE axes (0, 1, 2, …): M-RoPE then equals ordinary RoPE, which this file runs.

use serde::Deserialize;

use crate::backend::{Activation, AttentionSpec, Norm, Ops, Post};
use crate::error::ModelError;
use crate::layers::block::{pre_norm_stack, LayerBuffers, PreNormLayer};
use crate::layers::decoder::DecoderSpec;
use crate::layers::rotary::{inv_freq, tables};
use crate::layers::Positional;
use crate::layers::{Mlp, SelfAttention, Weights};
use crate::media::image::Pixels;

#[derive(Debug, Clone, Deserialize)]
pub struct RopeParameters {
    pub rope_theta: Option<f64>,
    /// transformers 5's name for the rotary variant (`default`, or `mrope` with its sections).
    pub rope_type: Option<String>,
}

/// `Qwen2VLVisionConfig`; hub configs omit what equals the class defaults, so every field has them.
#[derive(Debug, Clone, Deserialize)]
pub struct VisionConfig {
    #[serde(default = "crate::config::n::<32>")]
    pub depth: usize,
    #[serde(default = "crate::config::n::<1280>")]
    pub embed_dim: usize,
    /// Width of the merged tokens (the decoder's hidden size).
    #[serde(default = "crate::config::n::<3584>")]
    pub hidden_size: usize,
    #[serde(default = "crate::config::n::<16>")]
    pub num_heads: usize,
    #[serde(default = "d4f")]
    pub mlp_ratio: f64,
    #[serde(default = "crate::config::n::<14>")]
    pub patch_size: usize,
    #[serde(default = "crate::config::n::<2>")]
    pub temporal_patch_size: usize,
    #[serde(default = "crate::config::n::<2>")]
    pub spatial_merge_size: usize,
    #[serde(default = "crate::config::n::<3>")]
    pub in_channels: usize,
    #[serde(default = "quick_gelu")]
    pub hidden_act: String,
    pub rope_parameters: Option<RopeParameters>,
}

/// `Qwen2_5_VLVisionConfig`: `hidden_size` is the tower's own width here, `out_hidden_size` the merged
/// tokens' (the decoder's).
#[derive(Debug, Clone, Deserialize)]
pub struct Qwen25VisionConfig {
    #[serde(default = "crate::config::n::<32>")]
    pub depth: usize,
    #[serde(default = "crate::config::n::<3584>")]
    pub hidden_size: usize,
    #[serde(default = "silu")]
    pub hidden_act: String,
    #[serde(default = "crate::config::n::<3420>")]
    pub intermediate_size: usize,
    #[serde(default = "crate::config::n::<16>")]
    pub num_heads: usize,
    #[serde(default = "crate::config::n::<3>")]
    pub in_channels: usize,
    #[serde(default = "crate::config::n::<14>")]
    pub patch_size: usize,
    #[serde(default = "crate::config::n::<2>")]
    pub spatial_merge_size: usize,
    #[serde(default = "crate::config::n::<2>")]
    pub temporal_patch_size: usize,
    #[serde(default = "crate::config::n::<112>")]
    pub window_size: usize,
    #[serde(default = "crate::config::n::<3584>")]
    pub out_hidden_size: usize,
    #[serde(default = "full_attention_blocks")]
    pub fullatt_block_indexes: Vec<usize>,
    pub rope_parameters: Option<RopeParameters>,
}

fn full_attention_blocks() -> Vec<usize> {
    vec![7, 15, 23, 31]
}

/// One vision tower's shape, whichever generation's config it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct VisionSpec {
    pub depth: usize,
    /// The tower's width.
    pub width: usize,
    /// The merged tokens' width (the decoder's).
    pub out: usize,
    pub heads: usize,
    pub mlp: usize,
    pub act: String,
    pub patch_size: usize,
    pub temporal_patch_size: usize,
    pub spatial_merge_size: usize,
    pub in_channels: usize,
    pub rope_theta: f64,
    /// Qwen2.5-VL: RMS norms, a gated MLP, and windows of this many merged tokens a side on every block but
    /// the listed ones.
    pub windows: Option<(usize, Vec<usize>)>,
}

impl From<&VisionConfig> for VisionSpec {
    fn from(c: &VisionConfig) -> Self {
        VisionSpec {
            depth: c.depth,
            width: c.embed_dim,
            out: c.hidden_size,
            heads: c.num_heads,
            mlp: (c.embed_dim as f64 * c.mlp_ratio) as usize,
            act: c.hidden_act.clone(),
            patch_size: c.patch_size,
            temporal_patch_size: c.temporal_patch_size,
            spatial_merge_size: c.spatial_merge_size,
            in_channels: c.in_channels,
            rope_theta: c.rope_parameters.as_ref().and_then(|r| r.rope_theta).unwrap_or(10_000.0),
            windows: None,
        }
    }
}

impl Qwen25VisionConfig {
    pub fn spec(&self) -> Result<VisionSpec, ModelError> {
        let unit = self.patch_size * self.spatial_merge_size;
        let window = self.window_size / unit.max(1);
        if window == 0 {
            return Err(ModelError::Unsupported(format!(
                "Qwen2.5-VL window_size {} smaller than a merged token ({unit} pixels)",
                self.window_size
            )));
        }
        Ok(VisionSpec {
            depth: self.depth,
            width: self.hidden_size,
            out: self.out_hidden_size,
            heads: self.num_heads,
            mlp: self.intermediate_size,
            act: self.hidden_act.clone(),
            patch_size: self.patch_size,
            temporal_patch_size: self.temporal_patch_size,
            spatial_merge_size: self.spatial_merge_size,
            in_channels: self.in_channels,
            rope_theta: self.rope_parameters.as_ref().and_then(|r| r.rope_theta).unwrap_or(10_000.0),
            windows: Some((window, self.fullatt_block_indexes.clone())),
        })
    }
}

/// `Qwen2VLTextConfig` (and `Qwen2_5_VLTextConfig`, whose defaults are the same).
#[derive(Debug, Clone, Deserialize)]
pub struct TextConfig {
    #[serde(default = "crate::config::n::<152_064>")]
    pub vocab_size: usize,
    #[serde(default = "crate::config::n::<8192>")]
    pub hidden_size: usize,
    #[serde(default = "crate::config::n::<29_568>")]
    pub intermediate_size: usize,
    #[serde(default = "crate::config::n::<80>")]
    pub num_hidden_layers: usize,
    #[serde(default = "crate::config::n::<64>")]
    pub num_attention_heads: usize,
    #[serde(default = "crate::config::n::<8>")]
    pub num_key_value_heads: usize,
    #[serde(default = "silu")]
    pub hidden_act: String,
    #[serde(default = "crate::config::n::<32_768>")]
    pub max_position_embeddings: usize,
    #[serde(default = "eps")]
    pub rms_norm_eps: f64,
    pub rope_theta: Option<f64>,
    pub rope_parameters: Option<RopeParameters>,
    /// transformers 4's `{"type": "mrope", "mrope_section": [...]}`.
    pub rope_scaling: Option<serde_json::Value>,
}

impl TextConfig {
    /// Multimodal RoPE (`mrope`) is plain RoPE on one position per token, which is what the decoder computes
    /// here; a scaled variant (`yarn`, `dynamic`, `linear`, ...) is refused.
    fn check_rope(&self) -> Result<(), ModelError> {
        let legacy = self.rope_scaling.as_ref().filter(|s| !s.is_null());
        let kind = legacy
            .and_then(|s| s.get("type").or_else(|| s.get("rope_type")).and_then(|t| t.as_str()).map(str::to_string))
            .or_else(|| self.rope_parameters.as_ref().and_then(|r| r.rope_type.clone()));
        match kind.as_deref() {
            None | Some("default") | Some("mrope") => Ok(()),
            Some(other) => Err(ModelError::Unsupported(format!("Qwen2 rope type `{other}` (only default and mrope)"))),
        }
    }
}

fn d4f() -> f64 {
    4.0
}
fn quick_gelu() -> String {
    "quick_gelu".into()
}
fn silu() -> String {
    "silu".into()
}
/// `Qwen2VLTextConfig`'s `rms_norm_eps` (the vision tower's norms use a fixed 1e-6).
fn eps() -> f64 {
    1e-5
}

/// The vision tower's norms use a fixed epsilon.
const VISION_EPS: f64 = 1e-6;

pub struct Qwen2VlVision<O: Ops> {
    patch: O::Linear,
    blocks: Vec<PreNormLayer<O>>,
    /// Qwen2.5-VL: merged tokens a window side, and the blocks that attend over whole images.
    windows: Option<(usize, Vec<usize>)>,
    merge_norm: Norm<O::Param>,
    merge_fc1: O::Linear,
    merge_fc2: O::Linear,
    dim: usize,
    patch_size: usize,
    temporal: usize,
    merge: usize,
    channels: usize,
    /// Per axis (rows, columns): the rotary frequencies of a quarter of each head.
    inv_freq: Vec<f32>,
}

impl<O: Ops> Qwen2VlVision<O> {
    pub fn load(w: &Weights<O>, cfg: &VisionSpec) -> Result<Self, ModelError> {
        let (d, p, t, c) = (cfg.width, cfg.patch_size, cfg.temporal_patch_size, cfg.in_channels);
        let heads = cfg.heads;
        if heads == 0 || !d.is_multiple_of(heads) || !(d / heads).is_multiple_of(4) {
            return Err(ModelError::Unsupported(format!("Qwen2-VL vision width {d} over {heads} heads")));
        }
        let act = Activation::parse(&cfg.act)?;
        let (mlp, windowed) = (cfg.mlp, cfg.windows.is_some());
        let merged = d * cfg.spatial_merge_size * cfg.spatial_merge_size;
        let spec = AttentionSpec::new(d, heads, false);
        // Qwen2.5-VL's norms are RMS norms, Qwen2-VL's layer norms.
        let norm =
            |n: &Weights<O>| if windowed { n.rms_norm(d, VISION_EPS, false) } else { n.layer_norm(d, VISION_EPS) };
        let conv = w.pp("patch_embed").pp("proj");
        let pw = conv.vb().get((d, c, t, p, p), "weight").and_then(|x| x.reshape((d, c * t * p * p)));
        let blocks = (0..cfg.depth)
            .map(|i| {
                let b = w.pp("blocks").pp(i);
                let m = b.pp("mlp");
                Ok(PreNormLayer {
                    norm1: norm(&b.pp("norm1"))?,
                    attention: SelfAttention {
                        qk_norm: None,
                        qkv: b.pp("attn").pp("qkv").linear(d, 3 * d, true)?,
                        out: b.pp("attn").pp("proj").linear(d, d, true)?,
                        spec,
                    },
                    norm2: norm(&b.pp("norm2"))?,
                    mlp: if windowed {
                        Mlp::gated(
                            m.linear_cat(&[("gate_proj", mlp), ("up_proj", mlp)], d, true)?,
                            m.pp("down_proj").linear(mlp, d, true)?,
                            act,
                        )
                    } else {
                        Mlp::plain(m.pp("fc1").linear(d, mlp, true)?, m.pp("fc2").linear(mlp, d, true)?, act)
                    },
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let m = w.pp("merger");
        Ok(Qwen2VlVision {
            patch: conv.linear_from(pw.map_err(crate::error::weights)?, None)?,
            blocks,
            windows: cfg.windows.clone(),
            merge_norm: norm(&m.pp("ln_q"))?,
            merge_fc1: m.pp("mlp").pp(0).linear(merged, merged, true)?,
            merge_fc2: m.pp("mlp").pp(2).linear(merged, cfg.out, true)?,
            dim: d,
            patch_size: p,
            temporal: t,
            merge: cfg.spatial_merge_size,
            channels: c,
            inv_freq: inv_freq(cfg.rope_theta, d / heads / 2),
        })
    }

    /// Side lengths images must be multiples of.
    pub fn factor(&self) -> usize {
        self.patch_size * self.merge
    }

    /// Merged tokens of one image.
    pub fn tokens(&self, img: &Pixels) -> usize {
        (img.height / self.patch_size) * (img.width / self.patch_size) / (self.merge * self.merge)
    }

    /// Merged tokens of every image, packed image after image: `[Σ tokens, hidden]`.
    pub fn forward(&self, o: &O, images: &[Pixels]) -> Result<O::T, ModelError> {
        let (p, m, c, t) = (self.patch_size, self.merge, self.channels, self.temporal);
        let k = c * t * p * p;
        let mut rows = Vec::new();
        let mut rot = Vec::new();
        let mut cu = vec![0usize];
        // Qwen2.5-VL's windows as runs of patch rows, and where each merged token computed (window by window)
        // goes in the raster order the decoder reads.
        let mut cu_windows = vec![0usize];
        let mut raster = Vec::new();
        for img in images {
            if img.height == 0
                || img.width == 0
                || !img.height.is_multiple_of(p * m)
                || !img.width.is_multiple_of(p * m)
                || img.data.len() != c * img.height * img.width
            {
                return Err(ModelError::Forward(format!(
                    "a {}x{} image is not a multiple of {}",
                    img.height,
                    img.width,
                    p * m
                )));
            }
            let (gh, gw) = (img.height / p, img.width / p);
            let (bh, bw) = (gh / m, gw / m);
            let first = raster.len();
            for (by, bx) in self.block_order(bh, bw, &mut cu_windows) {
                raster.push((first + by * bw + bx) as u32);
                // The block's patches in the merger's order, each `[channel][frame][row][col]` with the frame
                // repeated; and each patch's (row, column) angles.
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
                        rot.extend(self.inv_freq.iter().map(|f| y as f32 * f));
                        rot.extend(self.inv_freq.iter().map(|f| x as f32 * f));
                    }
                }
            }
            cu.push(cu[cu.len() - 1] + gh * gw);
        }
        let n = cu[cu.len() - 1];
        let mut x = o.empty()?;
        o.linear_fwd(&o.upload(n, k, rows)?, &self.patch, Post::None, &mut x)?;
        let (cos, sin) = tables(o, &rot, n, 2 * self.inv_freq.len())?;
        let positional = Positional::Rotary(&cos, &sin);
        let whole = o.seqs(&cu)?;
        match &self.windows {
            None => pre_norm_stack(o, &self.blocks, &mut x, &whole, positional)?,
            Some((_, full)) => {
                let windows = o.seqs(&cu_windows)?;
                let mut buffers = LayerBuffers::new(o)?;
                for (i, block) in self.blocks.iter().enumerate() {
                    let seqs = if full.contains(&i) { &whole } else { &windows };
                    block.forward(o, &mut x, seqs, positional, &mut buffers)?;
                }
            }
        }
        o.norm(&mut x, &self.merge_norm)?;
        // Rows are in 2×2-block order, so each block's four rows side by side are one row of the merger.
        o.reshape(&mut x, n / (m * m), self.dim * m * m)?;
        let mut mid = o.empty()?;
        o.linear_fwd(&x, &self.merge_fc1, Post::Act(Activation::GeluErf), &mut mid)?;
        o.linear_fwd(&mid, &self.merge_fc2, Post::None, &mut x)?;
        if self.windows.is_none() {
            return Ok(x);
        }
        let mut back = vec![(0u32, 0u32); raster.len()];
        for (computed, &at) in raster.iter().enumerate() {
            back[at as usize] = (0, computed as u32);
        }
        o.gather_rows(&mut mid, &[&x], &back)?;
        Ok(mid)
    }

    /// The merged blocks of a `bh × bw` grid in the order the tower computes them: raster order, or for
    /// Qwen2.5-VL window after window (raster within each, windows in raster order, the last row and column
    /// of windows partial), each window's patch rows appended to `cu_windows`.
    fn block_order(&self, bh: usize, bw: usize, cu_windows: &mut Vec<usize>) -> Vec<(usize, usize)> {
        let Some((win, _)) = self.windows else {
            return (0..bh).flat_map(|by| (0..bw).map(move |bx| (by, bx))).collect();
        };
        let mut order = Vec::with_capacity(bh * bw);
        for wy in (0..bh).step_by(win) {
            for wx in (0..bw).step_by(win) {
                let (ys, xs) = (wy..(wy + win).min(bh), wx..(wx + win).min(bw));
                let units = ys.len() * xs.len();
                for by in ys {
                    order.extend(xs.clone().map(|bx| (by, bx)));
                }
                cu_windows.push(cu_windows[cu_windows.len() - 1] + units * self.merge * self.merge);
            }
        }
        order
    }
}

impl TextConfig {
    /// The Qwen2 decoder this config describes (causal).
    pub fn decoder(&self) -> Result<DecoderSpec, ModelError> {
        let (h, nh) = (self.hidden_size, self.num_attention_heads);
        if nh == 0 || !h.is_multiple_of(nh) {
            return Err(ModelError::Unsupported(format!("Qwen2 hidden_size {h} over {nh} heads")));
        }
        self.check_rope()?;
        Ok(DecoderSpec {
            vocab: self.vocab_size,
            hidden: h,
            intermediate: self.intermediate_size,
            layers: self.num_hidden_layers,
            heads: nh,
            kv_heads: self.num_key_value_heads,
            head_dim: h / nh,
            act: Activation::parse(&self.hidden_act)?,
            qkv_bias: true,
            eps: self.rms_norm_eps,
            qk_norm: false,
            norm_plus_one: false,
            causal: true,
            window: None,
            rope_theta: self.rope_parameters.as_ref().and_then(|r| r.rope_theta).or(self.rope_theta).unwrap_or(1e6),
            embed_scale: None,
            attn_scale: None,
            sandwich: false,
            local: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_rotary_variants_are_refused() {
        let cfg = |json: &str| serde_json::from_str::<TextConfig>(json).unwrap();
        assert!(cfg(r#"{"rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}"#).check_rope().is_ok());
        assert!(cfg(r#"{"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}"#).check_rope().is_ok());
        for bad in
            [r#"{"rope_scaling": {"type": "yarn", "factor": 4.0}}"#, r#"{"rope_parameters": {"rope_type": "dynamic"}}"#]
        {
            let err = cfg(bad).check_rope().unwrap_err().to_string();
            assert!(err.contains("rope type"), "{bad}: {err}");
        }
    }
}
