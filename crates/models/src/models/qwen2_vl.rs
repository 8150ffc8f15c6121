//! Qwen2-VL, as ColQwen2 runs it: the vision tower (patches of two identical frames embedded by a 3-D
//! convolution, 2-D rotary attention over the whole image, a merger of 2×2 patch blocks into one token) and
//! the Qwen2 decoder (RMS norms, rotary positions, grouped-query causal attention, a SiLU-gated MLP).
//!
//! ColQwen2 hands the decoder embeddings rather than token ids, so transformers gives every token the same
//! position on the three M-RoPE axes (0, 1, 2, …): M-RoPE then equals ordinary RoPE, which this file runs.

use serde::Deserialize;

use crate::backend::{Activation, AttentionSpec, Norm, Ops, Post};
use crate::error::ModelError;
use crate::layers::block::{pre_norm_stack, PreNormLayer};
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

/// `Qwen2VLTextConfig`.
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
    pub fn load(w: &Weights<O>, cfg: &VisionConfig) -> Result<Self, ModelError> {
        let (d, p, t, c) = (cfg.embed_dim, cfg.patch_size, cfg.temporal_patch_size, cfg.in_channels);
        let heads = cfg.num_heads;
        if heads == 0 || !d.is_multiple_of(heads) || !(d / heads).is_multiple_of(4) {
            return Err(ModelError::Unsupported(format!("Qwen2-VL vision width {d} over {heads} heads")));
        }
        let act = Activation::parse(&cfg.hidden_act)?;
        let mlp = (d as f64 * cfg.mlp_ratio) as usize;
        let merged = d * cfg.spatial_merge_size * cfg.spatial_merge_size;
        let spec = AttentionSpec::new(d, heads, false);
        let conv = w.pp("patch_embed").pp("proj");
        let pw = conv.vb().get((d, c, t, p, p), "weight").and_then(|x| x.reshape((d, c * t * p * p)));
        let blocks = (0..cfg.depth)
            .map(|i| {
                let b = w.pp("blocks").pp(i);
                Ok(PreNormLayer {
                    norm1: b.pp("norm1").layer_norm(d, VISION_EPS)?,
                    attention: SelfAttention {
                        qk_norm: None,
                        qkv: b.pp("attn").pp("qkv").linear(d, 3 * d, true)?,
                        out: b.pp("attn").pp("proj").linear(d, d, true)?,
                        spec,
                    },
                    norm2: b.pp("norm2").layer_norm(d, VISION_EPS)?,
                    mlp: Mlp::plain(
                        b.pp("mlp").pp("fc1").linear(d, mlp, true)?,
                        b.pp("mlp").pp("fc2").linear(mlp, d, true)?,
                        act,
                    ),
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let m = w.pp("merger");
        let theta = cfg.rope_parameters.as_ref().and_then(|r| r.rope_theta).unwrap_or(10_000.0);
        Ok(Qwen2VlVision {
            patch: conv.linear_from(pw.map_err(crate::error::weights)?, None)?,
            blocks,
            merge_norm: m.pp("ln_q").layer_norm(d, VISION_EPS)?,
            merge_fc1: m.pp("mlp").pp(0).linear(merged, merged, true)?,
            merge_fc2: m.pp("mlp").pp(2).linear(merged, cfg.hidden_size, true)?,
            dim: d,
            patch_size: p,
            temporal: t,
            merge: cfg.spatial_merge_size,
            channels: c,
            inv_freq: inv_freq(theta, d / heads / 2),
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
            // Patches in 2×2-block order (the merger's), each `[channel][frame][row][col]` with the frame
            // repeated; and each patch's (row, column) angles.
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
                            rot.extend(self.inv_freq.iter().map(|f| y as f32 * f));
                            rot.extend(self.inv_freq.iter().map(|f| x as f32 * f));
                        }
                    }
                }
            }
            cu.push(cu[cu.len() - 1] + gh * gw);
        }
        let n = cu[cu.len() - 1];
        let mut x = o.empty()?;
        o.linear_fwd(&o.upload(n, k, rows)?, &self.patch, Post::None, &mut x)?;
        let (cos, sin) = tables(o, &rot, n, 2 * self.inv_freq.len())?;
        pre_norm_stack(o, &self.blocks, &mut x, &o.seqs(&cu)?, Positional::Rotary(&cos, &sin))?;
        o.norm(&mut x, &self.merge_norm)?;
        // Rows are in 2×2-block order, so each block's four rows side by side are one row of the merger.
        o.reshape(&mut x, n / (m * m), self.dim * m * m)?;
        let mut mid = o.empty()?;
        o.linear_fwd(&x, &self.merge_fc1, Post::Act(Activation::GeluErf), &mut mid)?;
        o.linear_fwd(&mid, &self.merge_fc2, Post::None, &mut x)?;
        Ok(x)
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
