//! The fuzz targets' committed seeds (each a past crash or a starting shape), replayed through the same
//! bodies libFuzzer runs (`fuzz/targets`), so a regression fails `cargo test`, not only a fuzzing session.
//! Inputs a local fuzzing session found (`fuzz/corpus/<target>`, not committed) are replayed too.

use std::path::PathBuf;

use crate::common::repo_root;

#[path = "../../../../fuzz/targets/audio_decode.rs"]
mod audio_decode;
#[path = "../../../../fuzz/targets/data_uri.rs"]
mod data_uri;
#[path = "../../../../fuzz/targets/image_decode.rs"]
mod image_decode;
#[path = "../../../../fuzz/targets/request_json.rs"]
mod request_json;

/// Every file under `fuzz/seeds/<target>` and `fuzz/corpus/<target>`; at least one seed must exist.
fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let fuzz = repo_root().join("fuzz");
    let mut files = Vec::new();
    for dir in [fuzz.join("seeds").join(target), fuzz.join("corpus").join(target)] {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_file() {
                let bytes = std::fs::read(&path).expect("a readable fuzz input");
                files.push((path, bytes));
            }
        }
    }
    assert!(files.iter().any(|(p, _)| p.starts_with(fuzz.join("seeds"))), "no committed seeds for {target}");
    files
}

/// Runs every input, naming the one that panicked.
fn replay(target: &str, run: impl Fn(&[u8])) {
    for (path, bytes) in inputs(target) {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&bytes)));
        assert!(outcome.is_ok(), "fuzz target {target} panicked on {}", path.display());
    }
}

fn tiny_models() -> PathBuf {
    repo_root().join("tests/fixtures/tiny")
}

#[test]
fn request_json_seeds() {
    replay("request_json", request_json::run);
}

#[test]
fn data_uri_seeds() {
    replay("data_uri", data_uri::run);
}

#[test]
fn image_decode_seeds() {
    let tiny = tiny_models();
    replay("image_decode", |d| image_decode::run(d, &tiny));
}

#[test]
fn audio_decode_seeds() {
    let tiny = tiny_models();
    replay("audio_decode", |d| audio_decode::run(d, &tiny));
}
