//! Element-wise and row kernels of the encoder (GELU, layer norm, softmax), written as plain loops that
//! the compiler vectorizes, compiled once per instruction set and picked at run time.

use super::Isa;

/// `dst += src`, element-wise.
#[inline(always)]
pub fn add_assign(dst: &mut [f32], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += s;
    }
}

/// Sums with 16 independent lanes, so the loop vectorizes without reassociating one running sum.
#[inline(always)]
fn lane_sum(x: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0f32; 16];
    let chunks = x.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..16 {
            acc[i] += f(c[i]);
        }
    }
    acc.iter().sum::<f32>() + rest.iter().map(|&v| f(v)).sum::<f32>()
}

#[inline(always)]
fn lane_max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 16];
    let chunks = x.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..16 {
            acc[i] = max_fast(acc[i], c[i]);
        }
    }
    acc.iter().chain(rest).copied().fold(f32::NEG_INFINITY, max_fast)
}

/// `max` as one compare-and-select (`vmaxps`); `f32::max`'s NaN rule costs extra instructions per lane.
/// Rows holding NaN produce NaN downstream either way.
#[inline(always)]
fn max_fast(a: f32, b: f32) -> f32 {
    if b > a {
        b
    } else {
        a
    }
}

#[inline(always)]
fn min_fast(a: f32, b: f32) -> f32 {
    if b < a {
        b
    } else {
        a
    }
}

/// `e^x` to about 1 ulp-scale relative error (Cephes' polynomial after range reduction), branch-free.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 88.0);
    let k = (x * LOG2E + 0.5).floor();
    let r = x - k * LN2_HI - k * LN2_LO;
    let mut p = 1.987_569_1e-4_f32;
    p = p * r + 1.398_2e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    e * pow2i(k)
}

/// `2^k` for an integral `k` in [-127, 128]: adding 2^23 + 127 puts `k + 127` in the low mantissa bits, and
/// shifting them into the exponent field builds the power. Unlike `k as i32` (a saturating conversion that
/// compiles to scalar code per lane), this stays in vector registers.
#[inline(always)]
fn pow2i(k: f32) -> f32 {
    f32::from_bits((k + (8_388_608.0 + 127.0)).to_bits() << 23)
}

/// `x` (integral, in [0, 255]) as a byte, by the same mantissa trick as [`pow2i`], which vectorizes where
/// `x as u8` does not.
#[inline(always)]
fn small_int_to_u8(x: f32) -> u8 {
    (x + 8_388_608.0).to_bits() as u8
}

/// `erf(x)` as an odd/even rational function of `x` on [-4, 4] (the single-precision minimax fit used by
/// XLA and Eigen), ±1 beyond: no `exp`, one division, so it vectorizes to a few FMAs.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10_f32;
    for c in [2.770_681_4e-8, -2.101_024e-6, -5.692_506_4e-5, -7.349_906_3e-4, -2.954_6e-3, -1.609_603_3e-2] {
        p = p * x2 + c;
    }
    let mut q = -1.456_607_2e-5_f32;
    for c in [-2.133_740_5e-4, -1.682_827e-3, -7.373_329e-3, -1.426_473_9e-2] {
        q = q * x2 + c;
    }
    x * p / q
}

#[inline(always)]
pub(crate) fn gelu_erf_body(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = 0.5 * *v * (1.0 + erf(*v * std::f32::consts::FRAC_1_SQRT_2));
    }
}

#[inline(always)]
fn gelu_tanh_body(x: &mut [f32]) {
    const C: f32 = 0.797_884_6; // sqrt(2/pi)
    for v in x.iter_mut() {
        let u = C * (*v + 0.044_715 * *v * *v * *v);
        let tanh = 1.0 - 2.0 / (exp(2.0 * u) + 1.0);
        *v = 0.5 * *v * (1.0 + tanh);
    }
}

/// OpenAI CLIP's `x · sigmoid(1.702 x)`.
#[inline(always)]
fn quick_gelu_body(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v /= 1.0 + exp(-1.702 * *v);
    }
}

/// `x · sigmoid(x)` (SiLU, swish).
#[inline(always)]
fn silu_body(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v /= 1.0 + exp(-*v);
    }
}

/// `tanh(x) = 1 − 2 / (e^{2x} + 1)`, saturating cleanly at ±1.
#[inline(always)]
fn tanh_body(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = 1.0 - 2.0 / (exp(2.0 * *v) + 1.0);
    }
}

/// `max(x, 0)`; compare-and-select, so NaN stays NaN as in torch.
#[inline(always)]
fn relu_body(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = if *v < 0.0 { 0.0 } else { *v };
    }
}

#[inline(always)]
fn layer_norm_body(x: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
    let n = x.len() as f32;
    let mean = lane_sum(x, |v| v) / n;
    let var = lane_sum(x, |v| (v - mean) * (v - mean)) / n;
    let rstd = 1.0 / (var + eps).sqrt();
    for ((v, g), b) in x.iter_mut().zip(gamma).zip(beta) {
        *v = (*v - mean) * rstd * g + b;
    }
}

/// `x / rms(x) · gamma` (RMSNorm).
#[inline(always)]
fn rms_norm_body(x: &mut [f32], gamma: &[f32], eps: f32) {
    let n = x.len() as f32;
    let ms = lane_sum(x, |v| v * v) / n;
    let r = 1.0 / (ms + eps).sqrt();
    for (v, g) in x.iter_mut().zip(gamma) {
        *v = *v * r * g;
    }
}

/// `dst *= src`, element by element (a gated MLP's gate times its up projection).
#[inline(always)]
fn mul_body(dst: &mut [f32], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d *= s;
    }
}

#[inline(always)]
fn softmax_body(x: &mut [f32], scale: f32) {
    let max = lane_max(x);
    for v in x.iter_mut() {
        *v = exp((*v - max) * scale);
    }
    let inv = 1.0 / lane_sum(x, |v| v);
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// One key block of an online softmax: `x = e^(x·scale − shift)` in place, adding the new values to `sum`.
#[inline(always)]
fn exp_block_body(x: &mut [f32], scale: f32, shift: f32, sum: &mut f32) {
    for v in x.iter_mut() {
        *v = exp(*v * scale - shift);
    }
    *sum += lane_sum(x, |v| v);
}

/// The largest element (`-inf` for none).
pub fn row_max(x: &[f32]) -> f32 {
    lane_max(x)
}

/// Quantizes a row to u8 codes `0..=top` over its own `[min, max]` (asymmetric): `x ≈ scale · (q − zero)`.
/// Writes `q` into `out` and returns `(scale, zero)`.
#[inline(always)]
fn quantize_row_body(x: &[f32], out: &mut [u8], top: f32) -> (f32, i32) {
    let mut lo = [0f32; 16];
    let mut hi = [0f32; 16];
    let chunks = x.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..16 {
            lo[i] = min_fast(lo[i], c[i]);
            hi[i] = max_fast(hi[i], c[i]);
        }
    }
    // The range always holds 0, so zero is exactly representable (padding and masked values stay 0).
    let min = lo.iter().chain(rest).copied().fold(0f32, min_fast);
    let max = hi.iter().chain(rest).copied().fold(0f32, max_fast);
    let scale = if max > min { (max - min) / top } else { 1.0 };
    let zero = (-min / scale).round() as i32;
    let inv = 1.0 / scale;
    let z = zero as f32;
    for (o, v) in out.iter_mut().zip(x) {
        let q = *v * inv + z + 0.5;
        *o = small_int_to_u8(q.clamp(0.0, top).floor());
    }
    (scale, zero)
}

/// Compiles each body once per instruction set; `dispatch!` picks one at run time.
macro_rules! versions {
    ($($name:ident($($arg:ident: $ty:ty),*) => $body:ident;)*) => {
        #[cfg(target_arch = "x86_64")]
        mod avx512 {
            #[allow(unused_imports)]
            use super::*;
            $(
                /// # Safety
                /// The CPU has these features (the slices bound every access).
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma")]
                pub unsafe fn $name($($arg: $ty),*) { $body($($arg),*) }
            )*
        }
        #[cfg(target_arch = "x86_64")]
        mod avx2 {
            #[allow(unused_imports)]
            use super::*;
            $(
                /// # Safety
                /// The CPU has these features (the slices bound every access).
                #[target_feature(enable = "avx2,fma")]
                pub unsafe fn $name($($arg: $ty),*) { $body($($arg),*) }
            )*
        }
        $(
            pub fn $name(isa: Isa, $($arg: $ty),*) {
                match isa.usable() {
                    // SAFETY: `usable` never answers a set wider than the CPU has.
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 => unsafe { avx512::$name($($arg),*) },
                    // SAFETY: as above.
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 => unsafe { avx2::$name($($arg),*) },
                    _ => $body($($arg),*),
                }
            }
        )*
    };
}

versions! {
    gelu_erf(x: &mut [f32]) => gelu_erf_body;
    gelu_tanh(x: &mut [f32]) => gelu_tanh_body;
    quick_gelu(x: &mut [f32]) => quick_gelu_body;
    silu(x: &mut [f32]) => silu_body;
    relu(x: &mut [f32]) => relu_body;
    tanh(x: &mut [f32]) => tanh_body;
    layer_norm(x: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) => layer_norm_body;
    rms_norm(x: &mut [f32], gamma: &[f32], eps: f32) => rms_norm_body;
    mul(dst: &mut [f32], src: &[f32]) => mul_body;
    softmax(x: &mut [f32], scale: f32) => softmax_body;
    exp_block(x: &mut [f32], scale: f32, shift: f32, sum: &mut f32) => exp_block_body;
    add(dst: &mut [f32], src: &[f32]) => add_assign;
}

/// [`quantize_row_body`] for the running CPU.
pub fn quantize_row(isa: Isa, x: &[f32], out: &mut [u8], top: u8) -> (f32, i32) {
    /// # Safety
    /// The CPU has these features.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma")]
    unsafe fn wide(x: &[f32], out: &mut [u8], top: f32) -> (f32, i32) {
        quantize_row_body(x, out, top)
    }
    /// # Safety
    /// The CPU has these features.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn narrow(x: &[f32], out: &mut [u8], top: f32) -> (f32, i32) {
        quantize_row_body(x, out, top)
    }
    let top = top as f32;
    match isa.usable() {
        // SAFETY: `usable` never answers a set wider than the CPU has.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { wide(x, out, top) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { narrow(x, out, top) },
        _ => quantize_row_body(x, out, top),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_and_erf_are_accurate() {
        for i in -800..=800 {
            let x = i as f32 / 10.0;
            let want = (x as f64).exp();
            let got = exp(x) as f64;
            assert!(((got - want) / want).abs() < 3e-7, "exp({x}): {got} vs {want}");
        }
        for i in -600..=600 {
            let x = i as f64 / 100.0;
            let want = libm_erf(x);
            let got = erf(x as f32) as f64;
            assert!((got - want).abs() < 5e-7, "erf({x}): {got} vs {want}");
        }
    }

    /// erf by its Taylor series / continued fraction, in f64, as the reference.
    fn libm_erf(x: f64) -> f64 {
        if x.abs() < 3.0 {
            let mut sum = 0.0;
            let mut term = x;
            let mut n = 0.0;
            while term.abs() > 1e-17 {
                sum += term / (2.0 * n + 1.0);
                n += 1.0;
                term *= -x * x / n;
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        } else {
            // erfc continued fraction
            let a = x.abs();
            let mut f = 0.0;
            for k in (1..60).rev() {
                f = (k as f64 / 2.0) / (a + f);
            }
            let erfc = (-a * a).exp() / (std::f64::consts::PI.sqrt() * (a + f));
            (1.0 - erfc).copysign(x)
        }
    }

    #[test]
    fn kernels_agree_across_instruction_sets() {
        let base: Vec<f32> = (0..301).map(|i| ((i * 37 % 101) as f32 - 50.0) / 13.0).collect();
        let gamma: Vec<f32> = (0..301).map(|i| 1.0 + i as f32 / 1000.0).collect();
        let beta: Vec<f32> = (0..301).map(|i| i as f32 / 500.0).collect();
        for isa in [Isa::get(), Isa::Scalar] {
            let mut g = base.clone();
            gelu_erf(isa, &mut g);
            for (x, y) in base.iter().zip(&g) {
                let want = 0.5 * *x as f64 * (1.0 + libm_erf(*x as f64 / 2f64.sqrt()));
                assert!((*y as f64 - want).abs() < 1e-6, "{isa:?} gelu({x})");
            }
            let mut s = base.clone();
            softmax(isa, &mut s, 0.5);
            assert!((s.iter().sum::<f32>() - 1.0).abs() < 1e-5);
            let mut ln = base.clone();
            layer_norm(isa, &mut ln, &gamma, &beta, 1e-12);
            let mean: f64 = base.iter().map(|&v| v as f64).sum::<f64>() / 301.0;
            let var: f64 = base.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / 301.0;
            for i in 0..301 {
                let want = (base[i] as f64 - mean) / var.sqrt() * gamma[i] as f64 + beta[i] as f64;
                assert!((ln[i] as f64 - want).abs() < 1e-5, "{isa:?} ln[{i}]");
            }
        }
    }
}
