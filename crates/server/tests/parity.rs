//! all-MiniLM-L6-v2 served by Aleph matches sentence-transformers (reference vectors committed in
//! tests/fixtures/minilm, made by scripts/make_minilm_reference.py).

mod common;

use common::{cosine, floats, minilm, repo_root, Server};
use serde_json::{json, Value};

fn fixtures() -> (Vec<String>, Vec<Vec<f32>>, Vec<u64>) {
    let dir = repo_root().join("tests/fixtures/minilm");
    let sentences: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("sentences.json")).unwrap()).unwrap();
    let reference: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
    let vectors = reference["vectors"].as_array().unwrap().iter().map(floats).collect();
    let counts = reference["token_counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    (sentences, vectors, counts)
}

#[test]
fn minilm_matches_sentence_transformers() {
    let server = Server::start(&["--model-id", &minilm(), "--no-model-warmup"]);
    check_parity(&server);
}

/// The candle reference backend, and Aleph's CPU kernels with each narrower instruction set (the
/// machine running the tests may have AVX-512; others may have only AVX2, or neither).
#[test]
fn every_backend_and_instruction_set_matches() {
    let m = minilm();
    let candle = Server::start(&["--model-id", &m, "--no-model-warmup", "--engine", "candle"]);
    assert_eq!(candle.get("/models").json()["data"][0]["backend"], "candle");
    check_parity(&candle);
    for isa in ["avx2", "scalar"] {
        let s = Server::start_with_env(&["--model-id", &m, "--no-model-warmup"], &[("ALEPH_CPU_ISA", isa)]);
        check_parity(&s);
    }
}

fn check_parity(server: &Server) {
    let (sentences, reference, counts) = fixtures();
    assert!(sentences.len() >= 50);

    // All at once: one request, batched by the engine.
    let reply = server.post_json("/embeddings", &json!({"input": sentences}));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = reply.json();
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), sentences.len());
    let mut worst = 1.0f64;
    for (i, item) in data.iter().enumerate() {
        assert_eq!(item["index"], i);
        let v = floats(&item["embedding"]);
        assert_eq!(v.len(), 384);
        let c = cosine(&v, &reference[i]);
        worst = worst.min(c);
        assert!(c >= 0.9999, "sentence {i} {:?}: cosine {c}", sentences[i]);
    }
    eprintln!("worst cosine over {} sentences: {worst:.7}", sentences.len());
    assert_eq!(
        body["usage"]["prompt_tokens"],
        counts.iter().sum::<u64>(),
        "usage counts real tokens"
    );

    // One by one: the same vectors whatever the batch composition.
    for i in [0, 1, 2, 21, 28, sentences.len() - 1] {
        let body = server.post_json("/embeddings", &json!({"input": sentences[i]})).json();
        let v = floats(&body["data"][0]["embedding"]);
        assert!(cosine(&v, &reference[i]) >= 0.9999, "solo sentence {i}");
        assert_eq!(body["usage"]["total_tokens"], counts[i]);
    }
}
