//! TEI's API (text-embeddings-inference 1.9) beside Infinity's, on the spawned binary: every route, its
//! defaults and its error shape, checked against the Infinity routes' answers for the same inputs.

use crate::common;

use common::{cosine, floats, minilm, tiny, Server};
use serde_json::{json, Value};

fn serve() -> Server {
    Server::start(&[
        "--model-id",
        &minilm(),
        "--served-model-name",
        "mini",
        "--model-id",
        &tiny("bert-rerank"),
        "--served-model-name",
        "rerank",
        "--model-id",
        &tiny("bert-classify"),
        "--served-model-name",
        "classify",
        "--no-model-warmup",
    ])
}

fn ok(s: &Server, path: &str, body: Value) -> Value {
    let r = s.post_json(path, &body);
    assert_eq!(r.status, 200, "{path} {body}: {}", r.body);
    r.json()
}

fn tei_error(s: &Server, path: &str, body: Value, status: u16, kind: &str) -> String {
    let r = s.post_json(path, &body);
    assert_eq!(r.status, status, "{path} {body}: {}", r.body);
    let v = r.json();
    assert_eq!(v["error_type"], kind, "{v}");
    v["error"].as_str().unwrap().to_string()
}

fn infinity_vector(s: &Server, text: &str) -> Vec<f32> {
    floats(&ok(s, "/embeddings", json!({"model": "mini", "input": text}))["data"][0]["embedding"])
}

fn rows(v: &Value) -> Vec<Vec<f32>> {
    v.as_array().unwrap().iter().map(floats).collect()
}

#[test]
fn embed_matches_the_infinity_route_with_tei_options() {
    let s = serve();
    let hello = infinity_vector(&s, "Hello world");
    let other = infinity_vector(&s, "Another sentence");

    let one = rows(&ok(&s, "/embed", json!({"inputs": "Hello world"})));
    assert_eq!(one.len(), 1, "always a list of vectors");
    assert!(cosine(&one[0], &hello) > 0.999999);
    let both = rows(&ok(&s, "/embed", json!({"inputs": ["Hello world", "Another sentence"]})));
    assert!(cosine(&both[1], &other) > 0.999999);
    // Token ids, as given.
    let ids = rows(&ok(&s, "/embed", json!({"inputs": [101, 7592, 2088, 102]})));
    assert!(cosine(&ids[0], &hello) > 0.99999);

    // normalize: false is the raw pooled vector: same direction, not unit length.
    let raw = rows(&ok(&s, "/embed", json!({"inputs": "Hello world", "normalize": false})));
    let norm: f32 = raw[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() > 0.01, "{norm}");
    assert!(cosine(&raw[0], &hello) > 0.999999);
    // dimensions cut before normalization.
    let cut = rows(&ok(&s, "/embed", json!({"inputs": "Hello world", "dimensions": 64})));
    assert_eq!(cut[0].len(), 64);
    let n: f32 = cut[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((n - 1.0).abs() < 1e-5);
    assert!(cosine(&cut[0], &raw[0][..64]) > 0.999999);

    // Truncation: off is a 422 past the window; left keeps the end.
    let long = "word ".repeat(400);
    let msg = tei_error(&s, "/embed", json!({"inputs": long, "truncate": false}), 422, "Validation");
    assert!(msg.contains("256"), "{msg}");
    let right = rows(&ok(&s, "/embed", json!({"inputs": format!("{long} tail end")})));
    let left = rows(&ok(&s, "/embed", json!({"inputs": format!("start here {long}"), "truncation_direction": "left"})));
    let right_of_plain = rows(&ok(&s, "/embed", json!({"inputs": long, "truncate": true})));
    assert!(cosine(&right[0], &right_of_plain[0]) > 0.999999, "the tail past the window is cut");
    assert!(cosine(&left[0], &right_of_plain[0]) > 0.999999, "the head is cut");

    // TEI's errors.
    let msg = tei_error(&s, "/embed", json!({"inputs": ""}), 400, "Empty");
    assert!(msg.contains("cannot be empty"), "{msg}");
    tei_error(&s, "/embed", json!({"inputs": []}), 400, "Empty");
    tei_error(&s, "/embed", json!({"inputs": "x", "dimensions": 0}), 422, "Validation");
    tei_error(&s, "/embed", json!({"inputs": "x", "dimensions": 999}), 422, "Validation");
    let msg = tei_error(&s, "/embed", json!({"inputs": "x", "prompt_name": "query"}), 422, "Validation");
    assert!(msg.contains("query"), "{msg}");
    tei_error(&s, "/embed", json!({"inputs": "x", "model": "classify"}), 424, "Backend");
    tei_error(&s, "/embed", json!({"inputs": "x", "truncation_direction": "sideways"}), 422, "Validation");
    let r = s.request("POST", "/embed", Some(r#"{"inputs": "x"}"#), &[("Content-Type", "text/plain")]);
    assert_eq!((r.status, r.json()["error_type"].clone()), (415, json!("Validation")));
}

#[test]
fn embed_all_predict_rerank_similarity_tokenize_decode_info() {
    let s = serve();
    // embed_all: one vector per token, whose mean (MiniLM pools by mean) is the raw embedding.
    let all = ok(&s, "/embed_all", json!({"inputs": ["Hello world"]}));
    let tokens = rows(&all[0]);
    assert_eq!(tokens.len(), 4, "[CLS] hello world [SEP]");
    assert_eq!(tokens[0].len(), 384);
    let mean: Vec<f32> = (0..384).map(|d| tokens.iter().map(|t| t[d]).sum::<f32>() / 4.0).collect();
    assert!(cosine(&mean, &infinity_vector(&s, "Hello world")) > 0.99999);
    let msg = tei_error(&s, "/embed_sparse", json!({"inputs": "x"}), 424, "Backend");
    assert!(msg.contains("SPLADE"), "{msg}");

    // predict: TEI's shapes, scores equal to /classify's.
    let single = ok(&s, "/predict", json!({"inputs": "a fine day"}));
    let infinity = ok(&s, "/classify", json!({"model": "classify", "input": ["a fine day"]}));
    assert_eq!(single.as_array().unwrap().len(), 3, "{single}");
    assert_eq!(single[0]["label"], infinity["data"][0][0]["label"]);
    assert!((single[0]["score"].as_f64().unwrap() - infinity["data"][0][0]["score"].as_f64().unwrap()).abs() < 1e-6);
    let total: f64 = single.as_array().unwrap().iter().map(|p| p["score"].as_f64().unwrap()).sum();
    assert!((total - 1.0).abs() < 1e-5, "softmax");
    let batch =
        ok(&s, "/predict", json!({"inputs": [["a fine day"], ["a question", "an answer"]], "raw_scores": true}));
    assert_eq!(batch.as_array().unwrap().len(), 2);
    assert_eq!(batch[1].as_array().unwrap().len(), 3);
    tei_error(&s, "/predict", json!({"inputs": ["a", "b", "c"]}), 422, "Validation");
    tei_error(&s, "/predict", json!({"inputs": "x", "model": "mini"}), 424, "Backend");

    // rerank with `texts`: TEI's shape, the same scores as Infinity's shape.
    let docs = ["Paris is in France", "bananas are yellow", "the capital of France"];
    let tei = ok(&s, "/rerank", json!({"query": "capital of France", "texts": docs, "return_text": true}));
    let inf = ok(&s, "/rerank", json!({"model": "rerank", "query": "capital of France", "documents": docs}));
    for (t, i) in tei.as_array().unwrap().iter().zip(inf["results"].as_array().unwrap()) {
        assert_eq!(t["index"], i["index"]);
        assert!((t["score"].as_f64().unwrap() - i["relevance_score"].as_f64().unwrap()).abs() < 1e-6);
        assert_eq!(t["text"], docs[t["index"].as_u64().unwrap() as usize]);
    }
    let bare = ok(&s, "/rerank", json!({"query": "q", "texts": ["a"]}));
    assert!(bare[0].get("text").is_none(), "{bare}");
    tei_error(&s, "/rerank", json!({"query": "q", "texts": []}), 400, "Empty");
    tei_error(&s, "/rerank", json!({"query": "q", "texts": ["a"], "model": "mini"}), 424, "Backend");

    // similarity: cosine of the embeddings.
    let sims = ok(
        &s,
        "/similarity",
        json!({"inputs": {"source_sentence": "Hello world", "sentences": ["Hello world", "Another sentence"]},
               "parameters": {}}),
    );
    let a = infinity_vector(&s, "Hello world");
    let b = infinity_vector(&s, "Another sentence");
    assert!((sims[0].as_f64().unwrap() - 1.0).abs() < 1e-5);
    assert!((sims[1].as_f64().unwrap() - cosine(&a, &b)).abs() < 1e-5, "{sims}");
    tei_error(&s, "/similarity", json!({"inputs": {"source_sentence": "x", "sentences": []}}), 400, "Empty");
    // `POST /` takes a similarity body by its shape (huggingface_hub's sentence_similarity posts it there).
    let body = json!({"inputs": {"source_sentence": "Hello world", "sentences": ["Hello world", "Another sentence"]},
                      "parameters": {}});
    assert_eq!(ok(&s, "/", body), sims);

    // tokenize / decode round trip.
    let toks = ok(&s, "/tokenize", json!({"inputs": "Hello world"}));
    let t = toks[0].as_array().unwrap();
    assert_eq!(t.iter().map(|x| x["id"].as_u64().unwrap()).collect::<Vec<_>>(), vec![101, 7592, 2088, 102]);
    assert_eq!(t[0], json!({"id": 101, "text": "[CLS]", "special": true, "start": null, "stop": null}));
    assert_eq!(t[2], json!({"id": 2088, "text": "world", "special": false, "start": 6, "stop": 11}));
    let plain = ok(&s, "/tokenize", json!({"inputs": ["Hello world"], "add_special_tokens": false}));
    assert_eq!(plain[0].as_array().unwrap().len(), 2);
    let text = ok(&s, "/decode", json!({"ids": [101, 7592, 2088, 102]}));
    assert_eq!(text, json!(["hello world"]));
    let texts = ok(&s, "/decode", json!({"ids": [[101, 7592, 102], [2088]], "skip_special_tokens": false}));
    assert_eq!(texts, json!(["[CLS] hello [SEP]", "world"]));
    tei_error(&s, "/decode", json!({"ids": []}), 400, "Empty");

    // info describes a model; POST / routes by the first model's kind (an embedder here).
    let info = s.get("/info").json();
    assert_eq!(info["served_model_name"], "mini");
    assert_eq!(info["model_type"], json!({"embedding": {"pooling": "mean"}}));
    assert_eq!(info["max_input_length"], 256);
    let classifier = s.get("/info?model=classify").json();
    assert_eq!(classifier["model_type"]["classifier"]["id2label"]["2"], "positive");
    let root = rows(&ok(&s, "/", json!({"inputs": "Hello world"})));
    assert!(cosine(&root[0], &a) > 0.999999);
    let routed = ok(&s, "/", json!({"inputs": "a fine day", "model": "classify"}));
    assert_eq!(routed.as_array().unwrap().len(), 3);
    assert_eq!(s.get("/").status, 307, "browsers still get the docs");
}
