//! vLLM's routes for pooling models, each against the route that already answers the same question: `/score`
//! (each pairing, 1:1, 1:N, N:N; a cross-encoder's relevance, an embedder's cosine, ColBERT's MaxSim) and
//! `/pooling` (embed, token_embed, classify).

use serde_json::{json, Value};

use crate::common::{cosine, floats, minilm, tiny, Server};

fn scores(v: &Value) -> Vec<f32> {
    v["data"].as_array().unwrap().iter().map(|d| d["score"].as_f64().unwrap() as f32).collect()
}

#[test]
fn a_cross_encoder_scores_pairs_as_it_reranks() {
    let (model, classifier) = (tiny("bert-rerank"), tiny("bert-classify"));
    let s = Server::start(&[
        "--model-id",
        &model,
        "--served-model-name",
        "ce",
        "--model-id",
        &classifier,
        "--served-model-name",
        "cls",
        "--no-model-warmup",
    ]);
    let docs = ["Paris is the capital of France.", "Horses eat hay.", "Berlin is in Germany."];
    let reply = s.post_json("/score", &json!({"model": "ce", "text_1": "capital of France?", "text_2": docs})).json();
    assert_eq!(reply["object"], "list");
    assert!(reply["id"].as_str().unwrap().starts_with("score-"));
    assert!(reply["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    let ranked =
        s.post_json("/rerank", &json!({"model": "ce", "query": "capital of France?", "documents": docs})).json();
    let mut by_index = vec![0f32; docs.len()];
    for r in ranked["results"].as_array().unwrap() {
        by_index[r["index"].as_u64().unwrap() as usize] = r["relevance_score"].as_f64().unwrap() as f32;
    }
    assert_eq!(scores(&reply), by_index, "pair i scores document i");
    // Raw logits with use_activation false, as /rerank's raw_scores; vLLM's newer spellings; /v1/score.
    let raw = s
        .post_json(
            "/v1/score",
            &json!({"model": "ce", "queries": "capital of France?", "documents": docs,
                                         "use_activation": false}),
        )
        .json();
    let raw_ranked = s
        .post_json(
            "/rerank",
            &json!({"model": "ce", "query": "capital of France?", "documents": [docs[0]],
                                       "raw_scores": true}),
        )
        .json();
    assert_eq!(scores(&raw)[0], raw_ranked["results"][0]["relevance_score"].as_f64().unwrap() as f32);
    // N:N pairs by position.
    let zipped = s
        .post_json(
            "/score",
            &json!({"model": "ce", "data_1": ["capital of France?", "what do horses eat?"],
                                      "data_2": [docs[0], docs[1]]}),
        )
        .json();
    let second =
        s.post_json("/score", &json!({"model": "ce", "text_1": "what do horses eat?", "text_2": docs[1]})).json();
    assert_eq!(scores(&zipped)[1], scores(&second)[0]);
    // What cannot be paired or scored is refused, naming why.
    let e = s
        .post_json("/score", &json!({"model": "ce", "text_1": ["a", "b"], "text_2": ["x", "y", "z"]}))
        .assert_error(400);
    assert!(e["error"]["message"].as_str().unwrap().contains("1:1, 1:N or N:N"), "{e}");
    s.post_json("/score", &json!({"model": "ce", "text_1": [], "text_2": ["x"]})).assert_error(400);
    s.post_json("/score", &json!({"model": "ce", "text_2": ["x"]})).assert_error(422);
    let parts = json!({"model": "ce", "text_1": "q", "text_2": {"content": [{"type": "text", "text": "x"}]}});
    s.post_json("/score", &parts).assert_error(400);
    let e = s.post_json("/score", &json!({"model": "cls", "text_1": "q", "text_2": "x"})).assert_error(400);
    assert!(e["error"]["message"].as_str().unwrap().contains("scores no pairs"), "{e}");
}

/// MiniLM as `mini` and the tiny ColBERT as `colbert`, in one server.
fn mini_and_colbert() -> Server {
    let (mini, colbert) = (minilm(), tiny("colbert"));
    Server::start(&[
        "--model-id",
        &mini,
        "--served-model-name",
        "mini",
        "--model-id",
        &colbert,
        "--served-model-name",
        "colbert",
        "--no-model-warmup",
    ])
}

#[test]
fn an_embedder_scores_by_cosine_and_colbert_by_maxsim() {
    let s = mini_and_colbert();
    let texts = ["A man is playing a guitar.", "Someone plays an instrument.", "The stock market fell."];
    let reply = s.post_json("/score", &json!({"model": "mini", "text_1": texts[0], "text_2": texts[1..]})).json();
    let e = s.post_json("/embeddings", &json!({"model": "mini", "input": texts})).json();
    let v: Vec<Vec<f32>> = (0..3).map(|i| floats(&e["data"][i]["embedding"])).collect();
    for (i, got) in scores(&reply).into_iter().enumerate() {
        assert!((got as f64 - cosine(&v[0], &v[i + 1])).abs() < 1e-6, "pair {i}: {got}");
    }
    // ColBERT: MaxSim summed over the query's tokens, as /rerank's raw score.
    let reply = s.post_json("/score", &json!({"model": "colbert", "text_1": texts[0], "text_2": texts[1]})).json();
    let ranked = s
        .post_json(
            "/rerank",
            &json!({"model": "colbert", "query": texts[0], "documents": [texts[1]],
                                       "raw_scores": true}),
        )
        .json();
    let want = ranked["results"][0]["relevance_score"].as_f64().unwrap() as f32;
    assert!((scores(&reply)[0] - want).abs() < 1e-5, "{reply} vs {want}");
}

#[test]
fn pooling_answers_each_task_as_the_routes_that_compute_it() {
    let (mini, classifier) = (minilm(), tiny("bert-classify"));
    let s = Server::start(&[
        "--model-id",
        &mini,
        "--served-model-name",
        "mini",
        "--model-id",
        &classifier,
        "--served-model-name",
        "cls",
        "--no-model-warmup",
    ]);
    let texts = ["A man is playing a guitar.", "The stock market fell."];
    let pooled = s.post_json("/pooling", &json!({"model": "mini", "input": texts})).json();
    assert_eq!(pooled["object"], "list");
    assert_eq!(pooled["data"][0]["object"], "pooling");
    let e = s.post_json("/embeddings", &json!({"model": "mini", "input": texts})).json();
    for i in 0..2 {
        assert_eq!(floats(&pooled["data"][i]["data"]), floats(&e["data"][i]["embedding"]), "embed {i}");
    }
    // base64: the same f32 values.
    let b64 = s.post_json("/pooling", &json!({"model": "mini", "input": texts[0], "encoding_format": "base64"})).json();
    let e64 =
        s.post_json("/embeddings", &json!({"model": "mini", "input": texts[0], "encoding_format": "base64"})).json();
    assert_eq!(b64["data"][0]["data"], e64["data"][0]["embedding"]);
    // token_embed: every token's state, as TEI's /embed_all.
    let tokens = s.post_json("/pooling", &json!({"model": "mini", "input": texts[0], "task": "token_embed"})).json();
    let all = s.post_json("/embed_all", &json!({"model": "mini", "inputs": texts[0]})).json();
    assert_eq!(tokens["data"][0]["data"], all[0]);
    assert!(tokens["data"][0]["data"].as_array().unwrap().len() > 3);
    // classify: probabilities in label order (the model's default task), logits with use_activation false.
    let probs = s.post_json("/pooling", &json!({"model": "cls", "input": [texts[0]]})).json();
    let labels = s.post_json("/classify", &json!({"model": "cls", "input": [texts[0]]})).json();
    let mut want: Vec<f32> =
        labels["data"][0].as_array().unwrap().iter().map(|l| l["score"].as_f64().unwrap() as f32).collect();
    let mut got = floats(&probs["data"][0]["data"]);
    assert_eq!(got.len(), 3);
    got.sort_by(f32::total_cmp);
    want.sort_by(f32::total_cmp);
    assert_eq!(got, want);
    let logits = s.post_json("/pooling", &json!({"model": "cls", "input": [texts[0]], "use_activation": false})).json();
    let raw = s.post_json("/classify", &json!({"model": "cls", "input": [texts[0]], "raw_scores": true})).json();
    let mut got = floats(&logits["data"][0]["data"]);
    let mut want: Vec<f32> =
        raw["data"][0].as_array().unwrap().iter().map(|l| l["score"].as_f64().unwrap() as f32).collect();
    got.sort_by(f32::total_cmp);
    want.sort_by(f32::total_cmp);
    assert_eq!(got, want);
    // Tasks a model cannot run are refused, naming the task.
    let e = s.post_json("/pooling", &json!({"model": "cls", "input": "x", "task": "embed"})).assert_error(400);
    assert!(e["error"]["message"].as_str().unwrap().contains("`embed`"), "{e}");
    s.post_json("/pooling", &json!({"model": "mini", "input": "x", "task": "token_classify"})).assert_error(400);
    s.post_json("/pooling", &json!({"model": "mini", "input": "x", "task": "classify"})).assert_error(400);
}

#[test]
fn a_vllm_rerank_request_gets_vllms_answer_on_every_rerank_path() {
    let (model, mini) = (tiny("bert-rerank"), minilm());
    let s = Server::start(&[
        "--model-id",
        &model,
        "--served-model-name",
        "ce",
        "--model-id",
        &mini,
        "--served-model-name",
        "mini",
        "--no-model-warmup",
    ]);
    let docs = ["Brasilia.", "Paris is the capital of France.", "Horses eat hay."];
    let query = "capital of France?";
    let infinity = s.post_json("/rerank", &json!({"model": "ce", "query": query, "documents": docs})).json();
    let want: Vec<(u64, f64)> = infinity["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["index"].as_u64().unwrap(), r["relevance_score"].as_f64().unwrap()))
        .collect();
    // Infinity's body keeps Infinity's answer: no document unless asked.
    assert_eq!(infinity["results"][0]["document"], Value::Null, "{infinity}");
    for path in ["/rerank", "/v1/rerank", "/v2/rerank"] {
        // What only vLLM sends: its scoring fields (with them `top_n: 0` means all).
        for extra in [
            json!({"top_n": 0, "use_activation": true}),
            json!({"use_activation": true}),
            json!({"truncate_prompt_tokens": -1}),
        ] {
            let mut body = json!({"model": "ce", "query": query, "documents": docs});
            body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            let reply = s.post_json(path, &body);
            assert_eq!(reply.status, 200, "{path} {extra}: {}", reply.body);
            let reply = reply.json();
            assert!(reply["id"].as_str().unwrap().starts_with("rerank-"), "{path}: {reply}");
            assert_eq!(reply["model"], "ce");
            let results = reply["results"].as_array().unwrap();
            assert_eq!(results.len(), docs.len(), "{path} {extra}: every document");
            for (r, (index, score)) in results.iter().zip(&want) {
                assert_eq!(r["index"].as_u64().unwrap(), *index, "{path}: best first, as Infinity's");
                assert!((r["relevance_score"].as_f64().unwrap() - score).abs() < 1e-6, "{path}: {reply}");
                assert_eq!(r["document"], json!({"text": docs[*index as usize]}), "{path}: vLLM echoes documents");
            }
            assert!(reply["usage"]["total_tokens"].as_u64().unwrap() > 0);
            assert_eq!(reply["usage"]["prompt_tokens"], reply["usage"]["total_tokens"]);
        }
    }
    // top_n cuts; one document as a string; raw logits with use_activation false.
    let top = s
        .post_json(
            "/v1/rerank",
            &json!({"model": "ce", "query": query, "documents": docs, "top_n": 1,
                                                  "use_activation": true}),
        )
        .json();
    assert_eq!(top["results"].as_array().unwrap().len(), 1);
    let one = s
        .post_json("/rerank", &json!({"model": "ce", "query": query, "documents": docs[1], "use_activation": true}))
        .json();
    assert_eq!(one["results"][0]["document"]["text"], docs[1], "{one}");
    let raw = s
        .post_json("/rerank", &json!({"model": "ce", "query": query, "documents": docs[1], "use_activation": false}))
        .json();
    let logit = raw["results"][0]["relevance_score"].as_f64().unwrap();
    let prob = one["results"][0]["relevance_score"].as_f64().unwrap();
    assert!((1.0 / (1.0 + (-logit).exp()) - prob).abs() < 1e-6, "sigmoid(logit) {logit} vs {prob}");
    // An embedder reranks by cosine, as vLLM's /rerank and /score do.
    let by_cosine = s
        .post_json("/rerank", &json!({"model": "mini", "query": query, "documents": docs, "use_activation": true}))
        .json();
    let scored = s.post_json("/score", &json!({"model": "mini", "text_1": query, "text_2": docs})).json();
    for r in by_cosine["results"].as_array().unwrap() {
        let i = r["index"].as_u64().unwrap() as usize;
        assert_eq!(r["relevance_score"].as_f64().unwrap() as f32, scores(&scored)[i]);
    }
    // `top_n: 0` alone is Infinity's 422; Cohere's body on /v2/rerank keeps Cohere's answer.
    s.post_json("/rerank", &json!({"model": "ce", "query": query, "documents": docs, "top_n": 0})).assert_error(422);
    let cohere = s.post_json("/v2/rerank", &json!({"model": "ce", "query": query, "documents": docs})).json();
    assert!(cohere.get("meta").is_some() && cohere["results"][0].get("document").is_none(), "{cohere}");
    // Bad vLLM bodies are 4xx.
    let vllm = |body: Value| {
        let mut body = body;
        body["use_activation"] = json!(true);
        body
    };
    s.post_json("/rerank", &vllm(json!({"model": "ce", "query": query, "documents": []}))).assert_error(400);
    s.post_json("/rerank", &vllm(json!({"model": "ce", "documents": docs}))).assert_error(422);
}

#[test]
fn embeddings_take_vllms_activation_truncation_and_encoding_fields() {
    let mini = minilm();
    let s = Server::start(&["--model-id", &mini, "--served-model-name", "mini", "--no-model-warmup"]);
    let embed = |body: Value| {
        let reply = s.post_json("/v1/embeddings", &body);
        assert_eq!(reply.status, 200, "{body}: {}", reply.body);
        reply.json()
    };
    let vector = |reply: &Value| floats(&reply["data"][0]["embedding"]);
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let text = "The quick brown fox jumps over the lazy dog";
    // use_activation: false is the raw pooled vector (TEI's normalize: false), true a unit vector.
    let raw = vector(&embed(json!({"model": "mini", "input": text, "use_activation": false})));
    let tei = floats(&s.post_json("/embed", &json!({"inputs": text, "normalize": false})).json()[0]);
    assert_eq!(raw, tei);
    assert!((norm(&raw) - 1.0).abs() > 1e-3);
    let unit = vector(&embed(json!({"model": "mini", "input": text, "use_activation": true})));
    assert!((norm(&unit) - 1.0).abs() < 1e-5 && cosine(&unit, &raw) > 0.99999);
    let old = vector(&embed(json!({"model": "mini", "input": text, "normalize": false})));
    assert_eq!(old, raw, "vLLM 0.10-0.16's `normalize`");
    // truncate_prompt_tokens k keeps k tokens, [CLS] and [SEP] among them: as the ids cut by hand.
    let ids: Vec<u64> = s.post_json("/tokenize", &json!({"inputs": text})).json()[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_u64().unwrap())
        .collect();
    let cut = embed(json!({"model": "mini", "input": text, "truncate_prompt_tokens": 5}));
    assert_eq!(cut["usage"]["prompt_tokens"], 5);
    let by_hand = [&ids[..4], &ids[ids.len() - 1..]].concat();
    let want = vector(&embed(json!({"model": "mini", "input": [by_hand]})));
    assert!(cosine(&vector(&cut), &want) > 0.99999, "the first 3 words with [CLS] and [SEP]");
    let left = embed(json!({"model": "mini", "input": text, "truncate_prompt_tokens": 5, "truncation_side": "left"}));
    let by_hand = [&ids[..1], &ids[ids.len() - 4..]].concat();
    assert!(cosine(&vector(&left), &vector(&embed(json!({"model": "mini", "input": [by_hand]})))) > 0.99999);
    // -1 cuts at the window; null cuts nothing (too long is refused); out of range is a 400.
    let long = "word ".repeat(400);
    let window = embed(json!({"model": "mini", "input": long, "truncate_prompt_tokens": -1}));
    assert_eq!(window["usage"]["prompt_tokens"], 256);
    assert!(
        s.post_json("/v1/embeddings", &json!({"model": "mini", "input": long, "truncate_prompt_tokens": null})).status
            >= 400
    );
    for k in [0, -2, 257] {
        let e = s
            .post_json("/v1/embeddings", &json!({"model": "mini", "input": text, "truncate_prompt_tokens": k}))
            .assert_error(400);
        assert_eq!(e["error"]["param"], "truncate_prompt_tokens", "{e}");
    }
    // embed_dtype and endianness shape base64; fp8 is refused.
    let b64 = |dtype: &str, order: &str| {
        let reply = embed(json!({"model": "mini", "input": text, "encoding_format": "base64",
                                 "embed_dtype": dtype, "endianness": order}));
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.decode(reply["data"][0]["embedding"].as_str().unwrap()).unwrap()
    };
    let float = vector(&embed(json!({"model": "mini", "input": text})));
    let f16: Vec<f32> =
        b64("float16", "little").chunks(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect();
    assert_eq!(f16.len(), float.len());
    assert!(f16.iter().zip(&float).all(|(a, b)| (a - b).abs() < 1e-3));
    let bf16_big: Vec<f32> =
        b64("bfloat16", "big").chunks(2).map(|b| half::bf16::from_be_bytes([b[0], b[1]]).to_f32()).collect();
    assert!(bf16_big.iter().zip(&float).all(|(a, b)| (a - b).abs() < 1e-2));
    let f32_big: Vec<f32> =
        b64("float32", "big").chunks(4).map(|b| f32::from_be_bytes([b[0], b[1], b[2], b[3]])).collect();
    assert_eq!(f32_big, float);
    s.post_json(
        "/v1/embeddings",
        &json!({"model": "mini", "input": text, "encoding_format": "base64", "embed_dtype": "fp8_e4m3"}),
    )
    .assert_error(400);
}

#[test]
fn a_vllm_classify_request_gets_probs_in_label_order() {
    let (classifier, ce) = (tiny("bert-classify"), tiny("bert-rerank"));
    let s = Server::start(&[
        "--model-id",
        &classifier,
        "--served-model-name",
        "cls",
        "--model-id",
        &ce,
        "--served-model-name",
        "ce",
        "--no-model-warmup",
    ]);
    let texts = ["I love this movie", "This was awful"];
    let infinity = s.post_json("/classify", &json!({"model": "cls", "input": texts})).json();
    assert!(infinity["data"][0].is_array(), "Infinity's body keeps Infinity's shape: {infinity}");
    let vllm = s.post_json("/classify", &json!({"model": "cls", "input": texts, "use_activation": true})).json();
    assert!(vllm["id"].as_str().unwrap().starts_with("classify-"), "{vllm}");
    assert_eq!(vllm["object"], "list");
    for (i, item) in vllm["data"].as_array().unwrap().iter().enumerate() {
        assert_eq!(item["index"], i);
        assert_eq!(item["num_classes"], 3);
        let best = &infinity["data"][i][0];
        assert_eq!(item["label"], best["label"], "the best label");
        // probs are in label order: each label's Infinity score at its own position.
        for l in infinity["data"][i].as_array().unwrap() {
            let label = l["label"].as_str().unwrap();
            let at = ["negative", "neutral", "positive"].iter().position(|x| *x == label).unwrap();
            assert!((item["probs"][at].as_f64().unwrap() - l["score"].as_f64().unwrap()).abs() < 1e-6, "{vllm}");
        }
        let sum: f64 = item["probs"].as_array().unwrap().iter().map(|p| p.as_f64().unwrap()).sum();
        assert!((sum - 1.0).abs() < 1e-5);
    }
    let logits = s.post_json("/classify", &json!({"model": "cls", "input": texts[0], "use_activation": false})).json();
    let raw = s.post_json("/classify", &json!({"model": "cls", "input": [texts[0]], "raw_scores": true})).json();
    for l in raw["data"][0].as_array().unwrap() {
        let at = ["negative", "neutral", "positive"].iter().position(|x| *x == l["label"].as_str().unwrap()).unwrap();
        assert!((logits["data"][0]["probs"][at].as_f64().unwrap() - l["score"].as_f64().unwrap()).abs() < 1e-6);
    }
    // A cross-encoder classifies with its one logit through a sigmoid, as /pooling's classify task does.
    let pooled = s.post_json("/pooling", &json!({"model": "ce", "input": "x", "task": "classify"})).json();
    let one = s.post_json("/classify", &json!({"model": "ce", "input": "x", "use_activation": true})).json();
    assert_eq!(one["data"][0]["num_classes"], 1);
    assert_eq!(one["data"][0]["label"], "LABEL_0");
    let prob = one["data"][0]["probs"][0].as_f64().unwrap();
    assert!(
        prob > 0.0 && prob < 1.0 && (prob - pooled["data"][0]["data"][0].as_f64().unwrap()).abs() < 1e-6,
        "{pooled}"
    );
    s.post_json("/classify", &json!({"model": "cls", "input": texts, "truncate_prompt_tokens": 0})).assert_error(400);
}

/// One raw POST: status, headers and the body's bytes (vLLM's `bytes` answers are not text).
fn post_raw(s: &Server, path: &str, body: &Value) -> (u16, Option<String>, Option<String>, Vec<u8>) {
    let resp = match ureq::post(&format!("{}{path}", s.base)).send_string(&body.to_string()) {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{path}: {e}"),
    };
    let (status, kind) = (resp.status(), resp.header("content-type").map(str::to_string));
    let metadata = resp.header("metadata").map(str::to_string);
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut resp.into_reader(), &mut bytes).unwrap();
    (status, kind, metadata, bytes)
}

#[test]
fn bytes_formats_answer_the_raw_vectors_with_vllms_metadata() {
    let s = mini_and_colbert();
    let texts = ["The quick brown fox", "jumps over the lazy dog", "!"];
    let floats_of = |model: &str| s.post_json("/v1/embeddings", &json!({"model": model, "input": texts})).json();
    let want = floats_of("mini");
    let body = json!({"model": "mini", "input": texts, "encoding_format": "bytes", "embed_dtype": "float16"});
    let (status, kind, metadata, bytes) = post_raw(&s, "/v1/embeddings", &body);
    assert_eq!((status, kind.as_deref()), (200, Some("application/octet-stream")));
    let meta: Value = serde_json::from_str(&metadata.expect("a metadata header")).unwrap();
    assert_eq!(meta["model"], "mini");
    assert_eq!(meta["usage"]["prompt_tokens"], want["usage"]["prompt_tokens"]);
    assert!(meta["id"].is_string() && meta["created"].is_u64());
    let items = meta["data"].as_array().unwrap();
    assert_eq!(items.len(), texts.len());
    for (i, item) in items.iter().enumerate() {
        assert_eq!((item["index"].as_u64(), item["embed_dtype"].as_str()), (Some(i as u64), Some("float16")));
        assert_eq!(item["endianness"], "native");
        assert_eq!(item["shape"], json!([384]));
        let (start, end) = (item["start"].as_u64().unwrap() as usize, item["end"].as_u64().unwrap() as usize);
        assert_eq!((start, end), (i * 768, (i + 1) * 768));
        let got: Vec<f32> =
            bytes[start..end].chunks(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect();
        let w = floats(&want["data"][i]["embedding"]);
        assert!(got.iter().zip(&w).all(|(a, b)| (a - b).abs() < 1e-3), "item {i}");
    }
    assert_eq!(bytes.len(), 3 * 768);
    // bytes_only: the same body, no header.
    let body = json!({"model": "mini", "input": texts, "encoding_format": "bytes_only", "embed_dtype": "float16"});
    let (status, _, metadata, only) = post_raw(&s, "/v1/embeddings", &body);
    assert_eq!((status, metadata, only), (200, None, bytes));
    // Token vectors: `[tokens, dim]` shapes, f32 by default.
    let want = floats_of("colbert");
    let body = json!({"model": "colbert", "input": texts, "encoding_format": "bytes"});
    let (status, _, metadata, bytes) = post_raw(&s, "/v1/embeddings", &body);
    assert_eq!(status, 200);
    let meta: Value = serde_json::from_str(&metadata.unwrap()).unwrap();
    for (i, item) in meta["data"].as_array().unwrap().iter().enumerate() {
        let rows = want["data"][i]["embedding"].as_array().unwrap();
        let shape = [rows.len(), rows[0].as_array().unwrap().len()];
        assert_eq!(item["shape"], json!(shape));
        let (start, end) = (item["start"].as_u64().unwrap() as usize, item["end"].as_u64().unwrap() as usize);
        let got: Vec<f32> = bytes[start..end].chunks(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        let flat: Vec<f32> = rows.iter().flat_map(floats).collect();
        assert_eq!(got, flat);
    }
    // /pooling keeps to float and base64.
    let e =
        s.post_json("/pooling", &json!({"model": "mini", "input": "x", "encoding_format": "bytes"})).assert_error(400);
    assert_eq!(e["error"]["param"], "encoding_format");
}
