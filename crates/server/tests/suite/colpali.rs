//! ColPali over HTTP on the tiny seeded model from scripts/make_tiny_colpali.py: page images and queries
//! into per-token vectors (lists of lists, or flattened base64), MaxSim scores as transformers' vectors
//! give them, and the image errors.

use crate::common;

use base64::Engine as _;
use common::media::{file_uri, max_diff};
use common::{floats, repo_root, Server};
use serde_json::{json, Value};

fn fixture() -> (String, Value) {
    fixture_of("colpali")
}

fn fixture_of(name: &str) -> (String, Value) {
    let dir = repo_root().join("tests/fixtures/tiny").join(name);
    let reference = serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
    (dir.to_string_lossy().into_owned(), reference)
}

fn rows(v: &Value) -> Vec<Vec<f32>> {
    v.as_array().unwrap().iter().map(floats).collect()
}

/// Sum over query vectors of the best dot product with any document vector.
fn maxsim(q: &[Vec<f32>], d: &[Vec<f32>]) -> f32 {
    q.iter()
        .map(|qv| d.iter().map(|dv| qv.iter().zip(dv).map(|(a, b)| a * b).sum::<f32>()).fold(f32::MIN, f32::max))
        .sum()
}

#[test]
fn pages_and_queries_embed_per_token_and_score_like_transformers() {
    // Lossless pages only: the JPEG's decoder difference is covered in colpali_reference.rs.
    check_pages_and_queries("colpali", &["wide.png", "alpha.png", "small-gray.png"]);
}

#[test]
fn colqwen2_pages_at_their_own_resolution_and_queries_score_like_transformers() {
    // small-gray.png resizes with one level of rounding difference (see colqwen2_reference.rs).
    check_pages_and_queries("colqwen2", &["wide.png", "alpha.png"]);
}

#[test]
fn colqwen25_pages_attend_in_windows_and_queries_score_like_transformers() {
    // Qwen2.5-VL's tower (scripts/make_tiny_colqwen25.py): wide.png's 4×5 merged tokens end in a partial window.
    check_pages_and_queries("colqwen25", &["wide.png", "alpha.png"]);
}

fn check_pages_and_queries(model: &str, files: &[&str]) {
    let (dir, r) = fixture_of(model);
    let s = Server::start(&["--model-id", &dir]);
    let m = &s.get("/models").json()["data"][0];
    assert_eq!(m["capabilities"], json!(["embed", "rerank", "image_embed"]));

    let pages: Vec<&Value> =
        r["images"].as_array().unwrap().iter().filter(|p| files.contains(&p["file"].as_str().unwrap())).collect();
    assert_eq!(pages.len(), files.len());
    let uris: Vec<String> = pages.iter().map(|p| file_uri(p["file"].as_str().unwrap())).collect();
    let body = s.post_json("/embeddings", &json!({"input": uris, "modality": "image"}));
    assert_eq!(body.status, 200, "{}", body.body);
    let body = body.json();
    // Usage counts each page's sequence: its image tokens (by its own size, for ColQwen2) and prompt.
    let tokens: usize = pages.iter().map(|p| p["input_ids"].as_array().unwrap().len()).sum();
    assert_eq!(body["usage"]["prompt_tokens"], tokens, "{model}: usage");
    let mut page_vectors = Vec::new();
    for (i, page) in pages.iter().enumerate() {
        let got = rows(&body["data"][i]["embedding"]);
        let want = rows(&page["embeddings"]);
        assert_eq!(got.len(), want.len(), "{}: one vector per patch and prompt token", page["file"]);
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.len(), 16);
            assert!(max_diff(g, w) < 1e-4, "{}: differs from transformers", page["file"]);
        }
        page_vectors.push(got);
    }

    // base64: the vectors flattened row-major; the client reshapes with the vector size (16).
    let b64 = s.post_json("/embeddings", &json!({"input": uris[0], "modality": "image", "encoding_format": "base64"}));
    let b64 = b64.json();
    let bytes =
        base64::engine::general_purpose::STANDARD.decode(b64["data"][0]["embedding"].as_str().unwrap()).unwrap();
    let flat: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(flat.len() % 16, 0);
    assert_eq!(flat, page_vectors[0].concat());

    // Queries go through ColPali's query template; their vectors score pages as transformers' do.
    let queries: Vec<&str> = r["queries"].as_array().unwrap().iter().map(|q| q["text"].as_str().unwrap()).collect();
    let body = s.post_json("/embeddings", &json!({"input": queries})).json();
    let all_pages = r["images"].as_array().unwrap();
    for (qi, q) in r["queries"].as_array().unwrap().iter().enumerate() {
        let got = rows(&body["data"][qi]["embedding"]);
        assert_eq!(got.len(), q["embeddings"].as_array().unwrap().len(), "{:?}: tokens", q["text"]);
        for (pi, page) in pages.iter().enumerate() {
            let col = all_pages.iter().position(|p| p["file"] == page["file"]).unwrap();
            let want = r["scores"][qi][col].as_f64().unwrap() as f32;
            let score = maxsim(&got, &page_vectors[pi]);
            assert!((score - want).abs() < 1e-3, "query {qi} × {}: MaxSim {score} vs {want}", page["file"]);
        }
    }
}

#[test]
fn bad_pages_get_a_clear_error_and_the_server_keeps_serving() {
    let (dir, _) = fixture();
    let s = Server::start(&["--model-id", &dir, "--no-model-warmup"]);
    let bad = s.post_json("/embeddings", &json!({"input": "data:image/png;base64,AAAA", "modality": "image"}));
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.json()["error"]["param"], "input");
    assert!(bad.json()["error"]["message"].as_str().unwrap().contains("image"), "{}", bad.body);
    let audio = s.post_json("/embeddings", &json!({"input": file_uri("chirp-48k.wav"), "modality": "audio"}));
    assert_eq!(audio.status, 400, "{}", audio.body);
    let ok = s.post_json("/embeddings", &json!({"input": file_uri("wide.png"), "modality": "image"}));
    assert_eq!(ok.status, 200, "{}", ok.body);
    // Text documents rerank by MaxSim too (each embedded with the query template).
    let ranked = s.post_json("/rerank", &json!({"query": "red squares", "documents": ["two red squares", "a cat"]}));
    assert_eq!(ranked.status, 200, "{}", ranked.body);
    assert_eq!(ranked.json()["results"].as_array().unwrap().len(), 2);
}
