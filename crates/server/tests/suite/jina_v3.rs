//! jina-embeddings-v3 over HTTP (tests/fixtures/tiny/jina-v3-embed, scripts/make_jina_v3.py): Jina's `task` field
//! on `/v1/embeddings` picks the task's LoRA adapter and puts its instruction first, as the model card's
//! `encode(task=t, prompt_name=t)` does; the vectors are the remote code's.

use serde_json::{json, Value};

use crate::common::{floats, repo_root, Server};

const NAME: &str = "jina-v3-embed";

fn reference() -> Value {
    let path = repo_root().join("tests/fixtures/tiny").join(NAME).join("reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn texts() -> Vec<String> {
    // The no-task case's inputs are the bare (stripped) texts.
    reference()["cases"][""]["inputs"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect()
}

fn assert_vectors(reply: &Value, want: &Value, what: &str) {
    for (i, w) in want["vectors"].as_array().unwrap().iter().enumerate() {
        let (got, w) = (floats(&reply["data"][i]["embedding"]), floats(w));
        let d = got.iter().zip(&w).map(|(g, w)| (g - w).abs()).fold(0.0, f32::max);
        assert!(got.len() == w.len() && d < 1e-4, "{what}, text {i}: differs by {d}");
    }
}

#[test]
fn the_task_field_picks_the_adapter_and_its_instruction() {
    let dir = repo_root().join("tests/fixtures/tiny").join(NAME);
    let s = Server::start(&["--model-id", dir.to_str().unwrap(), "--served-model-name", NAME]);
    let r = reference();
    let texts = texts();
    // No task: the base weights, no prompt.
    let reply = s.post_json("/v1/embeddings", &json!({"model": NAME, "input": texts}));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_vectors(&reply.json(), &r["cases"][""], "no task");
    let mut all = Vec::new();
    for task in r["tasks"].as_array().unwrap() {
        let task = task.as_str().unwrap();
        let want = &r["cases"][task];
        let reply = s.post_json("/v1/embeddings", &json!({"model": NAME, "input": texts, "task": task}));
        assert_eq!(reply.status, 200, "{task}: {}", reply.body);
        let reply = reply.json();
        assert_vectors(&reply, want, task);
        let tokens: u64 = want["token_counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).sum();
        assert_eq!(reply["usage"]["prompt_tokens"], tokens, "{task}: the instruction's tokens are counted");
        all.push(reply);
    }
    // An explicit prompt_name wins over the task's: retrieval.query's adapter with no instruction (the
    // "classification" prompt is empty) differs from both reference cases.
    let mixed = s
        .post_json(
            "/v1/embeddings",
            &json!({"model": NAME, "input": [texts[0]], "task": "retrieval.query", "prompt_name": "classification"}),
        )
        .json();
    let v = floats(&mixed["data"][0]["embedding"]);
    for case in ["", "retrieval.query"] {
        let w = floats(&r["cases"][case]["vectors"][0]);
        assert!(v.iter().zip(&w).any(|(a, b)| (a - b).abs() > 1e-3), "prompt_name is applied ({case})");
    }
    // Matryoshka: `dimensions` cuts and re-normalizes.
    let cut = s
        .post_json(
            "/v1/embeddings",
            &json!({"model": NAME, "input": [texts[1]], "task": "text-matching", "dimensions": 16}),
        )
        .json();
    let v = floats(&cut["data"][0]["embedding"]);
    let full = floats(&r["cases"]["text-matching"]["vectors"][1]);
    let norm = full[..16].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert_eq!(v.len(), 16);
    assert!(v.iter().zip(&full[..16]).all(|(a, b)| (a - b / norm).abs() < 1e-4));
    // Requests with different tasks at once, batched together, each get their own adapter's vectors.
    std::thread::scope(|scope| {
        let handles: Vec<_> = r["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|task| {
                let (s, texts) = (&s, &texts);
                scope.spawn(move || {
                    let body = json!({"model": NAME, "input": texts, "task": task});
                    (task.as_str().unwrap().to_string(), s.post_json("/v1/embeddings", &body).json())
                })
            })
            .collect();
        for h in handles {
            let (task, reply) = h.join().unwrap();
            assert_vectors(&reply, &r["cases"][task.as_str()], &format!("{task}, concurrent"));
        }
    });
    // An unknown task is a 422 (Infinity's status for invalid input) naming the model's tasks.
    let bad = s.post_json("/v1/embeddings", &json!({"model": NAME, "input": ["x"], "task": "summarize"}));
    assert_eq!(bad.status, 422, "{}", bad.body);
    assert!(bad.body.contains("retrieval.query") && bad.body.contains("summarize"), "{}", bad.body);
}

#[test]
fn a_task_on_a_model_without_adapters_is_refused() {
    let dir = repo_root().join("tests/fixtures/tiny/xlmr-embed");
    let s = Server::start(&["--model-id", dir.to_str().unwrap(), "--served-model-name", "xlmr"]);
    let bad = s.post_json("/v1/embeddings", &json!({"model": "xlmr", "input": ["x"], "task": "retrieval.query"}));
    assert_eq!(bad.status, 422, "{}", bad.body);
    assert!(bad.body.contains("no task adapters"), "{}", bad.body);
}
