//! Pooling token states into one vector per sequence.

use std::str::FromStr;

/// How token states become one sentence vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    Mean,
    Cls,
    LastToken,
}

/// The `--pooling-method` choice: `auto` follows the model's sentence-transformers files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PoolingChoice {
    #[default]
    Auto,
    Fixed(Pooling),
}

impl FromStr for PoolingChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "auto" => Ok(PoolingChoice::Auto),
            "mean" => Ok(PoolingChoice::Fixed(Pooling::Mean)),
            "cls" => Ok(PoolingChoice::Fixed(Pooling::Cls)),
            "last-token" | "lasttoken" => Ok(PoolingChoice::Fixed(Pooling::LastToken)),
            other => Err(format!("unknown pooling method `{other}` (expected auto, mean, cls or last-token)")),
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
        Pooling::Mean => {
            out.resize(hidden, 0.0);
            for row in states[..len * hidden].chunks_exact(hidden) {
                for (o, v) in out.iter_mut().zip(row) {
                    *o += v;
                }
            }
            let inv = 1.0 / len as f32;
            out.iter_mut().for_each(|v| *v *= inv);
        }
    }
}

/// Scales `v` to unit L2 norm, as sentence-transformers' `Normalize` does (eps 1e-12).
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
        assert!("max".parse::<PoolingChoice>().is_err());
    }
}
