//! Qwen3-VL-Embedding and Qwen3-VL-Reranker over HTTP, on text (scripts/make_qwen3_vl.py): the chat frame with
//! the default instruction unless the request names the `query` prompt, on Infinity's and TEI's routes; the
//! reranker by default (its card says text-ranking), with the request's own instruction; images refused with
//! a clear 4xx while the vision tower is not built.

use crate::common;

use common::{floats, tiny, Server};
use serde_json::{json, Value};

fn reference(name: &str) -> Value {
    let path = std::path::Path::new(&tiny(name)).join("reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    let d = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    assert!(d < 1e-4, "{what}: {d}");
}

#[test]
fn the_embedder_frames_each_text_with_its_instruction() {
    let r = reference("qwen3-vl-embed");
    let inputs = r["inputs"].as_array().unwrap();
    let model = tiny("qwen3-vl-embed");
    let s = Server::start(&["--model-id", &model, "--no-model-warmup"]);
    // No prompt named: the default instruction (inputs 0, 2, 4 and 5 of the reference).
    let plain: Vec<&Value> = inputs.iter().filter(|i| i["instruction"].is_null()).collect();
    let texts: Vec<&str> = plain.iter().map(|i| i["text"].as_str().unwrap()).collect();
    let infinity = s.post_json("/embeddings", &json!({"input": texts, "encoding_format": "float"})).json();
    let tei = s.post_json("/embed", &json!({"inputs": texts})).json();
    for (k, input) in plain.iter().enumerate() {
        let want = floats(&input["embedding"]);
        close(&floats(&infinity["data"][k]["embedding"]), &want, &format!("Infinity, text {k}"));
        close(&floats(&tei[k]), &want, &format!("TEI, text {k}"));
    }
    // The chat frame's tokens are counted as the model sees them.
    let counted: u64 = plain.iter().map(|i| i["input_ids"].as_array().unwrap().len() as u64).sum();
    assert_eq!(infinity["usage"]["prompt_tokens"].as_u64(), Some(counted));
    // `prompt_name: query`: the model card's retrieval instruction.
    let query = &inputs[1];
    let body = json!({"input": [query["text"]], "prompt_name": "query", "encoding_format": "float"});
    let got = s.post_json("/embeddings", &body).json();
    close(&floats(&got["data"][0]["embedding"]), &floats(&query["embedding"]), "the query prompt");
    let got = s.post_json("/embed", &json!({"inputs": query["text"], "prompt_name": "query"})).json();
    close(&floats(&got[0]), &floats(&query["embedding"]), "the query prompt on TEI's route");
    // An image is refused, naming why, and the server goes on.
    let png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
    let reply = s.post_json("/embeddings", &json!({"input": [png], "modality": "image"}));
    assert!((400..500).contains(&reply.status), "{}: {}", reply.status, reply.body);
    assert!(reply.body.contains("image"), "{}", reply.body);
    assert_eq!(s.post_json("/embeddings", &json!({"input": ["still here"]})).status, 200);
}

#[test]
fn the_reranker_scores_with_its_prompt_and_the_requests_instruction() {
    let r = reference("qwen3-vl-rerank");
    let model = tiny("qwen3-vl-rerank");
    let s = Server::start(&["--model-id", &model, "--no-model-warmup"]);
    let docs = &r["documents"];
    let scores = |body: Value| -> Vec<f32> {
        let reply = s.post_json("/rerank", &body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        let mut by_index = vec![f32::NAN; docs.as_array().unwrap().len()];
        for x in reply.json()["results"].as_array().unwrap() {
            by_index[x["index"].as_u64().unwrap() as usize] = x["relevance_score"].as_f64().unwrap() as f32;
        }
        by_index
    };
    close(&scores(json!({"query": r["query"], "documents": docs})), &floats(&r["default"]["scores"]), "scores");
    let raw = scores(json!({"query": r["query"], "documents": docs, "raw_scores": true}));
    close(&raw, &floats(&r["default"]["logit_differences"]), "raw scores");
    let own = json!({"query": r["query"], "documents": docs, "instruction": r["other"]["instruction"]});
    close(&scores(own), &floats(&r["other"]["scores"]), "the request's instruction");
}
