//! Audio bytes through the decoder, resampling and CLAP's feature extraction (the tiny test model's).
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

fn processor() -> &'static AudioProcessor {
    static P: OnceLock<AudioProcessor> = OnceLock::new();
    P.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny/clap");
        AudioProcessor::from_dir(&dir).expect("the tiny CLAP fixture").with_limits(AudioLimits { max_seconds: 5.0 })
    })
}

fuzz_target!(|data: &[u8]| {
    quiet_caught_panics();
    if let Ok(f) = processor().process(data) {
        assert_eq!(f.data.len(), f.frames * f.mels);
        assert!(f.data.iter().all(|v| v.is_finite()), "features are finite");
    }
});
