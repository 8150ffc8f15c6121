//! SPLADE: a BERT-family masked LM read as a sparse encoder. Each token's vocabulary logits become
//! `log(1 + relu(logit))` (twice for `log1p_relu`), pooled by max or sum over the sequence: one weight per
//! vocabulary entry, mostly zero, as sentence-transformers' `SpladePooling` computes them.

use std::sync::Arc;

use candle_nn::VarBuilder;

use crate::backend::Ops;
use crate::batch::{sparse_pairs, Batch, Output, OutputKind};
use crate::error::ModelError;
use crate::layers::Weights;
use crate::loader::{MappedTensors, Model};
use crate::models::bert::{encoder_weights, Bert, BertConfig, Flavor, MlmHead};
use crate::st_config::Splade as SpladePooling;

/// Rows of logits computed at once: bounds the `[rows, vocab]` buffer (BERT's vocabulary is 30,522 wide).
const CHUNK_ROWS: usize = 256;

pub struct Splade<O: Ops> {
    bert: Bert<O>,
    head: MlmHead<O>,
    pooling: SpladePooling,
}

impl<O: Ops> Splade<O> {
    /// `top` is the checkpoint's root, `encoder` the encoder's (see [`crate::models::bert::root`]).
    pub fn load(
        top: &Weights<O>,
        encoder: &Weights<O>,
        cfg: &BertConfig,
        flavor: Flavor,
        pooling: SpladePooling,
    ) -> Result<Self, ModelError> {
        Ok(Splade { bert: Bert::load(encoder, cfg, flavor)?, head: MlmHead::load(top, encoder, cfg)?, pooling })
    }

    pub fn vocab(&self) -> usize {
        self.head.vocab
    }

    /// One vocabulary-wide weight vector per sequence.
    pub fn forward(&self, o: &O, batch: &Batch) -> Result<Vec<Vec<f32>>, ModelError> {
        let x = self.bert.forward(o, batch)?;
        let (tokens, v) = (batch.total_tokens(), self.head.vocab);
        let owner: Vec<usize> = (0..batch.len()).flat_map(|s| std::iter::repeat_n(s, batch.seq_len(s))).collect();
        // Max pooling keeps each entry's largest logit (the transform is monotonic, so it is applied once at
        // the end); sum pooling adds the transformed positive logits.
        let mut out: Vec<Vec<f32>> = vec![vec![0.0; v]; batch.len()];
        let transform = |l: f32| {
            let w = l.max(0.0).ln_1p();
            if self.pooling.log1p_twice {
                w.ln_1p()
            } else {
                w
            }
        };
        let (mut rows, mut mid, mut logits) = (o.empty()?, o.empty()?, o.empty()?);
        for start in (0..tokens).step_by(CHUNK_ROWS) {
            let end = (start + CHUNK_ROWS).min(tokens);
            let chunk = if start == 0 && end == tokens {
                &x
            } else {
                let pick: Vec<(u32, u32)> = (start..end).map(|r| (0, r as u32)).collect();
                o.gather_rows(&mut rows, &[&x], &pick)?;
                &rows
            };
            self.head.forward(o, chunk, &mut mid, &mut logits)?;
            let host = o.host(&logits)?;
            for (r, row) in host.chunks_exact(v).enumerate() {
                let acc = &mut out[owner[start + r]];
                for (a, &l) in acc.iter_mut().zip(row) {
                    if l > 0.0 {
                        if self.pooling.sum {
                            *a += transform(l);
                        } else {
                            *a = a.max(l);
                        }
                    }
                }
            }
        }
        if !self.pooling.sum {
            out.iter_mut().flatten().for_each(|a| *a = transform(*a));
        }
        Ok(out)
    }
}

/// A SPLADE encoder with the backend that computes it.
pub struct SpladeModel<O: Ops> {
    ops: O,
    splade: Splade<O>,
    /// Bytes of weights the backend prepared.
    pub weight_bytes: usize,
}

impl<O: Ops> SpladeModel<O> {
    pub fn load(
        ops: O,
        vb: VarBuilder<'static>,
        mapped: Option<Arc<MappedTensors>>,
        cfg: &BertConfig,
        flavor: Flavor,
        pooling: SpladePooling,
    ) -> Result<Self, ModelError> {
        let (splade, weight_bytes) = {
            let top = Weights::new(vb, &ops).with_mapped(mapped);
            let splade = Splade::load(&top, &encoder_weights(&top), cfg, flavor, pooling)?;
            (splade, top.bytes())
        };
        Ok(SpladeModel { ops, splade, weight_bytes })
    }
}

impl<O: Ops> Model for SpladeModel<O> {
    fn forward(&self, batch: &Batch) -> Result<Output, ModelError> {
        if batch.is_empty() {
            return Ok(Output::default());
        }
        let mut vectors = self.splade.forward(&self.ops, batch)?;
        // Sequences that asked for sparse weights get only the non-zero ones.
        for (i, v) in vectors.iter_mut().enumerate() {
            if batch.output(i) == OutputKind::Sparse {
                *v = sparse_pairs(v.iter().enumerate().filter(|(_, w)| **w != 0.0).map(|(id, &w)| (id as u32, w)));
            }
        }
        Ok(Output { vectors })
    }
}
