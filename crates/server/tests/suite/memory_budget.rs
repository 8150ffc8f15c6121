//! `--memory-budget`: a load that would pass it is refused, naming what holds the memory, at start-up and
//! through the admin API (409 before anything is read when the files are here; a failed entry with the reason
//! when the measured weights pass it); `/models` reports the budget and what holds it.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{minilm, repo_root, tiny, Reply, Server};

const ADMIN: &str = "admin-secret";

fn admin(s: &Server, method: &str, path: &str, body: Option<&Value>) -> Reply {
    let auth = format!("Bearer {ADMIN}");
    let body = body.map(Value::to_string);
    s.request(method, path, body.as_deref(), &[("Authorization", &auth), ("Content-Type", "application/json")])
}

/// Polls until `name` leaves the loading state; returns its admin entry.
fn settled(s: &Server, name: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let list = admin(s, "GET", "/admin/models", None).json();
        let e = list["data"].as_array().unwrap().iter().find(|e| e["name"] == name).cloned();
        let e = e.unwrap_or_else(|| panic!("`{name}` is not listed\n{}", s.logs()));
        if e["state"] != "loading" {
            return e;
        }
        assert!(Instant::now() < deadline, "`{name}` still loading\n{}", s.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn mpnet() -> String {
    repo_root().join("models/all-mpnet-base-v2").to_string_lossy().into_owned()
}

#[test]
fn loads_past_the_budget_are_refused_naming_what_holds_it() {
    let s = Server::start(&[
        "--model-id",
        &minilm(),
        "--served-model-name",
        "minilm",
        "--admin-key",
        ADMIN,
        "--memory-budget",
        "256Mi",
        "--no-model-warmup",
    ]);
    let models = s.get("/models").json();
    let minilm_bytes = models["data"][0]["weight_bytes"].as_u64().unwrap();
    assert_eq!(models["memory_budget"], json!({"cpu": 256u64 << 20}));
    assert_eq!(models["memory_held"], json!({"cpu": minilm_bytes}));

    // all-mpnet-base-v2's layers alone are 340 MB of float32, past the budget: refused at once, before any weight
    // is read.
    let reply = admin(&s, "POST", "/admin/models", Some(&json!({"model_id": mpnet(), "served_model_name": "mpnet"})));
    let err = reply.assert_error(409);
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("model `mpnet` would need at least")
            && message.contains("on cpu, and the memory budget there is 256 MiB")
            && message.contains("`minilm`"),
        "{message}"
    );
    assert_eq!(err["error"]["param"], "model_id");
    assert!(unlisted(&s, "mpnet"), "a refused load is not listed");

    // In int8 (a byte per number, 85 MB) it fits beside MiniLM.
    let body = json!({"model_id": mpnet(), "served_model_name": "mpnet", "dtype": "int8", "model_warmup": false});
    let reply = admin(&s, "POST", "/admin/models", Some(&body));
    assert_eq!(reply.status, 202, "{}", reply.body);
    let reserved = reply.json()["memory"]["cpu"].as_u64().unwrap();
    assert!(reserved > 80_000_000, "the reservation while loading: {reserved}");
    let e = settled(&s, "mpnet");
    assert_eq!(e["state"], "ready", "{e}\n{}", s.logs());
    let mpnet_bytes = e["weight_bytes"].as_u64().unwrap();
    assert!(mpnet_bytes >= reserved, "held {mpnet_bytes}, reserved {reserved}");
    let models = s.get("/models").json();
    assert_eq!(models["memory_held"]["cpu"].as_u64().unwrap(), minilm_bytes + mpnet_bytes);
    let reply = s.post_json("/embeddings", &json!({"model": "mpnet", "input": ["within budget"]}));
    assert_eq!(reply.status, 200, "{}", reply.body);

    // Removed, its bytes leave what is held.
    assert_eq!(admin(&s, "DELETE", "/admin/models/mpnet", None).status, 200);
    assert_eq!(s.get("/models").json()["memory_held"], json!({"cpu": minilm_bytes}));
}

fn unlisted(s: &Server, name: &str) -> bool {
    let list = admin(s, "GET", "/admin/models", None).json();
    !list["data"].as_array().unwrap().iter().any(|e| e["name"] == name)
}

#[test]
fn a_start_up_past_the_budget_stops_naming_the_budget() {
    let logs = Server::try_start(&["--model-id", &mpnet(), "--memory-budget", "100Mi"], &[])
        .err()
        .expect("mpnet's weights do not fit 100 MiB");
    assert!(logs.contains("memory budget there is 100 MiB"), "{logs}");
    let bad = Server::try_start(&["--engine", "debug", "--model-id", "m", "--memory-budget", "lots"], &[])
        .err()
        .expect("a bad budget is refused");
    assert!(bad.contains("--memory-budget") && bad.contains("neither bytes"), "{bad}");
}

/// The estimate before a load is a lower bound; a model whose measured weights then pass the budget is not
/// served, and its entry says why.
#[test]
fn a_load_whose_measured_weights_pass_the_budget_fails_with_the_reason() {
    let model = tiny("bert-rerank");
    let body = json!({"model_id": model, "served_model_name": "reranker", "model_warmup": false});
    let (estimate, held) = {
        let s = Server::start(&["--engine", "debug", "--model-id", "m", "--admin-key", ADMIN]);
        let reply = admin(&s, "POST", "/admin/models", Some(&body));
        assert_eq!(reply.status, 202, "{}", reply.body);
        let estimate = reply.json()["memory"]["cpu"].as_u64().unwrap();
        let e = settled(&s, "reranker");
        (estimate, e["weight_bytes"].as_u64().unwrap())
    };
    assert!(estimate > 0 && estimate < held, "estimate {estimate}, held {held}");
    let budget = ((estimate + held) / 2).to_string();
    let s = Server::start(&["--engine", "debug", "--model-id", "m", "--admin-key", ADMIN, "--memory-budget", &budget]);
    let reply = admin(&s, "POST", "/admin/models", Some(&body));
    assert_eq!(reply.status, 202, "the estimate fits: {}", reply.body);
    let e = settled(&s, "reranker");
    assert_eq!(e["state"], "failed", "{e}");
    let reason = e["reason"].as_str().unwrap();
    assert!(reason.contains("model `reranker` holds") && reason.contains("memory budget"), "{reason}");
    let reply = s.post_json("/rerank", &json!({"model": "reranker", "query": "q", "documents": ["d"]}));
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert_eq!(s.get("/models").json()["memory_held"], json!({"cpu": 0}));
}
