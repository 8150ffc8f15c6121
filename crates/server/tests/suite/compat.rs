//! Drop-in details clients depend on: Infinity's whole command line, `null` options, token-id input,
//! renormalized `dimensions`, `GET /models/{id}`, content types, error bodies, replicas and the
//! vector disk cache, against the spawned binary.

use crate::common;

use common::{cosine, floats, minilm, tiny, Server};
use serde_json::{json, Value};

fn embedding(s: &Server, body: Value) -> Vec<f32> {
    let r = s.post_json("/embeddings", &body);
    assert_eq!(r.status, 200, "{body}: {}", r.body);
    floats(&r.json()["data"][0]["embedding"])
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("aleph-compat-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn every_infinity_flag_starts_and_python_only_ones_are_logged() {
    let model = minilm();
    let s = Server::start(&[
        "--model-id",
        &model,
        "--served-model-name",
        "mini",
        "--no-model-warmup",
        "--trust-remote-code",
        "--no-compile",
        "--bettertransformer",
        "--lengths-via-tokenize",
        "--no-vector-disk-cache",
        "--onnx-disable-optimize",
        "--no-onnx-do-not-prefer-quantized",
        "--engine",
        "optimum",
        "--device",
        "cpu",
        "--device-id",
        "0,1",
        "--dtype",
        "float32",
        "--pooling-method",
        "auto",
        "--embedding-dtype",
        "float32",
        "--proxy-root-path",
        "/behind/proxy",
        "--url-prefix",
        "/api",
        "--permissive-cors",
        "--log-level",
        "info",
        "--revision",
        "main",
        "--redirect-slash",
        "/api/docs",
    ]);
    let logs = s.logs();
    let line = logs.lines().find(|l| l.contains("no effect")).unwrap_or_else(|| panic!("{logs}"));
    for flag in ["--compile", "--bettertransformer", "--onnx-disable-optimize", "--engine optimum"] {
        assert!(line.contains(flag), "{flag}: {line}");
    }
    let doc = s.get("/api/openapi.json").json();
    assert_eq!(doc["servers"][0]["url"], "/behind/proxy/api", "OpenAPI servers carry the proxy root path");
    let models = s.get("/api/models").json();
    assert_eq!(models["data"][0]["stats"]["replicas"], 2, "--device-id 0,1 on the CPU: two replicas");
    // Both replicas serve: concurrent requests all succeed with the same vectors.
    let one = embedding_at(&s, "/api/embeddings", json!({"input": "Hello world"}));
    // TEI's root route moves with the prefix.
    let root = s.post_json("/api", &json!({"inputs": "Hello world"}));
    assert_eq!(root.status, 200, "{}", root.body);
    assert!(cosine(&floats(&root.json()[0]), &one) > 0.999999);
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let base = s.base.clone();
            std::thread::spawn(move || {
                let body = json!({"input": ["Hello world", format!("sentence {i}")]}).to_string();
                ureq::post(&format!("{base}/api/embeddings"))
                    .set("Content-Type", "application/json")
                    .send_string(&body)
                    .unwrap()
                    .into_json::<Value>()
                    .unwrap()
            })
        })
        .collect();
    for h in handles {
        let v = h.join().unwrap();
        assert_eq!(floats(&v["data"][0]["embedding"]), one);
    }
}

/// Cache entries are written off the request path: wait (a little) for them to land.
fn entries_eventually(dir: &std::path::Path, at_least: usize) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let n = std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
        if n >= at_least || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn embedding_at(s: &Server, path: &str, body: Value) -> Vec<f32> {
    let r = s.post_json(path, &body);
    assert_eq!(r.status, 200, "{body}: {}", r.body);
    floats(&r.json()["data"][0]["embedding"])
}

#[test]
fn infinity_environment_variables_configure_the_new_flags() {
    let dir = temp_dir("env-cache");
    let model = minilm();
    let env = [
        ("INFINITY_MODEL_ID", model.as_str()),
        ("INFINITY_SERVED_MODEL_NAME", "mini"),
        ("INFINITY_MODEL_WARMUP", "false"),
        ("INFINITY_DEVICE_ID", "0,1,2"),
        ("INFINITY_VECTOR_DISK_CACHE", "true"),
        ("INFINITY_TRUST_REMOTE_CODE", "false"),
        ("INFINITY_BETTERTRANSFORMER", "false"),
        ("INFINITY_PROXY_ROOT_PATH", "/p"),
        ("ALEPH_VECTOR_DISK_CACHE_DIR", dir.to_str().unwrap()),
    ];
    let s = Server::start_with_env(&[], &env);
    assert_eq!(s.get("/models").json()["data"][0]["stats"]["replicas"], 3);
    assert_eq!(s.get("/openapi.json").json()["servers"][0]["url"], "/p");
    s.post_json("/embeddings", &json!({"input": "cached"}));
    assert_eq!(entries_eventually(&dir.join("mini"), 1), 1, "the cache is on");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unsupported_values_are_refused_before_loading_with_the_reason() {
    let model = minilm();
    for (args, needle) in [
        (vec!["--dtype", "float16"], "float16"),
        (vec!["--dtype", "int8", "--engine", "candle"], "int8"),
        (vec!["--dtype", "fp8"], "fp8"),
        (vec!["--engine", "neuron"], "neuron"),
        (vec!["--device", "mps"], "mps"),
        (vec!["--embedding-dtype", "int4"], "int4"),
        (vec!["--device-id", "0,x"], "--device-id"),
        (vec!["--trust-remote-code", "maybe"], "--trust-remote-code"),
    ] {
        let mut all = vec!["--model-id", model.as_str(), "--no-model-warmup"];
        all.extend(args.iter().copied());
        let logs = match Server::try_start(&all, &[]) {
            Ok(_) => panic!("{args:?} started"),
            Err(logs) => logs,
        };
        assert!(logs.contains(needle), "{args:?}: {logs}");
    }
    // The attention override is read on every build, not only where candle runs.
    let args = ["--model-id", model.as_str(), "--no-model-warmup"];
    match Server::try_start(&args, &[("ALEPH_ATTENTION", "flash")]) {
        Ok(_) => panic!("ALEPH_ATTENTION=flash started"),
        Err(logs) => assert!(logs.contains("ALEPH_ATTENTION is `flash`"), "{logs}"),
    }
}

#[test]
fn remote_code_is_refused_unless_trust_is_off() {
    let dir = temp_dir("remote-code");
    let src = std::path::PathBuf::from(tiny("bert-classify"));
    for f in ["model.safetensors", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    config["auto_map"] = json!({"AutoConfig": "org/impl--configuration.Cfg", "AutoModel": "org/impl--modeling.Custom"});
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let path = dir.to_string_lossy().into_owned();

    let logs = match Server::try_start(&["--model-id", &path, "--no-model-warmup"], &[]) {
        Ok(_) => panic!("a model with remote code Aleph does not implement loaded"),
        Err(logs) => logs,
    };
    assert!(logs.contains("org/impl--modeling.Custom") && logs.contains("no Python"), "{logs}");
    // As transformers does without trust: auto_map is ignored and the plain architecture loads.
    let s = Server::start(&["--model-id", &path, "--no-model-warmup", "--no-trust-remote-code"]);
    assert_eq!(s.post_json("/classify", &json!({"input": ["hello"]})).status, 200);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn null_options_token_ids_dimensions_and_models_by_id() {
    let model = minilm();
    let rerank = tiny("bert-rerank");
    let s = Server::start(&[
        "--model-id",
        &model,
        "--served-model-name",
        "sentence-transformers/all-MiniLM-L6-v2",
        "--model-id",
        &rerank,
        "--served-model-name",
        "tiny-rerank",
        "--no-model-warmup",
    ]);
    let name = "sentence-transformers/all-MiniLM-L6-v2";
    let plain = embedding(&s, json!({"model": name, "input": "hello world"}));

    // LiteLLM's openai/ provider sends every unset option as null.
    let nulls = json!({"model": name, "input": ["hello world"], "encoding_format": null, "modality": null,
                       "dimensions": null, "user": null});
    assert_eq!(embedding(&s, nulls), plain);
    let r = s.post_json(
        "/rerank",
        &json!({"model": "tiny-rerank", "query": "q", "documents": ["a", "b"], "top_n": null,
                "return_documents": null, "raw_scores": null}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["results"][0]["document"], Value::Null);

    // Token ids of the model's vocabulary ([CLS] hello world [SEP]) are the same input as the text.
    let ids = embedding(&s, json!({"model": name, "input": [101, 7592, 2088, 102]}));
    assert!(cosine(&ids, &plain) > 0.999999, "{}", cosine(&ids, &plain));
    let r = s.post_json("/embeddings", &json!({"model": name, "input": [[101, 7592, 2088, 102], "hello world"]}));
    let v = r.json();
    assert_eq!(v["usage"]["prompt_tokens"], 8);
    assert!(cosine(&floats(&v["data"][0]["embedding"]), &floats(&v["data"][1]["embedding"])) > 0.999999);
    let bad = s.post_json("/embeddings", &json!({"model": name, "input": [101, 30522]})).assert_error(422);
    assert!(bad["error"]["message"].as_str().unwrap().contains("30522"), "{bad}");

    // dimensions (and LiteLLM's infinity/ alias output_dimension) come back unit length.
    for field in ["dimensions", "output_dimension"] {
        let cut = embedding(&s, json!({"model": name, "input": "hello world", field: 128}));
        assert_eq!(cut.len(), 128, "{field}");
        let norm: f32 = cut.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{field}: {norm}");
        assert!(cosine(&cut, &plain[..128]) > 0.999999);
    }

    // GET /models/{id}, names with slashes included, as the OpenAI SDK's models.retrieve asks.
    for path in ["/models/sentence-transformers/all-MiniLM-L6-v2", "/v1/models/tiny-rerank"] {
        let r = s.get(path);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let v = r.json();
        assert_eq!(v["object"], "model");
        assert_eq!(v["owned_by"], "infinity");
        assert!(path.ends_with(v["id"].as_str().unwrap()), "{v}");
    }
    let missing = s.get("/models/nope").assert_error(404);
    assert!(missing["error"]["message"].as_str().unwrap().contains("tiny-rerank"), "{missing}");
    let list = s.get("/models").json();
    assert!(list["data"].as_array().unwrap().iter().all(|m| m["owned_by"] == "infinity"), "{list}");
}

#[test]
fn content_types_and_error_bodies() {
    let model = minilm();
    let s = Server::start(&["--model-id", &model, "--no-model-warmup"]);
    let body = r#"{"input": "hello"}"#;
    for ct in ["text/plain", "application/x-www-form-urlencoded", "garbage"] {
        let r = s.request("POST", "/embeddings", Some(body), &[("Content-Type", ct)]);
        let v = r.assert_error(415);
        assert_eq!(v["detail"], v["error"]["message"], "{v}");
    }
    assert_eq!(s.request("POST", "/embeddings", Some(body), &[]).status, 200, "no content type reads as JSON");
    let r = s.request("POST", "/embeddings", Some(body), &[("Content-Type", "application/json; charset=utf-8")]);
    assert_eq!(r.status, 200);

    // 422: FastAPI's validation shape in `detail` (Infinity's own client parses it), the envelope beside it.
    let v = s.post("/embeddings", r#"{"input": ["a", 5]}"#).assert_error(422);
    let detail = &v["detail"][0];
    assert_eq!(detail["msg"], v["error"]["message"], "{v}");
    assert_eq!(detail["type"], "value_error");
    assert_eq!(detail["loc"][0], "body");
    let v = s.post_json("/embeddings", &json!({"input": "a", "dimensions": 999})).assert_error(400);
    assert_eq!(v["detail"], v["error"]["message"], "{v}");
}

#[test]
fn vector_disk_cache_skips_the_model_and_survives_a_restart() {
    let model = minilm();
    let dir = temp_dir("vector-cache");
    let cache_dir = dir.to_string_lossy().into_owned();
    let args = [
        "--model-id",
        model.as_str(),
        "--served-model-name",
        "mini",
        "--no-model-warmup",
        "--vector-disk-cache",
        "--vector-disk-cache-dir",
        cache_dir.as_str(),
    ];
    let batches = |s: &Server| s.get("/models").json()["data"][0]["stats"]["batches_total"].as_u64().unwrap();
    let texts = json!(["the cache keeps this", "and this one too"]);
    let first = {
        let s = Server::start(&args);
        let a = s.post_json("/embeddings", &json!({"input": texts})).json();
        let after_first = batches(&s);
        assert!(after_first >= 1);
        let b = s.post_json("/embeddings", &json!({"input": texts})).json();
        assert_eq!(batches(&s), after_first, "a repeated input is served from the cache, not the model");
        assert_eq!(a["data"], b["data"]);
        assert_eq!(a["usage"], b["usage"], "usage counts the tokens the input cost when computed");
        // Post-processing applies to cached vectors too: a cut of a hit is the cut of a fresh vector.
        let cut = s.post_json("/embeddings", &json!({"input": texts, "dimensions": 16})).json();
        assert_eq!(batches(&s), after_first);
        assert_eq!(floats(&cut["data"][0]["embedding"]).len(), 16);
        // A new input misses.
        s.post_json("/embeddings", &json!({"input": "something new"}));
        assert_eq!(batches(&s), after_first + 1);
        assert_eq!(entries_eventually(&dir.join("mini"), 3), 3, "one entry per distinct input");
        a
    };
    let s = Server::start(&args);
    let again = s.post_json("/embeddings", &json!({"input": texts})).json();
    assert_eq!(again["data"], first["data"]);
    assert_eq!(batches(&s), 0, "after a restart the entries on disk are hits");
    // Another model (another fingerprint) never reads these entries.
    drop(s);
    let other = Server::start(&[
        "--model-id",
        model.as_str(),
        "--served-model-name",
        "mini",
        "--no-model-warmup",
        "--vector-disk-cache",
        "--vector-disk-cache-dir",
        cache_dir.as_str(),
        "--pooling-method",
        "cls",
    ]);
    let cls = other.post_json("/embeddings", &json!({"input": texts})).json();
    assert_eq!(batches(&other), 1, "different pooling, different key");
    assert_ne!(cls["data"][0]["embedding"], first["data"][0]["embedding"]);
    let _ = std::fs::remove_dir_all(&dir);
}
