//! From encoded audio bytes to the log-mel features CLAP's audio tower takes, as the model folder's
//! `preprocessor_config.json` (`ClapFeatureExtractor`) describes them.
//!
//! Where Aleph goes past transformers it says so: any sample rate is resampled to the model's
//! (Infinity refuses other rates), channels are averaged to mono, and a clip longer than the window
//! is cut at its centre (transformers cuts at a random offset, which makes embeddings differ from
//! call to call).

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

/// Log-mel features: `[frames][mels]`, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioFeatures {
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
        if cfg.truncation != "rand_trunc" {
            return Err(format!(
                "truncation `{}` (feature fusion) is not supported; CLAP checkpoints without fusion use `rand_trunc`",
                cfg.truncation
            ));
        }
        let padding = match cfg.padding.as_str() {
            "repeatpad" => Padding::RepeatPad,
            "repeat" => Padding::Repeat,
            "pad" => Padding::Pad,
            other => return Err(format!("unknown padding `{other}`")),
        };
        if cfg.hop_length == 0 || cfg.fft_window_size < 2 || cfg.sampling_rate == 0 || cfg.max_length_s == 0 {
            return Err("hop_length, fft_window_size, sampling_rate and max_length_s must be positive".into());
        }
        // Outside fusion CLAP uses librosa's filters: Slaney scale and area normalization.
        let spec = MelSpec::new(&MelParams {
            rate: cfg.sampling_rate,
            n_fft: cfg.fft_window_size,
            hop: cfg.hop_length,
            n_mels: cfg.feature_size,
            fmin: cfg.frequency_min,
            fmax: cfg.frequency_max,
            scale: MelScale::Slaney,
            slaney_norm: true,
        });
        Ok(AudioProcessor {
            rate: cfg.sampling_rate,
            window: cfg.max_length_s * cfg.sampling_rate as usize,
            padding,
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

    /// Decodes, converts to mono at the model's rate, and extracts features.
    pub fn process(&self, bytes: &[u8]) -> Result<AudioFeatures, MediaError> {
        let clip = decode(bytes, &self.limits)?;
        let wave = if clip.rate == self.rate { clip.samples } else { resample(&clip.samples, clip.rate, self.rate) };
        Ok(self.features(&wave))
    }

    /// Features of mono samples already at the model's rate.
    pub fn features(&self, wave: &[f64]) -> AudioFeatures {
        let n = self.window;
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
        let (frames, mels) = self.output_shape();
        AudioFeatures { frames, mels, data: self.spec.log_mel(&fitted) }
    }
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
    fn a_wav_with_a_zero_sample_rate_is_an_error_not_a_panic() {
        // Found by fuzz/audio_decode: symphonia panics building a time base from a zero rate.
        let mut wav = b"RIFF\xa4\x70\0\0WAVEfmt \x10\0\0\0\x01\0\x07\0\0\0\0\0\0\x7d\0\0\x02\0\x10\0".to_vec();
        wav.extend(b"data\x80\x70\0\0\x56\xf7\x58\x04\xf5\xb9\x01\x31\xf1\xff");
        assert!(matches!(decode(&wav, &AudioLimits::default()), Err(MediaError::Decode(_))));
    }
}
