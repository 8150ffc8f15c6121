//! Image bytes through the decoder and two preprocessors of the tiny test models: CLIP's (resize and crop to
//! a fixed size) and ColQwen2's (dynamic resolution).

use std::path::Path;
use std::sync::OnceLock;

use aleph_models::media::image::{decode_rgb, ImageLimits, ImageProcessor};

fn processors(tiny: &Path) -> &'static [ImageProcessor; 2] {
    static P: OnceLock<[ImageProcessor; 2]> = OnceLock::new();
    P.get_or_init(|| {
        let load = |name: &str| ImageProcessor::from_dir(&tiny.join(name)).expect("a tiny fixture's image processor");
        [load("clip"), load("colqwen2")]
    })
}

/// `tiny` is the folder of the tiny test models (`tests/fixtures/tiny`).
pub fn run(data: &[u8], tiny: &Path) {
    // A small pixel budget keeps each run fast; the limit itself is what a bomb must not pass.
    let limits = ImageLimits { max_pixels: 1 << 20 };
    if let Ok(rgb) = decode_rgb(data, &limits) {
        assert!((rgb.width * rgb.height) as u64 <= limits.max_pixels);
        for p in processors(tiny) {
            let pixels = p.process_rgb(&rgb);
            assert_eq!(pixels.data.len(), 3 * pixels.width * pixels.height);
            assert!(pixels.data.iter().all(|v| v.is_finite()));
        }
    }
}
