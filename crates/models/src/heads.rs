//! What turns per-token states into a request's answer: pooling for embedders, the sequence
//! classification head for rerankers and classifiers. Heads run on the host after the encoder.

use candle_nn::VarBuilder;

use crate::batch::Batch;
use crate::batch::OutputKind;
use crate::encoder::TokenStates;
use crate::pooling::{l2_normalize, pool_sequence, Pooling};

/// A dense layer kept in host memory: `w` is `[out, in]`, row-major, as checkpoints store it.
#[derive(Debug, Clone)]
pub struct HostLinear {
    w: Vec<f32>,
    b: Vec<f32>,
    inp: usize,
}

impl HostLinear {
    pub fn load(vb: VarBuilder, inp: usize, out: usize) -> candle_core::Result<Self> {
        let w = vb.get((out, inp), "weight")?.flatten_all()?.to_vec1::<f32>()?;
        let b = vb.get(out, "bias")?.to_vec1::<f32>()?;
        Ok(HostLinear { w, b, inp })
    }

    /// A layer whose checkpoint has no bias (ColBERT's projection); its width is read from the weight.
    pub fn load_no_bias(vb: VarBuilder, inp: usize) -> candle_core::Result<Self> {
        let t = vb.get_unchecked("weight")?;
        let (out, k) = t.dims2()?;
        if k != inp {
            candle_core::bail!("{}.weight is [{out}, {k}], expected [_, {inp}]", vb.prefix());
        }
        Ok(HostLinear { w: t.flatten_all()?.to_vec1::<f32>()?, b: vec![0.0; out], inp })
    }

    pub fn out_dim(&self) -> usize {
        self.b.len()
    }

    pub fn bytes(&self) -> usize {
        4 * (self.w.len() + self.b.len())
    }

    pub fn apply(&self, x: &[f32]) -> Vec<f32> {
        self.w
            .chunks_exact(self.inp)
            .zip(&self.b)
            .map(|(row, b)| row.iter().zip(x).map(|(w, x)| w * x).sum::<f32>() + b)
            .collect()
    }
}

pub enum Head {
    /// Sentence embedding: pool the tokens, optionally L2-normalize.
    Pool { pooling: Pooling, normalize: bool },
    /// Sequence classification from the first token: `out(tanh(dense(h[0])))`. BERT calls `dense` the
    /// pooler; RoBERTa keeps both inside its classification head. The output is the logits.
    Classifier { dense: HostLinear, out: HostLinear },
    /// Late interaction: every token projected and L2-normalized; the output is the token vectors,
    /// row-major, `len × proj.out_dim()`.
    MultiVector { proj: HostLinear },
}

impl Head {
    /// One output vector per sequence.
    pub fn apply(&self, states: &TokenStates, batch: &Batch) -> Vec<Vec<f32>> {
        let h = states.hidden;
        (0..batch.len())
            .map(|i| {
                let seq = states.sequence(batch, i);
                let kind = batch.output(i);
                if kind == OutputKind::Tokens {
                    return seq.to_vec();
                }
                match self {
                    Head::Pool { pooling, normalize } => {
                        let mut v = Vec::with_capacity(h);
                        pool_sequence(*pooling, seq, batch.seq_len(i), h, &mut v);
                        if *normalize && kind != OutputKind::Unnormalized {
                            l2_normalize(&mut v);
                        }
                        v
                    }
                    Head::MultiVector { proj } => seq
                        .chunks_exact(h)
                        .flat_map(|token| {
                            let mut v = proj.apply(token);
                            l2_normalize(&mut v);
                            v
                        })
                        .collect(),
                    Head::Classifier { dense, out } => {
                        let first = if seq.len() >= h { &seq[..h] } else { &[][..] };
                        let mut x = dense.apply(first);
                        x.iter_mut().for_each(|v| *v = v.tanh());
                        out.apply(&x)
                    }
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_is_w_x_plus_b() {
        let l = HostLinear { w: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], b: vec![0.5, -1.0], inp: 3 };
        assert_eq!(l.apply(&[1.0, 0.0, -1.0]), vec![-1.5, -3.0]);
        assert_eq!(l.out_dim(), 2);
    }

    #[test]
    fn classifier_reads_the_first_token() {
        let ident = HostLinear { w: vec![1.0, 0.0, 0.0, 1.0], b: vec![0.0, 0.0], inp: 2 };
        let sum = HostLinear { w: vec![1.0, 1.0], b: vec![0.0], inp: 2 };
        let head = Head::Classifier { dense: ident, out: sum };
        let mut b = Batch::new();
        b.push(&[1, 2], &[0, 0]);
        let states = TokenStates { hidden: 2, data: vec![0.5, -0.5, 9.0, 9.0] };
        let out = head.apply(&states, &b);
        assert!((out[0][0] - (0.5f32.tanh() + (-0.5f32).tanh())).abs() < 1e-6);
    }
}
