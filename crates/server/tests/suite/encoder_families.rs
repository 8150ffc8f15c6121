//! Encoder families over HTTP, on Aleph's kernels (each instruction set) and candle, against the references
//! transformers and sentence-transformers computed (tests/fixtures/tiny, made by
//! scripts/make_encoder_families.py): SPLADE through TEI's `/embed_sparse` and `/embeddings` with
//! `encoding_format: "sparse"` (dense stays the default), DistilBERT with a Dense module and a classifier
//! from pickles, ModernBERT's, GTE's, NomicBERT's, DeBERTa's and JinaBERT's embedders and cross-encoders
//! (DeBERTa's by scripts/make_deberta.py, JinaBERT's by scripts/make_jinabert.py from jina's remote code),
//! NomicBERT v2's experts (scripts/make_nomic_moe.py, nomic's remote code).

use crate::common;

use std::path::PathBuf;

use common::media::{Run, OTHER_PATHS};
use common::{floats, tiny, Server};
use serde_json::{json, Value};

fn reference(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(PathBuf::from(tiny(name)).join("reference.json")).unwrap()).unwrap()
}

/// The reference's non-empty texts (the APIs refuse empty ones) with their positions in it.
fn texts(r: &Value) -> Vec<(usize, String)> {
    let all = r["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string());
    all.enumerate().filter(|(_, t)| !t.is_empty()).collect()
}

fn only_texts(r: &Value) -> Vec<String> {
    texts(r).into_iter().map(|(_, t)| t).collect()
}

/// `[{index, value}]` as (index, value) pairs, from either the reference or a reply.
fn pairs(entries: &Value) -> Vec<(u64, f32)> {
    entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["index"].as_u64().unwrap(), e["value"].as_f64().unwrap() as f32))
        .collect()
}

fn reference_pairs(r: &Value, i: usize) -> Vec<(u64, f32)> {
    let s = &r["sparse"][i];
    let idx = s["indices"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap());
    idx.zip(floats(&s["values"])).collect()
}

/// Same entries (a weight within 1e-4 of zero may fall on either side), same weights within 1e-4.
fn assert_sparse_close(got: &[(u64, f32)], want: &[(u64, f32)], what: &str) {
    let find = |v: &[(u64, f32)], i: u64| v.iter().find(|e| e.0 == i).map_or(0.0, |e| e.1);
    for &(i, w) in want.iter().chain(got) {
        let (g, w2) = (find(got, i), find(want, i));
        assert!((g - w2).abs() < 1e-4, "{what}: entry {i}: {g} vs {w2} ({w})");
    }
    assert!(got.iter().all(|e| e.1 > 0.0), "{what}: only positive weights are listed");
}

fn check_splade(s: &Server, model: &str) {
    let r = reference(model);
    let (positions, texts): (Vec<usize>, Vec<String>) = texts(&r).into_iter().unzip();
    let reply = s.post_json("/embed_sparse", &json!({"inputs": texts}));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let tei = reply.json();
    let openai = s.post_json("/embeddings", &json!({"input": texts, "encoding_format": "sparse"}));
    assert_eq!(openai.status, 200, "{}", openai.body);
    let openai = openai.json();
    for (i, &at) in positions.iter().enumerate() {
        let want = reference_pairs(&r, at);
        assert_sparse_close(&pairs(&tei[i]), &want, &format!("{model} /embed_sparse text {i}"));
        assert_sparse_close(&pairs(&openai["data"][i]["embedding"]), &want, &format!("{model} /embeddings text {i}"));
    }
    // Dense stays the default: the whole vocabulary-wide vector.
    let dense = s.post_json("/embeddings", &json!({"input": texts[0]})).json();
    let v = floats(&dense["data"][0]["embedding"]);
    assert_eq!(v.len() as u64, r["vocab"].as_u64().unwrap());
    let nonzero: Vec<(u64, f32)> =
        v.iter().enumerate().filter(|(_, x)| **x != 0.0).map(|(i, x)| (i as u64, *x)).collect();
    assert_sparse_close(&nonzero, &reference_pairs(&r, positions[0]), &format!("{model} dense"));
}

#[test]
fn splade_serves_sparse_on_every_path() {
    let m = tiny("distilbert-splade");
    let s = Server::start(&["--model-id", &m, "--no-model-warmup"]);
    check_splade(&s, "distilbert-splade");
    let models = s.get("/models").json();
    let caps = models["data"][0]["capabilities"].as_array().unwrap().clone();
    assert!(caps.contains(&json!("sparse")) && caps.contains(&json!("embed")), "{caps:?}");
    assert_eq!(s.get("/info").json()["model_type"]["embedding"]["pooling"], "splade");
    // TEI's `POST /` routes a SPLADE model to /embed_sparse.
    let root = s.post_json("/", &json!({"inputs": "a cat"}));
    assert_eq!(root.status, 200, "{}", root.body);
    assert!(root.json()[0][0]["index"].is_u64(), "{}", root.body);
    for (flags, env) in OTHER_PATHS {
        let mut args = vec!["--model-id", m.as_str(), "--no-model-warmup"];
        args.extend_from_slice(flags);
        check_splade(&Server::start_with_env(&args, env), "distilbert-splade");
    }
}

#[test]
fn a_plain_masked_lm_is_sparse_with_pooling_method_splade() {
    let m = tiny("bert-splade");
    let s = Server::start(&["--model-id", &m, "--no-model-warmup", "--pooling-method", "splade"]);
    check_splade(&s, "bert-splade");
    // Without it, the same folder is a mean-pooled dense embedder (as Infinity serves BertForMaskedLM).
    let dense = Server::start(&["--model-id", &m, "--no-model-warmup"]);
    let r = dense.post_json("/embeddings", &json!({"input": "a cat", "encoding_format": "sparse"}));
    r.assert_error(400);
    assert!(r.body.contains("has no sparse output"), "{}", r.body);
    let r = dense.post_json("/embed_sparse", &json!({"inputs": "a cat"}));
    assert_eq!(r.status, 424, "{}", r.body);
}

#[test]
fn distilbert_embeds_and_classifies_on_every_path() {
    let embed = tiny("distilbert-embed");
    let classify = tiny("distilbert-classify");
    let er = reference("distilbert-embed");
    let cr = reference("distilbert-classify");
    let default: Run = (&[], &[]);
    for (flags, env) in std::iter::once(default).chain(OTHER_PATHS) {
        let mut args = vec!["--model-id", embed.as_str(), "--model-id", classify.as_str(), "--no-model-warmup"];
        args.extend_from_slice(flags);
        let s = Server::start_with_env(&args, env);
        let reply = s.post_json("/embeddings", &json!({"model": "tiny/distilbert-embed", "input": only_texts(&er)}));
        assert_eq!(reply.status, 200, "{}", reply.body);
        let body = reply.json();
        for (i, (at, _)) in texts(&er).into_iter().enumerate() {
            let (g, w) = (floats(&body["data"][i]["embedding"]), floats(&er["vectors"][at]));
            assert_eq!(g.len(), 16, "the Dense module's width");
            let d = g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(d < 1e-4, "{flags:?} {env:?} text {i}: differs by {d}");
        }
        check_classify(&s, "distilbert-classify", &cr, &["negative", "neutral", "positive"], &format!("{flags:?}"));
    }
}

/// `/classify` on `tiny/{name}`: the softmax over transformers' logits, per label.
fn check_classify(s: &Server, name: &str, r: &Value, labels: &[&str], what: &str) {
    let reply = s.post_json("/classify", &json!({"model": format!("tiny/{name}"), "input": only_texts(r)}));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = reply.json();
    for (i, (at, _)) in texts(r).into_iter().enumerate() {
        let logits = floats(&r["logits"][at]);
        let max = logits.iter().cloned().fold(f32::MIN, f32::max);
        let total: f32 = logits.iter().map(|l| (l - max).exp()).sum();
        for entry in body["data"][i].as_array().unwrap() {
            let k = labels.iter().position(|l| entry["label"] == *l).unwrap();
            let want = (logits[k] - max).exp() / total;
            let got = entry["score"].as_f64().unwrap() as f32;
            assert!((got - want).abs() < 1e-4, "{what} {name} text {i} {}: {got} vs {want}", labels[k]);
        }
    }
}

#[test]
fn deberta_classifies_on_every_path() {
    let (m, r) = (tiny("deberta-classify"), reference("deberta-classify"));
    let default: Run = (&[], &[]);
    for (flags, env) in std::iter::once(default).chain(OTHER_PATHS) {
        let mut args = vec!["--model-id", m.as_str(), "--no-model-warmup"];
        args.extend_from_slice(flags);
        let s = Server::start_with_env(&args, env);
        check_classify(&s, "deberta-classify", &r, &["contradiction", "entailment", "neutral"], &format!("{flags:?}"));
    }
}

#[test]
fn modernbert_embeds_and_reranks_on_every_path() {
    embeds_and_reranks_on_every_path("modernbert");
}

#[test]
fn gte_embeds_and_reranks_on_every_path() {
    embeds_and_reranks_on_every_path("gte");
}

#[test]
fn deberta_embeds_and_reranks_on_every_path() {
    embeds_and_reranks_on_every_path("deberta");
}

#[test]
fn nomic_bert_embeds_and_reranks_on_every_path() {
    embeds_and_reranks_on_every_path("nomic");
}

#[test]
fn jina_bert_embeds_and_reranks_on_every_path() {
    embeds_and_reranks_on_every_path("jina");
}

#[test]
fn nomic_bert_v2_experts_embed_on_every_path() {
    let (name, default): (_, Run) = ("nomic-moe-embed", (&[], &[]));
    let model = tiny(name);
    for (flags, env) in std::iter::once(default).chain(OTHER_PATHS) {
        let mut args = vec!["--model-id", model.as_str(), "--no-model-warmup"];
        args.extend_from_slice(flags);
        check_embeddings(&Server::start_with_env(&args, env), name, &format!("{flags:?} {env:?}"));
    }
}

/// Qwen3-Embedding's shape (scripts/make_qwen3.py): last-token pooled decoder states, and its `query` prompt by
/// `prompt_name` on Infinity's route and TEI's, on every compute path.
#[test]
fn qwen3_embeds_with_its_prompts_on_every_path() {
    embeds_with_its_query_prompt_on_every_path("qwen3-embed");
}

/// EmbeddingGemma's shape (scripts/make_gemma3.py): Gemma 3 attending both ways, mean pooling, Dense layers,
/// its `query` task prompt.
#[test]
fn gemma3_embeds_with_its_prompts_on_every_path() {
    embeds_with_its_query_prompt_on_every_path("gemma3-embed");
}

/// gte-Qwen2-instruct's shape (scripts/make_gte_qwen2.py) under its own code, which the server trusts by default:
/// bidirectional from `is_causal: false`, the eos its tokenizer code appends, its `query` instruction.
#[test]
fn gte_qwen2_embeds_with_its_prompts_on_every_path() {
    embeds_with_its_query_prompt_on_every_path("gte-qwen2-embed");
}

fn embeds_with_its_query_prompt_on_every_path(name: &str) {
    let default: Run = (&[], &[]);
    let (model, r) = (tiny(name), reference(name));
    for (flags, env) in std::iter::once(default).chain(OTHER_PATHS) {
        let mut args = vec!["--model-id", model.as_str(), "--no-model-warmup"];
        args.extend_from_slice(flags);
        let s = Server::start_with_env(&args, env);
        check_embeddings(&s, name, &format!("{flags:?} {env:?}"));
        let inputs = only_texts(&r);
        let body = json!({"model": format!("tiny/{name}"), "input": inputs, "prompt_name": "query"});
        let infinity = s.post_json("/embeddings", &body).json();
        let tei = s.post_json("/embed", &json!({"inputs": inputs, "prompt_name": "query"})).json();
        for (i, (at, _)) in texts(&r).into_iter().enumerate() {
            let want = floats(&r["query_vectors"][at]);
            for (route, got) in
                [("/embeddings", floats(&infinity["data"][i]["embedding"])), ("/embed", floats(&tei[i]))]
            {
                let d = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                assert!(d < 1e-4, "{name} {route} {flags:?} {env:?} text {i} with the query prompt: differs by {d}");
            }
        }
    }
}

/// The Llama-style LLM embedders (scripts/make_llama_family.py: Mistral's sliding window, Qwen2's biases, Llama)
/// served together, on every path.
#[test]
fn llama_style_embedders_serve_on_every_path() {
    let default: Run = (&[], &[]);
    let names = ["mistral-embed", "qwen2-embed", "llama-embed"];
    let models: Vec<String> = names.iter().map(|n| tiny(n)).collect();
    for (flags, env) in std::iter::once(default).chain(OTHER_PATHS) {
        let mut args: Vec<&str> = models.iter().flat_map(|m| ["--model-id", m.as_str()]).collect();
        args.push("--no-model-warmup");
        args.extend_from_slice(flags);
        let s = Server::start_with_env(&args, env);
        names.iter().for_each(|n| check_embeddings(&s, n, &format!("{flags:?} {env:?}")));
    }
}

/// Qwen3-Reranker over HTTP (scripts/make_qwen3_reranker.py): `--model-task rerank` on a causal LM; `/rerank`'s
/// raw scores are the yes-minus-no logits, its scores the model card's probabilities; `--rerank-instruction`
/// replaces the default instruction.
#[test]
fn qwen3_reranks_with_model_task_rerank_on_every_path() {
    // A cross-encoder has no prompt to put an instruction in: the request is refused, the server serves on.
    let s = Server::start(&["--model-id", &tiny("bert-rerank"), "--no-model-warmup"]);
    let body = json!({"query": "q", "documents": ["d"], "instruction": "judge"});
    let reply = s.post_json("/rerank", &body);
    assert!((400..500).contains(&reply.status) && reply.body.contains("instruction"), "{}", reply.body);
    assert_eq!(s.post_json("/rerank", &json!({"query": "q", "documents": ["d"]})).status, 200);
    drop(s);
    let (name, default): (_, Run) = ("qwen3-rerank", (&[], &[]));
    let (model, r) = (tiny(name), reference(name));
    let docs: Vec<&str> = r["documents"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    let other = r["other_instruction"].as_str().unwrap();
    let rerank = |s: &Server, raw: bool| -> Vec<f32> {
        let body = json!({"model": format!("tiny/{name}"), "query": r["query"], "documents": docs, "raw_scores": raw});
        let reply = s.post_json("/rerank", &body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        let mut by_index = vec![f32::NAN; docs.len()];
        for x in reply.json()["results"].as_array().unwrap() {
            by_index[x["index"].as_u64().unwrap() as usize] = x["relevance_score"].as_f64().unwrap() as f32;
        }
        by_index
    };
    let close = |got: &[f32], want: &[f32], what: &str| {
        let d = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(d < 1e-4, "{what}: {got:?} vs {want:?}");
    };
    for (flags, env) in std::iter::once(default).chain(OTHER_PATHS) {
        let mut args = vec!["--model-id", model.as_str(), "--model-task", "rerank", "--no-model-warmup"];
        args.extend_from_slice(flags);
        let s = Server::start_with_env(&args, env);
        close(&rerank(&s, true), &floats(&r["logit_differences"]), &format!("raw {flags:?} {env:?}"));
        close(&rerank(&s, false), &floats(&r["scores"]), &format!("scores {flags:?} {env:?}"));
        // The request's own instruction, in place of the model's.
        let body =
            json!({"model": format!("tiny/{name}"), "query": r["query"], "documents": docs, "instruction": other});
        let mut by_index = vec![f32::NAN; docs.len()];
        for x in s.post_json("/rerank", &body).json()["results"].as_array().unwrap() {
            by_index[x["index"].as_u64().unwrap() as usize] = x["relevance_score"].as_f64().unwrap() as f32;
        }
        close(&by_index, &floats(&r["other_scores"]), &format!("request instruction {flags:?} {env:?}"));
        drop(s);
        args.extend_from_slice(&["--rerank-instruction", other]);
        let s = Server::start_with_env(&args, env);
        close(&rerank(&s, false), &floats(&r["other_scores"]), &format!("instruction {flags:?} {env:?}"));
    }
}

/// mxbai-rerank-v2 over HTTP (scripts/make_mxbai_rerank.py): served as a reranker with no flags (its model card
/// says text-ranking), `/rerank`'s raw scores its "1"-minus-"0" logits and its scores their sigmoid, with the
/// request's instruction or none, on every path.
#[test]
fn mxbai_rerank_v2_reranks_on_every_path() {
    let default: Run = (&[], &[]);
    let name = "mxbai-rerank-v2";
    let (model, r) = (tiny(name), reference(name));
    let docs: Vec<&str> = r["documents"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    for (flags, env) in std::iter::once(default).chain(OTHER_PATHS) {
        let mut args = vec!["--model-id", model.as_str(), "--no-model-warmup"];
        args.extend_from_slice(flags);
        let s = Server::start_with_env(&args, env);
        for (instruction, raw, want) in [
            (None, true, floats(&r["logit_differences"])),
            (None, false, floats(&r["logit_differences"]).iter().map(|x| 1.0 / (1.0 + (-x).exp())).collect()),
            (r["instruction"].as_str(), true, floats(&r["instructed_logit_differences"])),
        ] {
            let mut body =
                json!({"model": format!("tiny/{name}"), "query": r["query"], "documents": docs, "raw_scores": raw});
            if let Some(i) = instruction {
                body["instruction"] = json!(i);
            }
            let reply = s.post_json("/rerank", &body);
            assert_eq!(reply.status, 200, "{}", reply.body);
            let mut got = vec![f32::NAN; docs.len()];
            for x in reply.json()["results"].as_array().unwrap() {
                got[x["index"].as_u64().unwrap() as usize] = x["relevance_score"].as_f64().unwrap() as f32;
            }
            let d = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(d < 1e-4, "{flags:?} {env:?} instruction {instruction:?} raw {raw}: {got:?} vs {want:?}");
        }
    }
}

/// `/embeddings` of `tiny/{name}` equal its reference vectors within 1e-4.
fn check_embeddings(s: &Server, name: &str, what: &str) {
    let r = reference(name);
    let reply = s.post_json("/embeddings", &json!({"model": format!("tiny/{name}"), "input": only_texts(&r)}));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = reply.json();
    for (i, (at, _)) in texts(&r).into_iter().enumerate() {
        let (g, w) = (floats(&body["data"][i]["embedding"]), floats(&r["vectors"][at]));
        let d = g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(d < 1e-4, "{name} {what} text {i}: differs by {d}");
    }
}

/// `tiny/{family}-embed` and `tiny/{family}-rerank` served together on each compute path.
fn embeds_and_reranks_on_every_path(family: &str) {
    let (embed_name, rerank_name) = (format!("{family}-embed"), format!("{family}-rerank"));
    let (embed, rerank) = (tiny(&embed_name), tiny(&rerank_name));
    let rr = reference(&rerank_name);
    let default: Run = (&[], &[]);
    for (flags, env) in std::iter::once(default).chain(OTHER_PATHS) {
        let mut args = vec!["--model-id", embed.as_str(), "--model-id", rerank.as_str(), "--no-model-warmup"];
        args.extend_from_slice(flags);
        let s = Server::start_with_env(&args, env);
        check_embeddings(&s, &embed_name, &format!("{flags:?} {env:?}"));
        // Raw scores are the logits; documents keep their order in `index`.
        let docs: Vec<&str> = rr["documents"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
        let query = rr["query"].as_str().unwrap();
        let body =
            json!({"model": format!("tiny/{rerank_name}"), "query": query, "documents": docs, "raw_scores": true});
        let reply = s.post_json("/rerank", &body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        for r in reply.json()["results"].as_array().unwrap() {
            let i = r["index"].as_u64().unwrap() as usize;
            let want = rr["logits"][i][0].as_f64().unwrap();
            let got = r["relevance_score"].as_f64().unwrap();
            assert!((got - want).abs() < 1e-4, "{flags:?} document {i}: {got} vs {want}");
        }
    }
}

/// BGE-M3's lexical weights from the reference, as (index, value) pairs.
fn lexical_pairs(r: &Value, i: usize) -> Vec<(u64, f32)> {
    let w = r["lexical_weights"][i].as_object().unwrap();
    w.iter().map(|(k, v)| (k.parse().unwrap(), v.as_f64().unwrap() as f32)).collect()
}

#[test]
fn bge_m3_serves_dense_sparse_and_colbert_outputs_on_every_path() {
    let m = tiny("bge-m3");
    let r = reference("bge-m3");
    let default: Run = (&[], &[]);
    for (flags, env) in std::iter::once(default).chain(OTHER_PATHS) {
        let mut args = vec!["--model-id", m.as_str(), "--no-model-warmup"];
        args.extend_from_slice(flags);
        let s = Server::start_with_env(&args, env);
        let caps = s.get("/models").json()["data"][0]["capabilities"].clone();
        assert_eq!(caps, json!(["embed", "sparse", "colbert"]), "{flags:?}");
        let input = only_texts(&r);
        // Dense by default, the sentence-transformers CLS embedding, normalized.
        let dense = s.post_json("/embeddings", &json!({"input": input})).json();
        let sparse = s.post_json("/embeddings", &json!({"input": input, "output": "sparse"})).json();
        let by_format = s.post_json("/embeddings", &json!({"input": input, "encoding_format": "sparse"})).json();
        let tei = s.post_json("/embed_sparse", &json!({"inputs": input})).json();
        let colbert = s.post_json("/embeddings", &json!({"input": input, "output": "colbert"})).json();
        let colbert64 =
            s.post_json("/embeddings", &json!({"input": input, "output": "colbert", "encoding_format": "base64"}));
        let colbert64 = colbert64.json();
        for (i, (at, _)) in texts(&r).into_iter().enumerate() {
            let what = format!("{flags:?} {env:?} text {i}");
            let (g, w) = (floats(&dense["data"][i]["embedding"]), floats(&r["vectors"][at]));
            let d = g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(d < 1e-4, "{what}: dense differs by {d}");
            let want = lexical_pairs(&r, at);
            assert_sparse_close(&pairs(&sparse["data"][i]["embedding"]), &want, &format!("{what} output sparse"));
            assert_sparse_close(&pairs(&by_format["data"][i]["embedding"]), &want, &format!("{what} format sparse"));
            assert_sparse_close(&pairs(&tei[i]), &want, &format!("{what} /embed_sparse"));
            let want: Vec<Vec<f32>> = r["colbert_vecs"][at].as_array().unwrap().iter().map(floats).collect();
            let got = colbert["data"][i]["embedding"].as_array().unwrap();
            assert_eq!(got.len(), want.len(), "{what}: one ColBERT vector per token after the first");
            for (g, w) in got.iter().zip(&want) {
                let d = floats(g).iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                assert!(d < 1e-4, "{what}: ColBERT vector differs by {d}");
            }
            let packed = colbert64["data"][i]["embedding"].as_str().unwrap();
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD.decode(packed).unwrap();
            assert_eq!(bytes.len(), 4 * want.len() * 32, "{what}: base64 ColBERT rows");
        }
    }
}

#[test]
fn outputs_a_model_lacks_are_refused() {
    let (m3, embed) = (tiny("bge-m3"), tiny("distilbert-embed"));
    let s = Server::start(&["--model-id", &m3, "--model-id", &embed, "--no-model-warmup"]);
    let body = json!({"model": "tiny/distilbert-embed", "input": "a cat", "output": "colbert"});
    let r = s.post_json("/embeddings", &body);
    let err = r.assert_error(400);
    assert!(r.body.contains("has no ColBERT output"), "{}", r.body);
    assert_eq!(err["error"]["param"], "output");
    let r = s.post_json("/embeddings", &json!({"model": "tiny/distilbert-embed", "input": "a", "output": "sparse"}));
    r.assert_error(400);
    let body = json!({"model": "tiny/bge-m3", "input": "a cat", "output": "sparse", "encoding_format": "base64"});
    s.post_json("/embeddings", &body).assert_error(400);
    let body = json!({"model": "tiny/bge-m3", "input": "a cat", "output": "colbert", "encoding_format": "sparse"});
    s.post_json("/embeddings", &body).assert_error(400);
    let r = s.post_json("/embeddings", &json!({"model": "tiny/bge-m3", "input": "a cat", "output": "lexical"}));
    assert!(r.status == 400 || r.status == 422, "an unknown output: {}", r.body);
}
