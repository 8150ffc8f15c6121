//! What the reference tests share: the fixtures, JSON numbers, and the backends to run.
#![allow(dead_code)]

use std::path::PathBuf;

use aleph_models::{load, Backend, Batch, ImageProcessor, LoadOptions, Pixels};
use serde_json::Value;

/// tests/fixtures/tiny, or `ALEPH_TEST_TINY` (a test binary run away from its checkout, as on a GPU machine).
pub fn fixtures() -> PathBuf {
    std::env::var_os("ALEPH_TEST_TINY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny"))
}

/// `tests/fixtures/tiny/<model>/reference.json`.
pub fn reference(model: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join(model).join("reference.json")).unwrap()).unwrap()
}

pub fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// `v` scaled to unit length (CLIP's and SigLIP's references are the projections before it).
pub fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
    v
}

/// A sparse reference (`{indices, values}`) as a vocabulary-wide vector.
pub fn dense(sparse: &Value, vocab: usize) -> Vec<f32> {
    let mut v = vec![0.0; vocab];
    for (i, x) in sparse["indices"].as_array().unwrap().iter().zip(sparse["values"].as_array().unwrap()) {
        v[i.as_u64().unwrap() as usize] = x.as_f64().unwrap() as f32;
    }
    v
}

pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Aleph's CPU kernels and the candle reference path, with the name `/models` reports for each.
pub fn backends() -> [(Backend, &'static str); 2] {
    [(Backend::Auto, "aleph-cpu"), (Backend::Candle, "candle")]
}

/// Runs Aleph's preprocessing on a test image and compares it with transformers' pixel values (`want`).
/// Lossless files must match within 1e-4 and come back, to go through the model. The JPEG decoder
/// (zune-jpeg) differs from Pillow's libjpeg-turbo by up to two levels on a few pixels (clip_reference.rs
/// checks the rest of the path from Pillow's decoded pixels), which a bicubic resize's negative lobes can
/// stretch to three: JPEGs are held to 3/255 over the normalization's std of 0.5 and not returned.
pub fn preprocess_like_transformers(processor: &ImageProcessor, file: &str, want: &[f32]) -> Option<Pixels> {
    let ours = processor.process(&std::fs::read(fixtures().join("media").join(file)).unwrap()).unwrap();
    let lossy = file.ends_with(".jpg");
    let d = max_diff(&ours.data, want);
    assert!(d < if lossy { 3.0 / 255.0 / 0.5 + 1e-4 } else { 1e-4 }, "{file}: pixel values differ by {d}");
    (!lossy).then_some(ours)
}

/// Row-major `[tokens × dim]` from a reference's list of vectors.
pub fn rows(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().flat_map(floats).collect()
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// A multi-vector model's queries (`reference.json`'s `queries`): token ids through the model's query
/// template, then per-token vectors, all queries in one batch (each computed as if alone), on `backend`.
pub fn check_multivector_queries(model: &str, backend: Backend) {
    let loaded = load(&fixtures().join(model), &LoadOptions { backend, ..Default::default() }).unwrap();
    let r = reference(model);
    let queries = r["queries"].as_array().unwrap();
    let mut batch = Batch::new();
    for q in queries {
        let enc = loaded.tokenizer.encode(q["text"].as_str().unwrap()).unwrap();
        assert_eq!(enc.ids, ids(&q["input_ids"]), "{model}: ids of {:?}", q["text"]);
        batch.push(&enc.ids, &enc.type_ids);
    }
    let out = loaded.model.forward(&batch).unwrap();
    for (q, got) in queries.iter().zip(&out.vectors) {
        let d = max_diff(got, &rows(&q["embeddings"]));
        assert!(d < 1e-4, "{model} on {backend:?}, {:?}: vectors differ by {d}", q["text"]);
    }
}

/// Embedder `model` (`reference.json`: `texts`, `vectors`, `token_counts`) on both backends: the same token
/// counts, every vector within 1e-4.
pub fn check_embedder(model: &str) {
    check_embedder_with(model, &LoadOptions::default());
}

/// [`check_embedder`] loading with `options` (on each backend in turn).
pub fn check_embedder_with(model: &str, options: &LoadOptions) {
    let r = reference(model);
    let texts: Vec<&str> = r["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let want: Vec<Vec<f32>> = r["vectors"].as_array().unwrap().iter().map(floats).collect();
    let counts: Vec<u64> = r["token_counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
    for (backend, name) in backends() {
        let loaded = load(&fixtures().join(model), &LoadOptions { backend, ..options.clone() }).unwrap();
        assert_eq!(loaded.info.backend.name(), name);
        let batch = text_batch(&loaded, &texts);
        assert_eq!((0..batch.len()).map(|i| batch.seq_len(i) as u64).collect::<Vec<_>>(), counts, "token counts");
        for (i, (g, w)) in loaded.model.forward(&batch).unwrap().vectors.iter().zip(&want).enumerate() {
            let d = max_diff(g, w);
            assert!(d < 1e-4, "{model} on {name}, text {i}: vectors differ by {d}");
        }
    }
}

/// Cross-encoder `model` (`reference.json`: `query`, `documents`, one-label `logits`) on both backends,
/// within 1e-4.
pub fn check_cross_encoder(model: &str) {
    let r = reference(model);
    let query = r["query"].as_str().unwrap();
    let docs: Vec<&str> = r["documents"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let logits: Vec<f32> = r["logits"].as_array().unwrap().iter().map(|l| l[0].as_f64().unwrap() as f32).collect();
    for (backend, name) in backends() {
        let loaded = load(&fixtures().join(model), &LoadOptions { backend, ..Default::default() }).unwrap();
        let mut batch = Batch::new();
        for d in &docs {
            let e = loaded.tokenizer.encode_pair(query, d).unwrap();
            batch.push(&e.ids, &e.type_ids);
        }
        let got: Vec<f32> = loaded.model.forward(&batch).unwrap().vectors.iter().map(|v| v[0]).collect();
        let d = max_diff(&got, &logits);
        assert!(d < 1e-4, "{model} on {name}: logits {got:?} vs {logits:?}");
    }
}

/// Classifier `model` (`reference.json`: `texts`, `logits` per label) on both backends, within 1e-4, with
/// its labels as the config names them.
pub fn check_classifier(model: &str, labels: &[&str]) {
    let r = reference(model);
    let texts: Vec<&str> = r["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let want: Vec<Vec<f32>> = r["logits"].as_array().unwrap().iter().map(floats).collect();
    for (backend, name) in backends() {
        let loaded = load(&fixtures().join(model), &LoadOptions { backend, ..Default::default() }).unwrap();
        match &loaded.info.task {
            aleph_models::Task::Classify { labels: got, .. } => assert_eq!(got, labels, "{model} labels"),
            other => panic!("{model} loads as {other:?}"),
        }
        let batch = text_batch(&loaded, &texts);
        for (i, (g, w)) in loaded.model.forward(&batch).unwrap().vectors.iter().zip(&want).enumerate() {
            let d = max_diff(g, w);
            assert!(d < 1e-4, "{model} on {name}, text {i}: logits {g:?} vs {w:?}");
        }
    }
}

/// Embedder `model` with `--dtype int8`: cosine to its f32 vectors above 0.99 on the reference texts.
pub fn check_int8_close(model: &str) {
    check_close_to_f32(model, aleph_models::DType::Int8, 0.99);
}

/// `--dtype bfloat16` (weights rounded to bf16, and on AVX512-BF16 the GEMM inputs too) against f32: every
/// vector at cosine `>= 0.999`.
pub fn check_bf16_close(model: &str) {
    check_close_to_f32(model, aleph_models::DType::BFloat16, 0.999);
}

fn check_close_to_f32(model: &str, dtype: aleph_models::DType, min_cos: f32) {
    let r = reference(model);
    let texts: Vec<&str> = r["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let dir = fixtures().join(model);
    // As the server loads by default: trusting the code of the families Aleph implements.
    let f32_model = load(&dir, &LoadOptions { trust_remote_code: true, ..Default::default() }).unwrap();
    let other = load(&dir, &LoadOptions { dtype, trust_remote_code: true, ..Default::default() }).unwrap();
    assert!(other.info.weight_bytes < f32_model.info.weight_bytes, "{model}: {dtype:?} holds fewer bytes");
    let batch = text_batch(&f32_model, &texts);
    let (a, b) = (f32_model.model.forward(&batch).unwrap().vectors, other.model.forward(&batch).unwrap().vectors);
    for (x, y) in a.iter().zip(&b) {
        let dot: f32 = x.iter().zip(y).map(|(p, q)| p * q).sum();
        let norm = |v: &[f32]| v.iter().map(|p| p * p).sum::<f32>().sqrt();
        let cos = dot / (norm(x) * norm(y));
        assert!(cos >= min_cos, "{model}: {dtype:?} cosine {cos}");
    }
}

/// The reference's `query_vectors`: each text after its `prompt`, as sentence-transformers prepends it before
/// tokenizing, on both backends within 1e-4.
pub fn check_prompted(model: &str) {
    check_prompted_with(model, &LoadOptions::default());
}

/// [`check_prompted`] loading with `options` (on each backend in turn).
pub fn check_prompted_with(model: &str, options: &LoadOptions) {
    let r = reference(model);
    let prompt = r["prompt"].as_str().unwrap();
    for (backend, name) in backends() {
        let loaded = load(&fixtures().join(model), &LoadOptions { backend, ..options.clone() }).unwrap();
        assert_eq!(loaded.info.prompts.get("query"), Ok(prompt), "{model}: the prompt read from its files");
        let texts: Vec<String> =
            r["texts"].as_array().unwrap().iter().map(|t| format!("{prompt}{}", t.as_str().unwrap())).collect();
        let batch = text_batch(&loaded, &texts.iter().map(String::as_str).collect::<Vec<_>>());
        let got = loaded.model.forward(&batch).unwrap().vectors;
        for (i, (g, w)) in got.iter().zip(r["query_vectors"].as_array().unwrap()).enumerate() {
            let d = max_diff(g, &floats(w));
            assert!(d < 1e-4, "{model} on {name}, text {i} with its prompt: {d}");
        }
    }
}

pub fn text_batch(loaded: &aleph_models::LoadedModel, texts: &[&str]) -> Batch {
    let mut batch = Batch::new();
    for t in texts {
        let e = loaded.tokenizer.encode(t).unwrap();
        batch.push(&e.ids, &e.type_ids);
    }
    batch
}
