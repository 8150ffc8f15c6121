//! `data:` URIs as clients send them for images and audio.

use aleph_models::media::data_uri;

pub fn run(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(d) = data_uri::parse(s, 1 << 20) {
            assert!(d.bytes.len() <= 1 << 20, "the size cap holds");
        }
    }
}
