//! Which queued items go into the next batch.
//!
//! The oldest item always goes, so nothing starves. Around it the batch grows through a window of the
//! oldest items sorted by length, each step adding the neighbour that adds the least padding, until the
//! count cap or the token budget would be passed.

/// Limits for one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPolicy {
    pub max_items: usize,
    pub max_tokens: usize,
    /// Whether the backend computes every sequence at the batch's longest length.
    pub pads: bool,
}

impl BatchPolicy {
    /// How many of the oldest items are considered for one batch.
    pub fn window(&self) -> usize {
        self.max_items.saturating_mul(8).max(1)
    }

    fn cost(&self, count: usize, max_len: usize, sum: usize) -> usize {
        if self.pads {
            count * max_len
        } else {
            sum
        }
    }
}

/// Picks the items of the next batch from `lengths` (oldest first). Returns indices into `lengths`,
/// never empty when `lengths` is not. The oldest item is taken even if it alone passes the budget.
pub fn select(lengths: &[usize], policy: &BatchPolicy) -> Vec<usize> {
    let n = lengths.len().min(policy.window());
    if n == 0 {
        return Vec::new();
    }
    let lengths = &lengths[..n];
    if !policy.pads {
        // Padding costs nothing: take the oldest items that fit.
        let mut picked = vec![0];
        let mut sum = lengths[0];
        for (i, &len) in lengths.iter().enumerate().skip(1) {
            if picked.len() == policy.max_items {
                break;
            }
            if sum + len <= policy.max_tokens {
                sum += len;
                picked.push(i);
            }
        }
        return picked;
    }

    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (lengths[i], i));
    let anchor = order.iter().position(|&i| i == 0).unwrap_or(0);
    // The batch is the run order[lo..hi] of the length-sorted window.
    let (mut lo, mut hi) = (anchor, anchor + 1);
    let (mut max_len, mut sum) = (lengths[0], lengths[0]);
    while hi - lo < policy.max_items {
        let count = hi - lo;
        let mut best: Option<(usize, bool)> = None; // (padding added, take the left one?)
        if lo > 0 {
            let len = lengths[order[lo - 1]];
            if policy.cost(count + 1, max_len, sum + len) <= policy.max_tokens {
                best = Some((max_len - len, true));
            }
        }
        if hi < n {
            let len = lengths[order[hi]];
            let waste = (len - max_len) * count;
            if policy.cost(count + 1, len, sum + len) <= policy.max_tokens && best.is_none_or(|(w, _)| waste < w) {
                best = Some((waste, false));
            }
        }
        match best {
            Some((_, true)) => {
                lo -= 1;
                sum += lengths[order[lo]];
            }
            Some((_, false)) => {
                max_len = lengths[order[hi]];
                sum += max_len;
                hi += 1;
            }
            None => break,
        }
    }
    let mut picked = order[lo..hi].to_vec();
    picked.sort_unstable();
    picked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn padded(max_items: usize, max_tokens: usize) -> BatchPolicy {
        BatchPolicy { max_items, max_tokens, pads: true }
    }

    #[test]
    fn always_takes_the_oldest_even_over_budget() {
        assert_eq!(select(&[500, 3, 3], &padded(8, 100)), vec![0]);
        assert_eq!(select(&[], &padded(8, 100)), Vec::<usize>::new());
    }

    #[test]
    fn respects_count_cap_and_budget() {
        let lengths = vec![10; 20];
        assert_eq!(select(&lengths, &padded(4, 1000)).len(), 4);
        assert_eq!(select(&lengths, &padded(100, 55)).len(), 5);
    }

    #[test]
    fn groups_similar_lengths_around_the_oldest() {
        // Oldest is 100 long; the short ones should not be padded up to 100 when longer peers exist.
        let lengths = [100, 5, 99, 6, 101, 7, 98];
        let picked = select(&lengths, &padded(4, 10_000));
        assert_eq!(picked, vec![0, 2, 4, 6]);
        // A short oldest item gathers the short ones.
        let lengths = [5, 100, 6, 99, 7];
        assert_eq!(select(&lengths, &padded(3, 10_000)), vec![0, 2, 4]);
    }

    #[test]
    fn padded_budget_counts_the_longest() {
        // 3 items padded to 50 = 150 > 120, so only two fit.
        let lengths = [50, 10, 10];
        assert_eq!(select(&lengths, &padded(8, 120)).len(), 2);
    }

    #[test]
    fn unpadded_budget_counts_real_tokens_in_fifo_order() {
        let policy = BatchPolicy { max_items: 8, max_tokens: 120, pads: false };
        assert_eq!(select(&[50, 10, 100, 10], &policy), vec![0, 1, 3]);
    }

    #[test]
    fn considers_only_the_window() {
        let policy = padded(1, 1000); // window of 8
        let mut lengths = vec![10; 8];
        lengths.push(10);
        assert_eq!(select(&lengths, &policy), vec![0]);
        assert_eq!(policy.window(), 8);
    }
}
