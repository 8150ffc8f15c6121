//! The serving engine over HTTP: failure isolation, backpressure, abandoned work, concurrency,
//! graceful shutdown. Most use the weight-free debug engine, whose inputs can inject faults
//! (`__fail__`, `__panic__`) and delays (`__slow__`, 400 ms per batch).

use crate::common;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{cosine, floats, minilm, repo_root, Server};
use serde_json::json;

fn debug_server(extra: &[&str]) -> Server {
    let mut args = vec!["--engine", "debugengine", "--model-id", "debug/model"];
    args.extend_from_slice(extra);
    Server::start(&args)
}

fn stats(s: &Server) -> serde_json::Value {
    s.get("/models").json()["data"][0]["stats"].clone()
}

#[test]
fn a_failing_batch_fails_only_its_requests() {
    let s = debug_server(&[]);
    let ok = s.post_json("/embeddings", &json!({"input": ["fine"]})).json();
    for marker in ["__fail__", "__panic__"] {
        let v = s.post_json("/embeddings", &json!({"input": ["fine", marker]})).assert_error(500);
        assert!(v["error"]["message"].as_str().unwrap().contains(marker), "{v}");
        // The model keeps serving, with the same answers as before.
        let again = s.post_json("/embeddings", &json!({"input": ["fine"]})).json();
        assert_eq!(again["data"], ok["data"]);
        assert_eq!(s.get("/health").status, 200);
    }
    let st = stats(&s);
    assert_eq!(st["batches_failed"], 2, "{st}");
    assert_eq!(st["running_batches"], 0);
}

#[test]
fn concurrent_failures_do_not_hang_or_leak_into_other_batches() {
    let s = Arc::new(debug_server(&["--batch-size", "1"]));
    let barrier = Arc::new(Barrier::new(40));
    let threads: Vec<_> = (0..40)
        .map(|i| {
            let (s, barrier) = (s.clone(), barrier.clone());
            std::thread::spawn(move || {
                let text = if i % 4 == 0 { format!("bad {i} __fail__") } else { format!("good {i}") };
                barrier.wait();
                (i, s.post_json("/embeddings", &json!({"input": text})).status)
            })
        })
        .collect();
    for t in threads {
        let (i, status) = t.join().unwrap();
        // Batch size 1: each request is its own batch, so only the faulty ones fail.
        assert_eq!(status, if i % 4 == 0 { 500 } else { 200 }, "request {i}");
    }
}

#[test]
fn a_full_queue_answers_429_with_retry_after() {
    let s = Arc::new(debug_server(&["--batch-size", "1", "--queue-size", "4"]));
    // Four slow items in one request: one runs, one is prepared, two wait in the queue for ≥ 800 ms.
    let busy = {
        let s = s.clone();
        std::thread::spawn(move || {
            let input: Vec<String> = (0..4).map(|i| format!("__slow__ {i}")).collect();
            s.post_json("/embeddings", &json!({ "input": input })).status
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while stats(&s)["queue_absolute"] != 2 {
        assert!(Instant::now() < deadline, "the slow items never queued: {}", stats(&s));
        std::thread::sleep(Duration::from_millis(5));
    }
    // 2 queued + 3 more > 4: refused whole, with a hint when to retry.
    let r = s.post_json("/embeddings", &json!({"input": ["x", "y", "z"]}));
    let v = r.assert_error(429);
    assert!(v["error"]["message"].as_str().unwrap().contains("overloaded"), "{v}");
    assert_eq!(r.header("retry-after"), Some("1"));
    // What fits is still taken.
    let fits = s.post_json("/embeddings", &json!({"input": ["x", "y"]}));
    assert_eq!(fits.status, 200, "{}", fits.body);
    assert_eq!(busy.join().unwrap(), 200);
    assert_eq!(s.post_json("/embeddings", &json!({"input": "after"})).status, 200);
}

#[test]
fn a_disconnected_clients_work_is_dropped_before_compute() {
    let s = Arc::new(debug_server(&["--batch-size", "1"]));
    let slow = {
        let s = s.clone();
        std::thread::spawn(move || s.post_json("/embeddings", &json!({"input": "__slow__"})).status)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while stats(&s)["running_batches"] != 1 {
        assert!(Instant::now() < deadline, "the slow batch never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    // 20 items queued behind the slow batch, then the client gives up.
    let body = json!({"input": (0..20).map(|i| format!("abandoned {i}")).collect::<Vec<_>>()}).to_string();
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_millis(100)).build();
    let r = agent.post(&format!("{}/embeddings", s.base)).set("Content-Type", "application/json").send_string(&body);
    assert!(r.is_err(), "the request should time out while the model is busy");
    assert_eq!(slow.join().unwrap(), 200);
    std::thread::sleep(Duration::from_millis(200));
    let st = stats(&s);
    assert_eq!(st["batches_total"], 1, "abandoned items cost no batches: {st}");
    assert_eq!(st["queue_absolute"], 0, "{st}");
}

#[test]
fn concurrent_requests_return_what_each_returns_alone() {
    let s = Arc::new(Server::start(&["--model-id", &minilm(), "--no-model-warmup", "--batch-size", "16"]));
    let texts: Vec<String> = (0..200)
        .map(|i| {
            let words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"];
            let n = 1 + (i * 37) % 60;
            (0..n).map(|k| words[(i + k) % words.len()]).collect::<Vec<_>>().join(" ")
        })
        .collect();
    let solo: Vec<Vec<f32>> = texts
        .iter()
        .map(|t| floats(&s.post_json("/embeddings", &json!({"input": t})).json()["data"][0]["embedding"]))
        .collect();
    let barrier = Arc::new(Barrier::new(texts.len()));
    let threads: Vec<_> = texts
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, t)| {
            let (s, barrier) = (s.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let r = s.post_json("/embeddings", &json!({"input": t}));
                assert_eq!(r.status, 200, "{}", r.body);
                (i, floats(&r.json()["data"][0]["embedding"]))
            })
        })
        .collect();
    for t in threads {
        let (i, v) = t.join().unwrap();
        let c = cosine(&v, &solo[i]);
        assert!(c >= 0.99999, "request {i}: cosine {c} to its solo result");
    }
    let st = stats(&s);
    assert!(st["batches_total"].as_u64().unwrap() < 400, "requests were batched together: {st}");
}

#[test]
fn sigterm_drains_in_flight_requests_then_exits_zero() {
    let s = debug_server(&[]);
    let base = s.base.clone();
    let in_flight = std::thread::spawn(move || {
        let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(10)).build();
        let r = agent.post(&format!("{base}/embeddings")).send_string(r#"{"input":"__slow__"}"#);
        r.map(|r| r.status()).unwrap_or_else(|e| panic!("in-flight request failed: {e}"))
    });
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    let status = s.terminate();
    assert!(status.success(), "exit status {status}");
    assert_eq!(in_flight.join().unwrap(), 200, "the in-flight request completed");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn metrics_have_per_model_series() {
    let s = debug_server(&["--served-model-name", "dbg"]);
    assert_eq!(s.post_json("/embeddings", &json!({"input": ["a", "b"]})).status, 200);
    s.post_json("/embeddings", &json!({"input": []})).assert_error(422);
    let m = s.get("/metrics").body;
    for needle in [
        "aleph_http_requests_total{route=\"/embeddings\",status=\"200\"}",
        "aleph_http_requests_total{route=\"/embeddings\",status=\"422\"}",
        "aleph_requests_total{model=\"dbg\",route=\"/embeddings\",status=\"200\"}",
        "aleph_queue_depth{model=\"dbg\"}",
        "aleph_batch_size_bucket{model=\"dbg\"",
        "aleph_batch_tokens_bucket{model=\"dbg\"",
        "aleph_tokenization_duration_seconds_bucket{model=\"dbg\"",
        "aleph_queue_duration_seconds_bucket{model=\"dbg\"",
        "aleph_inference_duration_seconds_bucket{model=\"dbg\"",
    ] {
        assert!(m.contains(needle), "{needle} missing from\n{m}");
    }
}

/// Readiness: the port opens at once and /health answers 503 until every model is loaded and warm.
#[test]
fn health_is_503_while_loading_then_200() {
    use std::io::{BufRead, BufReader};
    let mpnet = repo_root().join("models/all-mpnet-base-v2").to_string_lossy().into_owned();
    /// Kills the server however the test ends.
    struct Child(std::process::Child);
    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Child(
        std::process::Command::new(env!("CARGO_BIN_EXE_aleph"))
            // all-mpnet-base-v2: 110M parameters to read and pack, so the loading state lasts long enough to see.
            .args(["v2", "--host", "127.0.0.1", "--port", "0", "--model-id", &mpnet])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(child.0.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("aleph exited").unwrap();
        if let Some(rest) = line.split("on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    let (mut loading, deadline) = (0, Instant::now() + Duration::from_secs(60));
    let status = loop {
        let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(10)).build();
        let status = match agent.get(&format!("http://{addr}/health")).call() {
            Ok(r) => r.status(),
            Err(ureq::Error::Status(code, r)) => {
                let body: serde_json::Value = r.into_json().unwrap();
                assert_eq!(body["error"]["code"], 503, "{body}");
                let posted = agent.post(&format!("http://{addr}/embeddings")).send_string(r#"{"input":"x"}"#);
                match posted {
                    Err(ureq::Error::Status(503, _)) => {}
                    // Loading finished between the two requests: then /health must say so too.
                    Ok(r) if r.status() == 200 => {
                        assert_eq!(
                            agent.get(&format!("http://{addr}/health")).call().map(|r| r.status()).ok(),
                            Some(200)
                        )
                    }
                    other => panic!("API during loading: {other:?}"),
                }
                code
            }
            Err(e) => panic!("{e}"),
        };
        if status == 503 {
            loading += 1;
        } else {
            break status;
        }
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(status, 200);
    assert!(loading > 0, "never saw the loading state (loading all-mpnet-base-v2 takes most of a second)");
}

/// Draining: after SIGTERM /health and new work get 503 while the in-flight request finishes.
#[test]
fn health_is_503_while_draining() {
    let s = debug_server(&[]);
    let base = s.base.clone();
    let in_flight = {
        let base = base.clone();
        std::thread::spawn(move || {
            let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(10)).build();
            agent
                .post(&format!("{base}/embeddings"))
                .send_string(r#"{"input":"__slow__"}"#)
                .map(|r| r.status())
                .map_err(|e| e.to_string())
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while stats(&s)["running_batches"] != 1 {
        assert!(Instant::now() < deadline, "the slow batch never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = std::process::Command::new("kill").args(["-TERM", &s.pid().to_string()]).status();
    std::thread::sleep(Duration::from_millis(50));
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(10)).build();
    let health = agent.get(&format!("{base}/health")).call();
    assert!(matches!(health, Err(ureq::Error::Status(503, _))), "draining: {health:?}");
    let new_work = agent.post(&format!("{base}/embeddings")).send_string(r#"{"input":"late"}"#);
    assert!(matches!(new_work, Err(ureq::Error::Status(503, _))), "no new work while draining");
    assert_eq!(in_flight.join().unwrap().unwrap(), 200, "the in-flight request completes");
    assert!(s.terminate().success());
}
