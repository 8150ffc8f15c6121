//! Several API keys (`--api-key` repeated, `--api-key-file`), each with its own limits: past a key's limit
//! that key gets 429 with `Retry-After`, and the other keys are served as before.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{minilm, Reply, Server};

fn with_key(s: &Server, key: &str, body: &Value) -> Reply {
    let auth = format!("Bearer {key}");
    s.request(
        "POST",
        "/embeddings",
        Some(&body.to_string()),
        &[("Authorization", &auth), ("Content-Type", "application/json")],
    )
}

#[test]
fn repeated_keys_each_open_the_api() {
    let s = Server::start(&["--engine", "debug", "--model-id", "m", "--api-key", "k-one", "--api-key", "k-two"]);
    for key in ["k-one", "k-two"] {
        assert_eq!(with_key(&s, key, &json!({"input": "x"})).status, 200, "{key}");
    }
    with_key(&s, "k-three", &json!({"input": "x"})).assert_error(401);
    let env = Server::start_with_env(&["--engine", "debug", "--model-id", "m"], &[("ALEPH_API_KEY", "e-one,e-two")]);
    assert_eq!(with_key(&env, "e-two", &json!({"input": "x"})).status, 200);
    with_key(&env, "e-one,e-two", &json!({"input": "x"})).assert_error(401);
}

#[test]
fn each_key_is_held_to_its_own_limits() {
    let dir = std::env::temp_dir().join(format!("aleph-keys-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("keys");
    std::fs::write(
        &file,
        "# one request at a time\nsk-serial name=serial max_in_flight=1\nsk-metered name=metered tokens_per_second=20\nsk-open\n",
    )
    .unwrap();
    let s = Server::start(&["--model-id", &minilm(), "--api-key-file", file.to_str().unwrap(), "--no-model-warmup"]);

    // Tokens per second: the first request spends the bucket's 20 tokens and more; the next waits for it.
    let long = "the quick brown fox jumps over the lazy dog and keeps on running far away ".repeat(3);
    let first = with_key(&s, "sk-metered", &json!({"input": long}));
    assert_eq!(first.status, 200, "{}", first.body);
    let tokens = first.json()["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(tokens > 40, "{tokens} tokens");
    let refused = with_key(&s, "sk-metered", &json!({"input": "again"}));
    let err = refused.assert_error(429);
    let retry: u64 = refused.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!((1..=(tokens / 20 + 1)).contains(&retry), "retry after {retry} s for {tokens} tokens at 20/s");
    assert!(err["error"]["message"].as_str().unwrap().contains("API key `metered` used its 20 tokens per second"));
    assert_eq!(with_key(&s, "sk-open", &json!({"input": "others are served"})).status, 200);
    std::thread::sleep(Duration::from_secs(retry));
    assert_eq!(with_key(&s, "sk-metered", &json!({"input": "refilled"})).status, 200);

    // Requests in flight: while a large request of `serial` runs, its next one is refused, others are served.
    let big = json!({"input": vec!["a sentence long enough to take a while when there are many of them"; 2048]});
    let busy = {
        let base = s.base.clone();
        std::thread::spawn(move || loop {
            let sent = ureq::post(&format!("{base}/embeddings"))
                .set("Authorization", "Bearer sk-serial")
                .timeout(Duration::from_secs(120))
                .send_json(big.clone());
            match sent {
                // A probe below was in flight when it arrived: it is the one refused then, and tries again.
                Err(ureq::Error::Status(429, _)) => std::thread::sleep(Duration::from_millis(50)),
                other => break other.map(|r| r.status()).map_err(|e| e.to_string()),
            }
        })
    };
    let mut saw_refusal = false;
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(20));
        let reply = with_key(&s, "sk-serial", &json!({"input": "me too"}));
        if reply.status == 429 {
            assert_eq!(reply.header("retry-after"), Some("1"));
            let message = reply.assert_error(429)["error"]["message"].as_str().unwrap().to_string();
            assert!(message.contains("API key `serial` has 1 requests in flight, its limit"), "{message}");
            assert_eq!(with_key(&s, "sk-open", &json!({"input": "still served"})).status, 200);
            saw_refusal = true;
            break;
        }
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    assert!(saw_refusal, "the big request never overlapped a second one");
    assert_eq!(busy.join().unwrap().expect("the big request is served"), 200);
    assert_eq!(with_key(&s, "sk-serial", &json!({"input": "after it"})).status, 200);

    let metrics = s.get("/metrics").body;
    assert!(metrics.contains(r#"aleph_key_rejections_total{key="serial",reason="in_flight"} "#), "{metrics}");
    assert!(metrics.contains(r#"aleph_key_rejections_total{key="metered",reason="tokens"} 1"#), "{metrics}");
    assert!(!metrics.contains(r#"aleph_key_rejections_total{key="key-3""#), "the open key was never refused");
    assert!(!s.logs().contains("sk-serial") && !metrics.contains("sk-"), "keys are never logged");
}

#[test]
fn a_bad_key_file_stops_the_start_naming_the_line() {
    let file = std::env::temp_dir().join(format!("aleph-bad-keys-{}", std::process::id()));
    std::fs::write(&file, "sk-a\nsk-b max_in_flight=many\n").unwrap();
    let logs =
        Server::try_start(&["--engine", "debug", "--model-id", "m", "--api-key-file", file.to_str().unwrap()], &[])
            .err()
            .expect("refused");
    assert!(logs.contains("line 2: max_in_flight: `many` is not a number"), "{logs}");
}
