//! libFuzzer's harness for `targets/data_uri.rs` (the body the test suite also replays the seeds through).
#![no_main]

#[path = "../targets/data_uri.rs"]
mod body;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| body::run(data));
