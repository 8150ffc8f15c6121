//! Rational-ratio audio resampling, as `scipy.signal.resample_poly` does it (librosa's "polyphase"
//! method): upsample by `up`, low-pass with a Kaiser-windowed sinc (β = 5, 10 zero crossings per
//! side at the lower rate), downsample by `down`, keeping the output centred on the input.
//! Reproducing a reference resampler keeps audio from other rates comparable against a reference.

/// Resamples `x` from `from` Hz to `to` Hz.
pub fn resample(x: &[f64], from: u32, to: u32) -> Vec<f64> {
    let g = gcd(from as u64, to as u64);
    let (up, down) = ((to as u64 / g) as usize, (from as u64 / g) as usize);
    if up == down || x.is_empty() {
        return x.to_vec();
    }
    let n_in = x.len();
    let n_out = (n_in * up).div_ceil(down);
    let max_rate = up.max(down);
    let half_len = 10 * max_rate;
    let mut h = lowpass(2 * half_len + 1, 1.0 / max_rate as f64);
    h.iter_mut().for_each(|v| *v *= up as f64);
    // Zero-pad the filter so output sample 0 sits on input sample 0.
    let pre_pad = down - half_len % down;
    let pre_remove = (half_len + pre_pad) / down;
    let mut post_pad = 0;
    let out_len = |len_h: usize| ((n_in - 1) * up + len_h - 1) / down + 1;
    while out_len(h.len() + pre_pad + post_pad) < n_out + pre_remove {
        post_pad += 1;
    }
    let mut padded = vec![0.0; pre_pad];
    padded.extend_from_slice(&h);
    padded.extend(std::iter::repeat_n(0.0, post_pad));
    let h = padded;
    // y[k] = Σ_m x[m] · h[k·down − m·up] over the taps that land on input samples.
    (pre_remove..pre_remove + n_out)
        .map(|k| {
            let pos = k * down;
            let m_max = (pos / up).min(n_in - 1);
            let mut acc = 0.0;
            let mut m = m_max as isize;
            while m >= 0 {
                let j = pos - m as usize * up;
                if j >= h.len() {
                    break;
                }
                acc += x[m as usize] * h[j];
                m -= 1;
            }
            acc
        })
        .collect()
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// `scipy.signal.firwin(taps, cutoff, window=("kaiser", 5.0))`: a windowed-sinc low-pass with unit
/// gain at DC; `cutoff` is relative to Nyquist.
fn lowpass(taps: usize, cutoff: f64) -> Vec<f64> {
    let alpha = (taps - 1) as f64 / 2.0;
    let beta = 5.0;
    let i0_beta = bessel_i0(beta);
    let mut h: Vec<f64> = (0..taps)
        .map(|n| {
            let m = n as f64 - alpha;
            let ratio = (n as f64 - alpha) / alpha;
            let window = bessel_i0(beta * (1.0 - ratio * ratio).max(0.0).sqrt()) / i0_beta;
            cutoff * sinc(cutoff * m) * window
        })
        .collect();
    let sum: f64 = h.iter().sum();
    h.iter_mut().for_each(|v| *v /= sum);
    h
}

fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let px = std::f64::consts::PI * x;
        px.sin() / px
    }
}

/// The modified Bessel function of the first kind, order 0, by its power series (exact to f64
/// rounding for the small arguments a Kaiser window uses).
fn bessel_i0(x: f64) -> f64 {
    let q = x * x / 4.0;
    let (mut term, mut sum) = (1.0, 1.0);
    for k in 1..200 {
        term *= q / (k * k) as f64;
        sum += term;
        if term < sum * 1e-17 {
            break;
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_length_and_dc_gain() {
        let x = vec![1.0; 1000];
        let y = resample(&x, 16_000, 48_000);
        assert_eq!(y.len(), 3000);
        // Away from the edges a constant stays constant.
        assert!(y[100..2900].iter().all(|v| (v - 1.0).abs() < 1e-3), "{:?}", &y[100..110]);
        assert_eq!(resample(&x, 48_000, 16_000).len(), 334);
        assert_eq!(resample(&x, 44_100, 48_000).len(), 1089);
        assert_eq!(resample(&x, 8_000, 8_000), x);
    }

    #[test]
    fn bessel_matches_known_values() {
        assert!((bessel_i0(0.0) - 1.0).abs() < 1e-15);
        assert!((bessel_i0(5.0) - 27.239_871_823_604_45).abs() < 1e-10);
    }
}
