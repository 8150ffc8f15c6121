//! `data:` URIs as clients send them for images and audio.
#![no_main]

use aleph_models::media::data_uri;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(d) = data_uri::parse(s, 1 << 20) {
            assert!(d.bytes.len() <= 1 << 20, "the size cap holds");
        }
    }
});
