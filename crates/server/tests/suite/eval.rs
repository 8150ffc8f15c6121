//! `aleph eval` as a user runs it: the binary, real model files, the datasets on disk; its numbers against
//! sentence-transformers', MTEB's (pytrec_eval) and scikit-learn's on the same data
//! (scripts/make_eval_fixtures.py).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{minilm, repo_root, tiny};

fn eval(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aleph"))
        .arg("eval")
        .args(args)
        .env_remove("ALEPH_MODEL_ID")
        .output()
        .expect("running aleph eval")
}

/// The JSON report of a run that must succeed.
fn eval_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = eval(&all);
    assert!(out.status.success(), "aleph eval {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("--json prints one JSON object")
}

/// The stderr of a run that must fail.
fn eval_error(args: &[&str]) -> String {
    let out = eval(args);
    assert!(!out.status.success(), "aleph eval {args:?} should have failed");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn fixtures() -> PathBuf {
    repo_root().join("tests/fixtures/eval")
}

fn reference(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join(name)).unwrap()).unwrap()
}

fn metric(result: &Value, name: &str) -> f64 {
    result["metrics"][name].as_f64().unwrap_or_else(|| panic!("no {name} in {result}"))
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn minilm_on_the_shipped_sts_benchmark_scores_what_sentence_transformers_does() {
    let want = &reference("beir-toy/reference.json")["sts_b_test"];
    // No dataset given: the STS Benchmark test split shipped in the binary; the table on stdout.
    let out = eval(&["--model-id", &minilm(), "--no-model-warmup"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("STS · STS-B test"), "{table}");
    assert!(table.contains("| spearman |"), "{table}");
    let row = table.lines().find(|l| l.contains("all-MiniLM-L6-v2")).expect("a row for the model");
    let spearman: f64 = row.split('|').nth(3).unwrap().trim().parse().unwrap();
    assert_eq!(format!("{spearman:.4}"), "0.8203", "{table}");
    assert!((spearman - want["spearman"].as_f64().unwrap()).abs() < 1e-4);

    // The same through --json, with every digit, against EmbeddingSimilarityEvaluator's.
    let sts = repo_root().join("tests/fixtures/stsb/test.tsv");
    let report = eval_json(&["--model-id", &minilm(), "--no-model-warmup", "--sts", path(&sts)]);
    let result = &report["results"][0];
    assert_eq!(result["task"], "sts");
    assert_eq!(result["items"], want["pairs"]);
    for name in ["spearman", "pearson"] {
        let (ours, theirs) = (metric(result, name), want[name].as_f64().unwrap());
        assert!((ours - theirs).abs() < 2e-4, "{name}: Aleph {ours}, sentence-transformers {theirs}");
    }
}

#[test]
fn retrieval_and_its_rerank_stage_score_as_mteb_does() {
    let want = reference("beir-toy/reference.json");
    let folder = fixtures().join("beir-toy");
    let top_k = want["rerank_top_k"].to_string();
    let report = eval_json(&[
        "--model-id",
        &minilm(),
        "--retrieval",
        path(&folder),
        "--rerank-model",
        &tiny("bert-rerank"),
        "--rerank-top-k",
        &top_k,
    ]);
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{report}");
    for (result, (task, stage)) in results.iter().zip([("retrieval", "dense"), ("retrieval+rerank", "rerank")]) {
        assert_eq!(result["task"], task);
        for name in ["ndcg_at_10", "mrr_at_10", "recall_at_100"] {
            let (ours, theirs) = (metric(result, name), want[stage][name].as_f64().unwrap());
            assert!((ours - theirs).abs() < 1e-9, "{task} {name}: Aleph {ours}, MTEB/pytrec_eval {theirs}");
        }
    }
    assert_eq!(results[1]["reranker"], "tiny/bert-rerank");
}

#[test]
fn classification_scores_as_scikit_learn_does_and_an_embedder_is_noted_not_scored() {
    let want = reference("classify.reference.json");
    let file = fixtures().join("classify.tsv");
    let report =
        eval_json(&["--model-id", &tiny("bert-classify"), "--model-id", &minilm(), "--classification", path(&file)]);
    let results = report["results"].as_array().unwrap();
    assert_eq!(report["models"].as_array().unwrap().len(), 2);
    for name in ["accuracy", "macro_f1"] {
        let (ours, theirs) = (metric(&results[0], name), want[name].as_f64().unwrap());
        assert!((ours - theirs).abs() < 1e-12, "{name}: Aleph {ours}, scikit-learn {theirs}");
    }
    assert_eq!(results[0]["items"], want["texts"]);
    assert!(results[1]["metrics"].as_object().unwrap().is_empty());
    assert_eq!(results[1]["note"], "embedding models are not classifiers");
}

#[test]
fn bad_files_are_refused_naming_the_line() {
    let dir = std::env::temp_dir().join(format!("aleph-eval-bad-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("beir/qrels")).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    // The debug engine needs no weights: a bad file must fail before any model would load.
    let debug = ["--model-id", "debug", "--engine", "debugengine"];

    let sts = write("pairs.tsv", "a\tb\t1.0\nc\td\tvery similar\n");
    let err = eval_error(&[&debug[..], &["--sts", path(&sts)]].concat());
    assert!(err.contains(&format!("{}:2: score `very similar` is not a number", sts.display())), "{err}");

    let jsonl =
        write("pairs.jsonl", "{\"sentence1\": \"a\", \"sentence2\": \"b\", \"score\": 1}\n{\"sentence1\": \"a\"\n");
    let err = eval_error(&[&debug[..], &["--sts", path(&jsonl)]].concat());
    assert!(err.contains(&format!("{}:2: invalid JSON", jsonl.display())), "{err}");

    write("beir/corpus.jsonl", "{\"_id\": \"d1\", \"text\": \"x\"}\n");
    write("beir/queries.jsonl", "{\"_id\": \"q1\", \"text\": \"y\"}\n");
    let qrels = write("beir/qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td1\t1\n");
    let err = eval_error(&[&debug[..], &["--retrieval", path(&dir.join("beir"))]].concat());
    assert!(err.contains(&format!("{}:3: query `q2` is not in", qrels.display())), "{err}");
    let err = eval_error(&[&debug[..], &["--retrieval", path(&dir)]].concat());
    assert!(err.contains("no corpus.jsonl"), "{err}");

    let labelled = write("labels.tsv", "text\tlabel\ngood\tpositive\nbad\tsideways\n");
    let err = eval_error(&["--model-id", &tiny("bert-classify"), "--classification", path(&labelled)]);
    assert!(
        err.contains(&format!("{}:3: label `sideways` is not one of the model's labels", labelled.display())),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
