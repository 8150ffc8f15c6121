//! ColBERT (late interaction) on a tiny seeded model generated with transformers
//! (scripts/make_tiny_models.py): per-token vectors, and MaxSim reranking.

use crate::common;

use base64::Engine as _;
use common::{floats, repo_root, Server};
use serde_json::{json, Value};

fn fixture() -> (String, Value) {
    let dir = repo_root().join("tests/fixtures/tiny/colbert");
    let reference = serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
    (dir.to_string_lossy().into_owned(), reference)
}

fn rows(v: &Value) -> Vec<Vec<f32>> {
    v.as_array().unwrap().iter().map(floats).collect()
}

#[test]
fn per_token_vectors_match_the_reference() {
    let (dir, r) = fixture();
    let s = Server::start(&["--model-id", &dir, "--no-model-warmup"]);
    let m = &s.get("/models").json()["data"][0];
    assert_eq!(m["capabilities"], json!(["embed", "rerank"]));

    let body = s.post_json("/embeddings", &json!({"input": r["texts"]})).json();
    for (i, expected) in r["vectors"].as_array().unwrap().iter().enumerate() {
        let got = rows(&body["data"][i]["embedding"]);
        let want = rows(expected);
        assert_eq!(got.len(), want.len(), "text {i}: one vector per token, padding removed");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.len(), 16);
            let diff = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(diff < 1e-4, "text {i}: max diff {diff}");
        }
    }

    // Asking for ColBERT vectors by name (`output`, as BGE-M3 needs) gives a ColBERT model's own answer.
    let named = s.post_json("/embeddings", &json!({"input": r["texts"], "output": "colbert"})).json();
    assert_eq!(named["data"], body["data"]);

    // base64: the token vectors flattened row-major; the client reshapes with the vector size.
    let b64 = s.post_json("/embeddings", &json!({"input": r["texts"][0], "encoding_format": "base64"})).json();
    let bytes =
        base64::engine::general_purpose::STANDARD.decode(b64["data"][0]["embedding"].as_str().unwrap()).unwrap();
    let flat: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    let float = rows(&body["data"][0]["embedding"]);
    assert_eq!(flat, float.concat());

    // dimensions cuts every token vector (not the token list, as Infinity does), each rescaled to unit
    // length as the model's own vectors are.
    let cut = s.post_json("/embeddings", &json!({"input": r["texts"][0], "dimensions": 4})).json();
    let cut = rows(&cut["data"][0]["embedding"]);
    assert_eq!(cut.len(), float.len());
    for (c, f) in cut.iter().zip(&float) {
        let norm = f[..4].iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!(c.iter().zip(&f[..4]).all(|(c, f)| (c - f / norm).abs() < 1e-6), "{c:?} vs {:?}", &f[..4]);
    }
}

#[test]
fn maxsim_reranks_like_the_reference() {
    let (dir, r) = fixture();
    let s = Server::start(&["--model-id", &dir, "--no-model-warmup"]);
    let expected: Vec<f64> = r["maxsim"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    let body = json!({"query": r["query"], "documents": r["documents"], "raw_scores": true});
    let out = s.post_json("/rerank", &body).json();
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), expected.len());
    let mut order: Vec<usize> = (0..expected.len()).collect();
    order.sort_by(|&a, &b| expected[b].total_cmp(&expected[a]));
    let got_order: Vec<usize> = results.iter().map(|x| x["index"].as_u64().unwrap() as usize).collect();
    assert_eq!(got_order, order, "MaxSim order");
    for res in results {
        let i = res["index"].as_u64().unwrap() as usize;
        let score = res["relevance_score"].as_f64().unwrap();
        assert!((score - expected[i]).abs() < 1e-3, "doc {i}: {score} vs {}", expected[i]);
    }
    // Without raw_scores: the mean over query tokens.
    let query_tokens = r["query_vectors"].as_array().unwrap().len() as f64;
    let out = s.post_json("/rerank", &json!({"query": r["query"], "documents": r["documents"], "top_n": 1})).json();
    let best = &out["results"][0];
    assert_eq!(best["index"], order[0]);
    assert!((best["relevance_score"].as_f64().unwrap() - expected[order[0]] / query_tokens).abs() < 1e-4);
}
