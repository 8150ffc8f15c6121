//! Pillow's convolution resize for 8-bit RGB, reproduced bit for bit.
//!
//! CLIP-family models were trained on images that Pillow resized, and transformers' reference image
//! processors still resize with Pillow. Other resizers (the `image` crate's, torchvision's) differ by
//! a few levels per pixel, which moves embeddings visibly; so this follows Pillow's algorithm: a
//! separable filter whose support widens with the downscale factor (antialiasing), coefficients
//! normalized per output pixel and rounded to fixed point, a horizontal pass over only the rows the
//! vertical pass reads, and clamping to 0..=255 after each pass.

/// Pillow's resampling filters, numbered as `PIL.Image.Resampling` (and `preprocessor_config.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    Nearest,
    Lanczos,
    Bilinear,
    Bicubic,
    Box,
    Hamming,
}

impl Filter {
    pub fn from_pil(code: u32) -> Option<Filter> {
        Some(match code {
            0 => Filter::Nearest,
            1 => Filter::Lanczos,
            2 => Filter::Bilinear,
            3 => Filter::Bicubic,
            4 => Filter::Box,
            5 => Filter::Hamming,
            _ => return None,
        })
    }

    fn support(self) -> f64 {
        match self {
            Filter::Nearest | Filter::Box => 0.5,
            Filter::Bilinear | Filter::Hamming => 1.0,
            Filter::Bicubic => 2.0,
            Filter::Lanczos => 3.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        match self {
            Filter::Nearest | Filter::Box => {
                if (-0.5..0.5).contains(&x) {
                    1.0
                } else {
                    0.0
                }
            }
            Filter::Bilinear => (1.0 - x.abs()).max(0.0),
            Filter::Hamming => {
                let x = x.abs();
                if x == 0.0 {
                    1.0
                } else if x >= 1.0 {
                    0.0
                } else {
                    let px = x * std::f64::consts::PI;
                    px.sin() / px * (0.54 + 0.46 * px.cos())
                }
            }
            Filter::Bicubic => {
                const A: f64 = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
            Filter::Lanczos => {
                if (-3.0..3.0).contains(&x) {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let px = x * std::f64::consts::PI;
        px.sin() / px
    }
}

/// Fractional bits of the fixed-point coefficients (Pillow: 32 - 8 - 2).
const PRECISION_BITS: u32 = 22;

/// For each output pixel: the first input pixel read and the fixed-point weights from there.
struct Coefficients {
    starts: Vec<usize>,
    /// How many input pixels each output pixel reads.
    counts: Vec<usize>,
    /// `ksize` weights per output pixel; unused tails are zero.
    weights: Vec<i32>,
    ksize: usize,
}

impl Coefficients {
    fn new(in_size: usize, out_size: usize, filter: Filter) -> Self {
        let scale = in_size as f64 / out_size as f64;
        let filterscale = scale.max(1.0);
        let support = filter.support() * filterscale;
        let ksize = support.ceil() as usize * 2 + 1;
        let mut starts = Vec::with_capacity(out_size);
        let mut counts = Vec::with_capacity(out_size);
        let mut weights = vec![0i32; out_size * ksize];
        let mut k = vec![0f64; ksize];
        for xx in 0..out_size {
            let center = (xx as f64 + 0.5) * scale;
            let ss = 1.0 / filterscale;
            // Pillow truncates `center ± support + 0.5` toward zero, then clamps.
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
            let n = xmax.saturating_sub(xmin).min(ksize);
            let mut total = 0.0;
            for (x, w) in k.iter_mut().enumerate().take(n) {
                *w = filter.weight((x as f64 + xmin as f64 - center + 0.5) * ss);
                total += *w;
            }
            for (x, w) in k.iter().enumerate().take(n) {
                let w = if total != 0.0 { w / total } else { *w };
                let scaled = w * (1u32 << PRECISION_BITS) as f64;
                weights[xx * ksize + x] = if scaled < 0.0 { (scaled - 0.5) as i32 } else { (scaled + 0.5) as i32 };
            }
            starts.push(xmin);
            counts.push(n);
        }
        Coefficients { starts, counts, weights, ksize }
    }

    fn row(&self, i: usize) -> (usize, &[i32]) {
        (self.starts[i], &self.weights[i * self.ksize..(i + 1) * self.ksize])
    }

    /// One past the last input pixel output `i` reads.
    fn end(&self, i: usize) -> usize {
        self.starts[i] + self.counts[i]
    }
}

fn clip8(acc: i32) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// An 8-bit RGB image, row-major, 3 bytes per pixel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rgb8 {
    pub width: usize,
    pub height: usize,
    pub data: Vec<u8>,
}

/// Resizes as Pillow's `Image.resize((width, height), filter)` does for an RGB image.
pub fn resize(img: &Rgb8, width: usize, height: usize, filter: Filter) -> Rgb8 {
    if (img.width, img.height) == (width, height) {
        return img.clone();
    }
    if filter == Filter::Nearest {
        return resize_nearest(img, width, height);
    }
    let horiz = Coefficients::new(img.width, width, filter);
    let vert = Coefficients::new(img.height, height, filter);
    // The horizontal pass only computes the rows the vertical pass reads.
    let (first_row, last_row) =
        if height != img.height { (vert.starts[0], vert.end(height - 1)) } else { (0, img.height) };
    let tmp = if width != img.width {
        horizontal(img, &horiz, width, first_row, last_row)
    } else {
        let rows = &img.data[first_row * img.width * 3..last_row * img.width * 3];
        Rgb8 { width, height: last_row - first_row, data: rows.to_vec() }
    };
    if height == img.height {
        return tmp;
    }
    vertical(&tmp, &vert, height, first_row)
}

fn horizontal(img: &Rgb8, c: &Coefficients, width: usize, first_row: usize, last_row: usize) -> Rgb8 {
    let mut out = Vec::with_capacity((last_row - first_row) * width * 3);
    for y in first_row..last_row {
        let row = &img.data[y * img.width * 3..(y + 1) * img.width * 3];
        for xx in 0..width {
            let (start, w) = c.row(xx);
            let mut acc = [1i32 << (PRECISION_BITS - 1); 3];
            for (k, &wk) in w.iter().enumerate() {
                let x = start + k;
                if wk == 0 || x >= img.width {
                    continue;
                }
                for ch in 0..3 {
                    acc[ch] += row[x * 3 + ch] as i32 * wk;
                }
            }
            out.extend(acc.map(clip8));
        }
    }
    Rgb8 { width, height: last_row - first_row, data: out }
}

fn vertical(img: &Rgb8, c: &Coefficients, height: usize, row_offset: usize) -> Rgb8 {
    let mut out = Vec::with_capacity(height * img.width * 3);
    for yy in 0..height {
        let (start, w) = c.row(yy);
        for x in 0..img.width * 3 {
            let mut acc = 1i32 << (PRECISION_BITS - 1);
            for (k, &wk) in w.iter().enumerate() {
                let y = start + k;
                if wk == 0 || y < row_offset || y - row_offset >= img.height {
                    continue;
                }
                acc += img.data[(y - row_offset) * img.width * 3 + x] as i32 * wk;
            }
            out.push(clip8(acc));
        }
    }
    Rgb8 { width: img.width, height, data: out }
}

/// Pillow's nearest-neighbour resize: the source pixel under each output pixel's centre.
fn resize_nearest(img: &Rgb8, width: usize, height: usize) -> Rgb8 {
    let sx = img.width as f64 / width as f64;
    let sy = img.height as f64 / height as f64;
    let mut data = Vec::with_capacity(width * height * 3);
    for yy in 0..height {
        let y = (((yy as f64 + 0.5) * sy) as usize).min(img.height - 1);
        for xx in 0..width {
            let x = (((xx as f64 + 0.5) * sx) as usize).min(img.width - 1);
            data.extend_from_slice(&img.data[(y * img.width + x) * 3..][..3]);
        }
    }
    Rgb8 { width, height, data }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coefficients_sum_to_one_in_fixed_point() {
        for (inp, out) in [(64, 32), (20, 32), (75, 32), (7, 3)] {
            let c = Coefficients::new(inp, out, Filter::Bicubic);
            for i in 0..out {
                let sum: i64 = c.row(i).1.iter().map(|&w| w as i64).sum();
                assert!((sum - (1 << PRECISION_BITS)).abs() <= c.ksize as i64, "{inp}->{out} pixel {i}: {sum}");
            }
        }
    }

    #[test]
    fn a_flat_image_stays_flat() {
        let img = Rgb8 { width: 9, height: 5, data: [10u8, 200, 77].repeat(45) };
        for f in [Filter::Bicubic, Filter::Bilinear, Filter::Lanczos, Filter::Box, Filter::Hamming, Filter::Nearest] {
            let r = resize(&img, 4, 7, f);
            assert_eq!((r.width, r.height), (4, 7));
            assert!(r.data.chunks(3).all(|p| p == [10, 200, 77]), "{f:?}");
        }
    }
}
