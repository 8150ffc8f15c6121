//! The admin API (`--admin-key`): models loaded, served, unloaded and reloaded while another model serves a
//! steady stream of requests, every one of which is checked.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{cosine, floats, minilm, repo_root, tiny, Reply, Server};

const ADMIN: &str = "admin-secret";
const API: &str = "api-secret";

fn admin(s: &Server, method: &str, path: &str, body: Option<&Value>) -> Reply {
    let auth = format!("Bearer {ADMIN}");
    let body = body.map(Value::to_string);
    s.request(method, path, body.as_deref(), &[("Authorization", &auth), ("Content-Type", "application/json")])
}

fn api(s: &Server, path: &str, body: &Value) -> Reply {
    let auth = format!("Bearer {API}");
    s.request("POST", path, Some(&body.to_string()), &[("Authorization", &auth), ("Content-Type", "application/json")])
}

/// The admin entry of `name`, if listed.
fn entry(s: &Server, name: &str) -> Option<Value> {
    let list = admin(s, "GET", "/admin/models", None);
    assert_eq!(list.status, 200, "{}", list.body);
    list.json()["data"].as_array().unwrap().iter().find(|e| e["name"] == name).cloned()
}

/// Polls until `name` leaves the loading state; returns its entry.
fn settled(s: &Server, name: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let e = entry(s, name).unwrap_or_else(|| panic!("`{name}` is not listed\n{}", s.logs()));
        if e["state"] != "loading" {
            return e;
        }
        assert!(Instant::now() < deadline, "`{name}` still loading\n{}", s.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The tiny cross-encoder's reference: its pairs and the logits transformers gives them.
fn rerank_reference() -> Value {
    let path = repo_root().join("tests/fixtures/tiny/bert-rerank/reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The reference pairs' raw scores through `/rerank` on the served name `name`.
fn rerank_logits(s: &Server, name: &str) -> Reply {
    let r = rerank_reference();
    api(s, "/rerank", &json!({"model": name, "query": r["query"], "documents": r["documents"], "raw_scores": true}))
}

fn check_reference_logits(reply: &Reply) {
    assert_eq!(reply.status, 200, "{}", reply.body);
    let r = rerank_reference();
    let want: Vec<f32> = r["logits"].as_array().unwrap().iter().map(|l| l[0].as_f64().unwrap() as f32).collect();
    let mut got = vec![f32::NAN; want.len()];
    for x in reply.json()["results"].as_array().unwrap() {
        got[x["index"].as_u64().unwrap() as usize] = x["relevance_score"].as_f64().unwrap() as f32;
    }
    let d = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    assert!(d < 1e-4, "{got:?} vs {want:?}");
}

fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn admin_routes_are_absent_without_an_admin_key() {
    let s = Server::start(&["--engine", "debug", "--model-id", "m"]);
    assert_eq!(s.get("/admin/models").status, 404);
    let reply = s.post_json("/admin/models", &json!({"model_id": "m2", "engine": "debug"}));
    assert_eq!(reply.status, 404, "{}", reply.body);
}

#[test]
fn models_load_serve_unload_and_reload_while_another_model_serves() {
    let minilm = minilm();
    let s = Server::start(&[
        "--model-id",
        &minilm,
        "--served-model-name",
        "minilm",
        "--admin-key",
        ADMIN,
        "--api-key",
        API,
        "--no-model-warmup",
    ]);

    // The admin key and only it opens the admin routes; it is not an API key.
    assert_eq!(
        s.get("/admin/models").assert_error(401)["error"]["message"],
        "missing admin key: send `Authorization: Bearer <key>`"
    );
    let with_api_key = s.request("GET", "/admin/models", None, &[("Authorization", &format!("Bearer {API}"))]);
    assert_eq!(with_api_key.status, 401);
    let bad = api(&s, "/embeddings", &json!({"model": "minilm", "input": "x"}));
    assert_eq!(bad.status, 200, "{}", bad.body);
    let with_admin_key = s.request(
        "POST",
        "/embeddings",
        Some(&json!({"model": "minilm", "input": "x"}).to_string()),
        &[("Authorization", &format!("Bearer {ADMIN}")), ("Content-Type", "application/json")],
    );
    assert_eq!(with_admin_key.status, 401, "the admin key is not an API key");
    let e = entry(&s, "minilm").unwrap();
    assert_eq!(e["state"], "ready");
    assert!(e["weight_bytes"].as_u64().unwrap() > 30_000_000, "{e}");

    // A steady stream to MiniLM for the whole test, each vector checked against the first.
    let text = "A man is playing a guitar on the stage.";
    let reference =
        floats(&api(&s, "/embeddings", &json!({"model": "minilm", "input": text})).json()["data"][0]["embedding"]);
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    let traffic = {
        let (stop, served, base) = (stop.clone(), served.clone(), s.base.clone());
        std::thread::spawn(move || {
            let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(60)).build();
            let mut failures = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let reply = agent
                    .post(&format!("{base}/embeddings"))
                    .set("Authorization", &format!("Bearer {API}"))
                    .send_json(json!({"model": "minilm", "input": [text]}));
                match reply {
                    Ok(r) => {
                        let v: Value = r.into_json().unwrap();
                        let got = floats(&v["data"][0]["embedding"]);
                        if cosine(&got, &reference) < 0.99999 {
                            failures.push(format!("vector changed: cosine {}", cosine(&got, &reference)));
                        }
                        served.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => failures.push(e.to_string()),
                }
            }
            failures
        })
    };

    // Each step below waits until the stream has been answered again, so the traffic spans every step.
    let flowing = |what: &str| {
        let (start, deadline) = (served.load(Ordering::SeqCst), Instant::now() + Duration::from_secs(60));
        while served.load(Ordering::SeqCst) < start + 2 {
            assert!(Instant::now() < deadline, "the steady stream stalled {what}\n{}", s.logs());
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    flowing("before the load");

    // Load a reranker at run time: 202 at once, then ready, then it answers as the reference does.
    let body = json!({"model_id": tiny("bert-rerank"), "served_model_name": "reranker", "batch_size": 8});
    let reply = admin(&s, "POST", "/admin/models", Some(&body));
    assert_eq!(reply.status, 202, "{}", reply.body);
    assert_eq!(reply.json()["state"], "loading");
    assert_eq!(settled(&s, "reranker")["state"], "ready", "{}", s.logs());
    check_reference_logits(&rerank_logits(&s, "reranker"));
    flowing("after the load");
    let listed: Vec<String> = s.request("GET", "/models", None, &[("Authorization", &format!("Bearer {API}"))]).json()
        ["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, ["minilm", "reranker"]);
    let total = |s: &Server| {
        let models = s.request("GET", "/models", None, &[("Authorization", &format!("Bearer {API}"))]).json();
        models["weight_bytes_total"].as_u64().unwrap()
    };
    let reranker_bytes = entry(&s, "reranker").unwrap()["weight_bytes"].as_u64().unwrap();
    let minilm_bytes = entry(&s, "minilm").unwrap()["weight_bytes"].as_u64().unwrap();
    assert!(reranker_bytes > 0);
    assert_eq!(total(&s), minilm_bytes + reranker_bytes, "the process total counts both models");

    // The same name again: 409. Options the command line would refuse: 422 naming them; unknown fields: 4xx.
    assert_eq!(
        admin(&s, "POST", "/admin/models", Some(&body)).assert_error(409)["error"]["param"],
        "served_model_name"
    );
    let bad = admin(&s, "POST", "/admin/models", Some(&json!({"model_id": tiny("bert-rerank"), "dtype": "float7"})));
    assert!(bad.assert_error(422)["error"]["message"].as_str().unwrap().contains("--dtype"), "{}", bad.body);
    let unknown = admin(&s, "POST", "/admin/models", Some(&json!({"model_id": "x", "port": 1})));
    assert!((400..500).contains(&unknown.status) && unknown.body.contains("port"), "{}", unknown.body);

    // A load that fails is listed with its reason, and can be forgotten.
    let missing = repo_root().join("tests/fixtures/tiny/no-such-model").to_string_lossy().into_owned();
    let reply = admin(&s, "POST", "/admin/models", Some(&json!({"model_id": missing, "served_model_name": "ghost"})));
    assert_eq!(reply.status, 202, "{}", reply.body);
    let ghost = settled(&s, "ghost");
    assert_eq!(ghost["state"], "failed");
    assert!(ghost["reason"].as_str().unwrap().contains("no-such-model"), "{ghost}");
    assert_eq!(api(&s, "/embeddings", &json!({"model": "ghost", "input": "x"})).status, 404);
    assert_eq!(admin(&s, "DELETE", "/admin/models/ghost", None).status, 200);
    assert!(entry(&s, "ghost").is_none());

    // Unload: gone from routing and listings; then loaded again under the same name.
    let reply = admin(&s, "DELETE", "/admin/models/reranker", None);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["state"], "removed");
    assert!(entry(&s, "reranker").is_none());
    assert_eq!(rerank_logits(&s, "reranker").assert_error(404)["error"]["param"], "model");
    assert_eq!(admin(&s, "DELETE", "/admin/models/reranker", None).status, 404);
    flowing("after the unload");
    assert_eq!(total(&s), minilm_bytes, "an unloaded model's weights leave the total");
    assert_eq!(admin(&s, "POST", "/admin/models", Some(&body)).status, 202);
    assert_eq!(settled(&s, "reranker")["state"], "ready");
    check_reference_logits(&rerank_logits(&s, "reranker"));
    assert_eq!(s.get("/health").status, 200);
    flowing("after the reload");

    stop.store(true, Ordering::SeqCst);
    let failures = traffic.join().unwrap();
    assert!(failures.is_empty(), "{failures:?}");
}

/// Unloading frees the model's memory: with MiniLM serving, the process's resident set returns to within 10 %
/// of what it was before all-mpnet-base-v2 (420 MB of f32 weights) was loaded and used.
#[test]
fn an_unloaded_model_gives_its_memory_back() {
    let mpnet = repo_root().join("models/all-mpnet-base-v2").to_string_lossy().into_owned();
    let s = Server::start(&["--model-id", &minilm(), "--served-model-name", "minilm", "--admin-key", ADMIN]);
    assert_eq!(s.post_json("/embeddings", &json!({"model": "minilm", "input": ["a baseline"]})).status, 200);
    let before = resident_kib(s.pid());
    let body = json!({"model_id": mpnet, "served_model_name": "mpnet", "batch_size": 4});
    assert_eq!(admin(&s, "POST", "/admin/models", Some(&body)).status, 202);
    assert_eq!(settled(&s, "mpnet")["state"], "ready", "{}", s.logs());
    let reply = s.post_json("/embeddings", &json!({"model": "mpnet", "input": ["memory comes back"]}));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let loaded = resident_kib(s.pid());
    assert!(loaded > before + 200_000, "mpnet should hold hundreds of MB: {before} -> {loaded} KiB");
    assert_eq!(admin(&s, "DELETE", "/admin/models/mpnet", None).status, 200);
    let after = resident_kib(s.pid());
    eprintln!("resident set: {before} KiB before the load, {loaded} KiB loaded, {after} KiB after the unload");
    assert!(
        (after as f64) < before as f64 * 1.10,
        "resident set {before} KiB before the load, {loaded} KiB loaded, {after} KiB after the unload"
    );
}
