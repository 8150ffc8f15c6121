//! What clients actually send: a battery of malformed, hostile and oversized requests against the
//! spawned binary. Each gets the expected 4xx in the OpenAI envelope, and the server keeps answering
//! correctly afterwards.

use crate::common;

use common::{floats, minilm, repo_root, Server};
use serde_json::json;

struct Case {
    what: &'static str,
    method: &'static str,
    path: &'static str,
    body: Vec<u8>,
    content_type: Option<&'static str>,
    status: u16,
}

fn case(what: &'static str, path: &'static str, body: impl Into<Vec<u8>>, status: u16) -> Case {
    Case { what, method: "POST", path, body: body.into(), content_type: Some("application/json"), status }
}

fn cases() -> Vec<Case> {
    let big_list = json!({"input": vec!["x"; 100_000]}).to_string();
    let ten_mb = json!({"input": "a".repeat(10 * 1024 * 1024)}).to_string();
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let deep_field = format!(r#"{{"input":"a","user":{}1{}}}"#, "[".repeat(5000), "]".repeat(5000));
    let mut v = vec![
        // Malformed and truncated JSON
        case("empty body", "/embeddings", "", 422),
        case("whitespace body", "/embeddings", "   \n ", 422),
        case("not JSON", "/embeddings", "hello", 422),
        case("truncated object", "/embeddings", r#"{"input": "a""#, 422),
        case("truncated list", "/embeddings", r#"{"input": ["a", "b""#, 422),
        case("trailing garbage", "/embeddings", r#"{"input": "a"} xyz"#, 422),
        case("single quotes", "/embeddings", "{'input': 'a'}", 422),
        case("unquoted key", "/embeddings", "{input: \"a\"}", 422),
        case("top-level list", "/embeddings", r#"["a"]"#, 422),
        case("top-level string", "/embeddings", r#""a""#, 422),
        case("top-level number", "/embeddings", "42", 422),
        case("null body", "/embeddings", "null", 422),
        case("deeply nested body", "/embeddings", deep.clone(), 422),
        case("deeply nested ignored field", "/embeddings", deep_field, 422),
        case("invalid UTF-8", "/embeddings", b"{\"input\": \"\xff\xfe\"}".to_vec(), 422),
        case("lone surrogate escape", "/embeddings", r#"{"input": "\ud800"}"#, 422),
        case("duplicate key", "/embeddings", r#"{"input": "a", "input": "b"}"#, 422),
        // Wrong types in every field
        case("input number", "/embeddings", r#"{"input": 5}"#, 422),
        case("input bool", "/embeddings", r#"{"input": true}"#, 422),
        case("input object", "/embeddings", r#"{"input": {"a": 1}}"#, 422),
        case("input null", "/embeddings", r#"{"input": null}"#, 422),
        case("input nested list", "/embeddings", r#"{"input": [["a"]]}"#, 422),
        case("input list with null", "/embeddings", r#"{"input": ["a", null]}"#, 422),
        case("input token ids past the vocabulary", "/embeddings", r#"{"input": [[1, 2, 4000000000]]}"#, 422),
        case("model number", "/embeddings", r#"{"input": "a", "model": 1}"#, 422),
        case("encoding_format number", "/embeddings", r#"{"input": "a", "encoding_format": 1}"#, 422),
        case("encoding_format unknown", "/embeddings", r#"{"input": "a", "encoding_format": "hex"}"#, 422),
        case("dimensions string", "/embeddings", r#"{"input": "a", "dimensions": "8"}"#, 422),
        case("dimensions float", "/embeddings", r#"{"input": "a", "dimensions": 8.5}"#, 422),
        case("dimensions huge", "/embeddings", r#"{"input": "a", "dimensions": 1e30}"#, 422),
        case("dimensions beyond i64", "/embeddings", r#"{"input": "a", "dimensions": 99999999999999999999}"#, 422),
        case("modality unknown", "/embeddings", r#"{"input": "a", "modality": "video"}"#, 422),
        case("modality number", "/embeddings", r#"{"input": "a", "modality": 3}"#, 422),
        case("user number", "/embeddings", r#"{"input": "a", "user": 3}"#, 422),
        // Values out of range
        case("dimensions negative", "/embeddings", r#"{"input": "a", "dimensions": -1}"#, 400),
        case("dimensions too large", "/embeddings", r#"{"input": "a", "dimensions": 385}"#, 400),
        case("dimensions i64 max", "/embeddings", r#"{"input": "a", "dimensions": 9223372036854775807}"#, 400),
        case("modality image, input not a URI", "/embeddings", r#"{"input": "a", "modality": "image"}"#, 422),
        case(
            "modality image on a text model",
            "/embeddings",
            r#"{"input": "data:image/png;base64,AAAA", "modality": "image"}"#,
            400,
        ),
        case(
            "modality audio on a text model",
            "/embeddings",
            r#"{"input": "https://example.com/a.wav", "modality": "audio"}"#,
            400,
        ),
        case(
            "deprecated image route on a text model",
            "/embeddings_image",
            r#"{"input": "https://example.com/a.png"}"#,
            400,
        ),
        case("empty list", "/embeddings", r#"{"input": []}"#, 422),
        case("100k-item list", "/embeddings", big_list, 422),
        case("string over the character limit", "/embeddings", json!({"input": "b".repeat(122_881)}).to_string(), 422),
        case("10 MB string", "/embeddings", ten_mb, 422),
        // Rerank and classify on an embedder, and their schemas
        case("rerank on an embedder", "/rerank", r#"{"query": "q", "documents": ["d"]}"#, 400),
        case("rerank top_n zero", "/rerank", r#"{"query": "q", "documents": ["d"], "top_n": 0}"#, 422),
        case("rerank top_n negative", "/rerank", r#"{"query": "q", "documents": ["d"], "top_n": -5}"#, 422),
        case("rerank top_n string", "/rerank", r#"{"query": "q", "documents": ["d"], "top_n": "3"}"#, 422),
        case("rerank missing query", "/rerank", r#"{"documents": ["d"]}"#, 422),
        case("rerank documents string", "/rerank", r#"{"query": "q", "documents": "d"}"#, 422),
        case("rerank empty documents", "/rerank", r#"{"query": "q", "documents": []}"#, 422),
        case(
            "rerank return_documents string",
            "/rerank",
            r#"{"query": "q", "documents": ["d"], "return_documents": "yes"}"#,
            422,
        ),
        case("classify on an embedder", "/classify", r#"{"input": ["a"]}"#, 400),
        case("classify input number", "/classify", r#"{"input": 1}"#, 422),
        case("classify raw_scores string", "/classify", r#"{"input": ["a"], "raw_scores": "no"}"#, 422),
        // Routes, methods, content
        case("unknown route", "/embedding", r#"{"input": "a"}"#, 404),
        case("unknown nested route", "/v1/v1/embeddings", r#"{"input": "a"}"#, 404),
        case("path traversal", "/../../etc/passwd", "", 404),
        case("v2 prefix", "/v2/embeddings", r#"{"input": "a"}"#, 404),
    ];
    v.push(Case {
        what: "GET on /embeddings",
        method: "GET",
        path: "/embeddings",
        body: vec![],
        content_type: None,
        status: 405,
    });
    v.push(Case {
        what: "PUT on /embeddings",
        method: "PUT",
        path: "/embeddings",
        body: b"{}".to_vec(),
        content_type: None,
        status: 405,
    });
    v.push(Case {
        what: "DELETE on /rerank",
        method: "DELETE",
        path: "/rerank",
        body: vec![],
        content_type: None,
        status: 405,
    });
    v.push(Case {
        what: "POST on /models",
        method: "POST",
        path: "/models",
        body: b"{}".to_vec(),
        content_type: None,
        status: 405,
    });
    v.push(Case {
        what: "POST on /health",
        method: "POST",
        path: "/health",
        body: vec![],
        content_type: None,
        status: 405,
    });
    v.push(Case {
        what: "form content type",
        method: "POST",
        path: "/embeddings",
        body: b"input=hello".to_vec(),
        content_type: Some("application/x-www-form-urlencoded"),
        status: 415,
    });
    // A JSON body under another content type is refused too, as FastAPI refuses it.
    for (what, content_type) in [("text/plain JSON", "text/plain"), ("garbage content type", "garbage")] {
        v.push(Case {
            what,
            method: "POST",
            path: "/embeddings",
            body: br#"{"input": "hello"}"#.to_vec(),
            content_type: Some(content_type),
            status: 415,
        });
    }
    v.push(Case {
        what: "missing content type, bad body",
        method: "POST",
        path: "/embeddings",
        body: b"input".to_vec(),
        content_type: None,
        status: 422,
    });
    v
}

#[test]
fn every_bad_request_gets_a_clear_4xx_and_the_server_keeps_serving() {
    let s = Server::start(&["--model-id", &minilm(), "--no-model-warmup", "--payload-limit", "16777216"]);
    let good = || {
        let r = s.post_json("/embeddings", &json!({"input": "Hello world"}));
        assert_eq!(r.status, 200, "{}", r.body);
        floats(&r.json()["data"][0]["embedding"])
    };
    let baseline = good();
    let cases = cases();
    assert!(cases.len() >= 60, "{} cases", cases.len());
    let agent = ureq::AgentBuilder::new().timeout(std::time::Duration::from_secs(60)).build();
    for c in &cases {
        let mut req = agent.request(c.method, &format!("{}{}", s.base, c.path));
        if let Some(ct) = c.content_type {
            req = req.set("Content-Type", ct);
        }
        let resp = if c.method == "GET" || (c.method == "DELETE" && c.body.is_empty()) {
            req.call()
        } else {
            req.send_bytes(&c.body)
        };
        let resp = match resp {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{}: transport error {e}\n{}", c.what, s.logs()),
        };
        let status = resp.status();
        let body = resp.into_string().unwrap_or_default();
        let expected = c.status;
        assert_eq!(status, expected, "{}: {}", c.what, &body[..body.len().min(300)]);
        let v: serde_json::Value =
            serde_json::from_str(&body).unwrap_or_else(|_| panic!("{}: not JSON: {body}", c.what));
        assert_eq!(v["error"]["code"], expected, "{}: {v}", c.what);
        assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{}", c.what);
        assert!(body.len() < 4096, "{}: the error does not echo the input ({} bytes)", c.what, body.len());
        assert_eq!(good(), baseline, "after {}", c.what);
    }
    assert!(!s.logs().contains("panicked"), "{}", s.logs());
    // NUL bytes and control characters are text like any other.
    let r = s.post_json("/embeddings", &json!({"input": ["a\u{0}b", "\u{1}\u{7f}", "\u{feff}x"]}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.get("/health").status, 200);
    let _ = repo_root();
}
