//! The HTTP contract, against the spawned binary serving the real all-MiniLM-L6-v2.

use crate::common;

use base64::Engine as _;
use common::{cosine, floats, minilm, Server};
use serde_json::json;

fn serve(extra: &[&str]) -> Server {
    let mut args = vec!["--model-id", Box::leak(minilm().into_boxed_str()), "--no-model-warmup"];
    args.extend_from_slice(extra);
    Server::start(&args)
}

#[test]
fn embeddings_shape_ids_and_key_order() {
    let s = serve(&["--served-model-name", "mini"]);
    let r = s.post("/embeddings", r#"{"input":["Hello world","Another one"],"model":"whatever"}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/json"));
    // Infinity's key order on the wire.
    let keys: Vec<usize> = ["\"object\"", "\"data\"", "\"model\"", "\"usage\"", "\"id\"", "\"created\""]
        .iter()
        .map(|k| r.body.find(k).unwrap())
        .collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "{}", &r.body[r.body.len() - 200..]);
    let v = r.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "mini", "a single model answers to any name, and echoes its own");
    assert!(v["id"].as_str().unwrap().starts_with("infinity-"));
    assert!(v["created"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(v["data"][1]["object"], "embedding");
    assert_eq!(v["data"][1]["index"], 1);
    let e = floats(&v["data"][0]["embedding"]);
    assert_eq!(e.len(), 384);
    let norm: f32 = e.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "normalized: {norm}");
    // "Hello world" is [CLS] hello world [SEP]; "Another one" likewise.
    assert_eq!(v["usage"]["prompt_tokens"], 8);
    assert_eq!(v["usage"]["total_tokens"], 8);
    for h in ["x-tokenization-time", "x-queue-time", "x-inference-time"] {
        assert!(r.header(h).unwrap().parse::<f64>().unwrap() >= 0.0, "{h}");
    }
}

#[test]
fn base64_equals_float_and_dimensions_slice() {
    let s = serve(&[]);
    let float = s.post_json("/embeddings", &json!({"input": "Hello world"})).json();
    let b64 = s.post_json("/embeddings", &json!({"input": "Hello world", "encoding_format": "base64"})).json();
    let bytes =
        base64::engine::general_purpose::STANDARD.decode(b64["data"][0]["embedding"].as_str().unwrap()).unwrap();
    let decoded: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(decoded, floats(&float["data"][0]["embedding"]), "bit-identical");

    // A prefix, rescaled to unit length (OpenAI's, TEI's and sentence-transformers' answer).
    let sliced = s.post_json("/embeddings", &json!({"input": "Hello world", "dimensions": 8})).json();
    let sliced = floats(&sliced["data"][0]["embedding"]);
    let norm: f32 = decoded[..8].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!(norm < 0.9, "the bare prefix is not unit: {norm}");
    let expected: Vec<f32> = decoded[..8].iter().map(|x| x / norm).collect();
    assert_eq!(sliced.len(), 8);
    assert!(sliced.iter().zip(&expected).all(|(a, b)| (a - b).abs() < 1e-6), "{sliced:?} vs {expected:?}");
    let zero = s.post_json("/embeddings", &json!({"input": "Hello world", "dimensions": 0})).json();
    assert_eq!(floats(&zero["data"][0]["embedding"]).len(), 384);
    for bad in [385, -1, 100000] {
        let r = s.post_json("/embeddings", &json!({"input": "x", "dimensions": bad}));
        let v = r.assert_error(400);
        assert_eq!(v["error"]["param"], "dimensions");
    }
    // Surrounding whitespace is stripped before embedding.
    let padded = s.post_json("/embeddings", &json!({"input": "  Hello world \n"})).json();
    assert!(cosine(&floats(&padded["data"][0]["embedding"]), &decoded) > 0.999999);
}

#[test]
fn schema_errors_are_422_in_the_openai_envelope() {
    let s = serve(&["--max-client-batch-size", "4"]);
    let cases: &[(&str, &str)] = &[
        (r#"{"input":[]}"#, "empty list"),
        (r#"{"input":["a","b","c","d","e"]}"#, "too many items"),
        (r#"{"input":[1.5,2]}"#, "fractional token ids"),
        (r#"{"input":[1,"a"]}"#, "ids mixed with a string in one list"),
        (r#"{"input":[[]]}"#, "an empty token-id list"),
        (r#"{"input":[999999999]}"#, "a token id outside the vocabulary"),
        (r#"{"input":null}"#, "null"),
        (r#"{"input":{"a":1}}"#, "object"),
        (r#"{}"#, "missing input"),
        (r#"{"input":"a","encoding_format":"hex"}"#, "bad encoding"),
        (r#"{"input":"a","modality":"video"}"#, "bad modality"),
        (r#"{"input":"a","dimensions":"8"}"#, "string dimensions"),
        (r#"{"input":"a","model":5}"#, "numeric model"),
        (r#"{"input": ["a""#, "truncated JSON"),
        (r#"not json"#, "not JSON"),
        ("", "empty body"),
        (r#"["a"]"#, "top-level list"),
    ];
    for (body, what) in cases {
        let r = s.post("/embeddings", body);
        assert_eq!(r.status, 422, "{what}: {}", r.body);
        r.assert_error(422);
    }
    let v = s.post("/embeddings", r#"{"input":["a", 7]}"#).assert_error(422);
    assert_eq!(v["error"]["param"], "input[1]");
    let long = "x".repeat(122_881);
    s.post_json("/embeddings", &json!({"input": [long]})).assert_error(422);
    drop(s);
    // The limit is a flag.
    let s = serve(&["--max-string-chars", "10"]);
    let v = s.post_json("/embeddings", &json!({"input": ["short", "eleven char"]})).assert_error(422);
    assert_eq!(v["error"]["param"], "input[1]");
    assert_eq!(s.post_json("/embeddings", &json!({"input": "  eleven char  "})).status, 422);
    assert_eq!(s.post_json("/embeddings", &json!({"input": "  ten chars!  "})).status, 200, "counted after stripping");
    // Unknown fields are ignored, as in Infinity.
    assert_eq!(s.post("/embeddings", r#"{"input":"a","extra":{"deep":[1]}}"#).status, 200);
    // The server still answers.
    assert_eq!(s.post("/embeddings", r#"{"input":"still here"}"#).status, 200);
}

#[test]
fn statuses_for_routes_methods_capabilities_and_size() {
    let s = serve(&["--payload-limit", "2000"]);
    s.get("/nope").assert_error(404);
    s.request("DELETE", "/embeddings", None, &[]).assert_error(405);
    s.get("/embeddings").assert_error(405);
    let v = s.post("/embeddings", r#"{"input":"data:image/png;base64,AAAA","modality":"image"}"#).assert_error(400);
    assert!(v["error"]["message"].as_str().unwrap().contains("embed"), "{v}");
    let big = json!({"input": "y".repeat(5000)}).to_string();
    s.post("/embeddings", &big).assert_error(413);
    assert_eq!(s.post("/embeddings", r#"{"input":"fine"}"#).status, 200);
}

#[test]
fn v1_aliases_health_models_docs_and_redirect() {
    let s = serve(&["--served-model-name", "mini"]);
    assert_eq!(s.post("/v1/embeddings", r#"{"input":"a"}"#).status, 200);
    let models = s.get("/v1/models").json();
    assert_eq!(models["object"], "list");
    let m = &models["data"][0];
    assert_eq!(m["id"], "mini");
    assert_eq!(m["object"], "model");
    assert_eq!(m["capabilities"], json!(["embed"]));
    assert_eq!(m["backend"], "aleph-cpu", "Aleph's CPU kernels by default");
    assert_eq!(m["stats"]["batch_size"], 32);
    assert!(m["stats"]["queue_fraction"].is_number());
    // MiniLM's packed weights: ~43 MB of f32; its 30522 × 384 word table (47 MB) is read in place from the
    // mapped file.
    let weights = m["weight_bytes"].as_u64().unwrap();
    assert!((38_000_000..48_000_000).contains(&weights), "weight_bytes {weights}");
    assert!(models["process_resident_bytes"].as_u64().unwrap() > weights);
    assert_eq!(models["weight_bytes_total"].as_u64().unwrap(), weights, "one model holds all the weights");
    let mut plain = s.get("/models").json();
    plain["data"][0]["created"] = m["created"].clone();
    assert_eq!(plain["data"], models["data"], "/models and /v1/models are the same");
    let health = s.get("/health").json();
    assert!(health["unix"].as_f64().unwrap() > 1.7e9);
    let api = s.get("/openapi.json").json();
    assert!(api["paths"]["/embeddings"]["post"].is_object(), "{api}");
    assert!(api["components"]["schemas"]["EmbeddingRequest"].is_object());
    let docs = s.get("/docs/");
    assert_eq!(docs.status, 200);
    assert!(docs.body.to_lowercase().contains("swagger"));
    let root = s.get("/");
    assert_eq!(root.status, 307);
    assert_eq!(root.header("location"), Some("/docs"));
    let metrics = s.get("/metrics");
    assert_eq!(metrics.status, 200);
    assert!(metrics.body.contains("aleph_http_requests_total"), "{}", metrics.body);
}

#[test]
fn url_prefix_moves_the_api() {
    let s = serve(&["--url-prefix", "/api", "--redirect-slash", ""]);
    assert_eq!(s.post("/api/embeddings", r#"{"input":"a"}"#).status, 200);
    assert_eq!(s.post("/api/v1/embeddings", r#"{"input":"a"}"#).status, 200);
    assert_eq!(s.get("/api/models").status, 200);
    assert_eq!(s.get("/health").status, 200, "/health stays unprefixed, as in Infinity");
    assert_eq!(s.get("/api/health").status, 200);
    assert_eq!(s.get("/api/openapi.json").status, 200);
    s.post("/embeddings", r#"{"input":"a"}"#).assert_error(404);
    s.get("/").assert_error(404);
}

#[test]
fn api_key_guards_the_api_but_not_health() {
    let s = serve(&["--api-key", "s3cret"]);
    let body = Some(r#"{"input":"a"}"#);
    let json_ct = ("Content-Type", "application/json");
    let v = s.request("POST", "/embeddings", body, &[json_ct]).assert_error(401);
    assert!(!v.to_string().contains("s3cret"));
    s.request("POST", "/embeddings", body, &[json_ct, ("Authorization", "Bearer wrong")]).assert_error(401);
    s.request("GET", "/models", None, &[("Authorization", "Bearer s3cre")]).assert_error(401);
    let ok = s.request("POST", "/v1/embeddings", body, &[json_ct, ("Authorization", "Bearer s3cret")]);
    assert_eq!(ok.status, 200);
    assert_eq!(s.request("GET", "/models", None, &[("Authorization", "Bearer s3cret")]).status, 200);
    assert_eq!(s.get("/health").status, 200);
    assert!(!s.logs().contains("s3cret"), "the key is never logged");
}

#[test]
fn several_models_route_by_name() {
    let s = serve(&["--model-id", &minilm(), "--served-model-name", "a;b", "--batch-size", "4;8"]);
    let a = s.post_json("/embeddings", &json!({"input": "x", "model": "a"})).json();
    assert_eq!(a["model"], "a");
    let b = s.post_json("/embeddings", &json!({"input": "x", "model": "b"})).json();
    assert_eq!(b["model"], "b");
    let v = s.post_json("/embeddings", &json!({"input": "x", "model": "c"})).assert_error(404);
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("`a`") || (msg.contains("a") && msg.contains("b")), "{msg}");
    let models = s.get("/models").json();
    let sizes: Vec<_> = models["data"].as_array().unwrap().iter().map(|m| m["stats"]["batch_size"].clone()).collect();
    assert_eq!(sizes, vec![json!(4), json!(8)]);
}

#[test]
fn start_up_errors_name_the_problem() {
    let err = |args: &[&str]| Server::try_start(args, &[]).err().expect("should not start");
    let m = minilm();
    let e = err(&["--model-id", &m, "--model-id", &m]);
    assert!(e.contains("unique"), "{e}");
    let e = err(&["--model-id", &m, "--model-id", &m, "--model-id", &m, "--served-model-name", "a;b"]);
    assert!(e.contains("--served-model-name"), "{e}");
    let e = err(&["--model-id", "/no/such/model/dir"]);
    assert!(e.contains("/no/such/model/dir"), "{e}");
    let e = err(&["--model-id", &m, "--pooling-method", "sum"]);
    assert!(e.contains("pooling"), "{e}");
    // SPLADE reads a masked-LM head, which a sentence-transformers BertModel does not have.
    let e = err(&["--model-id", &m, "--pooling-method", "splade"]);
    assert!(e.contains("masked-LM head"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn broken_model_folders_stop_start_up_with_a_clear_reason() {
    let src = common::minilm_dir();
    let tmp = std::env::temp_dir().join(format!("aleph-broken-{}", std::process::id()));
    let make = |name: &str, edit: &dyn Fn(&std::path::Path)| {
        let dir = tmp.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["config.json", "tokenizer.json", "modules.json", "sentence_bert_config.json"] {
            std::fs::copy(src.join(f), dir.join(f)).unwrap();
        }
        std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
        std::fs::copy(src.join("1_Pooling/config.json"), dir.join("1_Pooling/config.json")).unwrap();
        std::os::unix::fs::symlink(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
        edit(&dir);
        dir.to_string_lossy().into_owned()
    };
    let cases: Vec<(String, &str)> = vec![
        (make("no-weights", &|d| std::fs::remove_file(d.join("model.safetensors")).unwrap()), "model.safetensors"),
        (make("bad-json", &|d| std::fs::write(d.join("config.json"), "{ nope").unwrap()), "config.json"),
        (
            make("bad-shape", &|d| {
                let cfg = std::fs::read_to_string(d.join("config.json")).unwrap();
                std::fs::write(
                    d.join("config.json"),
                    cfg.replace("\"intermediate_size\": 1536", "\"intermediate_size\": 1024"),
                )
                .unwrap();
            }),
            "intermediate.dense.weight",
        ),
        (make("no-tokenizer", &|d| std::fs::remove_file(d.join("tokenizer.json")).unwrap()), "tokenizer.json"),
        (
            make("corrupt-weights", &|d| {
                std::fs::remove_file(d.join("model.safetensors")).unwrap();
                std::fs::write(d.join("model.safetensors"), b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header}").unwrap();
            }),
            "model.safetensors",
        ),
    ];
    for (dir, needle) in cases {
        let e = Server::try_start(&["--model-id", &dir, "--no-model-warmup"], &[]).err().expect("must not start");
        assert!(e.contains(&dir) && e.contains(needle), "{dir}: expected `{needle}` in\n{e}");
        assert!(!e.contains("panicked"), "{e}");
    }
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn environment_configures_like_flags() {
    let m = minilm();
    let s = Server::start_with_env(
        &["--no-model-warmup"],
        &[("INFINITY_MODEL_ID", &m), ("ALEPH_SERVED_MODEL_NAME", "from-env"), ("INFINITY_API_KEY", "k")],
    );
    let r = s.request("GET", "/models", None, &[("Authorization", "Bearer k")]).json();
    assert_eq!(r["data"][0]["id"], "from-env");
    s.get("/models").assert_error(401);
}

#[test]
fn help_lists_flags_with_env_and_defaults() {
    for args in [&["--help"][..], &["v2", "--help"][..]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_aleph")).args(args).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        for flag in [
            "--model-id",
            "--served-model-name",
            "--batch-size",
            "--revision",
            "--device",
            "--dtype",
            "--pooling-method",
            "--model-warmup",
            "--no-model-warmup",
            "--host",
            "--port",
            "--url-prefix",
            "--api-key",
            "--log-level",
            "--permissive-cors",
            "--preload-only",
            "--redirect-slash",
        ] {
            assert!(text.contains(flag), "{flag} missing from {args:?} help");
        }
        assert!(text.contains("ALEPH_PORT") && text.contains("[default: 7997]"), "{text}");
    }
}

#[test]
fn preload_only_loads_and_exits_cleanly() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_aleph"))
        .args(["v2", "--model-id", &minilm(), "--no-model-warmup", "--preload-only"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn sigterm_exits_zero() {
    let s = serve(&[]);
    assert_eq!(s.post("/embeddings", r#"{"input":"a"}"#).status, 200);
    assert!(s.terminate().success());
}

#[test]
fn permissive_cors_only_when_asked() {
    let origin = [("Origin", "http://example.com"), ("Content-Type", "application/json")];
    let s = serve(&[]);
    let r = s.request("POST", "/embeddings", Some(r#"{"input":"a"}"#), &origin);
    assert!(r.header("access-control-allow-origin").is_none());
    drop(s);
    let s = serve(&["--permissive-cors"]);
    let r = s.request("POST", "/embeddings", Some(r#"{"input":"a"}"#), &origin);
    assert!(r.header("access-control-allow-origin").is_some());
}

#[test]
fn json_depth_and_tokens_per_request_are_configurable_limits() {
    let s = serve(&["--max-json-depth", "3", "--max-request-tokens", "12"]);
    // {"input": [...]} is depth 2; one more level of nesting is still fine, two more are not.
    assert_eq!(s.post("/embeddings", r#"{"input": ["short"], "user": null}"#).status, 200);
    let v = s.post("/embeddings", r#"{"input": ["a"], "x": [[[1]]]}"#).assert_error(422);
    assert!(v["error"]["message"].as_str().unwrap().contains("--max-json-depth"), "{v}");
    // "Hello world" is 4 tokens with [CLS] and [SEP]: three fit in 12, four do not.
    assert_eq!(s.post_json("/embeddings", &json!({"input": vec!["Hello world"; 3]})).status, 200);
    let v = s.post_json("/embeddings", &json!({"input": vec!["Hello world"; 4]})).assert_error(422);
    assert!(v["error"]["message"].as_str().unwrap().contains("16 tokens"), "{v}");
}

#[test]
fn truncate_dim_is_the_default_dimensions() {
    let m = minilm();
    let s = serve(&["--truncate-dim", "64"]);
    let full = Server::start(&["--model-id", &m, "--no-model-warmup"]);
    let whole = floats(&full.post_json("/embeddings", &json!({"input": "Hello world"})).json()["data"][0]["embedding"]);
    let cut = floats(&s.post_json("/embeddings", &json!({"input": "Hello world"})).json()["data"][0]["embedding"]);
    assert_eq!(cut.len(), 64);
    // The prefix, renormalized (MiniLM normalizes), as a request's `dimensions` gives it.
    let norm = whole[..64].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!(cut.iter().zip(&whole[..64]).all(|(c, w)| (c - w / norm).abs() < 1e-5));
    // A request's own dimensions win; TEI's /embed and Cohere's v2 embed default the same way.
    let asked = s.post_json("/embeddings", &json!({"input": "Hello world", "dimensions": 128})).json();
    assert_eq!(asked["data"][0]["embedding"].as_array().unwrap().len(), 128);
    assert_eq!(s.post_json("/embed", &json!({"inputs": "Hello world"})).json()[0].as_array().unwrap().len(), 64);
    let cohere = s.post_json("/v2/embed", &json!({"texts": ["Hello world"], "input_type": "search_query"})).json();
    assert_eq!(cohere["embeddings"]["float"][0].as_array().unwrap().len(), 64, "{cohere}");
    // More dimensions than the model has: refused at start-up.
    let e = Server::try_start(&["--model-id", &m, "--truncate-dim", "1000", "--no-model-warmup"], &[]).err().unwrap();
    assert!(e.contains("--truncate-dim"), "{e}");
}
