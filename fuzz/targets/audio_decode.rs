//! Audio bytes through the decoder, resampling and CLAP's feature extraction (the tiny test models': one
//! window, and feature fusion's four spectrograms).

use std::path::Path;
use std::sync::OnceLock;

use aleph_models::media::audio::{AudioLimits, AudioProcessor};

fn processors(tiny: &Path) -> &'static [AudioProcessor; 2] {
    static P: OnceLock<[AudioProcessor; 2]> = OnceLock::new();
    P.get_or_init(|| {
        let load = |name: &str| {
            AudioProcessor::from_dir(&tiny.join(name))
                .expect("a tiny CLAP fixture")
                .with_limits(AudioLimits { max_seconds: 5.0 })
        };
        [load("clap"), load("clap-fused")]
    })
}

/// `tiny` is the folder of the tiny test models (`tests/fixtures/tiny`).
pub fn run(data: &[u8], tiny: &Path) {
    for p in processors(tiny) {
        if let Ok(f) = p.process(data) {
            assert_eq!(f.data.len(), f.channels * f.frames * f.mels);
            assert!(f.data.iter().all(|v| v.is_finite()), "features are finite");
        }
    }
}
