//! Image bytes through the decoder and two preprocessors of the tiny test models: CLIP's (resize and crop to
//! a fixed size) and ColQwen2's (dynamic resolution).
#![no_main]

use std::sync::OnceLock;

use aleph_models::media::image::{decode_rgb, ImageLimits, ImageProcessor};
use libfuzzer_sys::fuzz_target;

/// The decoders are called behind `catch_unwind` (a third-party decoder's panic on a malformed file is
/// a decode error), but libfuzzer-sys's panic hook aborts on any panic, caught or not. Its hook is
/// replaced by a silent one: a panic that escapes our API still aborts (libfuzzer-sys checks each run).
fn quiet_caught_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::panic::set_hook(Box::new(|_| {})));
}

fn processors() -> &'static [ImageProcessor; 2] {
    static P: OnceLock<[ImageProcessor; 2]> = OnceLock::new();
    P.get_or_init(|| {
        let load = |name: &str| {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny").join(name);
            ImageProcessor::from_dir(&dir).expect("a tiny fixture's image processor")
        };
        [load("clip"), load("colqwen2")]
    })
}

fuzz_target!(|data: &[u8]| {
    quiet_caught_panics();
    // A small pixel budget keeps each run fast; the limit itself is what a bomb must not pass.
    let limits = ImageLimits { max_pixels: 1 << 20 };
    if let Ok(rgb) = decode_rgb(data, &limits) {
        assert!((rgb.width * rgb.height) as u64 <= limits.max_pixels);
        for p in processors() {
            let pixels = p.process_rgb(&rgb);
            assert_eq!(pixels.data.len(), 3 * pixels.width * pixels.height);
            assert!(pixels.data.iter().all(|v| v.is_finite()));
        }
    }
});
