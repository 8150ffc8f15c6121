//! Static embeddings (model2vec folders) against `StaticModel.encode` (scripts/make_static_models.py, the real
//! model2vec): its tokenization rules (no special tokens, unknown tokens dropped after the token cut, the
//! character pre-cut), the mean, `normalize`, and an empty text's zero vector; through every route that embeds.

use serde_json::{json, Value};

use crate::common::{floats, repo_root, Server};

fn reference(name: &str) -> Value {
    let path = repo_root().join("tests/fixtures/tiny").join(name).join("reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn check(name: &str) {
    let dir = repo_root().join("tests/fixtures/tiny").join(name);
    let s = Server::start(&["--model-id", dir.to_str().unwrap(), "--served-model-name", name]);
    let r = reference(name);
    let texts = r["texts"].as_array().unwrap();
    for (i, text) in texts.iter().enumerate() {
        let reply = s.post_json("/embeddings", &json!({"input": [text]}));
        assert_eq!(reply.status, 200, "{name} text {i}: {}", reply.body);
        let reply = reply.json();
        let got = floats(&reply["data"][0]["embedding"]);
        let want = floats(&r["embeddings"][i]);
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-6, "{name} text {i} ({text}): {got:?} vs {want:?}");
        }
        assert_eq!(reply["usage"]["prompt_tokens"], r["token_counts"][i], "{name} text {i}: the tokens counted");
    }
    let info = s.get("/models").json();
    assert_eq!(info["data"][0]["capabilities"], json!(["embed"]));
    // TEI's /embed gives the same vectors (normalized ones, as the model normalizes).
    let tei = s.post_json("/embed", &json!({"inputs": texts[0], "normalize": r["normalize"]}));
    assert_eq!(tei.status, 200, "{}", tei.body);
}

#[test]
fn a_model2vec_model_embeds_as_static_model_encode_does() {
    check("model2vec");
}

#[test]
fn an_unnormalized_model2vec_model_without_a_token_limit_embeds_as_encode_does() {
    check("model2vec-raw");
}
