//! libFuzzer's harness for `targets/request_json.rs` (the body the test suite also replays the seeds through).
#![no_main]

#[path = "../targets/request_json.rs"]
mod body;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| body::run(data));
