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

/// vLLM's chat form: the conversation rendered by the checkpoint's chat template. With the system instruction
/// and `add_generation_prompt: true` it is the reference's prompt, so the same vector; vLLM's default (no
/// generation prompt) is another prompt. Image parts are refused, naming the part.
#[test]
fn messages_render_through_the_models_chat_template() {
    let r = reference("qwen3-vl-embed");
    let query = &r["inputs"][1];
    let model = tiny("qwen3-vl-embed");
    let s = Server::start(&["--model-id", &model, "--no-model-warmup"]);
    let messages = json!([
        {"role": "system", "content": [{"type": "text", "text": query["instruction"]}]},
        {"role": "user", "content": [{"type": "text", "text": query["text"]}]}
    ]);
    let body = json!({"messages": messages, "add_generation_prompt": true, "encoding_format": "float"});
    let reply = s.post_json("/v1/embeddings", &body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let got = reply.json();
    assert_eq!(got["data"].as_array().unwrap().len(), 1, "one conversation, one vector");
    close(&floats(&got["data"][0]["embedding"]), &floats(&query["embedding"]), "messages");
    let ids = query["input_ids"].as_array().unwrap().len() as u64;
    assert_eq!(got["usage"]["prompt_tokens"].as_u64(), Some(ids));
    let plain = s.post_json("/v1/embeddings", &json!({"messages": messages})).json();
    let fewer = plain["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(fewer < ids, "no `<|im_start|>assistant\\n`: {fewer} tokens against {ids}");

    let image = json!([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}, {"type": "text", "text": "a cat"}]}]);
    let reply = s.post_json("/v1/embeddings", &json!({"messages": image}));
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(reply.body.contains("messages[0].content[0]") && reply.body.contains("image_url"), "{}", reply.body);
    for (body, field) in [
        (json!({"messages": messages, "input": "x"}), "messages"),
        (json!({"messages": messages, "prompt_name": "query"}), "prompt_name"),
        (json!({"messages": [{"content": "no role"}]}), "messages[0].role"),
        (json!({"messages": "not a list"}), "messages"),
    ] {
        let reply = s.post_json("/v1/embeddings", &body);
        assert!((400..500).contains(&reply.status), "{body}: {}", reply.body);
        assert_eq!(reply.json()["error"]["param"].as_str(), Some(field), "{body}: {}", reply.body);
    }
}

/// A model without a chat template refuses messages, naming why; a request's own `chat_template` is used, and
/// `add_special_tokens` gives the tokenizer's special tokens, as the plain input gets them.
#[test]
fn a_requests_chat_template_serves_a_model_without_one() {
    let s = Server::start(&["--model-id", &common::minilm(), "--no-model-warmup"]);
    let messages = json!([{"role": "user", "content": "hello world"}]);
    let reply = s.post_json("/v1/embeddings", &json!({"messages": messages}));
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(reply.body.contains("chat template"), "{}", reply.body);
    let template = "{% for m in messages %}{{ m.content }}{% endfor %}";
    let body = json!({"messages": messages, "chat_template": template, "add_special_tokens": true,
                      "encoding_format": "float"});
    let got = s.post_json("/v1/embeddings", &body).json();
    let want = s.post_json("/v1/embeddings", &json!({"input": "hello world", "encoding_format": "float"})).json();
    close(&floats(&got["data"][0]["embedding"]), &floats(&want["data"][0]["embedding"]), "the same text");
    let broken = json!({"messages": messages, "chat_template": "{% for m in messages %}"});
    let reply = s.post_json("/v1/embeddings", &broken);
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(reply.body.contains("chat template"), "{}", reply.body);
}
