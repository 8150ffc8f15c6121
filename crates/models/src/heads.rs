//! What turns per-token states into a request's answer: pooling for embedders, the sequence
//! classification head for rerankers and classifiers. Heads run on the host after the encoder.

use candle_nn::VarBuilder;

use crate::batch::{sparse_pairs, Batch, OutputKind};
use crate::encoder::TokenStates;
use crate::pooling::{l2_normalize, pool_sequence, Pooling};
use crate::st_config::DenseActivation;

/// A dense layer kept in host memory: `w` is `[out, in]`, row-major, as checkpoints store it.
#[derive(Debug, Clone)]
pub struct HostLinear {
    w: Vec<f32>,
    b: Vec<f32>,
    inp: usize,
}

impl HostLinear {
    pub fn load(vb: VarBuilder, inp: usize, out: usize) -> candle_core::Result<Self> {
        Self::load_with(vb, inp, out, true)
    }

    /// Rows computed at load (`w`: `[out, inp]`, row-major), without a bias.
    pub fn from_rows(w: Vec<f32>, inp: usize) -> Self {
        let out = w.len() / inp.max(1);
        HostLinear { w, b: vec![0.0; out], inp }
    }

    /// `weight` `[out, inp]` and, with `bias`, `bias` `[out]` (else zeros).
    pub fn load_with(vb: VarBuilder, inp: usize, out: usize, bias: bool) -> candle_core::Result<Self> {
        let w = vb.get((out, inp), "weight")?.flatten_all()?.to_vec1::<f32>()?;
        let b = if bias { vb.get(out, "bias")?.to_vec1::<f32>()? } else { vec![0.0; out] };
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

    /// A layer whose width is read from its weight, with its bias where the checkpoint has one.
    pub fn load_sized(vb: VarBuilder, inp: usize) -> candle_core::Result<Self> {
        let mut l = Self::load_no_bias(vb.clone(), inp)?;
        if vb.contains_tensor("bias") {
            l.b = vb.get(l.b.len(), "bias")?.to_vec1::<f32>()?;
        }
        Ok(l)
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

/// A sentence-transformers `Dense` module: `act(linear(x))`, plus `x` (projected by `residual` when the
/// widths differ) with `use_residual`.
#[derive(Debug, Clone)]
pub struct DenseLayer {
    pub linear: HostLinear,
    pub act: DenseActivation,
    pub residual: Option<Residual>,
}

#[derive(Debug, Clone)]
pub enum Residual {
    Identity,
    Projected(HostLinear),
}

impl DenseLayer {
    pub fn apply(&self, x: &[f32]) -> Vec<f32> {
        let mut y = self.linear.apply(x);
        y.iter_mut().for_each(|v| *v = self.act.apply(*v));
        match &self.residual {
            None => {}
            Some(Residual::Identity) => y.iter_mut().zip(x).for_each(|(v, x)| *v += x),
            Some(Residual::Projected(p)) => y.iter_mut().zip(p.apply(x)).for_each(|(v, x)| *v += x),
        }
        y
    }
}

/// What sentence-transformers does after pooling, in its modules' order.
#[derive(Debug, Clone)]
pub enum PostStep {
    Dense(DenseLayer),
    Normalize,
}

/// A layer norm kept in host memory (ModernBERT's classification head).
#[derive(Debug, Clone)]
pub struct HostNorm {
    pub weight: Vec<f32>,
    pub bias: Option<Vec<f32>>,
    pub eps: f32,
}

impl HostNorm {
    pub fn load(vb: VarBuilder, width: usize, bias: bool, eps: f64) -> candle_core::Result<Self> {
        let weight = vb.get(width, "weight")?.to_vec1::<f32>()?;
        let bias = if bias { Some(vb.get(width, "bias")?.to_vec1::<f32>()?) } else { None };
        Ok(HostNorm { weight, bias, eps: eps as f32 })
    }

    pub fn apply(&self, x: &mut [f32]) {
        let n = x.len().max(1) as f32;
        let mean = x.iter().sum::<f32>() / n;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
        let inv = 1.0 / (var + self.eps).sqrt();
        for (j, v) in x.iter_mut().enumerate() {
            *v = (*v - mean) * inv * self.weight[j] + self.bias.as_ref().map_or(0.0, |b| b[j]);
        }
    }
}

/// BGE-M3's outputs beside its pooled embedding, from the same token states, as FlagEmbedding's
/// `BGEM3FlagModel` computes them: lexical weights `relu(sparse(h_t))`, the largest per vocabulary id, its
/// tokenizer's cls, eos, pad and unk tokens left out; and the ColBERT vectors `colbert(h_t)` of every token
/// after the first, each L2-normalized.
pub struct LexicalAndColbert {
    /// `sparse_linear`: `[1, hidden]`.
    pub sparse: HostLinear,
    /// `colbert_linear`: `[colbert_dim, hidden]`.
    pub colbert: HostLinear,
    /// Token ids that get no lexical weight.
    pub skip: Vec<u32>,
}

impl LexicalAndColbert {
    /// [`sparse_pairs`] of one sequence (`seq` `[len, hidden]`, `ids` its tokens).
    pub fn lexical(&self, seq: &[f32], ids: &[u32], hidden: usize) -> Vec<f32> {
        let mut best = std::collections::BTreeMap::<u32, f32>::new();
        for (token, &id) in seq.chunks_exact(hidden).zip(ids) {
            let w = self.sparse.apply(token)[0];
            if w > 0.0 && !self.skip.contains(&id) {
                let e = best.entry(id).or_insert(0.0);
                *e = e.max(w);
            }
        }
        sparse_pairs(best)
    }

    /// The tokens after the first, projected and normalized, row-major.
    pub fn colbert_vectors(&self, seq: &[f32], hidden: usize) -> Vec<f32> {
        seq.chunks_exact(hidden)
            .skip(1)
            .flat_map(|token| {
                let mut v = self.colbert.apply(token);
                l2_normalize(&mut v);
                v
            })
            .collect()
    }
}

pub enum Head {
    /// Sentence embedding: pool the tokens, then the `Dense` / `Normalize` modules (a normalization is
    /// skipped for [`OutputKind::Unnormalized`]); with `side`, BGE-M3's sparse and ColBERT outputs on request.
    Pool { pooling: Pooling, post: Vec<PostStep>, side: Option<Box<LexicalAndColbert>> },
    /// Sequence classification: `out(norm(act(dense(pool(h)))))`, pooling the first token (BERT calls
    /// `dense` the pooler; RoBERTa keeps both inside its classification head; DistilBERT's activation is
    /// ReLU) or, for ModernBERT with `classifier_pooling: mean`, the mean. The output is the logits.
    Classifier { pooling: Pooling, dense: HostLinear, act: DenseActivation, norm: Option<HostNorm>, out: HostLinear },
    /// A linear score of one pooled token, no pooler (Qwen3's `score`; an LLM reranker's yes-minus-no row of
    /// its language-model head).
    Score { pooling: Pooling, out: HostLinear },
    /// Late interaction: every token projected and L2-normalized; the output is the token vectors,
    /// row-major, `len × proj.out_dim()`.
    MultiVector { proj: HostLinear },
}

impl Head {
    /// The pooling that is all this batch needs of the token states, if it is: pooling heads, where no output
    /// asks for per-token states (BGE-M3's sparse and ColBERT outputs, [`OutputKind::Tokens`]).
    pub fn pooling_alone(&self, batch: &Batch) -> Option<Pooling> {
        let (pooling, side) = match self {
            Head::Pool { pooling, side, .. } => (*pooling, side.is_some()),
            Head::Score { pooling, .. } | Head::Classifier { pooling, .. } => (*pooling, false),
            Head::MultiVector { .. } => return None,
        };
        let needs_tokens =
            |kind| kind == OutputKind::Tokens || (side && matches!(kind, OutputKind::Sparse | OutputKind::MultiVector));
        (0..batch.len()).all(|i| !needs_tokens(batch.output(i))).then_some(pooling)
    }

    /// One output vector per sequence from the pooled states ([`Head::pooling_alone`]).
    pub fn apply_pooled(&self, pooled: Vec<Vec<f32>>, batch: &Batch) -> Vec<Vec<f32>> {
        pooled.into_iter().enumerate().map(|(i, v)| self.after_pooling(v, batch.output(i))).collect()
    }

    /// What a pooling head computes from one pooled state: the embedding's modules, a score or logits.
    fn after_pooling(&self, pooled: Vec<f32>, kind: OutputKind) -> Vec<f32> {
        match self {
            Head::Pool { post, .. } => {
                let mut v = pooled;
                for step in post {
                    match step {
                        PostStep::Dense(d) => v = d.apply(&v),
                        PostStep::Normalize if kind != OutputKind::Unnormalized => l2_normalize(&mut v),
                        PostStep::Normalize => {}
                    }
                }
                v
            }
            Head::Score { out, .. } => out.apply(&pooled),
            Head::Classifier { dense, act, norm, out, .. } => {
                let mut x = dense.apply(&pooled);
                x.iter_mut().for_each(|v| *v = act.apply(*v));
                if let Some(norm) = norm {
                    norm.apply(&mut x);
                }
                out.apply(&x)
            }
            Head::MultiVector { .. } => pooled,
        }
    }

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
                let pool = |pooling: Pooling| {
                    let mut v = Vec::with_capacity(h);
                    pool_sequence(pooling, seq, batch.seq_len(i), h, &mut v);
                    self.after_pooling(v, kind)
                };
                match self {
                    Head::Pool { side: Some(side), .. } if kind == OutputKind::Sparse => {
                        let ids = &batch.input_ids[batch.cu_seqlens[i]..batch.cu_seqlens[i + 1]];
                        side.lexical(seq, ids, h)
                    }
                    Head::Pool { side: Some(side), .. } if kind == OutputKind::MultiVector => {
                        side.colbert_vectors(seq, h)
                    }
                    Head::MultiVector { proj } => seq
                        .chunks_exact(h)
                        .flat_map(|token| {
                            let mut v = proj.apply(token);
                            l2_normalize(&mut v);
                            v
                        })
                        .collect(),
                    Head::Pool { pooling, .. } | Head::Score { pooling, .. } | Head::Classifier { pooling, .. } => {
                        pool(*pooling)
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

    /// A batch that asks only for pooled outputs is pooled where the states are, to the same answer as pooling
    /// every token's state on the host; one that asks for token states is not.
    #[test]
    fn pooled_heads_answer_from_pooled_states_as_from_token_states() {
        let ident = HostLinear { w: vec![1.0, 0.0, 0.0, 1.0], b: vec![0.0, 0.0], inp: 2 };
        let head = Head::Pool { pooling: Pooling::Mean, post: vec![PostStep::Normalize], side: None };
        let score = Head::Score { pooling: Pooling::LastToken, out: ident };
        let mut b = Batch::new();
        b.push(&[1, 2], &[0, 0]);
        b.push_as(&[3], &[0], OutputKind::Unnormalized);
        let states = TokenStates { hidden: 2, data: vec![1.0, 2.0, 3.0, 6.0, -4.0, 3.0] };
        for head in [&head, &score] {
            let pooling = head.pooling_alone(&b).unwrap();
            let pooled = crate::pooling::pool_packed(&states.data, 2, &b.cu_seqlens, pooling);
            assert_eq!(head.apply_pooled(pooled, &b), head.apply(&states, &b));
        }
        // The mean of (1, 2) and (3, 6), normalized; the second output asked to stay unnormalized.
        let out = head.apply(&states, &b);
        let want = [[1.0 / 5f32.sqrt(), 2.0 / 5f32.sqrt()], [-4.0, 3.0]];
        assert!(out.iter().flatten().zip(want.iter().flatten()).all(|(g, w)| (g - w).abs() < 1e-6), "{out:?}");
        b.push_as(&[4], &[0], OutputKind::Tokens);
        assert_eq!(head.pooling_alone(&b), None);
        assert_eq!(
            Head::MultiVector { proj: HostLinear { w: vec![1.0], b: vec![0.0], inp: 1 } }.pooling_alone(&Batch::new()),
            None
        );
    }

    #[test]
    fn classifier_reads_the_first_token() {
        let ident = HostLinear { w: vec![1.0, 0.0, 0.0, 1.0], b: vec![0.0, 0.0], inp: 2 };
        let sum = HostLinear { w: vec![1.0, 1.0], b: vec![0.0], inp: 2 };
        let head =
            Head::Classifier { pooling: Pooling::Cls, dense: ident, act: DenseActivation::Tanh, norm: None, out: sum };
        let mut b = Batch::new();
        b.push(&[1, 2], &[0, 0]);
        let states = TokenStates { hidden: 2, data: vec![0.5, -0.5, 9.0, 9.0] };
        let out = head.apply(&states, &b);
        assert!((out[0][0] - (0.5f32.tanh() + (-0.5f32).tanh())).abs() < 1e-6);
    }
}
