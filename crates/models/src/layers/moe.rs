//! A mixture-of-experts feed-forward block (nomic-embed-text-v2-moe): a router picks each token's top-k
//! experts by softmax probability (not renormalized, no capacity limit: every token reaches its experts), each
//! expert is a two-layer MLP, and their outputs, weighted by those probabilities, are summed with one shared
//! bias and added to the residual.
//!
//! Routing is per token and runs on the host in f32 (`experts × hidden` per token, next to the experts'
//! GEMMs); each expert then multiplies only the rows routed to it, gathered on the backend.

use crate::backend::{Activation, Ops, Post};
use crate::error::ModelError;

use super::Scratch;

pub struct Moe<O: Ops> {
    /// `[experts, hidden]`, row-major.
    pub router: Vec<f32>,
    /// Each expert's `(up, down)`, without biases.
    pub experts: Vec<(O::Linear, O::Linear)>,
    pub act: Activation,
    /// Added once to the weighted sum.
    pub bias: Vec<f32>,
    pub top_k: usize,
}

impl<O: Ops> Moe<O> {
    /// `out = residual + Σ_k p_k · expert_k(x) + bias` over each token's top-k experts.
    pub fn forward(
        &self,
        o: &O,
        x: &O::T,
        residual: &O::T,
        scratch: &mut Scratch<O>,
        out: &mut O::T,
    ) -> Result<(), ModelError> {
        let (rows, hidden) = o.dims(x);
        let experts = self.experts.len();
        if self.router.len() != experts * hidden || self.bias.len() != hidden || self.top_k > experts {
            return Err(ModelError::Forward("the router does not fit the experts".into()));
        }
        let mut routed: Vec<Vec<(u32, f32)>> = vec![Vec::new(); experts];
        {
            let xs = o.host(x)?;
            let mut probs = vec![0f32; experts];
            for (r, row) in xs.chunks_exact(hidden.max(1)).enumerate() {
                for (p, w) in probs.iter_mut().zip(self.router.chunks_exact(hidden)) {
                    *p = row.iter().zip(w).map(|(a, b)| a * b).sum();
                }
                softmax(&mut probs);
                for e in top_k(&probs, self.top_k) {
                    routed[e].push((r as u32, probs[e]));
                }
            }
        }
        let mut acc = o.host(residual)?.into_owned();
        if acc.len() != rows * hidden {
            return Err(ModelError::Forward("the residual does not fit the input".into()));
        }
        let mut picked = o.empty()?;
        for ((up, down), tokens) in self.experts.iter().zip(&routed) {
            if tokens.is_empty() {
                continue;
            }
            let order: Vec<(u32, u32)> = tokens.iter().map(|&(r, _)| (0, r)).collect();
            o.gather_rows(&mut picked, &[x], &order)?;
            o.linear_fwd(&picked, up, Post::Act(self.act), &mut scratch.inter)?;
            o.linear_fwd(&scratch.inter, down, Post::None, &mut scratch.gated)?;
            let y = o.host(&scratch.gated)?;
            for (&(r, p), y) in tokens.iter().zip(y.chunks_exact(hidden)) {
                let dst = &mut acc[r as usize * hidden..][..hidden];
                dst.iter_mut().zip(y).for_each(|(d, v)| *d += p * v);
            }
        }
        for row in acc.chunks_exact_mut(hidden.max(1)) {
            row.iter_mut().zip(&self.bias).for_each(|(d, b)| *d += b);
        }
        *out = o.upload(rows, hidden, acc)?;
        Ok(())
    }
}

fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    x.iter_mut().for_each(|v| *v = (*v - max).exp());
    let sum: f32 = x.iter().sum();
    x.iter_mut().for_each(|v| *v /= sum);
}

/// Indices of the `k` largest values, largest first; ties go to the lower index.
fn top_k(x: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|&a, &b| x[b].total_cmp(&x[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_takes_the_largest_and_breaks_ties_by_index() {
        assert_eq!(top_k(&[0.1, 0.4, 0.4, 0.1], 2), vec![1, 2]);
        assert_eq!(top_k(&[0.5, 0.2, 0.3], 1), vec![0]);
    }
}
