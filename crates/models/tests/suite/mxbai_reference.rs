//! mxbai-rerank-v2 against mixedbread's own package on both backends (scripts/make_mxbai_rerank.py): a Qwen2
//! causal LM whose model card says `pipeline_tag: text-ranking` reranks under `--model-task auto`, through its
//! prompt (pieces tokenized apart, as `MxbaiRerankV2` does), "1" against "0" at the last token, with and without
//! an instruction.

use crate::common;

use aleph_models::{load, Batch, LoadOptions, ModelTask, RerankTemplate, Task};
use common::{backends, fixtures, floats, max_diff, reference};

#[test]
fn reranks_as_mxbai_rerank_does_on_both_backends() {
    let r = reference("mxbai-rerank-v2");
    let query = r["query"].as_str().unwrap();
    let docs: Vec<&str> = r["documents"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    let counts: Vec<usize> =
        r["token_counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap() as usize).collect();
    let instruction = r["instruction"].as_str().unwrap();
    for (backend, name) in backends() {
        let loaded = load(&fixtures().join("mxbai-rerank-v2"), &LoadOptions { backend, ..Default::default() }).unwrap();
        assert_eq!(loaded.info.task, Task::Rerank, "the model card's text-ranking makes it a reranker");
        assert!(loaded.info.takes_instruction);
        for (given, want) in
            [(None, floats(&r["logit_differences"])), (Some(instruction), floats(&r["instructed_logit_differences"]))]
        {
            let mut batch = Batch::new();
            for d in &docs {
                let e = match given {
                    None => loaded.tokenizer.encode_pair(query, d).unwrap(),
                    Some(i) => loaded.tokenizer.encode_instructed_pair(query, d, i).unwrap(),
                };
                batch.push(&e.ids, &e.type_ids);
            }
            if given.is_none() {
                assert_eq!((0..batch.len()).map(|i| batch.seq_len(i)).collect::<Vec<_>>(), counts, "token counts");
            }
            let got: Vec<f32> = loaded.model.forward(&batch).unwrap().vectors.iter().map(|v| v[0]).collect();
            let d = max_diff(&got, &want);
            assert!(d < 1e-4, "{name}, instruction {given:?}: {got:?} vs {want:?}");
        }
    }
}

/// `auto` makes a causal LM a reranker only when its card says so and Aleph knows its prompt; the other tasks
/// and templates still insist.
#[test]
fn the_model_card_and_the_flags_decide_what_a_causal_lm_serves_as() {
    let dir = fixtures().join("mxbai-rerank-v2");
    let embeds = load(&dir, &LoadOptions { task: ModelTask::Embed, ..Default::default() }).unwrap();
    assert_eq!(embeds.info.task, Task::Embed);
    let unprompted = load(&dir, &LoadOptions { rerank_template: RerankTemplate::None, ..Default::default() }).unwrap();
    assert_eq!(unprompted.info.task, Task::Embed, "no known prompt: auto does not guess one");
    // Qwen3-Reranker's folder with a text-ranking card reranks under auto; without the card it embeds.
    let copy = std::env::temp_dir().join(format!("aleph-qwen3-card-{}", std::process::id()));
    std::fs::create_dir_all(&copy).unwrap();
    for f in std::fs::read_dir(fixtures().join("qwen3-rerank")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, copy.join(f.file_name().unwrap())).unwrap();
    }
    assert_eq!(load(&copy, &LoadOptions::default()).unwrap().info.task, Task::Embed);
    std::fs::write(copy.join("README.md"), "---\nlicense: apache-2.0\npipeline_tag: text-ranking\n---\n# Reranker\n")
        .unwrap();
    let r = reference("qwen3-rerank");
    let loaded = load(&copy, &LoadOptions::default()).unwrap();
    assert_eq!(loaded.info.task, Task::Rerank);
    let mut batch = Batch::new();
    for d in r["documents"].as_array().unwrap() {
        let e = loaded.tokenizer.encode_pair(r["query"].as_str().unwrap(), d.as_str().unwrap()).unwrap();
        batch.push(&e.ids, &e.type_ids);
    }
    let got: Vec<f32> = loaded.model.forward(&batch).unwrap().vectors.iter().map(|v| v[0]).collect();
    assert!(max_diff(&got, &floats(&r["logit_differences"])) < 1e-4, "{got:?}");
    // An explicit template wins over the family's: mxbai's prompt and tokens on the Qwen3 checkpoint.
    let mxbai = load(&copy, &LoadOptions { rerank_template: RerankTemplate::Mxbai, ..Default::default() }).unwrap();
    let (e, suffix) = (
        mxbai.tokenizer.encode_pair("q", "d").unwrap(),
        mxbai.tokenizer.encode_raw("<|im_end|>\n<|im_start|>assistant\n").unwrap(),
    );
    assert!(
        e.ids.ends_with(&suffix.ids) && !e.ids.ends_with(&loaded.tokenizer.encode_raw("</think>\n\n").unwrap().ids)
    );
    let _ = std::fs::remove_dir_all(&copy);
}
