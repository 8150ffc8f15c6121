//! Audio bytes through the decoder, resampling and CLAP's feature extraction (the tiny test models': one
//! window, and feature fusion's four spectrograms).
#![no_main]

use std::sync::OnceLock;

use aleph_models::media::audio::{AudioLimits, AudioProcessor};
use libfuzzer_sys::fuzz_target;

/// The decoders are called behind `catch_unwind` (a third-party decoder's panic on a malformed file is
/// a decode error), but libfuzzer-sys's panic hook aborts on any panic, caught or not. Its hook is
/// replaced by a silent one: a panic that escapes our API still aborts (libfuzzer-sys checks each run).
fn quiet_caught_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::panic::set_hook(Box::new(|_| {})));
}

fn processors() -> &'static [AudioProcessor; 2] {
    static P: OnceLock<[AudioProcessor; 2]> = OnceLock::new();
    P.get_or_init(|| {
        let load = |name: &str| {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny").join(name);
            AudioProcessor::from_dir(&dir).expect("a tiny CLAP fixture").with_limits(AudioLimits { max_seconds: 5.0 })
        };
        [load("clap"), load("clap-fused")]
    })
}

fuzz_target!(|data: &[u8]| {
    quiet_caught_panics();
    for p in processors() {
        if let Ok(f) = p.process(data) {
            assert_eq!(f.data.len(), f.channels * f.frames * f.mels);
            assert!(f.data.iter().all(|v| v.is_finite()), "features are finite");
        }
    }
});
