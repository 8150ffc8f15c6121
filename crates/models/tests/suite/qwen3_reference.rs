//! Qwen3 as Qwen3-Embedding runs it, against sentence-transformers on both backends (scripts/make_qwen3.py):
//! grouped-query causal attention with per-head query/key norms, last-token pooling, the `query` prompt.

use crate::common;

use aleph_models::{load, Batch, LoadOptions, ModelTask, RerankTemplate};
use common::{backends, check_embedder, check_int8_close, check_prompted, fixtures, floats, max_diff, reference};

#[test]
fn embedder_matches_sentence_transformers_on_both_backends() {
    check_embedder("qwen3-embed");
}

#[test]
fn int8_stays_close_to_f32() {
    check_int8_close("qwen3-embed");
}

/// sentence-transformers puts the prompt before the text, then tokenizes: the same text with its prompt.
#[test]
fn the_query_prompt_is_prepended_as_sentence_transformers_does() {
    check_prompted("qwen3-embed");
}

/// Qwen3-Reranker as its model card scores it (scripts/make_qwen3_reranker.py): with `--model-task rerank` a
/// `Qwen3ForCausalLM` puts its prompt around each pair and answers the last token's "yes" logit minus its
/// "no" (the score is its sigmoid, the card's softmax over the two), with the default instruction or another.
#[test]
fn a_causal_lm_reranks_as_qwen3_reranker_on_both_backends() {
    let r = reference("qwen3-rerank");
    let query = r["query"].as_str().unwrap();
    let docs: Vec<&str> = r["documents"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    let counts: Vec<u64> = r["token_counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
    let other = r["other_instruction"].as_str().map(String::from);
    for (instruction, want, is_logit) in
        [(None, floats(&r["logit_differences"]), true), (other, floats(&r["other_scores"]), false)]
    {
        for (backend, name) in backends() {
            let opts = LoadOptions {
                backend,
                task: ModelTask::Rerank,
                rerank_instruction: instruction.clone(),
                ..Default::default()
            };
            let loaded = load(&fixtures().join("qwen3-rerank"), &opts).unwrap();
            assert_eq!(loaded.info.task, aleph_models::Task::Rerank);
            let mut batch = Batch::new();
            for d in &docs {
                let e = loaded.tokenizer.encode_pair(query, d).unwrap();
                batch.push(&e.ids, &e.type_ids);
            }
            if instruction.is_none() {
                let got: Vec<u64> = (0..batch.len()).map(|i| batch.seq_len(i) as u64).collect();
                assert_eq!(got, counts, "token counts");
            }
            let logits: Vec<f32> = loaded.model.forward(&batch).unwrap().vectors.iter().map(|v| v[0]).collect();
            let got: Vec<f32> =
                if is_logit { logits } else { logits.iter().map(|x| 1.0 / (1.0 + (-x).exp())).collect() };
            let d = max_diff(&got, &want);
            assert!(d < 1e-4, "{name} {instruction:?}: {got:?} vs {want:?}");
        }
    }
}

/// `--model-task` insists: a causal LM without it embeds; a task the checkpoint is not is refused, naming it.
#[test]
fn model_task_follows_or_refuses_the_checkpoint() {
    let embeds = load(&fixtures().join("qwen3-rerank"), &LoadOptions::default()).unwrap();
    assert_eq!(embeds.info.task, aleph_models::Task::Embed);
    for (fixture, task) in [("qwen3-embed", ModelTask::Classify), ("bert-rerank", ModelTask::Embed)] {
        match load(&fixtures().join(fixture), &LoadOptions { task, ..Default::default() }) {
            Ok(_) => panic!("{fixture} loaded as {task:?}"),
            // Refused from the config, before the weights are read.
            Err(e) => assert!(
                e.to_string().contains(&format!("--model-task {}: this checkpoint's config", task.name())),
                "{e}"
            ),
        }
    }
}

/// A converted reranker (`Qwen3ForSequenceClassification`, one label) reranks through Qwen3-Reranker's prompt
/// by default (`--rerank-template auto`), its `score` row on the last token; `none` leaves the tokenizer's
/// pair encoding; a template file is filled and tokenized whole, and one without `{document}` is refused.
#[test]
fn a_qwen3_sequence_classifier_reranks_through_the_template() {
    let r = reference("qwen3-seqcls");
    let query = r["query"].as_str().unwrap();
    let docs: Vec<&str> = r["documents"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    let want: Vec<f32> = r["logits"].as_array().unwrap().iter().map(|l| l[0].as_f64().unwrap() as f32).collect();
    let counts: Vec<u64> = r["token_counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
    let dir = fixtures().join("qwen3-seqcls");
    let lengths = |m: &aleph_models::LoadedModel| -> Vec<u64> {
        docs.iter().map(|d| m.tokenizer.encode_pair(query, d).unwrap().ids.len() as u64).collect()
    };
    for (backend, name) in backends() {
        let loaded = load(&dir, &LoadOptions { backend, ..Default::default() }).unwrap();
        assert_eq!(loaded.info.task, aleph_models::Task::Rerank);
        assert_eq!(lengths(&loaded), counts);
        let mut batch = Batch::new();
        for d in &docs {
            let e = loaded.tokenizer.encode_pair(query, d).unwrap();
            batch.push(&e.ids, &e.type_ids);
        }
        let got: Vec<f32> = loaded.model.forward(&batch).unwrap().vectors.iter().map(|v| v[0]).collect();
        assert!(max_diff(&got, &want) < 1e-4, "{name}: {got:?} vs {want:?}");
    }
    let none = load(&dir, &LoadOptions { rerank_template: RerankTemplate::None, ..Default::default() }).unwrap();
    assert!(lengths(&none).iter().zip(&counts).all(|(a, b)| a < b), "no prompt around the pairs");
    let file = std::env::temp_dir().join(format!("aleph-template-{}.txt", std::process::id()));
    std::fs::write(&file, "{instruction}|{query}|{document}").unwrap();
    let opts = LoadOptions { rerank_template: RerankTemplate::File(file.clone()), ..Default::default() };
    let templated = load(&dir, &opts).unwrap();
    let filled = format!("{}|{query}|{}", aleph_models::models::qwen3::DEFAULT_INSTRUCTION, docs[0]);
    assert_eq!(
        templated.tokenizer.encode_pair(query, docs[0]).unwrap().ids,
        templated.tokenizer.encode(&filled).unwrap().ids
    );
    std::fs::write(&file, "{query} only").unwrap();
    match load(&dir, &opts) {
        Ok(_) => panic!("a template without {{document}} loaded"),
        Err(e) => assert!(e.to_string().contains("{document}"), "{e}"),
    }
    let _ = std::fs::remove_file(&file);
}
