//! Pooling token states into one vector per sequence.

use std::str::FromStr;

/// How token states become one sentence vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    Mean,
    Cls,
    LastToken,
    /// The largest value of each dimension over the tokens.
    Max,
    /// The sum over tokens divided by the square root of their number.
    MeanSqrtLen,
    /// Token `t` (from 0) weighted by `t + 1`.
    WeightedMean,
}

impl Pooling {
    /// A sentence-transformers `pooling_mode` name.
    pub fn from_st_mode(mode: &str) -> Option<Self> {
        match mode {
            "mean" => Some(Pooling::Mean),
            "cls" => Some(Pooling::Cls),
            "lasttoken" => Some(Pooling::LastToken),
            "max" => Some(Pooling::Max),
            "mean_sqrt_len_tokens" => Some(Pooling::MeanSqrtLen),
            "weightedmean" => Some(Pooling::WeightedMean),
            _ => None,
        }
    }
}

/// The `--pooling-method` choice: `auto` follows the model's sentence-transformers files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PoolingChoice {
    #[default]
    Auto,
    Fixed(Pooling),
    /// SPLADE over a masked-LM's logits (max of `log(1 + relu)`), for `*ForMaskedLM` checkpoints
    /// without sentence-transformers files (TEI's `--pooling splade`).
    Splade,
}

impl FromStr for PoolingChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "auto" => Ok(PoolingChoice::Auto),
            "mean" => Ok(PoolingChoice::Fixed(Pooling::Mean)),
            "cls" => Ok(PoolingChoice::Fixed(Pooling::Cls)),
            "last-token" | "lasttoken" => Ok(PoolingChoice::Fixed(Pooling::LastToken)),
            "max" => Ok(PoolingChoice::Fixed(Pooling::Max)),
            "splade" => Ok(PoolingChoice::Splade),
            other => {
                Err(format!("unknown pooling method `{other}` (expected auto, mean, cls, last-token, max or splade)"))
            }
        }
    }
}

/// Pools the states of one sequence (`len` rows of `hidden` values, row-major) into `out`.
pub fn pool_sequence(pooling: Pooling, states: &[f32], len: usize, hidden: usize, out: &mut Vec<f32>) {
    out.clear();
    if len == 0 {
        out.resize(hidden, 0.0);
        return;
    }
    match pooling {
        Pooling::Cls => out.extend_from_slice(&states[..hidden]),
        Pooling::LastToken => out.extend_from_slice(&states[(len - 1) * hidden..len * hidden]),
        Pooling::Mean | Pooling::MeanSqrtLen | Pooling::WeightedMean => {
            out.resize(hidden, 0.0);
            let weighted = pooling == Pooling::WeightedMean;
            for (t, row) in states[..len * hidden].chunks_exact(hidden).enumerate() {
                let w = if weighted { (t + 1) as f32 } else { 1.0 };
                for (o, v) in out.iter_mut().zip(row) {
                    *o += w * v;
                }
            }
            let total = match pooling {
                Pooling::MeanSqrtLen => (len as f32).sqrt(),
                Pooling::WeightedMean => (len * (len + 1) / 2) as f32,
                _ => len as f32,
            };
            let inv = 1.0 / total;
            out.iter_mut().for_each(|v| *v *= inv);
        }
        Pooling::Max => {
            out.extend_from_slice(&states[..hidden]);
            for row in states[hidden..len * hidden].chunks_exact(hidden) {
                for (o, v) in out.iter_mut().zip(row) {
                    *o = o.max(*v);
                }
            }
        }
    }
}

/// Scales `v` to unit L2 norm, as sentence-transformers' `Normalize` does (eps 1e-12).
/// Each sequence's pooled row of `data` (`[tokens, width]` row-major, packed by `cu_seqlens`).
pub fn pool_packed(data: &[f32], width: usize, cu_seqlens: &[usize], pooling: Pooling) -> Vec<Vec<f32>> {
    cu_seqlens
        .windows(2)
        .map(|w| {
            let mut v = Vec::with_capacity(width);
            pool_sequence(pooling, &data[w[0] * width..w[1] * width], w[1] - w[0], width, &mut v);
            v
        })
        .collect()
}

pub fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_mean_cls_last() {
        let states = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut out = Vec::new();
        pool_sequence(Pooling::Mean, &states, 3, 2, &mut out);
        assert_eq!(out, vec![3.0, 4.0]);
        pool_sequence(Pooling::Cls, &states, 3, 2, &mut out);
        assert_eq!(out, vec![1.0, 2.0]);
        pool_sequence(Pooling::LastToken, &states, 2, 2, &mut out);
        assert_eq!(out, vec![3.0, 4.0]);
    }

    #[test]
    fn normalizes_to_unit_length() {
        let mut v = vec![3.0, 4.0];
        l2_normalize(&mut v);
        assert_eq!(v, vec![0.6, 0.8]);
        let mut zero = vec![0.0, 0.0];
        l2_normalize(&mut zero);
        assert_eq!(zero, vec![0.0, 0.0]);
    }

    #[test]
    fn parses_choices() {
        assert_eq!("auto".parse::<PoolingChoice>().unwrap(), PoolingChoice::Auto);
        assert_eq!("last-token".parse::<PoolingChoice>().unwrap(), PoolingChoice::Fixed(Pooling::LastToken));
        assert_eq!("max".parse::<PoolingChoice>().unwrap(), PoolingChoice::Fixed(Pooling::Max));
        assert_eq!("splade".parse::<PoolingChoice>().unwrap(), PoolingChoice::Splade);
        assert!("sum".parse::<PoolingChoice>().is_err());
    }

    #[test]
    fn pools_max_sqrt_len_weighted() {
        let states = [1.0, 6.0, 3.0, 4.0, 5.0, 2.0];
        let mut out = Vec::new();
        pool_sequence(Pooling::Max, &states, 3, 2, &mut out);
        assert_eq!(out, vec![5.0, 6.0]);
        pool_sequence(Pooling::MeanSqrtLen, &states, 2, 2, &mut out);
        let r = 2f32.sqrt();
        assert_eq!(out, vec![4.0 / r, 10.0 / r]);
        // Weights 1, 2, 3 over 6.
        pool_sequence(Pooling::WeightedMean, &states, 3, 2, &mut out);
        let want = [(1.0 + 6.0 + 15.0) / 6.0, (6.0 + 8.0 + 6.0) / 6.0];
        assert!(out.iter().zip(want).all(|(o, w)| (o - w).abs() < 1e-6), "{out:?}");
    }
}
