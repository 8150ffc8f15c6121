//! Retrieval metrics over ranked runs, as MTEB reports them: nDCG@k and recall@k as trec_eval computes
//! them (MTEB calls `pytrec_eval`), MRR@k as MTEB's own function does.

use std::collections::HashMap;

/// Relevance judgements: per query id, per document id, the graded relevance (0 or less: not relevant).
pub type Qrels = HashMap<String, HashMap<String, i32>>;

/// One query's retrieved documents with their scores, in any order.
pub type Run = Vec<(String, f64)>;

/// Sorts a run as trec_eval ranks it: by score, highest first; equal scores by document id, the larger first.
pub fn rank(run: &mut Run) {
    run.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
}

/// nDCG@k of a ranked run (trec_eval's `ndcg_cut.k`): gains are the judged grades (non-positive ones count 0),
/// discounted by log2(rank + 1), over the ideal ordering of every judged document.
pub fn ndcg_at(ranked: &[(String, f64)], judged: &HashMap<String, i32>, k: usize) -> f64 {
    let gain = |doc: &str| judged.get(doc).copied().unwrap_or(0).max(0) as f64;
    let dcg: f64 = ranked.iter().take(k).enumerate().map(|(i, (doc, _))| gain(doc) / (i as f64 + 2.0).log2()).sum();
    let mut ideal: Vec<i32> = judged.values().copied().filter(|&g| g > 0).collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let idcg: f64 = ideal.iter().take(k).enumerate().map(|(i, &g)| g as f64 / (i as f64 + 2.0).log2()).sum();
    if idcg > 0.0 {
        dcg / idcg
    } else {
        0.0
    }
}

/// Recall@k (trec_eval's `recall.k`): the share of the relevant documents (grade 1 or more) in the first k.
pub fn recall_at(ranked: &[(String, f64)], judged: &HashMap<String, i32>, k: usize) -> f64 {
    let relevant = judged.values().filter(|&&g| g >= 1).count();
    if relevant == 0 {
        return 0.0;
    }
    let found = ranked.iter().take(k).filter(|(doc, _)| judged.get(doc).is_some_and(|&g| g >= 1)).count();
    found as f64 / relevant as f64
}

/// MRR@k (MTEB's): the reciprocal rank of the first relevant document (grade above 0) in the first k, else 0.
pub fn mrr_at(ranked: &[(String, f64)], judged: &HashMap<String, i32>, k: usize) -> f64 {
    ranked
        .iter()
        .take(k)
        .position(|(doc, _)| judged.get(doc).is_some_and(|&g| g > 0))
        .map_or(0.0, |i| 1.0 / (i as f64 + 1.0))
}

/// The means over the judged queries that have a run (as `pytrec_eval` averages).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct RetrievalScores {
    pub ndcg_at_10: f64,
    pub mrr_at_10: f64,
    pub recall_at_100: f64,
    /// How many queries the means are over.
    pub queries: usize,
}

/// Ranks each query's run and averages the metrics over the queries judged in `qrels` that have one.
pub fn evaluate(qrels: &Qrels, runs: &HashMap<String, Run>) -> RetrievalScores {
    let (mut ndcg, mut mrr, mut recall, mut n) = (0.0, 0.0, 0.0, 0usize);
    let mut ids: Vec<&String> = qrels.keys().filter(|q| runs.contains_key(*q)).collect();
    ids.sort();
    for qid in ids {
        let (judged, mut run) = (&qrels[qid], runs[qid].clone());
        rank(&mut run);
        ndcg += ndcg_at(&run, judged, 10);
        mrr += mrr_at(&run, judged, 10);
        recall += recall_at(&run, judged, 100);
        n += 1;
    }
    let mean = |x: f64| if n > 0 { x / n as f64 } else { f64::NAN };
    RetrievalScores { ndcg_at_10: mean(ndcg), mrr_at_10: mean(mrr), recall_at_100: mean(recall), queries: n }
}

/// The `k` best of `scores` as (index, score), best first; equal scores keep the lower index first.
pub fn top_k(scores: &[f32], k: usize) -> Vec<(usize, f32)> {
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    let by_score = |a: &usize, b: &usize| scores[*b].total_cmp(&scores[*a]).then(a.cmp(b));
    if k < idx.len() {
        idx.select_nth_unstable_by(k, by_score);
        idx.truncate(k);
    }
    idx.sort_by(by_score);
    idx.into_iter().map(|i| (i, scores[i])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_is_the_best_in_order() {
        let s = [0.1, 0.9, 0.5, 0.9, -1.0];
        assert_eq!(top_k(&s, 3), vec![(1, 0.9), (3, 0.9), (2, 0.5)]);
        assert_eq!(top_k(&s, 10).len(), 5);
        assert!(top_k(&s, 0).is_empty());
    }
}
