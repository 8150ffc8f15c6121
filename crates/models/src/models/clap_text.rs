//! CLAP's text tower: a RoBERTa encoder, its pooler (`tanh(dense(<s>))`), then CLAP's two-layer
//! projection. Not normalized here.

use candle_nn::VarBuilder;

use super::bert::{root, Bert, BertConfig, Flavor};
use crate::backend::{Activation, Ops};
use crate::batch::Batch;
use crate::cpu::Isa;
use crate::error::{weights, ModelError};
use crate::heads::HostLinear;
use crate::layers::Weights;

pub struct ClapText<O: Ops> {
    ops: O,
    encoder: Bert<O>,
    pooler: HostLinear,
    proj1: HostLinear,
    act: Activation,
    proj2: HostLinear,
}

impl<O: Ops> ClapText<O> {
    /// `text` is the checkpoint's `text_model`, `projection` its `text_projection`; `act` is
    /// `projection_hidden_act`.
    pub fn load(
        ops: O,
        text: VarBuilder,
        projection: VarBuilder,
        cfg: &BertConfig,
        act: &str,
    ) -> Result<Self, ModelError> {
        let h = cfg.hidden_size;
        let encoder = Bert::load(&Weights::new(root(text.clone()), &ops), cfg, Flavor::Roberta)?;
        let pooler = HostLinear::load(text.pp("pooler").pp("dense"), h, h).map_err(weights)?;
        let out = projection.pp("linear1").get_unchecked("bias").and_then(|b| b.dim(0)).map_err(weights)?;
        let proj1 = HostLinear::load(projection.pp("linear1"), h, out).map_err(weights)?;
        let proj2 = HostLinear::load(projection.pp("linear2"), out, out).map_err(weights)?;
        Ok(ClapText { ops, encoder, pooler, proj1, act: Activation::parse(act)?, proj2 })
    }

    pub fn dim(&self) -> usize {
        self.proj2.out_dim()
    }

    pub fn weight_bytes(&self) -> u64 {
        let host = |l: &HostLinear| l.bytes();
        (self.encoder.weight_bytes() + host(&self.pooler) + host(&self.proj1) + host(&self.proj2)) as u64
    }

    /// Projected (not normalized) text embeddings, one per sequence.
    pub fn forward(&self, batch: &Batch) -> Result<Vec<Vec<f32>>, ModelError> {
        let h = self.encoder.hidden_size();
        let states = self.ops.download(self.encoder.forward(&self.ops, batch)?)?;
        let zeros = vec![0.0; h];
        Ok((0..batch.len())
            .map(|i| {
                let at = batch.cu_seqlens[i] * h;
                let first = if batch.seq_len(i) > 0 { &states[at..at + h] } else { &zeros[..] };
                let pooled: Vec<f32> = self.pooler.apply(first).into_iter().map(f32::tanh).collect();
                let mut mid = self.proj1.apply(&pooled);
                self.act.apply_rows(Isa::get(), &mut mid);
                self.proj2.apply(&mid)
            })
            .collect())
    }
}
