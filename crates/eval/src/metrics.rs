//! Correlation and classification metrics, computed as scipy and scikit-learn do (sentence-transformers and
//! MTEB report theirs).

use std::collections::BTreeSet;

/// Pearson's correlation coefficient (`scipy.stats.pearsonr`); NaN when either side is constant or the
/// lengths differ.
pub fn pearson(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() || a.len() < 2 {
        return f64::NAN;
    }
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let (mut cov, mut va, mut vb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        let (dx, dy) = (x - ma, y - mb);
        cov += dx * dy;
        va += dx * dx;
        vb += dy * dy;
    }
    cov / (va.sqrt() * vb.sqrt())
}

/// Spearman's rank correlation (`scipy.stats.spearmanr`): Pearson's of the ranks, ties sharing their mean rank.
pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    pearson(&ranks(a), &ranks(b))
}

/// 1-based ranks, tied values taking the mean of the ranks they span.
fn ranks(v: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut out = vec![0.0; v.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && v[order[j + 1]] == v[order[i]] {
            j += 1;
        }
        let mean_rank = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            out[k] = mean_rank;
        }
        i = j + 1;
    }
    out
}

/// The share of predictions equal to their gold label.
pub fn accuracy<T: PartialEq>(gold: &[T], predicted: &[T]) -> f64 {
    if gold.is_empty() || gold.len() != predicted.len() {
        return f64::NAN;
    }
    gold.iter().zip(predicted).filter(|(g, p)| g == p).count() as f64 / gold.len() as f64
}

/// The unweighted mean of each label's F1, over every label that is gold or predicted somewhere
/// (`sklearn.metrics.f1_score(average="macro")`, a label with no true positives scoring 0).
pub fn macro_f1<T: Ord + Clone>(gold: &[T], predicted: &[T]) -> f64 {
    if gold.is_empty() || gold.len() != predicted.len() {
        return f64::NAN;
    }
    let labels: BTreeSet<&T> = gold.iter().chain(predicted).collect();
    let mut sum = 0.0;
    for label in &labels {
        let (mut tp, mut fp, mut fn_) = (0usize, 0usize, 0usize);
        for (g, p) in gold.iter().zip(predicted) {
            match (g == *label, p == *label) {
                (true, true) => tp += 1,
                (false, true) => fp += 1,
                (true, false) => fn_ += 1,
                (false, false) => {}
            }
        }
        // F1 = 2tp / (2tp + fp + fn); with no true positive it is 0 (sklearn's zero_division).
        if tp > 0 {
            sum += 2.0 * tp as f64 / (2 * tp + fp + fn_) as f64;
        }
    }
    sum / labels.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_share_their_mean_rank() {
        assert_eq!(ranks(&[3.0, 1.0, 3.0, 2.0]), vec![3.5, 1.0, 3.5, 2.0]);
    }

    #[test]
    fn constant_input_has_no_correlation() {
        assert!(pearson(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]).is_nan());
        assert!(spearman(&[1.0], &[1.0]).is_nan());
    }
}
