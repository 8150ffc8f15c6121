//! CLAP against transformers: the tiny seeded HTSAT + RoBERTa model and test clips from
//! `scripts/make_tiny_media_models.py`, with the features and embeddings transformers computed
//! (after the documented steps transformers lacks: resampling, downmix, centre window), and the same for
//! a CLAP with feature fusion (`clap-fused`: four spectrograms per clip, the crop path and the AFF block).

use aleph_models::{load, Backend, Batch, LoadOptions};

use crate::common;
use common::{backends, fixtures, floats, max_diff, reference};

#[test]
fn audio_features_and_embeddings_match_transformers() {
    for (backend, name) in backends() {
        check_audio("clap", backend, name);
    }
}

#[test]
fn fused_audio_features_and_embeddings_match_transformers() {
    for (backend, name) in backends() {
        check_audio("clap-fused", backend, name);
    }
    // The fixture covers both fusion paths: clips that fit the window and one past it (the crops).
    let r = reference("clap-fused");
    let longer: Vec<bool> = r["clips"].as_array().unwrap().iter().map(|c| c["longer_than_window"] == true).collect();
    assert!(longer.contains(&true) && longer.contains(&false));
}

fn check_audio(model: &str, backend: Backend, name: &str) {
    let loaded = load(&fixtures().join(model), &LoadOptions { backend, ..Default::default() }).unwrap();
    assert_eq!(loaded.info.backend.name(), name);
    let processor = loaded.audio.as_ref().unwrap();
    let r = reference(model);
    let mut all = Vec::new();
    for clip in r["clips"].as_array().unwrap() {
        let file = clip["file"].as_str().unwrap();
        let bytes = std::fs::read(fixtures().join("media").join(file)).unwrap();
        let features = processor.process(&bytes).unwrap();
        let d = max_diff(&features.data, &floats(&clip["input_features"]));
        assert!(d < 1e-4, "{model}, {file}: features differ by {d} dB");
        let out = loaded.model.forward_audio(std::slice::from_ref(&features)).unwrap();
        let d = max_diff(&out.vectors[0], &floats(&clip["embedding"]));
        assert!(d < 1e-4, "{model}, {name}, {file}: embedding differs by {d}");
        all.push((features, out.vectors[0].clone()));
    }
    // A batch computes each clip as alone.
    let feats: Vec<_> = all.iter().map(|(f, _)| f.clone()).collect();
    let out = loaded.model.forward_audio(&feats).unwrap();
    for ((_, alone), batched) in all.iter().zip(&out.vectors) {
        assert!(max_diff(alone, batched) < 1e-5);
    }
    assert_eq!(loaded.info.capabilities(), vec!["embed", "audio_embed"]);
}

#[test]
fn text_tower_matches_transformers() {
    for (backend, name) in backends() {
        check_texts("clap", backend, name);
        check_texts("clap-fused", backend, name);
    }
}

fn check_texts(model: &str, backend: Backend, name: &str) {
    let loaded = load(&fixtures().join(model), &LoadOptions { backend, ..Default::default() }).unwrap();
    assert_eq!(loaded.info.backend.name(), name);
    let r = reference(model);
    let texts = r["texts"].as_array().unwrap();
    let mut batch = Batch::new();
    for t in texts {
        let enc = loaded.tokenizer.encode(t["text"].as_str().unwrap()).unwrap();
        let want: Vec<u32> = t["input_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        assert_eq!(enc.ids, want, "token ids of {:?}", t["text"]);
        batch.push(&enc.ids, &enc.type_ids);
    }
    let out = loaded.model.forward(&batch).unwrap();
    for (t, got) in texts.iter().zip(&out.vectors) {
        let d = max_diff(got, &floats(&t["embedding"]));
        assert!(d < 1e-4, "{name}, {:?}: embedding differs by {d}", t["text"]);
    }
}

#[test]
fn a_fusion_extractor_beside_a_tower_without_fusion_is_refused_at_load() {
    let dir = std::env::temp_dir().join(format!("aleph-clap-mismatch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["model.safetensors", "tokenizer.json", "config.json"] {
        std::fs::copy(fixtures().join("clap").join(f), dir.join(f)).unwrap();
    }
    let fused = std::fs::read_to_string(fixtures().join("clap-fused/preprocessor_config.json")).unwrap();
    std::fs::write(dir.join("preprocessor_config.json"), fused).unwrap();
    let err = load(&dir, &LoadOptions::default()).err().expect("a mismatched extractor must not load").to_string();
    std::fs::remove_dir_all(&dir).ok();
    assert!(err.contains("fusion"), "{err}");
}
