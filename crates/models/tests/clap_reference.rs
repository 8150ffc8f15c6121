//! CLAP against transformers: the tiny seeded HTSAT + RoBERTa model and test clips from
//! `scripts/make_tiny_media_models.py`, with the features and embeddings transformers computed
//! (after the documented steps transformers lacks: resampling, downmix, centre window).

use aleph_models::{load, Backend, Batch, LoadOptions};

mod common;
use common::{backends, fixtures, floats, max_diff, reference};

#[test]
fn audio_features_and_embeddings_match_transformers() {
    for (backend, name) in backends() {
        check_audio(backend, name);
    }
}

fn check_audio(backend: Backend, name: &str) {
    let loaded = load(&fixtures().join("clap"), &LoadOptions { backend, ..Default::default() }).unwrap();
    assert_eq!(loaded.info.backend, name);
    let processor = loaded.audio.as_ref().unwrap();
    let r = reference("clap");
    let mut all = Vec::new();
    for clip in r["clips"].as_array().unwrap() {
        let file = clip["file"].as_str().unwrap();
        let bytes = std::fs::read(fixtures().join("media").join(file)).unwrap();
        let features = processor.process(&bytes).unwrap();
        let d = max_diff(&features.data, &floats(&clip["input_features"]));
        assert!(d < 1e-4, "{file}: features differ by {d} dB");
        let out = loaded.model.forward_audio(std::slice::from_ref(&features)).unwrap();
        let d = max_diff(&out.vectors[0], &floats(&clip["embedding"]));
        assert!(d < 1e-4, "{name}, {file}: embedding differs by {d}");
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
        check_texts(backend, name);
    }
}

fn check_texts(backend: Backend, name: &str) {
    let loaded = load(&fixtures().join("clap"), &LoadOptions { backend, ..Default::default() }).unwrap();
    assert_eq!(loaded.info.backend, name);
    let r = reference("clap");
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
