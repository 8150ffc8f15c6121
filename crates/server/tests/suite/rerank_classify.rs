//! Rerank, classify and the XLM-RoBERTa family, on tiny seeded random models generated with transformers
//! (scripts/make_tiny_models.py; reference outputs committed beside each model).

use crate::common;

use std::path::PathBuf;

use common::{cosine, floats, repo_root, Server};
use serde_json::{json, Value};

fn tiny(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/tiny").join(name)
}

fn reference(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(tiny(name).join("reference.json")).unwrap()).unwrap()
}

/// All the tiny models in one process, each under its folder name.
fn serve_all() -> Server {
    let names =
        ["bert-rerank", "xlmr-rerank", "bert-classify", "bert-multilabel", "xlmr-embed", "mpnet-rerank", "mpnet-embed"];
    let mut args: Vec<String> = Vec::new();
    for n in names {
        args.extend(["--model-id".into(), tiny(n).to_string_lossy().into_owned()]);
    }
    args.extend(["--served-model-name".into(), names.join(";"), "--no-model-warmup".into()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start(&refs)
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn check_reranker(s: &Server, name: &str) {
    let r = reference(name);
    let docs = r["documents"].as_array().unwrap();
    let logits: Vec<f64> = r["logits"].as_array().unwrap().iter().map(|l| l[0].as_f64().unwrap()).collect();
    let body = json!({"model": name, "query": r["query"], "documents": docs, "raw_scores": true});
    let out = s.post_json("/rerank", &body).json();
    assert_eq!(out["object"], "rerank");
    assert_eq!(out["model"], name);
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), docs.len());
    for res in results {
        let i = res["index"].as_u64().unwrap() as usize;
        let got = res["relevance_score"].as_f64().unwrap();
        assert!((got - logits[i]).abs() < 1e-4, "{name} doc {i}: {got} vs {}", logits[i]);
        assert!(res["document"].is_null(), "document is null unless asked");
    }
    let scores: Vec<f64> = results.iter().map(|r| r["relevance_score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "sorted best first: {scores:?}");
    let tokens: u64 = r["token_counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).sum();
    assert_eq!(out["usage"]["total_tokens"], tokens, "usage counts the pairs' real tokens");

    // Default: sigmoid of the logit; top_n keeps the best; documents echoed on request.
    let body = json!({"model": name, "query": r["query"], "documents": docs, "top_n": 2, "return_documents": true});
    let out = s.post_json("/rerank", &body).json();
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for res in results {
        let i = res["index"].as_u64().unwrap() as usize;
        assert!((res["relevance_score"].as_f64().unwrap() - sigmoid(logits[i])).abs() < 1e-4);
        // Stripped, as Infinity echoes it.
        assert_eq!(res["document"], docs[i].as_str().unwrap().trim());
    }
    assert!((results[0]["relevance_score"].as_f64().unwrap() - sigmoid(scores[0])).abs() < 1e-6, "best first");
    let all = s.post_json("/rerank", &json!({"model": name, "query": "q", "documents": ["a", "b"], "top_n": 50}));
    assert_eq!(all.json()["results"].as_array().unwrap().len(), 2, "top_n past the list returns all");
}

#[test]
fn rerankers_match_transformers() {
    let s = serve_all();
    check_reranker(&s, "bert-rerank");
    check_reranker(&s, "xlmr-rerank");
    check_reranker(&s, "mpnet-rerank");
}

#[test]
fn classifiers_match_transformers() {
    let s = serve_all();
    for name in ["bert-classify", "bert-multilabel"] {
        let r = reference(name);
        let multi = r["problem_type"] == "multi_label_classification";
        let texts = r["texts"].clone();
        let raw = s.post_json("/classify", &json!({"model": name, "input": texts, "raw_scores": true})).json();
        assert_eq!(raw["object"], "classify");
        let probs = s.post_json("/classify", &json!({"model": name, "input": texts})).json();
        let cfg: Value =
            serde_json::from_str(&std::fs::read_to_string(tiny(name).join("config.json")).unwrap()).unwrap();
        for (i, logits) in r["logits"].as_array().unwrap().iter().enumerate() {
            let logits: Vec<f64> = logits.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
            let label = |k: usize| cfg["id2label"][k.to_string()].as_str().unwrap().to_string();
            let expect_probs: Vec<f64> = if multi {
                logits.iter().map(|&x| sigmoid(x)).collect()
            } else {
                let m = logits.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = logits.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                e.iter().map(|x| x / z).collect()
            };
            for (body, expected) in [(&raw, &logits), (&probs, &expect_probs)] {
                let got = body["data"][i].as_array().unwrap();
                assert_eq!(got.len(), logits.len(), "every label");
                let scores: Vec<f64> = got.iter().map(|g| g["score"].as_f64().unwrap()).collect();
                assert!(scores.windows(2).all(|w| w[0] >= w[1]), "sorted: {scores:?}");
                for g in got {
                    let k = (0..logits.len()).find(|&k| label(k) == g["label"]).expect("known label");
                    let score = g["score"].as_f64().unwrap();
                    assert!(
                        (score - expected[k]).abs() < 1e-4,
                        "{name} text {i} label {k}: {score} vs {}",
                        expected[k]
                    );
                }
            }
        }
        let tokens: u64 = r["token_counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).sum();
        assert_eq!(raw["usage"]["prompt_tokens"], tokens);
    }
    // A single string is accepted too.
    let one = s.post_json("/classify", &json!({"model": "bert-classify", "input": "I love this movie"})).json();
    assert_eq!(one["data"].as_array().unwrap().len(), 1);
}

#[test]
fn xlm_roberta_and_mpnet_embedders_match_sentence_transformers() {
    let s = serve_all();
    for name in ["xlmr-embed", "mpnet-embed"] {
        check_embedder(&s, name);
    }
}

fn check_embedder(s: &Server, name: &str) {
    let r = reference(name);
    let out = s.post_json("/embeddings", &json!({"model": name, "input": r["texts"]})).json();
    for (i, expected) in r["vectors"].as_array().unwrap().iter().enumerate() {
        let got = floats(&out["data"][i]["embedding"]);
        let expected = floats(expected);
        let max_diff = got.iter().zip(&expected).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(max_diff < 1e-4 && cosine(&got, &expected) > 0.9999, "{name} text {i}: max diff {max_diff}");
    }
    let tokens: u64 = r["token_counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).sum();
    assert_eq!(out["usage"]["prompt_tokens"], tokens);
}

#[test]
fn capabilities_and_wrong_task_errors() {
    let s = serve_all();
    let models = s.get("/models").json();
    let caps: Vec<(String, Value)> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["id"].as_str().unwrap().to_string(), m["capabilities"].clone()))
        .collect();
    assert_eq!(
        caps,
        vec![
            ("bert-rerank".into(), json!(["rerank"])),
            ("xlmr-rerank".into(), json!(["rerank"])),
            ("bert-classify".into(), json!(["classify"])),
            ("bert-multilabel".into(), json!(["classify"])),
            ("xlmr-embed".into(), json!(["embed"])),
            ("mpnet-rerank".into(), json!(["rerank"])),
            ("mpnet-embed".into(), json!(["embed"])),
        ]
    );
    let v = s.post_json("/rerank", &json!({"model": "xlmr-embed", "query": "q", "documents": ["d"]})).assert_error(400);
    assert!(v["error"]["message"].as_str().unwrap().contains("supports: embed"), "{v}");
    let v = s.post_json("/embeddings", &json!({"model": "bert-rerank", "input": "x"})).assert_error(400);
    assert!(v["error"]["message"].as_str().unwrap().contains("supports: rerank"), "{v}");
    s.post_json("/classify", &json!({"model": "bert-rerank", "input": ["x"]})).assert_error(400);
    s.post_json("/rerank", &json!({"model": "bert-classify", "query": "q", "documents": ["d"]})).assert_error(400);
}

#[test]
fn rerank_and_classify_schema_errors() {
    let s = serve_all();
    let m = "bert-rerank";
    for (body, param) in [
        (json!({"model": m, "query": "q", "documents": ["d"], "top_n": 0}), Some("top_n")),
        (json!({"model": m, "query": "q", "documents": ["d"], "top_n": -3}), Some("top_n")),
        (json!({"model": m, "query": "q", "documents": []}), Some("documents")),
        (json!({"model": m, "documents": ["d"]}), None),
        (json!({"model": m, "query": "q"}), None),
        (json!({"model": m, "query": 5, "documents": ["d"]}), Some("query")),
        (json!({"model": m, "query": "q", "documents": "d"}), Some("documents")),
        (json!({"model": m, "query": "q", "documents": ["d"], "raw_scores": "yes"}), Some("raw_scores")),
    ] {
        let v = s.post_json("/rerank", &body).assert_error(422);
        if let Some(p) = param {
            assert_eq!(v["error"]["param"], p, "{body}: {v}");
        }
    }
    for body in [json!({"model": "bert-classify", "input": []}), json!({"model": "bert-classify"})] {
        s.post_json("/classify", &body).assert_error(422);
    }
    let long = "y".repeat(122_881);
    s.post_json("/rerank", &json!({"model": m, "query": long, "documents": ["d"]})).assert_error(422);
    assert_eq!(s.post_json("/v1/rerank", &json!({"model": m, "query": "q", "documents": ["d"]})).status, 200);
}
