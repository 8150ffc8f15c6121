//! The metrics against the libraries MTEB and sentence-transformers compute them with: scipy, scikit-learn and
//! pytrec_eval, on the toy inputs of `tests/fixtures/eval/metrics.json` (scripts/make_eval_fixtures.py).

use std::collections::HashMap;
use std::path::PathBuf;

use aleph_eval::metrics::{accuracy, macro_f1, pearson, spearman};
use aleph_eval::retrieval::{evaluate, mrr_at, ndcg_at, rank, recall_at, Qrels, Run};
use serde_json::Value;

fn fixture() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/eval/metrics.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
}

fn close(ours: f64, theirs: &Value, what: &str) {
    let theirs = theirs.as_f64().unwrap();
    assert!((ours - theirs).abs() < 1e-12, "{what}: ours {ours}, reference {theirs}");
}

#[test]
fn correlations_equal_scipy() {
    let f = &fixture()["correlation"];
    let (a, b) = (floats(&f["a"]), floats(&f["b"]));
    close(pearson(&a, &b), &f["pearson"], "pearson");
    close(spearman(&a, &b), &f["spearman"], "spearman (with ties)");
}

#[test]
fn classification_equals_scikit_learn() {
    let f = &fixture()["classification"];
    let (gold, predicted) = (strings(&f["gold"]), strings(&f["predicted"]));
    close(accuracy(&gold, &predicted), &f["accuracy"], "accuracy");
    // A predicted label no gold row has (`eel`) counts in the macro average, as in scikit-learn.
    close(macro_f1(&gold, &predicted), &f["macro_f1"], "macro-F1");
}

#[test]
fn retrieval_metrics_equal_pytrec_eval() {
    let f = &fixture()["retrieval"];
    let qrels: Qrels = serde_json::from_value(f["qrels"].clone()).unwrap();
    let runs: HashMap<String, Run> = f["run"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(q, docs)| {
            let run = docs.as_object().unwrap().iter().map(|(d, s)| (d.clone(), s.as_f64().unwrap())).collect();
            (q.clone(), run)
        })
        .collect();
    for (qid, want) in f["per_query"].as_object().unwrap() {
        let mut run = runs[qid].clone();
        rank(&mut run);
        let judged = &qrels[qid];
        close(ndcg_at(&run, judged, 10), &want["ndcg_at_10"], &format!("{qid} nDCG@10"));
        close(recall_at(&run, judged, 100), &want["recall_at_100"], &format!("{qid} recall@100"));
        close(mrr_at(&run, judged, 10), &want["mrr_at_10"], &format!("{qid} MRR@10"));
    }
    let mean = evaluate(&qrels, &runs);
    assert_eq!(mean.queries, 5);
    close(mean.ndcg_at_10, &f["mean"]["ndcg_at_10"], "mean nDCG@10");
    close(mean.mrr_at_10, &f["mean"]["mrr_at_10"], "mean MRR@10");
    close(mean.recall_at_100, &f["mean"]["recall_at_100"], "mean recall@100");
}

#[test]
fn equal_scores_rank_as_trec_eval_ranks_them() {
    // trec_eval breaks a tie by document id, the larger first; the fixture's q5 ties d12 and d11.
    let mut run: Run = vec![("d11".into(), 0.5), ("d12".into(), 0.5), ("d1".into(), 0.9)];
    rank(&mut run);
    let order: Vec<&str> = run.iter().map(|(d, _)| d.as_str()).collect();
    assert_eq!(order, ["d1", "d12", "d11"]);
}
