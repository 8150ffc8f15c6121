//! Log-mel spectrograms as transformers' `audio_utils.spectrogram` computes them: centred frames
//! (reflect padding), a periodic Hann window, a real FFT rounded to complex64 as numpy stores it,
//! power, a triangular mel filter bank, and decibels.

use std::sync::Arc;

use realfft::{RealFftPlanner, RealToComplex};

/// The mel frequency scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MelScale {
    Htk,
    Slaney,
}

fn hertz_to_mel(f: f64, scale: MelScale) -> f64 {
    match scale {
        MelScale::Htk => 2595.0 * (1.0 + f / 700.0).log10(),
        MelScale::Slaney => {
            let logstep = 27.0 / 6.4f64.ln();
            if f >= 1000.0 {
                15.0 + (f / 1000.0).ln() * logstep
            } else {
                3.0 * f / 200.0
            }
        }
    }
}

fn mel_to_hertz(m: f64, scale: MelScale) -> f64 {
    match scale {
        MelScale::Htk => 700.0 * (10f64.powf(m / 2595.0) - 1.0),
        MelScale::Slaney => {
            let logstep = 6.4f64.ln() / 27.0;
            if m >= 15.0 {
                1000.0 * (logstep * (m - 15.0)).exp()
            } else {
                200.0 * m / 3.0
            }
        }
    }
}

/// numpy's `linspace`: `start + i * step`, with the last point exactly `stop`.
fn linspace(start: f64, stop: f64, n: usize) -> Vec<f64> {
    let step = (stop - start) / (n - 1) as f64;
    let mut v: Vec<f64> = (0..n).map(|i| start + i as f64 * step).collect();
    v[n - 1] = stop;
    v
}

/// How a spectrogram is computed.
#[derive(Debug, Clone, Copy)]
pub struct MelParams {
    pub rate: u32,
    pub n_fft: usize,
    pub hop: usize,
    pub n_mels: usize,
    pub fmin: f64,
    pub fmax: f64,
    pub scale: MelScale,
    /// Divide each triangle by its width (librosa's default, and CLAP's outside fusion).
    pub slaney_norm: bool,
}

/// A planned spectrogram: filters, window and FFT.
#[derive(Clone)]
pub struct MelSpec {
    pub n_fft: usize,
    pub hop: usize,
    pub n_mels: usize,
    /// `[n_fft / 2 + 1][n_mels]`, row-major.
    filters: Vec<f64>,
    window: Vec<f64>,
    fft: Arc<dyn RealToComplex<f64>>,
}

impl MelSpec {
    pub fn new(p: &MelParams) -> Self {
        let MelParams { rate, n_fft, hop, n_mels, fmin, fmax, scale, slaney_norm } = *p;
        let bins = n_fft / 2 + 1;
        let fft_freqs = linspace(0.0, (rate / 2) as f64, bins);
        let mels = linspace(hertz_to_mel(fmin, scale), hertz_to_mel(fmax, scale), n_mels + 2);
        let f: Vec<f64> = mels.iter().map(|&m| mel_to_hertz(m, scale)).collect();
        let mut filters = vec![0.0; bins * n_mels];
        for (i, &freq) in fft_freqs.iter().enumerate() {
            for j in 0..n_mels {
                let down = -(f[j] - freq) / (f[j + 1] - f[j]);
                let up = (f[j + 2] - freq) / (f[j + 2] - f[j + 1]);
                let mut w = down.min(up).max(0.0);
                if slaney_norm {
                    w *= 2.0 / (f[j + 2] - f[j]);
                }
                filters[i * n_mels + j] = w;
            }
        }
        // np.hanning(n + 1)[:-1]: the periodic Hann window.
        let window =
            (0..n_fft).map(|k| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * k as f64 / n_fft as f64).cos()).collect();
        let fft = RealFftPlanner::<f64>::new().plan_fft_forward(n_fft);
        MelSpec { n_fft, hop, n_mels, filters, window, fft }
    }

    /// Frames for `samples` input samples.
    pub fn frames(&self, samples: usize) -> usize {
        1 + samples / self.hop
    }

    /// `[frames][n_mels]` log-mel values in dB (power, floor 1e-10), row-major.
    pub fn log_mel(&self, wave: &[f64]) -> Vec<f32> {
        let half = self.n_fft / 2;
        let padded = reflect_pad(wave, half);
        let frames = 1 + (padded.len() - self.n_fft) / self.hop;
        let bins = self.n_fft / 2 + 1;
        let mut input = self.fft.make_input_vec();
        let mut spectrum = self.fft.make_output_vec();
        let mut power = vec![0.0f64; bins];
        let mut out = Vec::with_capacity(frames * self.n_mels);
        for t in 0..frames {
            let frame = &padded[t * self.hop..t * self.hop + self.n_fft];
            for ((dst, &x), &w) in input.iter_mut().zip(frame).zip(&self.window) {
                *dst = x * w;
            }
            // A length mismatch cannot happen: the buffers come from the same plan.
            if self.fft.process(&mut input, &mut spectrum).is_err() {
                out.extend(std::iter::repeat_n(-100.0, self.n_mels));
                continue;
            }
            for (p, c) in power.iter_mut().zip(&spectrum) {
                // numpy keeps the spectrum as complex64.
                let (re, im) = (c.re as f32 as f64, c.im as f32 as f64);
                *p = re * re + im * im;
            }
            for j in 0..self.n_mels {
                let mut acc = 0.0;
                for (i, p) in power.iter().enumerate() {
                    acc += self.filters[i * self.n_mels + j] * p;
                }
                out.push((10.0 * acc.max(1e-10).log10()) as f32);
            }
        }
        out
    }
}

impl std::fmt::Debug for MelSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MelSpec {{ n_fft: {}, hop: {}, n_mels: {} }}", self.n_fft, self.hop, self.n_mels)
    }
}

/// numpy's `pad(mode="reflect")`: mirrored around the edge samples, which are not repeated.
fn reflect_pad(x: &[f64], pad: usize) -> Vec<f64> {
    let n = x.len();
    let at = |i: isize| -> f64 {
        if n == 1 {
            return x[0];
        }
        let period = 2 * (n as isize - 1);
        let mut k = i.rem_euclid(period);
        if k >= n as isize {
            k = period - k;
        }
        x[k as usize]
    };
    (-(pad as isize)..(n + pad) as isize).map(at).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflect_padding_mirrors_without_the_edge() {
        assert_eq!(reflect_pad(&[1.0, 2.0, 3.0, 4.0], 2), vec![3.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 2.0]);
    }

    #[test]
    fn mel_scales_round_trip() {
        for scale in [MelScale::Htk, MelScale::Slaney] {
            for f in [0.0, 50.0, 999.0, 1000.0, 14_000.0] {
                assert!((mel_to_hertz(hertz_to_mel(f, scale), scale) - f).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn a_tone_peaks_in_its_mel_band() {
        let spec = MelSpec::new(&MelParams {
            rate: 16_000,
            n_fft: 512,
            hop: 160,
            n_mels: 40,
            fmin: 0.0,
            fmax: 8000.0,
            scale: MelScale::Slaney,
            slaney_norm: true,
        });
        let wave: Vec<f64> =
            (0..16_000).map(|i| (2.0 * std::f64::consts::PI * 1000.0 * i as f64 / 16_000.0).sin()).collect();
        let mel = spec.log_mel(&wave);
        assert_eq!(mel.len(), spec.frames(wave.len()) * 40);
        let frame = &mel[40 * 50..40 * 51];
        let peak = frame.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
        let band = |j: usize| {
            let mels = linspace(hertz_to_mel(0.0, MelScale::Slaney), hertz_to_mel(8000.0, MelScale::Slaney), 42);
            mel_to_hertz(mels[j + 1], MelScale::Slaney)
        };
        assert!((band(peak) - 1000.0).abs() < 150.0, "peak at {} Hz", band(peak));
    }
}
