//! Static embeddings against their libraries: model2vec folders against `StaticModel.encode`
//! (scripts/make_static_models.py, the real model2vec: no special tokens, unknown tokens dropped after the token
//! cut, the character pre-cut, the mean, `normalize`, an empty text's zero vector), and sentence-transformers'
//! `StaticEmbedding` modules against `SentenceTransformer.encode` (scripts/make_st_static.py: unknown tokens kept,
//! only `tokenizer.json`'s own cut, `Normalize`, prompts); through every route that embeds.

use serde_json::{json, Value};

use crate::common::{floats, repo_root, Server};

fn reference(name: &str) -> Value {
    let path = repo_root().join("tests/fixtures/tiny").join(name).join("reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn check(name: &str) -> (Server, Value) {
    let dir = repo_root().join("tests/fixtures/tiny").join(name);
    let s = Server::start(&["--model-id", dir.to_str().unwrap(), "--served-model-name", name]);
    let r = reference(name);
    compare(&s, name, &r, &json!({}));
    let info = s.get("/models").json();
    assert_eq!(info["data"][0]["capabilities"], json!(["embed"]));
    // TEI's /embed gives the same vectors (normalized ones, as the model normalizes).
    let texts = r["texts"].as_array().unwrap();
    let tei = s.post_json("/embed", &json!({"inputs": texts[0], "normalize": r["normalize"]}));
    assert_eq!(tei.status, 200, "{}", tei.body);
    (s, r)
}

/// Every reference text through `/embeddings` (with `extra` fields in the body) against `want`'s embeddings and
/// token counts.
fn compare(s: &Server, name: &str, want: &Value, extra: &Value) {
    let texts = reference(name)["texts"].as_array().unwrap().clone();
    for (i, text) in texts.iter().enumerate() {
        let mut body = json!({"input": [text]});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let reply = s.post_json("/embeddings", &body);
        assert_eq!(reply.status, 200, "{name} text {i}: {}", reply.body);
        let reply = reply.json();
        let got = floats(&reply["data"][0]["embedding"]);
        let expected = floats(&want["embeddings"][i]);
        assert_eq!(got.len(), expected.len());
        for (g, w) in got.iter().zip(&expected) {
            assert!((g - w).abs() < 1e-6, "{name} {extra} text {i} ({text}): {got:?} vs {expected:?}");
        }
        assert_eq!(reply["usage"]["prompt_tokens"], want["token_counts"][i], "{name} text {i}: the tokens counted");
    }
}

#[test]
fn a_model2vec_model_embeds_as_static_model_encode_does() {
    check("model2vec");
}

#[test]
fn an_unnormalized_model2vec_model_without_a_token_limit_embeds_as_encode_does() {
    check("model2vec-raw");
}

#[test]
fn a_sentence_transformers_static_embedding_embeds_as_encode_does_with_its_prompts() {
    // sentence-transformers 6's layout: the module at the root, `Normalize` after it, named prompts.
    let (s, r) = check("st-static");
    compare(&s, "st-static", &r["prompted"]["query"], &json!({"prompt_name": "query"}));
    // The long text is not cut (its `max_seq_length` is infinite): 50 tokens counted, all in the mean.
    assert_eq!(r["token_counts"][5], 50);
}

#[test]
fn the_hubs_static_embedding_layout_cuts_where_its_tokenizer_json_says() {
    // `0_StaticEmbedding/` with sentence-transformers 3-5's type names; its tokenizer.json truncates at 10.
    let (_s, r) = check("st-static-legacy");
    assert_eq!(r["token_counts"][1], 10);
}
