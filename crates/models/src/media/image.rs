//! From encoded image bytes to the pixel tensor a vision tower takes, as `preprocessor_config.json`
//! describes it: decode, RGB (transparency composited onto white), resize, center crop, rescale,
//! normalize. Each step matches transformers' PIL image processor.

use std::io::Cursor;
use std::path::Path;

use image::{DynamicImage, ImageReader, Limits};
use serde::Deserialize;

use super::resample::{resize, Filter, Rgb8};
use super::MediaError;
use crate::error::{read_json, ModelError};

/// The smallest image accepted on either side (Infinity's rule).
pub const MIN_SIDE: u32 = 3;

/// `preprocessor_config.json` of an image processor.
#[derive(Debug, Clone, Deserialize)]
struct ProcessorConfig {
    #[serde(default = "yes")]
    do_resize: bool,
    #[serde(default)]
    size: Size,
    #[serde(default = "bicubic")]
    resample: u32,
    #[serde(default = "yes")]
    do_center_crop: bool,
    crop_size: Option<Size>,
    #[serde(default = "yes")]
    do_rescale: bool,
    #[serde(default = "one_over_255")]
    rescale_factor: f64,
    #[serde(default = "yes")]
    do_normalize: bool,
    #[serde(default = "openai_mean")]
    image_mean: Vec<f32>,
    #[serde(default = "openai_std")]
    image_std: Vec<f32>,
    /// Dynamic resolution (Qwen2-VL): sides are rounded to multiples of `patch_size · merge_size`.
    patch_size: Option<u32>,
    merge_size: Option<u32>,
    /// Older spellings of the dynamic size's bounds.
    min_pixels: Option<u64>,
    max_pixels: Option<u64>,
}

fn yes() -> bool {
    true
}
fn bicubic() -> u32 {
    3
}
fn one_over_255() -> f64 {
    1.0 / 255.0
}
fn openai_mean() -> Vec<f32> {
    vec![0.481_454_66, 0.457_827_5, 0.408_210_73]
}
// OpenAI's published values, verbatim; they round to f32 as transformers' float32 arrays do.
#[allow(clippy::excessive_precision)]
fn openai_std() -> Vec<f32> {
    vec![0.268_629_54, 0.261_302_58, 0.275_777_11]
}

/// A target size: `{"shortest_edge": n}`, `{"height": h, "width": w}`, or a bare number (a square); or, for
/// dynamic resolution, bounds on the pixel count (`{"shortest_edge": min, "longest_edge": max}`, as
/// transformers names them for Qwen2-VL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
enum Size {
    Area { shortest_edge: u64, longest_edge: u64 },
    ShortestEdge { shortest_edge: u32 },
    Exact { height: u32, width: u32 },
    Square(u32),
}

impl Default for Size {
    fn default() -> Self {
        Size::ShortestEdge { shortest_edge: 224 }
    }
}

impl Size {
    /// `(width, height)` for an input of `w × h`.
    fn resolve(self, w: u32, h: u32) -> (u32, u32) {
        match self {
            Size::Exact { height, width } => (width, height),
            // Resolved per image by `smart_resize`; (0, 0) marks it.
            Size::Area { .. } => (0, 0),
            Size::Square(s) => (s, s),
            Size::ShortestEdge { shortest_edge: s } => {
                // transformers: the long side is `int(s * long / short)`, in floating point.
                let (short, long) = if w <= h { (w, h) } else { (h, w) };
                let new_long = (s as f64 * long as f64 / short as f64) as u32;
                if w <= h {
                    (s, new_long)
                } else {
                    (new_long, s)
                }
            }
        }
    }
}

/// Normalized pixels, channels first: `[3, height, width]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Pixels {
    pub height: usize,
    pub width: usize,
    pub data: Vec<f32>,
}

/// Limits on what a client's image may cost before it is decoded.
#[derive(Debug, Clone, Copy)]
pub struct ImageLimits {
    /// Most pixels (width × height) an image may declare.
    pub max_pixels: u64,
}

impl Default for ImageLimits {
    fn default() -> Self {
        // 64 megapixels: a 8000 × 8000 photo; a "zip bomb" header declaring more is refused unread.
        ImageLimits { max_pixels: 64 << 20 }
    }
}

#[derive(Debug, Clone)]
pub struct ImageProcessor {
    cfg: ProcessorConfig,
    filter: Filter,
    /// The `(width, height)` the vision tower expects.
    output: (u32, u32),
    limits: ImageLimits,
}

impl ImageProcessor {
    /// Reads `preprocessor_config.json` in `dir`.
    /// Reads `preprocessor_config.json`, or the `image_processor` section of `processor_config.json`
    /// (where transformers 5 saves it).
    pub fn from_dir(dir: &Path) -> Result<Self, ModelError> {
        let path = dir.join("preprocessor_config.json");
        let combined = dir.join("processor_config.json");
        let cfg: ProcessorConfig = if path.exists() || !combined.exists() {
            read_json(&path)?
        } else {
            let all: serde_json::Value = read_json(&combined)?;
            let section = all.get("image_processor").cloned().ok_or_else(|| ModelError::MissingFile(path.clone()))?;
            serde_json::from_value(section)
                .map_err(|e| ModelError::BadFile { path: combined.clone(), reason: e.to_string() })?
        };
        Self::new(cfg).map_err(|reason| ModelError::BadFile { path, reason })
    }

    fn new(mut cfg: ProcessorConfig) -> Result<Self, String> {
        if let (Some(min), Some(max)) = (cfg.min_pixels, cfg.max_pixels) {
            cfg.size = Size::Area { shortest_edge: min, longest_edge: max };
        }
        let filter = Filter::from_pil(cfg.resample).ok_or_else(|| format!("unknown resample {}", cfg.resample))?;
        if cfg.image_mean.len() != 3 || cfg.image_std.len() != 3 || cfg.image_std.contains(&0.0) {
            return Err("image_mean and image_std need three values, std non-zero".into());
        }
        let output = match (cfg.do_center_crop, cfg.crop_size, cfg.size) {
            (true, Some(crop), _) => crop.resolve(1, 1),
            (_, _, Size::ShortestEdge { .. }) if cfg.do_resize => {
                return Err("a shortest-edge resize without a center crop gives images of varying size".into())
            }
            (_, _, size) => size.resolve(1, 1),
        };
        Ok(ImageProcessor { cfg, filter, output, limits: ImageLimits::default() })
    }

    pub fn with_limits(mut self, limits: ImageLimits) -> Self {
        self.limits = limits;
        self
    }

    /// `(width, height)` of every tensor this processor returns; `(0, 0)` when it varies by image
    /// (dynamic resolution).
    pub fn output_size(&self) -> (usize, usize) {
        (self.output.0 as usize, self.output.1 as usize)
    }

    /// `(width, height)` of the largest tensor this processor returns (a square image at the pixel bound,
    /// for dynamic resolution): what a warm-up should run.
    pub fn largest_output(&self) -> (usize, usize) {
        match self.dynamic() {
            Some((factor, min, max)) => {
                let side = (max as f64).sqrt() as usize;
                let (h, w) = smart_resize(side, side, factor, min, max);
                (w, h)
            }
            None => self.output_size(),
        }
    }

    /// For dynamic resolution: what sides are multiples of, and the bounds on pixels per image.
    pub fn dynamic(&self) -> Option<(u32, u64, u64)> {
        match self.cfg.size {
            Size::Area { shortest_edge, longest_edge } => {
                let factor = self.cfg.patch_size.unwrap_or(14) * self.cfg.merge_size.unwrap_or(2);
                Some((factor, shortest_edge, longest_edge))
            }
            _ => None,
        }
    }

    /// Decodes and preprocesses one image.
    pub fn process(&self, bytes: &[u8]) -> Result<Pixels, MediaError> {
        let rgb = decode_rgb(bytes, &self.limits)?;
        if self.dynamic().is_some() {
            let (long, short) = (rgb.width.max(rgb.height), rgb.width.min(rgb.height));
            if long > 200 * short {
                return Err(MediaError::Unsupported(format!(
                    "the image is {}x{}; its aspect ratio must be under 200",
                    rgb.width, rgb.height
                )));
            }
        }
        Ok(self.process_rgb(&rgb))
    }

    /// Preprocesses an already decoded image.
    pub fn process_rgb(&self, img: &Rgb8) -> Pixels {
        let cfg = &self.cfg;
        let resized;
        let dynamic = self.dynamic().map(|(factor, min, max)| smart_resize(img.height, img.width, factor, min, max));
        let img = if let Some((h, w)) = dynamic.filter(|_| cfg.do_resize) {
            resized = resize(img, w, h, self.filter);
            &resized
        } else if cfg.do_resize {
            let (w, h) = cfg.size.resolve(img.width as u32, img.height as u32);
            resized = resize(img, w as usize, h as usize, self.filter);
            &resized
        } else {
            img
        };
        let (ow, oh) = if dynamic.is_some() { (img.width, img.height) } else { self.output_size() };
        // Center crop (or zero-pad, as transformers does when the image is smaller), then to
        // channels-first floats.
        let top = floor_half(img.height as i64 - oh as i64);
        let left = floor_half(img.width as i64 - ow as i64);
        let mut data = vec![0f32; 3 * oh * ow];
        for ch in 0..3 {
            let mean = cfg.image_mean[ch];
            let std = cfg.image_std[ch];
            for y in 0..oh {
                for x in 0..ow {
                    let (sy, sx) = (y as i64 + top, x as i64 + left);
                    let p = if sy >= 0 && sx >= 0 && (sy as usize) < img.height && (sx as usize) < img.width {
                        img.data[(sy as usize * img.width + sx as usize) * 3 + ch]
                    } else {
                        0
                    };
                    // transformers rescales in f64 and casts to f32, then normalizes in f32.
                    let mut v = if cfg.do_rescale { (p as f64 * cfg.rescale_factor) as f32 } else { p as f32 };
                    if cfg.do_normalize {
                        v = (v - mean) / std;
                    }
                    data[(ch * oh + y) * ow + x] = v;
                }
            }
        }
        Pixels { height: oh, width: ow, data }
    }
}

/// Qwen2-VL's `smart_resize`: `(height, width)` rounded to multiples of `factor` (half to even, as Python's
/// `round`), then scaled, keeping the aspect ratio, into `[min_pixels, max_pixels]`.
fn smart_resize(height: usize, width: usize, factor: u32, min_pixels: u64, max_pixels: u64) -> (usize, usize) {
    let f = factor.max(1) as f64;
    let (h, w) = (height as f64, width as f64);
    let mut hb = (h / f).round_ties_even() * f;
    let mut wb = (w / f).round_ties_even() * f;
    if hb * wb > max_pixels as f64 {
        let beta = (h * w / max_pixels as f64).sqrt();
        hb = f.max((h / beta / f).floor() * f);
        wb = f.max((w / beta / f).floor() * f);
    } else if hb * wb < min_pixels as f64 {
        let beta = (min_pixels as f64 / (h * w)).sqrt();
        hb = (h * beta / f).ceil() * f;
        wb = (w * beta / f).ceil() * f;
    }
    (hb as usize, wb as usize)
}

/// `n // 2` rounding toward negative infinity, as Python does.
fn floor_half(n: i64) -> i64 {
    n.div_euclid(2)
}

/// Decodes PNG, JPEG, WebP, GIF or BMP into 8-bit RGB, compositing transparency onto white. A panic in
/// a decoder is the file's fault and comes back as a decode error.
pub fn decode_rgb(bytes: &[u8], limits: &ImageLimits) -> Result<Rgb8, MediaError> {
    std::panic::catch_unwind(|| decode_unguarded(bytes, limits))
        .unwrap_or_else(|_| Err(MediaError::Decode("the image file is malformed".into())))
}

fn decode_unguarded(bytes: &[u8], limits: &ImageLimits) -> Result<Rgb8, MediaError> {
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| MediaError::Decode(format!("cannot read the image: {e}")))?;
    if reader.format().is_none() {
        return Err(MediaError::Unsupported("not a PNG, JPEG, WebP, GIF or BMP image".into()));
    }
    let (w, h) = reader.into_dimensions().map_err(|e| MediaError::Decode(format!("cannot read the image: {e}")))?;
    if w < MIN_SIDE || h < MIN_SIDE {
        return Err(MediaError::TooSmall(format!("the image is {w}x{h}; both sides must be at least {MIN_SIDE} px")));
    }
    if w as u64 * h as u64 > limits.max_pixels {
        return Err(MediaError::TooLarge(format!(
            "the image declares {w}x{h} = {} pixels; the limit is {}",
            w as u64 * h as u64,
            limits.max_pixels
        )));
    }
    let mut reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| MediaError::Decode(format!("cannot read the image: {e}")))?;
    let mut l = Limits::default();
    l.max_image_width = Some(w);
    l.max_image_height = Some(h);
    // Decoded RGBA at 16 bits per channel, and some slack for the decoder's own buffers.
    l.max_alloc = Some(w as u64 * h as u64 * 8 + (16 << 20));
    reader.limits(l);
    let img = reader.decode().map_err(|e| MediaError::Decode(format!("cannot decode the image: {e}")))?;
    Ok(to_rgb(img))
}

fn to_rgb(img: DynamicImage) -> Rgb8 {
    let (width, height) = (img.width() as usize, img.height() as usize);
    if !img.color().has_alpha() {
        return Rgb8 { width, height, data: img.into_rgb8().into_raw() };
    }
    composite_on_white(width, height, &img.into_rgba8().into_raw())
}

/// RGBA to RGB over a white background, as transformers' `convert_to_rgb` does.
pub fn composite_on_white(width: usize, height: usize, rgba: &[u8]) -> Rgb8 {
    let data = rgba.chunks_exact(4).flat_map(|p| over_white(p[3], [p[0], p[1], p[2]])).collect();
    Rgb8 { width, height, data }
}

/// Pillow's `alpha_composite` of a pixel onto opaque white, in its fixed-point arithmetic.
fn over_white(alpha: u8, rgb: [u8; 3]) -> [u8; 3] {
    if alpha == 0 {
        return [255; 3];
    }
    const SHIFT: u32 = 7;
    let a = alpha as u32;
    let coef1 = a << SHIFT;
    let coef2 = (255 - a) << SHIFT;
    let div255 = |v: u32| ((v >> 8) + v) >> 8;
    rgb.map(|c| (div255(c as u32 * coef1 + 255 * coef2 + (0x80 << SHIFT)) >> SHIFT) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smart_resize_matches_qwen2_vl() {
        // (height, width, factor, min, max) → transformers' smart_resize, computed with transformers 5.24.
        let cases = [
            ((20, 23, 8, 256, 1536), (16, 24)), // 2.5 rounds to 2, as Python's round does
            ((48, 64, 8, 256, 1536), (32, 40)), // over the pixel bound: scaled down
            ((75, 41, 8, 256, 1536), (48, 24)),
            ((1000, 1000, 28, 3136, 1_003_520), (980, 980)),
            ((3, 600, 28, 3136, 1_003_520), (28, 812)),
            ((2000, 3000, 28, 3136, 1_003_520), (812, 1204)),
            ((10, 10, 28, 3136, 1_003_520), (56, 56)), // under the bound: scaled up
            ((42, 70, 28, 3136, 1_003_520), (56, 56)),
        ];
        for ((h, w, f, min, max), want) in cases {
            assert_eq!(smart_resize(h, w, f, min, max), want, "{h}x{w}");
        }
    }

    #[test]
    fn dynamic_resolution_sizes_each_image_and_refuses_extreme_aspect_ratios() {
        let cfg = r#"{"size": {"shortest_edge": 256, "longest_edge": 1536}, "patch_size": 4, "merge_size": 2}"#;
        let p = ImageProcessor::new(serde_json::from_str(cfg).unwrap()).unwrap();
        assert_eq!(p.dynamic(), Some((8, 256, 1536)));
        assert_eq!(p.output_size(), (0, 0));
        let png = |w: u32, h: u32| {
            let mut out = Cursor::new(Vec::new());
            image::RgbImage::new(w, h).write_to(&mut out, image::ImageFormat::Png).unwrap();
            out.into_inner()
        };
        let px = p.process(&png(23, 20)).unwrap();
        assert_eq!((px.width, px.height, px.data.len()), (24, 16, 3 * 24 * 16));
        assert!(matches!(p.process(&png(3, 700)), Err(MediaError::Unsupported(_))));
    }

    #[test]
    fn shortest_edge_keeps_the_aspect_ratio_like_transformers() {
        let s = Size::ShortestEdge { shortest_edge: 224 };
        assert_eq!(s.resolve(640, 480), (298, 224));
        assert_eq!(s.resolve(41, 75), (224, 409));
        assert_eq!(s.resolve(100, 100), (224, 224));
    }

    #[test]
    fn opaque_and_clear_pixels_composite_exactly() {
        assert_eq!(over_white(255, [1, 2, 3]), [1, 2, 3]);
        assert_eq!(over_white(0, [1, 2, 3]), [255, 255, 255]);
    }
}
