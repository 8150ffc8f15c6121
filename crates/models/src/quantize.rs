//! Output quantization (`--embedding-dtype`), as sentence-transformers' `quantize_embeddings` (and so
//! Infinity) defines it. int8 / uint8 need per-dimension ranges, measured on a calibration corpus that
//! ships inside the binary, so this works offline.

use std::str::FromStr;

/// The calibration corpus: varied text (prose, questions, code, numbers, 30 languages, reviews), written
/// for Aleph.
pub const CALIBRATION_TEXT: &str = include_str!("../assets/calibration.txt");

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmbeddingDtype {
    #[default]
    Float32,
    Int8,
    Uint8,
    /// Sign bits packed 8 per byte, each byte as `byte - 128`.
    Binary,
    /// Sign bits packed 8 per byte.
    Ubinary,
}

impl FromStr for EmbeddingDtype {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "float32" | "f32" => Ok(Self::Float32),
            "int8" => Ok(Self::Int8),
            "uint8" => Ok(Self::Uint8),
            "binary" => Ok(Self::Binary),
            "ubinary" => Ok(Self::Ubinary),
            other => Err(format!("unknown embedding dtype `{other}` (float32, int8, uint8, binary, ubinary)")),
        }
    }
}

impl EmbeddingDtype {
    pub fn name(self) -> &'static str {
        match self {
            Self::Float32 => "float32",
            Self::Int8 => "int8",
            Self::Uint8 => "uint8",
            Self::Binary => "binary",
            Self::Ubinary => "ubinary",
        }
    }

    /// Whether the output is bit-packed (8 dimensions per value).
    pub fn packed(self) -> bool {
        matches!(self, Self::Binary | Self::Ubinary)
    }

    pub fn needs_calibration(self) -> bool {
        matches!(self, Self::Int8 | Self::Uint8)
    }
}

/// Per-dimension `[min, max]` of the calibration embeddings.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    min: Vec<f32>,
    max: Vec<f32>,
}

impl Calibration {
    pub fn from_vectors(vectors: &[Vec<f32>]) -> Option<Self> {
        let dim = vectors.first()?.len();
        let mut min = vec![f32::INFINITY; dim];
        let mut max = vec![f32::NEG_INFINITY; dim];
        for v in vectors {
            for (d, x) in v.iter().enumerate().take(dim) {
                min[d] = min[d].min(*x);
                max[d] = max[d].max(*x);
            }
        }
        Some(Calibration { min, max })
    }
}

/// Quantizes `v` (already cut to the requested dimensions). Values come back as f32 holding
/// integers, as Infinity renders them. int8 / uint8: 256 buckets between each dimension's calibration
/// min and max, values outside clamped (sentence-transformers ≥ 5).
pub fn quantize(dtype: EmbeddingDtype, v: &[f32], calibration: Option<&Calibration>) -> Vec<f32> {
    match dtype {
        EmbeddingDtype::Float32 => v.to_vec(),
        EmbeddingDtype::Int8 | EmbeddingDtype::Uint8 => {
            let shift = if dtype == EmbeddingDtype::Int8 { 128.0 } else { 0.0 };
            v.iter()
                .enumerate()
                .map(|(d, &x)| {
                    let (min, max) = calibration.map(|c| (c.min[d], c.max[d])).unwrap_or((-1.0, 1.0));
                    let step = (max - min) / 255.0;
                    let step = if step == 0.0 { 1.0 } else { step };
                    ((x - min) / step).floor().clamp(0.0, 255.0) - shift
                })
                .collect()
        }
        EmbeddingDtype::Binary | EmbeddingDtype::Ubinary => v
            .chunks(8)
            .map(|bits| {
                // numpy's packbits: the first dimension is the most significant bit.
                let byte = bits.iter().enumerate().fold(0u32, |acc, (i, &x)| acc | (((x > 0.0) as u32) << (7 - i)));
                if dtype == EmbeddingDtype::Binary {
                    byte as f32 - 128.0
                } else {
                    byte as f32
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_packs_sign_bits_msb_first() {
        let v = [0.5, -1.0, 0.1, 0.0, 2.0, 3.0, -0.5, 1.0, 0.7];
        // bits 1 0 1 0 1 1 0 1 = 0b10101101 = 173; then 1 → 0b10000000 = 128
        assert_eq!(quantize(EmbeddingDtype::Ubinary, &v, None), vec![173.0, 128.0]);
        assert_eq!(quantize(EmbeddingDtype::Binary, &v, None), vec![45.0, 0.0]);
    }

    #[test]
    fn int8_and_uint8_follow_the_calibration_range() {
        let cal = Calibration::from_vectors(&[vec![-1.0, 0.0], vec![1.0, 2.0]]).unwrap();
        // dim 0: min -1, step 2/255; x = 0 → floor(127.5) = 127 → int8 -1. dim 1: x = max gives 254.99998
        // in f32 (as in numpy's float32 arithmetic), so 254.
        assert_eq!(quantize(EmbeddingDtype::Uint8, &[0.0, 2.0], Some(&cal)), vec![127.0, 254.0]);
        assert_eq!(quantize(EmbeddingDtype::Int8, &[0.0, 2.0], Some(&cal)), vec![-1.0, 126.0]);
        assert_eq!(quantize(EmbeddingDtype::Int8, &[-5.0, 9.0], Some(&cal)), vec![-128.0, 127.0], "clamped");
    }

    #[test]
    fn corpus_ships() {
        assert!(CALIBRATION_TEXT.lines().count() >= 150);
    }
}
