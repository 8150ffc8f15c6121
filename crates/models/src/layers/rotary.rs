//! Rotary position tables. Families compute each row's angles on the host (positions times inverse
//! frequencies, or Qwen2-VL's row and column angles); the backend sees only `cos` and `sin` tables.

use crate::backend::Ops;
use crate::error::ModelError;

/// `1 / θ^(2j / dim)` for `j < dim / 2`, in f32 as transformers computes it.
pub fn inv_freq(theta: f64, dim: usize) -> Vec<f32> {
    let theta = theta as f32;
    (0..dim / 2).map(|j| 1.0 / theta.powf((2 * j) as f32 / dim as f32)).collect()
}

/// GTE's NTK-scaled frequencies (its remote code's `NTKScalingRotaryEmbedding`), in f32 as torch computes them:
/// without `mixed_b`, `1 / (θ·factor)^(2j / dim)` divided by `factor^(2 / dim)`; with `mixed_b = b`, the
/// unscaled frequency `j` divided by `exp(a · (j + 1)^b)` for `a = ln(factor) / (dim / 2)^b`. A factor of at most
/// 1 leaves them as they are (the remote code rescales only past its original length).
pub fn ntk_inv_freq(theta: f64, dim: usize, factor: f64, mixed_b: Option<f64>) -> Vec<f32> {
    if factor <= 1.0 {
        return inv_freq(theta, dim);
    }
    match mixed_b {
        None => {
            let shrink = factor.powf(2.0 / dim as f64) as f32;
            inv_freq(theta * factor, dim).into_iter().map(|f| f / shrink).collect()
        }
        Some(b) => {
            let a = (factor as f32).ln() / (dim as f64 / 2.0).powf(b) as f32;
            let base = inv_freq(theta, dim);
            base.into_iter().enumerate().map(|(j, f)| f / (a * ((j + 1) as f32).powf(b as f32)).exp()).collect()
        }
    }
}

/// Each position's angles `position · inv_freq`: `[positions, inv_freq.len()]`, row-major.
pub fn angles(inv_freq: &[f32], positions: &[u32]) -> Vec<f32> {
    positions.iter().flat_map(|&p| inv_freq.iter().map(move |f| p as f32 * f)).collect()
}

/// `(cos, sin)` of `[rows, cols]` angles, on the backend.
pub fn tables<O: Ops>(o: &O, angles: &[f32], rows: usize, cols: usize) -> Result<(O::T, O::T), ModelError> {
    let cos = o.upload(rows, cols, angles.iter().map(|a| a.cos()).collect())?;
    let sin = o.upload(rows, cols, angles.iter().map(|a| a.sin()).collect())?;
    Ok((cos, sin))
}
