//! Qwen3-VL-Embedding and Qwen3-VL-Reranker on text, against their reference code (scripts/make_qwen3_vl.py):
//! the language model of a `Qwen3VLForConditionalGeneration` checkpoint under `model.language_model`, each text
//! in the chat frame with its instruction, the last token pooled and normalized; the reranker's "yes" against
//! "no" through its own prompt.

use crate::common;
use aleph_models::models::qwen3_vl;
use aleph_models::{load, Batch, DType, LoadOptions, Pooling, Task};
use common::{backends, fixtures, floats, max_diff, reference};

/// Each input as the engine sends it: the named prompt (or a frame with the input's own instruction) before the
/// text.
fn prompted(loaded: &aleph_models::LoadedModel, input: &serde_json::Value) -> String {
    let text = input["text"].as_str().unwrap();
    let prefix = match input["instruction"].as_str() {
        None => loaded.info.prompts.get("document").unwrap().to_string(),
        Some(qwen3_vl::QUERY_INSTRUCTION) => loaded.info.prompts.get("query").unwrap().to_string(),
        Some(own) => qwen3_vl::embedding_prefix(own),
    };
    format!("{prefix}{text}")
}

#[test]
fn the_embedder_matches_its_reference_code_on_both_backends() {
    let r = reference("qwen3-vl-embed");
    let inputs = r["inputs"].as_array().unwrap();
    for (backend, name) in backends() {
        let loaded = load(&fixtures().join("qwen3-vl-embed"), &LoadOptions { backend, ..Default::default() }).unwrap();
        assert_eq!(loaded.info.task, Task::Embed);
        assert!(loaded.info.normalize && loaded.info.pooling == Pooling::LastToken);
        assert!(!loaded.info.image_input, "the vision tower is not built: images are refused");
        assert_eq!(loaded.info.prompts.default_prompt_name.as_deref(), Some("document"));
        let mut batch = Batch::new();
        for input in inputs {
            let e = loaded.tokenizer.encode(&prompted(&loaded, input)).unwrap();
            let want: Vec<u32> =
                input["input_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
            assert_eq!(e.ids, want, "{name}: the chat frame of {:?}", input["text"]);
            batch.push(&e.ids, &e.type_ids);
        }
        let got = loaded.model.forward(&batch).unwrap().vectors;
        for (i, (g, input)) in got.iter().zip(inputs).enumerate() {
            let d = max_diff(g, &floats(&input["embedding"]));
            assert!(d < 1e-4, "{name}, input {i}: {d}");
        }
    }
}

/// The checkpoint's chat template renders each reference conversation into the reference's prompt.
#[test]
fn the_chat_template_renders_the_reference_prompts() {
    use aleph_models::chat_template::RenderOptions;
    let r = reference("qwen3-vl-embed");
    let loaded = load(&fixtures().join("qwen3-vl-embed"), &LoadOptions::default()).unwrap();
    let template = loaded.tokenizer.chat_template().expect("chat_template.jinja");
    let opts = RenderOptions { add_generation_prompt: true, ..Default::default() };
    for input in r["inputs"].as_array().unwrap() {
        let instruction = input["instruction"]
            .as_str()
            .map_or(qwen3_vl::EMBEDDING_INSTRUCTION.to_string(), qwen3_vl::with_final_punctuation);
        let messages = serde_json::json!([
            {"role": "system", "content": [{"type": "text", "text": instruction}]},
            {"role": "user", "content": [{"type": "text", "text": input["text"]}]}
        ]);
        assert_eq!(template.render(&messages, &opts).unwrap(), input["prompt"].as_str().unwrap());
    }
}

#[test]
fn int8_and_bf16_stay_close_to_f32() {
    let r = reference("qwen3-vl-embed");
    let dir = fixtures().join("qwen3-vl-embed");
    let f32_model = load(&dir, &LoadOptions::default()).unwrap();
    let texts: Vec<String> = r["inputs"].as_array().unwrap().iter().map(|i| prompted(&f32_model, i)).collect();
    let batch = common::text_batch(&f32_model, &texts.iter().map(String::as_str).collect::<Vec<_>>());
    let want = f32_model.model.forward(&batch).unwrap().vectors;
    for (dtype, min_cos) in [(DType::Int8, 0.99), (DType::BFloat16, 0.999)] {
        let other = load(&dir, &LoadOptions { dtype, ..Default::default() }).unwrap();
        for (x, y) in want.iter().zip(other.model.forward(&batch).unwrap().vectors) {
            let cos: f32 = x.iter().zip(&y).map(|(p, q)| p * q).sum();
            assert!(cos >= min_cos, "{dtype:?}: cosine {cos}");
        }
    }
}

/// The reranker's card says `pipeline_tag: text-ranking`, so it reranks by default, through Qwen3-VL-Reranker's
/// own prompt (no `<think>` block, unlike Qwen3-Reranker's), with its default instruction or another.
#[test]
fn the_reranker_scores_as_its_reference_code_on_both_backends() {
    let r = reference("qwen3-vl-rerank");
    let query = r["query"].as_str().unwrap();
    let docs: Vec<&str> = r["documents"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    for (backend, name) in backends() {
        let loaded = load(&fixtures().join("qwen3-vl-rerank"), &LoadOptions { backend, ..Default::default() }).unwrap();
        assert_eq!(loaded.info.task, Task::Rerank);
        assert!(loaded.info.takes_instruction);
        for case in ["default", "other"] {
            let c = &r[case];
            let instruction = c["instruction"].as_str().unwrap();
            let mut batch = Batch::new();
            for d in &docs {
                let e = match case {
                    "default" => loaded.tokenizer.encode_pair(query, d).unwrap(),
                    _ => loaded.tokenizer.encode_instructed_pair(query, d, instruction).unwrap(),
                };
                batch.push(&e.ids, &e.type_ids);
            }
            let counts: Vec<u64> = (0..batch.len()).map(|i| batch.seq_len(i) as u64).collect();
            let want_counts: Vec<u64> =
                c["token_counts"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
            assert_eq!(counts, want_counts, "{name} {case}: the prompt's tokens");
            let got: Vec<f32> = loaded.model.forward(&batch).unwrap().vectors.iter().map(|v| v[0]).collect();
            let d = max_diff(&got, &floats(&c["logit_differences"]));
            assert!(d < 1e-4, "{name} {case}: {got:?}");
        }
    }
}

/// The windows are the reference code's caps, 8,192 tokens for the embedder and 10,240 for the reranker, under a
/// config whose positions allow more.
#[test]
fn the_windows_are_the_reference_codes_caps() {
    for (name, want) in [("qwen3-vl-embed", 8192), ("qwen3-vl-rerank", 10240)] {
        let dir = std::env::temp_dir().join(format!("aleph-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for entry in std::fs::read_dir(fixtures().join(name)).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
        config["text_config"]["max_position_embeddings"] = 262_144.into();
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        let loaded = load(&dir, &LoadOptions::default()).unwrap();
        assert_eq!(loaded.info.window, want, "{name}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
