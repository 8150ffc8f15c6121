//! Cohere's v2 embed and rerank on the spawned binary, checked against the Infinity routes' answers.

use crate::common;

use base64::Engine as _;
use common::{cosine, floats, minilm_dir, repo_root, Server};
use serde_json::{json, Value};

/// all-MiniLM-L6-v2 with named prompts, as an instruction-tuned model ships them.
fn minilm_with_prompts(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("aleph-cohere-prompts-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    let src = minilm_dir();
    for f in ["config.json", "model.safetensors", "modules.json", "sentence_bert_config.json", "tokenizer.json"] {
        std::os::unix::fs::symlink(src.join(f), dir.join(f)).unwrap();
    }
    std::os::unix::fs::symlink(src.join("1_Pooling/config.json"), dir.join("1_Pooling/config.json")).unwrap();
    let prompts = json!({"prompts": {"query": "query: ", "document": "passage: "}, "default_prompt_name": null});
    std::fs::write(dir.join("config_sentence_transformers.json"), prompts.to_string()).unwrap();
    dir
}

fn ok(s: &Server, path: &str, body: Value) -> Value {
    let r = s.post_json(path, &body);
    assert_eq!(r.status, 200, "{path} {body}: {}", r.body);
    r.json()
}

fn infinity(s: &Server, text: &str, extra: Value) -> Vec<f32> {
    let mut body = json!({"model": "mini", "input": text});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    floats(&ok(s, "/embeddings", body)["data"][0]["embedding"])
}

#[test]
fn v2_embed_types_prompts_and_dimensions() {
    let dir = minilm_with_prompts("types");
    let path = dir.to_string_lossy().into_owned();
    let s = Server::start(&["--model-id", &path, "--served-model-name", "mini", "--no-model-warmup"]);
    let texts = ["the first text", "and a second one"];
    let v = ok(
        &s,
        "/v2/embed",
        json!({"model": "mini", "texts": texts, "input_type": "clustering",
               "embedding_types": ["float", "int8", "uint8", "binary", "ubinary", "base64"]}),
    );
    assert_eq!(v["response_type"], "embeddings_by_type");
    assert_eq!(v["texts"], json!(texts));
    assert!(v["id"].as_str().is_some_and(|id| !id.is_empty()));
    assert_eq!(v["meta"]["api_version"]["version"], "2");
    assert!(v["meta"]["billed_units"]["input_tokens"].as_u64().unwrap() > 0);
    let e = &v["embeddings"];
    let float = floats(&e["float"][0]);
    // No `clustering` prompt: the text as it is.
    assert!(cosine(&float, &infinity(&s, texts[0], json!({}))) > 0.999999);
    let bytes = base64::engine::general_purpose::STANDARD.decode(e["base64"][0].as_str().unwrap()).unwrap();
    let decoded: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(decoded, float, "base64 is the float vector's little-endian bytes");
    let ints = |t: &str| -> Vec<i64> { e[t][1].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect() };
    let (int8, uint8, binary, ubinary) = (ints("int8"), ints("uint8"), ints("binary"), ints("ubinary"));
    assert_eq!((int8.len(), uint8.len(), binary.len(), ubinary.len()), (384, 384, 48, 48));
    assert!(int8.iter().all(|x| (-128..=127).contains(x)) && uint8.iter().all(|x| (0..=255).contains(x)));
    assert!(binary.iter().zip(&ubinary).all(|(b, u)| *b == u - 128), "binary is ubinary - 128");
    // ubinary packs the signs, most significant bit first.
    let second = floats(&e["float"][1]);
    let first_byte = second[..8].iter().fold(0i64, |acc, &x| (acc << 1) | i64::from(x > 0.0));
    assert_eq!(ubinary[0], first_byte);
    // int8 agrees with --embedding-dtype int8's calibrated quantization direction-wise.
    let as_f: Vec<f32> = int8.iter().map(|&x| x as f32).collect();
    assert!(cosine(&as_f, &second) > 0.9, "{}", cosine(&as_f, &second));

    // Cohere v1 (`cohere.Client.embed`, POST /v1/embed): a plain list unless types are asked for; the
    // same path still answers TEI's `inputs` body.
    let v1 = ok(&s, "/v1/embed", json!({"model": "mini", "texts": texts, "input_type": "clustering"}));
    assert_eq!(v1["response_type"], "embeddings_floats");
    assert!(cosine(&floats(&v1["embeddings"][0]), &float) > 0.999999);
    assert_eq!(v1["texts"], json!(texts));
    let v1 = ok(&s, "/v1/embed", json!({"texts": texts, "embedding_types": ["ubinary"]}));
    assert_eq!(v1["response_type"], "embeddings_by_type");
    assert_eq!(v1["embeddings"]["ubinary"][1], e["ubinary"][1]);
    let tei = ok(&s, "/v1/embed", json!({"inputs": texts[0]}));
    assert!(cosine(&floats(&tei[0]), &float) > 0.999999);

    // input_type picks the model's prompt.
    let q = ok(&s, "/v2/embed", json!({"model": "mini", "texts": ["what is it"], "input_type": "search_query"}));
    let with_prompt = infinity(&s, "query: what is it", json!({}));
    assert!(cosine(&floats(&q["embeddings"]["float"][0]), &with_prompt) > 0.999999);
    let d = ok(&s, "/v2/embed", json!({"model": "mini", "texts": ["it is this"], "input_type": "search_document"}));
    assert!(cosine(&floats(&d["embeddings"]["float"][0]), &infinity(&s, "passage: it is this", json!({}))) > 0.999999);

    // output_dimension: a unit-length prefix; truncate NONE refuses a long text.
    let cut = ok(&s, "/v2/embed", json!({"model": "mini", "texts": ["the first text"], "output_dimension": 64}));
    let cut = floats(&cut["embeddings"]["float"][0]);
    assert_eq!(cut.len(), 64);
    assert!(cosine(&cut, &float[..64]) > 0.999999);
    assert!((cut.iter().map(|x| x * x).sum::<f32>().sqrt() - 1.0).abs() < 1e-5);
    let long = "word ".repeat(400);
    s.post_json("/v2/embed", &json!({"texts": [long], "truncate": "NONE"})).assert_error(422);
    assert_eq!(s.post_json("/v2/embed", &json!({"texts": [long], "truncate": "START"})).status, 200);
    s.post_json("/v2/embed", &json!({"texts": []})).assert_error(422);
    s.post_json("/v2/embed", &json!({"texts": ["x"], "embedding_types": ["int4"]})).assert_error(422);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn v2_rerank_matches_infinity_and_returns_documents() {
    let rerank = repo_root().join("tests/fixtures/tiny/bert-rerank").to_string_lossy().into_owned();
    let s = Server::start(&["--model-id", &rerank, "--served-model-name", "rr", "--no-model-warmup"]);
    let docs = ["Paris is in France", "bananas are yellow", "the capital of France", "a fourth"];
    let inf = ok(&s, "/rerank", json!({"query": "capital of France", "documents": docs}));
    let v = ok(&s, "/v2/rerank", json!({"model": "rr", "query": "capital of France", "documents": docs, "top_n": 3}));
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    for (c, i) in results.iter().zip(inf["results"].as_array().unwrap()) {
        assert_eq!(c["index"], i["index"]);
        assert!((c["relevance_score"].as_f64().unwrap() - i["relevance_score"].as_f64().unwrap()).abs() < 1e-9);
        assert!(c.get("document").is_none(), "{c}");
    }
    assert!(v["id"].is_string() && v["meta"]["api_version"]["version"] == "2");
    // LiteLLM's providers send return_documents and (v1 style) document objects.
    let objects: Vec<Value> = docs.iter().map(|d| json!({"text": d})).collect();
    let v = ok(&s, "/v2/rerank", json!({"query": "capital of France", "documents": objects, "return_documents": true}));
    for r in v["results"].as_array().unwrap() {
        assert_eq!(r["document"]["text"], docs[r["index"].as_u64().unwrap() as usize]);
    }
    s.post_json("/v2/rerank", &json!({"query": "q", "documents": ["a"], "top_n": 0})).assert_error(422);
    s.post_json("/v2/rerank", &json!({"query": "q", "documents": []})).assert_error(422);
}

#[test]
fn prompt_names_and_the_default_prompt_apply_on_every_route() {
    let dir = minilm_with_prompts("default");
    let path = dir.to_string_lossy().into_owned();
    let s = Server::start(&["--model-id", &path, "--served-model-name", "mini", "--no-model-warmup"]);
    let plain = infinity(&s, "query: what is it", json!({}));
    let named = infinity(&s, "what is it", json!({"prompt_name": "query"}));
    assert!(cosine(&named, &plain) > 0.999999, "prompt_name on /embeddings prepends the prompt");
    assert!(cosine(&infinity(&s, "what is it", json!({})), &plain) < 0.9999, "no prompt unless asked");
    let e = s.post_json("/embeddings", &json!({"input": "x", "prompt_name": "nope"})).assert_error(422);
    assert!(e["error"]["message"].as_str().unwrap().contains("document"), "names the prompts there are: {e}");
    drop(s);

    let s = Server::start(&[
        "--model-id",
        &path,
        "--served-model-name",
        "mini",
        "--no-model-warmup",
        "--default-prompt-name",
        "query",
    ]);
    assert!(cosine(&infinity(&s, "what is it", json!({})), &plain) > 0.999999, "the default applies");
    // A request's prompt_name overrides the default.
    let passage = infinity(&s, "what is it", json!({"prompt_name": "document"}));
    assert!(cosine(&passage, &plain) < 0.9999);
    let tei = floats(&ok(&s, "/embed", json!({"inputs": "what is it"}))[0]);
    assert!(cosine(&tei, &plain) > 0.999999, "TEI's /embed takes the default too");
    let co = ok(&s, "/v2/embed", json!({"texts": ["what is it"], "input_type": "clustering"}));
    assert!(cosine(&floats(&co["embeddings"]["float"][0]), &plain) > 0.999999, "no clustering prompt: the default");
    let co = ok(&s, "/v2/embed", json!({"texts": ["what is it"], "input_type": "search_document"}));
    assert!(cosine(&floats(&co["embeddings"]["float"][0]), &passage) > 0.999999, "the input type's prompt wins");
    drop(s);

    let logs =
        match Server::try_start(&["--model-id", &path, "--no-model-warmup", "--default-prompt-name", "nope"], &[]) {
            Ok(_) => panic!("an unknown default prompt started"),
            Err(logs) => logs,
        };
    assert!(logs.contains("--default-prompt-name") && logs.contains("nope"), "{logs}");
    let _ = std::fs::remove_dir_all(&dir);
}
