//! NomicBERT against transformers on both backends (scripts/make_encoder_families.py made the fixtures): an
//! embedder as nomic-ai ships it (`model_type: nomic_bert`, the remote code's config names, `auto_map`), a
//! cross-encoder as transformers 5 saves its port.

mod common;

use aleph_models::{load, Batch, DType, LoadOptions};
use common::{backends, fixtures, floats, max_diff, reference};

#[test]
fn embedder_matches_sentence_transformers_on_both_backends() {
    let r = reference("nomic-embed");
    let texts: Vec<&str> = r["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let want: Vec<Vec<f32>> = r["vectors"].as_array().unwrap().iter().map(floats).collect();
    for (backend, name) in backends() {
        let loaded = load(&fixtures().join("nomic-embed"), &LoadOptions { backend, ..Default::default() }).unwrap();
        let mut batch = Batch::new();
        for t in &texts {
            let e = loaded.tokenizer.encode(t).unwrap();
            batch.push(&e.ids, &e.type_ids);
        }
        let counts: Vec<u64> = (0..batch.len()).map(|i| batch.seq_len(i) as u64).collect();
        let expected: Vec<u64> = r["token_counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
        assert_eq!(counts, expected, "token counts");
        let got = loaded.model.forward(&batch).unwrap().vectors;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let d = max_diff(g, w);
            assert!(d < 1e-4, "{name}, text {i}: vectors differ by {d}");
        }
    }
}

#[test]
fn cross_encoder_matches_transformers_on_both_backends() {
    let r = reference("nomic-rerank");
    let query = r["query"].as_str().unwrap();
    let docs: Vec<&str> = r["documents"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let logits: Vec<f32> = r["logits"].as_array().unwrap().iter().map(|l| l[0].as_f64().unwrap() as f32).collect();
    for (backend, name) in backends() {
        let loaded = load(&fixtures().join("nomic-rerank"), &LoadOptions { backend, ..Default::default() }).unwrap();
        let mut batch = Batch::new();
        for d in &docs {
            let e = loaded.tokenizer.encode_pair(query, d).unwrap();
            batch.push(&e.ids, &e.type_ids);
        }
        let got: Vec<f32> = loaded.model.forward(&batch).unwrap().vectors.iter().map(|v| v[0]).collect();
        let d = max_diff(&got, &logits);
        assert!(d < 1e-4, "{name}: logits {got:?} vs {logits:?}");
    }
}

#[test]
fn int8_stays_close_to_f32() {
    let dir = fixtures().join("nomic-embed");
    let r = reference("nomic-embed");
    let f32_model = load(&dir, &LoadOptions::default()).unwrap();
    let int8 = load(&dir, &LoadOptions { dtype: DType::Int8, ..Default::default() }).unwrap();
    let mut batch = Batch::new();
    for t in r["texts"].as_array().unwrap() {
        let e = f32_model.tokenizer.encode(t.as_str().unwrap()).unwrap();
        batch.push(&e.ids, &e.type_ids);
    }
    let (a, b) = (f32_model.model.forward(&batch).unwrap().vectors, int8.model.forward(&batch).unwrap().vectors);
    for (x, y) in a.iter().zip(&b) {
        let cos: f32 = x.iter().zip(y).map(|(p, q)| p * q).sum();
        assert!(cos > 0.99, "int8 cosine {cos}");
    }
}
