//! CLAP's feature fusion (`enable_fusion`), shared by both backends.
//!
//! With fusion the features hold four spectrograms: the whole clip squeezed to the window, then three
//! window-long crops. HTSAT embeds the first into patch tokens as usual; a wider convolution
//! (`mel_conv2d`, three times the patch width and stride) embeds the crops side by side, and an
//! attentional feature fusion block (AFF) blends the two token grids before the first Swin stage.
//!
//! transformers runs the crop path only for clips it marks `is_longer`, and when no clip in a batch is,
//! marks one at random. Called on a single clip it therefore always runs it; Aleph does the same for
//! every clip, so an embedding does not depend on the clips it was batched with.

use candle_nn::VarBuilder;

use super::htsat::{AudioConfig, SpecImage};
use crate::error::ModelError;
use crate::media::audio::AudioFeatures;

/// `conv 1×1 → batch norm → ReLU → conv 1×1 → batch norm` over channels, the eval-mode norms folded
/// into the convolutions: one of AFF's two attention branches.
struct Gate {
    /// `[channels][mid]`.
    w1: Vec<f32>,
    b1: Vec<f32>,
    /// `[mid][channels]`.
    w2: Vec<f32>,
    b2: Vec<f32>,
}

/// A 1×1 convolution followed by eval-mode batch norm, as one affine map: weights `[in][out]`.
fn conv_bn(conv: VarBuilder, bn: VarBuilder, inp: usize, out: usize) -> candle_core::Result<(Vec<f32>, Vec<f32>)> {
    let get = |vb: &VarBuilder, shape: &[usize], name: &str| -> candle_core::Result<Vec<f32>> {
        vb.get(shape, name)?.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1()
    };
    let w = get(&conv, &[out, inp, 1, 1], "weight")?;
    let b = get(&conv, &[out], "bias")?;
    let (gamma, beta) = (get(&bn, &[out], "weight")?, get(&bn, &[out], "bias")?);
    let (mean, var) = (get(&bn, &[out], "running_mean")?, get(&bn, &[out], "running_var")?);
    // BatchNorm2d's eps is 1e-5.
    let scale: Vec<f32> = gamma.iter().zip(&var).map(|(g, v)| g / (v + 1e-5).sqrt()).collect();
    let mut wt = vec![0f32; inp * out];
    for o in 0..out {
        for i in 0..inp {
            wt[i * out + o] = w[o * inp + i] * scale[o];
        }
    }
    let bias = (0..out).map(|o| scale[o] * (b[o] - mean[o]) + beta[o]).collect();
    Ok((wt, bias))
}

/// `out = bias + x · w` for one row `x` and `w` stored `[x.len()][out.len()]`.
fn affine(x: &[f32], w: &[f32], bias: &[f32], out: &mut [f32]) {
    out.copy_from_slice(bias);
    for (xi, row) in x.iter().zip(w.chunks_exact(out.len())) {
        for (o, wv) in out.iter_mut().zip(row) {
            *o += xi * wv;
        }
    }
}

impl Gate {
    /// `convs` and `norms` are the Sequential's indices of the two convolutions and batch norms.
    fn load(vb: VarBuilder, convs: [usize; 2], norms: [usize; 2], c: usize, mid: usize) -> candle_core::Result<Self> {
        let (w1, b1) = conv_bn(vb.pp(convs[0]), vb.pp(norms[0]), c, mid)?;
        let (w2, b2) = conv_bn(vb.pp(convs[1]), vb.pp(norms[1]), mid, c)?;
        Ok(Gate { w1, b1, w2, b2 })
    }

    fn apply(&self, x: &[f32], mid: &mut [f32], out: &mut [f32]) {
        affine(x, &self.w1, &self.b1, mid);
        mid.iter_mut().for_each(|v| *v = v.max(0.0));
        affine(mid, &self.w2, &self.b2, out);
    }
}

pub(crate) struct Fusion {
    patch: usize,
    side: usize,
    dim: usize,
    /// `mel_conv2d` as `[patch · 3·patch][dim]`.
    conv: Vec<f32>,
    conv_bias: Vec<f32>,
    local: Gate,
    global: Gate,
    mid: usize,
}

impl Fusion {
    /// The fusion weights under `patch_embed`; `patch` is the (square) patch size and stride.
    pub fn load(pe: VarBuilder, cfg: &AudioConfig, patch: usize) -> candle_core::Result<Self> {
        let dim = cfg.patch_embeds_hidden_size;
        let mid = dim / cfg.aff_block_r.max(1);
        let k = patch * 3 * patch;
        let w = pe.pp("mel_conv2d").get((dim, 1, patch, 3 * patch), "weight")?;
        let w: Vec<f32> = w.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1()?;
        let mut conv = vec![0f32; k * dim];
        for o in 0..dim {
            for i in 0..k {
                conv[i * dim + o] = w[o * k + i];
            }
        }
        let conv_bias = pe.pp("mel_conv2d").get(dim, "bias")?.to_dtype(candle_core::DType::F32)?.to_vec1()?;
        let aff = pe.pp("fusion_model");
        Ok(Fusion {
            patch,
            side: cfg.spec_size,
            dim,
            conv,
            conv_bias,
            local: Gate::load(aff.pp("local_att"), [0, 3], [1, 4], dim, mid)?,
            global: Gate::load(aff.pp("global_att"), [1, 4], [2, 5], dim, mid)?,
            mid,
        })
    }

    /// The three crop images of a clip's fusion features (channels 1 to 3).
    pub fn crop_images(spec: &SpecImage, f: &AudioFeatures) -> Result<[Vec<f32>; 3], ModelError> {
        if f.channels != 4 {
            return Err(ModelError::Forward(format!(
                "this CLAP model fuses four spectrograms per clip; the features hold {}",
                f.channels
            )));
        }
        Ok([spec.image(f, 1)?, spec.image(f, 2)?, spec.image(f, 3)?])
    }

    /// Blends one clip's crop path into its patch tokens. `tokens`: the whole spectrogram's patch
    /// embeddings, `[grid²][dim]` row by row (before the patch layer norm), rewritten in place; `crops`:
    /// the three crop images, `side²` each.
    pub fn fuse(&self, tokens: &mut [f32], crops: [&[f32]; 3]) {
        let (p, side, dim) = (self.patch, self.side, self.dim);
        let grid = side / p;
        // mel_conv2d's output width per crop; the three are laid side by side and zero-padded to the grid.
        let width = if side >= 3 * p { (side - 3 * p) / (3 * p) + 1 } else { 0 };
        let mut local = vec![0f32; grid * grid * dim];
        let mut patch = vec![0f32; 3 * p * p];
        for y in 0..grid {
            for x in 0..grid.min(3 * width) {
                let (crop, cx) = (crops[x / width], x % width);
                for ky in 0..p {
                    patch[ky * 3 * p..(ky + 1) * 3 * p]
                        .copy_from_slice(&crop[(y * p + ky) * side + cx * 3 * p..][..3 * p]);
                }
                affine(&patch, &self.conv, &self.conv_bias, &mut local[(y * grid + x) * dim..][..dim]);
            }
        }
        // AFF: weights from the sum's per-token (local) and per-clip (global) attention branches.
        let sum: Vec<f32> = tokens.iter().zip(&local).map(|(a, b)| a + b).collect();
        let mut mean = vec![0f32; dim];
        for row in sum.chunks_exact(dim) {
            mean.iter_mut().zip(row).for_each(|(m, v)| *m += v);
        }
        let n = (grid * grid) as f32;
        mean.iter_mut().for_each(|m| *m /= n);
        let mut mid = vec![0f32; self.mid];
        let mut clip_gate = vec![0f32; dim];
        self.global.apply(&mean, &mut mid, &mut clip_gate);
        let mut gate = vec![0f32; dim];
        for ((tok, res), s) in tokens.chunks_exact_mut(dim).zip(local.chunks_exact(dim)).zip(sum.chunks_exact(dim)) {
            self.local.apply(s, &mut mid, &mut gate);
            for (((t, r), g), cg) in tok.iter_mut().zip(res).zip(&gate).zip(&clip_gate) {
                let w = 1.0 / (1.0 + (-(g + cg)).exp());
                *t = 2.0 * *t * w + 2.0 * r * (1.0 - w);
            }
        }
    }
}
