//! From encoded audio bytes to the log-mel features CLAP's audio tower takes, as the model folder's
//! `preprocessor_config.json` (`ClapFeatureExtractor`) describes them.
//!
//! Where Aleph goes past transformers it says so: any sample rate is resampled to the model's
//! (Infinity refuses other rates), channels are averaged to mono, and where transformers draws at
//! random Aleph takes the middle, so a clip's embedding is the same on every call: a clip longer than
//! the window is cut at its centre (`rand_trunc`), and feature fusion's three crops are the middle
//! offsets of their thirds (`fusion`).

use std::io::Cursor;
use std::path::Path;

use serde::Deserialize;
use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::DecoderOptions;
use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

use super::mel::{MelParams, MelScale, MelSpec};
use super::resample_poly::resample;
use super::MediaError;
use crate::error::{read_json, ModelError};

/// `preprocessor_config.json` of `ClapFeatureExtractor`.
#[derive(Debug, Clone, Deserialize)]
struct ExtractorConfig {
    #[serde(default = "default_mels")]
    feature_size: usize,
    #[serde(default = "default_rate")]
    sampling_rate: u32,
    #[serde(default = "default_hop")]
    hop_length: usize,
    #[serde(default = "default_seconds")]
    max_length_s: usize,
    #[serde(default = "default_fft")]
    fft_window_size: usize,
    #[serde(default)]
    frequency_min: f64,
    #[serde(default = "default_fmax")]
    frequency_max: f64,
    #[serde(default = "default_truncation")]
    truncation: String,
    #[serde(default = "default_padding")]
    padding: String,
}

fn default_mels() -> usize {
    64
}
fn default_rate() -> u32 {
    48_000
}
fn default_hop() -> usize {
    480
}
fn default_seconds() -> usize {
    10
}
fn default_fft() -> usize {
    1024
}
fn default_fmax() -> f64 {
    14_000.0
}
fn default_truncation() -> String {
    "fusion".into()
}
fn default_padding() -> String {
    "repeatpad".into()
}

/// How a clip shorter than the window is filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Padding {
    /// Repeat whole copies, then zeros.
    RepeatPad,
    /// Repeat, cut at the window.
    Repeat,
    /// Zeros.
    Pad,
}

/// How a clip longer than the window is brought to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Truncation {
    /// One window of the waveform (transformers: at random; Aleph: the centre).
    RandTrunc,
    /// Four spectrograms for CLAP's feature fusion: the whole clip's squeezed to the window's frame count,
    /// then three window-long crops from the front, middle and back thirds.
    Fusion,
}

/// Log-mel features: `[channels][frames][mels]`, row-major. One channel, or four with feature fusion.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioFeatures {
    pub channels: usize,
    pub frames: usize,
    pub mels: usize,
    pub data: Vec<f32>,
}

/// Limits on a client's clip.
#[derive(Debug, Clone, Copy)]
pub struct AudioLimits {
    /// Longest clip decoded, in seconds; longer ones are refused before they fill memory.
    pub max_seconds: f64,
}

impl Default for AudioLimits {
    fn default() -> Self {
        AudioLimits { max_seconds: 600.0 }
    }
}

#[derive(Debug, Clone)]
pub struct AudioProcessor {
    rate: u32,
    window: usize,
    padding: Padding,
    truncation: Truncation,
    spec: MelSpec,
    limits: AudioLimits,
}

impl AudioProcessor {
    pub fn from_dir(dir: &Path) -> Result<Self, ModelError> {
        let path = dir.join("preprocessor_config.json");
        let cfg: ExtractorConfig = read_json(&path)?;
        Self::new(cfg).map_err(|reason| ModelError::BadFile { path, reason })
    }

    fn new(cfg: ExtractorConfig) -> Result<Self, String> {
        let truncation = match cfg.truncation.as_str() {
            "rand_trunc" => Truncation::RandTrunc,
            "fusion" => Truncation::Fusion,
            other => return Err(format!("unknown truncation `{other}`")),
        };
        let padding = match cfg.padding.as_str() {
            "repeatpad" => Padding::RepeatPad,
            "repeat" => Padding::Repeat,
            "pad" => Padding::Pad,
            other => return Err(format!("unknown padding `{other}`")),
        };
        if cfg.hop_length == 0 || cfg.fft_window_size < 2 || cfg.sampling_rate == 0 || cfg.max_length_s == 0 {
            return Err("hop_length, fft_window_size, sampling_rate and max_length_s must be positive".into());
        }
        // Outside fusion CLAP uses librosa's filters (Slaney scale, area-normalized), with fusion
        // torchaudio's (HTK scale, unnormalized), as the original training code did.
        let fusion = truncation == Truncation::Fusion;
        let spec = MelSpec::new(&MelParams {
            rate: cfg.sampling_rate,
            n_fft: cfg.fft_window_size,
            hop: cfg.hop_length,
            n_mels: cfg.feature_size,
            fmin: cfg.frequency_min,
            fmax: cfg.frequency_max,
            scale: if fusion { MelScale::Htk } else { MelScale::Slaney },
            slaney_norm: !fusion,
        });
        Ok(AudioProcessor {
            rate: cfg.sampling_rate,
            window: cfg.max_length_s * cfg.sampling_rate as usize,
            padding,
            truncation,
            spec,
            limits: AudioLimits::default(),
        })
    }

    pub fn with_limits(mut self, limits: AudioLimits) -> Self {
        self.limits = limits;
        self
    }

    pub fn sampling_rate(&self) -> u32 {
        self.rate
    }

    /// `(frames, mels)` of every feature matrix.
    pub fn output_shape(&self) -> (usize, usize) {
        (self.spec.frames(self.window), self.spec.n_mels)
    }

    /// Whether features come as the four spectrograms of feature fusion.
    pub fn fusion(&self) -> bool {
        self.truncation == Truncation::Fusion
    }

    /// Decodes, converts to mono at the model's rate, and extracts features.
    pub fn process(&self, bytes: &[u8]) -> Result<AudioFeatures, MediaError> {
        let clip = decode(bytes, &self.limits)?;
        let wave = if clip.rate == self.rate { clip.samples } else { resample(&clip.samples, clip.rate, self.rate) };
        Ok(self.features(&wave))
    }

    /// Features of mono samples already at the model's rate.
    pub fn features(&self, wave: &[f64]) -> AudioFeatures {
        let n = self.window;
        let (frames, mels) = self.output_shape();
        if self.fusion() && wave.len() > n {
            let whole = self.spec.log_mel(wave);
            let total = whole.len() / mels;
            // Longer by less than a hop, the whole clip's spectrogram is window-long: used as is.
            let data = if total == frames { whole.repeat(4) } else { fusion_channels(&whole, total, frames, mels) };
            return AudioFeatures { channels: 4, frames, mels, data };
        }
        let fitted: Vec<f64> = if wave.len() > n {
            let start = (wave.len() - n) / 2;
            wave[start..start + n].to_vec()
        } else if wave.is_empty() {
            vec![0.0; n]
        } else {
            let mut v = match self.padding {
                Padding::RepeatPad => wave.repeat(n / wave.len()),
                Padding::Repeat => wave.repeat(n / wave.len() + 1),
                Padding::Pad => wave.to_vec(),
            };
            v.resize(n, 0.0);
            v
        };
        let mel = self.spec.log_mel(&fitted);
        if self.fusion() {
            // A clip that fits the window: its spectrogram in all four channels.
            AudioFeatures { channels: 4, frames, mels, data: mel.repeat(4) }
        } else {
            AudioFeatures { channels: 1, frames, mels, data: mel }
        }
    }
}

/// Feature fusion's four channels from the spectrogram of a clip longer than the window (`total` >
/// `frames` rows): the whole spectrogram squeezed to `frames` rows (bilinear, as torch's `interpolate`
/// with `align_corners=False`), then one `frames`-long crop from each third of the possible offsets.
/// transformers draws each offset at random within its third; Aleph takes the middle one.
fn fusion_channels(mel: &[f32], total: usize, frames: usize, mels: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(4 * frames * mels);
    // torch computes the source row in f32: (dst + 0.5) · in / out − 0.5, clamped at 0.
    let scale = total as f32 / frames as f32;
    for t in 0..frames {
        let src = ((t as f32 + 0.5) * scale - 0.5).max(0.0);
        let lo = src as usize;
        let hi = if lo + 1 < total { lo + 1 } else { lo };
        let (w1, w0) = (src - lo as f32, 1.0 - (src - lo as f32));
        let (a, b) = (&mel[lo * mels..][..mels], &mel[hi * mels..][..mels]);
        out.extend(a.iter().zip(b).map(|(a, b)| w0 * a + w1 * b));
    }
    for start in crop_starts(total - frames + 1) {
        out.extend_from_slice(&mel[start * mels..(start + frames) * mels]);
    }
    out
}

/// The middle offset of each third of `0..n` (numpy's `array_split` into three; an empty third falls
/// back to offset 0, as transformers does).
fn crop_starts(n: usize) -> [usize; 3] {
    let (base, extra) = (n / 3, n % 3);
    let mut starts = [0; 3];
    let mut first = 0;
    for (i, start) in starts.iter_mut().enumerate() {
        let len = base + usize::from(i < extra);
        *start = if len == 0 { 0 } else { first + len / 2 };
        first += len;
    }
    starts
}

/// A decoded clip: mono samples in [-1, 1] at `rate` Hz.
#[derive(Debug, Clone, PartialEq)]
pub struct Clip {
    pub rate: u32,
    pub samples: Vec<f64>,
}

/// Decodes WAV, FLAC, MP3 or OGG/Vorbis and averages the channels.
///
/// A decoder that panics on a malformed file (symphonia does on a WAV header with a zero sample rate,
/// found by fuzzing) is the file's fault: the panic becomes a decode error.
pub fn decode(bytes: &[u8], limits: &AudioLimits) -> Result<Clip, MediaError> {
    std::panic::catch_unwind(|| decode_unguarded(bytes, limits))
        .unwrap_or_else(|_| Err(MediaError::Decode("the audio file is malformed".into())))
}

fn decode_unguarded(bytes: &[u8], limits: &AudioLimits) -> Result<Clip, MediaError> {
    let bad = |e: SymphoniaError| match e {
        SymphoniaError::Unsupported(what) => MediaError::Unsupported(format!("unsupported audio: {what}")),
        other => MediaError::Decode(format!("cannot decode the audio: {other}")),
    };
    let stream = MediaSourceStream::new(Box::new(Cursor::new(bytes.to_vec())), Default::default());
    let probed = symphonia::default::get_probe()
        .format(&Hint::new(), stream, &FormatOptions::default(), &MetadataOptions::default())
        .map_err(|e| match e {
            // The prober reads until it recognizes a container: running out of bytes means none.
            SymphoniaError::Unsupported(_) | SymphoniaError::IoError(_) => {
                MediaError::Unsupported("not a WAV, FLAC, MP3 or OGG audio file".into())
            }
            other => bad(other),
        })?;
    let mut format = probed.format;
    let track =
        format.default_track().ok_or_else(|| MediaError::Decode("the audio file has no audio track".into()))?.clone();
    let rate = track.codec_params.sample_rate.ok_or_else(|| MediaError::Decode("no sample rate".into()))?;
    if rate == 0 || rate > 768_000 {
        return Err(MediaError::Decode(format!("implausible sample rate {rate} Hz")));
    }
    let mut decoder =
        symphonia::default::get_codecs().make(&track.codec_params, &DecoderOptions::default()).map_err(bad)?;
    let max_samples = (limits.max_seconds * rate as f64) as usize;
    let mut samples = Vec::new();
    loop {
        let packet = match format.next_packet() {
            Ok(p) => p,
            Err(SymphoniaError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(bad(e)),
        };
        if packet.track_id() != track.id {
            continue;
        }
        let decoded = match decoder.decode(&packet) {
            Ok(d) => d,
            // A corrupt packet: skip it, as players do; an empty result is refused below.
            Err(SymphoniaError::DecodeError(_)) => continue,
            Err(e) => return Err(bad(e)),
        };
        let channels = decoded.spec().channels.count().max(1);
        let mut buf = SampleBuffer::<f32>::new(decoded.capacity() as u64, *decoded.spec());
        buf.copy_interleaved_ref(decoded);
        for frame in buf.samples().chunks_exact(channels) {
            samples.push(frame.iter().map(|&s| s as f64).sum::<f64>() / channels as f64);
        }
        if samples.len() > max_samples {
            return Err(MediaError::TooLarge(format!(
                "the clip is longer than {} s; the limit is {} s",
                limits.max_seconds, limits.max_seconds
            )));
        }
    }
    if samples.is_empty() {
        return Err(MediaError::Decode("the audio file holds no samples".into()));
    }
    Ok(Clip { rate, samples })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusion_crops_are_the_middles_of_numpys_three_way_split() {
        // np.array_split(range(111), 3) → 37 + 37 + 37; range(8) → 3 + 3 + 2; range(2) → 1 + 1 + 0.
        assert_eq!(crop_starts(111), [18, 55, 92]);
        assert_eq!(crop_starts(8), [1, 4, 7]);
        assert_eq!(crop_starts(2), [0, 1, 0]);
    }

    #[test]
    fn a_wav_with_a_zero_sample_rate_is_an_error_not_a_panic() {
        // Found by fuzz/audio_decode: symphonia panics building a time base from a zero rate.
        let mut wav = b"RIFF\xa4\x70\0\0WAVEfmt \x10\0\0\0\x01\0\x07\0\0\0\0\0\0\x7d\0\0\x02\0\x10\0".to_vec();
        wav.extend(b"data\x80\x70\0\0\x56\xf7\x58\x04\xf5\xb9\x01\x31\xf1\xff");
        assert!(matches!(decode(&wav, &AudioLimits::default()), Err(MediaError::Decode(_))));
    }
}
