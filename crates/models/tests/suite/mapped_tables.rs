//! Token tables read in place: on Aleph's CPU kernels a text model's vocabulary stays in the memory-mapped
//! safetensors (the reference tests check the vectors that come out), so the bytes it holds are the file's
//! less that table; candle and pickled checkpoints hold theirs.

use aleph_models::{load, Backend, LoadOptions};

use crate::common::fixtures;

#[test]
fn cpu_models_hold_everything_but_their_token_table() {
    for fixture in ["qwen3-embed", "gemma3-embed", "xlmr-embed", "mpnet-embed"] {
        let dir = fixtures().join(fixture);
        let cfg: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
        let (vocab, hidden) = (cfg["vocab_size"].as_u64().unwrap(), cfg["hidden_size"].as_u64().unwrap());
        let file = std::fs::metadata(dir.join("model.safetensors")).unwrap().len();
        let table = vocab * hidden * 4;
        let held = load(&dir, &LoadOptions::default()).unwrap().info.weight_bytes;
        // Everything else of the (f32) file is held, packed: nothing else is left out.
        assert!(held <= file - table && held > (file - table) / 2, "{fixture}: {held} held, {file} in the file");
    }
}

#[test]
fn pickled_checkpoints_hold_their_table() {
    let dir = fixtures().join("distilbert-classify");
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let table = cfg["vocab_size"].as_u64().unwrap() * cfg["dim"].as_u64().unwrap() * 4;
    let mut total = 0;
    for shard in ["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"] {
        let tensors = candle_core::pickle::read_all(dir.join(shard)).unwrap();
        total += tensors.iter().map(|(_, t)| 4 * t.elem_count() as u64).sum::<u64>();
    }
    let held = load(&dir, &LoadOptions { backend: Backend::Auto, ..Default::default() }).unwrap().info.weight_bytes;
    // Held whole, the table included (leaving it out would hold `total - table`).
    assert!(held >= total - table / 2, "{held} held of {total} f32 bytes; the table alone is {table}");
}
