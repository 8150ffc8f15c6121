//! libFuzzer's harness for `targets/image_decode.rs` (the body the test suite also replays the seeds through).
#![no_main]

#[path = "../targets/image_decode.rs"]
mod body;

use libfuzzer_sys::fuzz_target;

/// The decoders are called behind `catch_unwind` (a third-party decoder's panic on a malformed file is
/// a decode error), but libfuzzer-sys's panic hook aborts on any panic, caught or not. Its hook is
/// replaced by a silent one: a panic that escapes our API still aborts (libfuzzer-sys checks each run).
fn quiet_caught_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::panic::set_hook(Box::new(|_| {})));
}

fuzz_target!(|data: &[u8]| {
    quiet_caught_panics();
    body::run(data, &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny"));
});
