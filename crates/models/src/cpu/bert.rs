//! The BERT-family encoder on Aleph's CPU kernels, padding-free: the batch's sequences are packed end
//! to end, every GEMM runs over real tokens only, and attention runs per (sequence, head).
//!
//! Weight names are the checkpoint's, as in `architectures/bert.rs` (the candle reference path).

use candle_nn::VarBuilder;

use super::gemm::{Epilogue, MatRef};
use super::layers::{attention, host, norm_rows, Act, Dense, Norm};
use super::{ops, Isa};
use crate::architectures::bert::{BertConfig, Flavor};
use crate::batch::Batch;
use crate::encoder::{Encoder, TokenStates};
use crate::error::{weights, ModelError};

struct Layer {
    qkv: Dense,
    attn_out: Dense,
    attn_norm: Norm,
    ffn_in: Dense,
    ffn_out: Dense,
    out_norm: Norm,
}

pub struct FastBert {
    word: Vec<f32>,
    position: Vec<f32>,
    token_type: Option<Vec<f32>>,
    emb_norm: Norm,
    layers: Vec<Layer>,
    act: Act,
    hidden: usize,
    heads: usize,
    inter: usize,
    eps: f32,
    position_offset: usize,
    max_positions: usize,
    vocab: usize,
    isa: Isa,
}

impl FastBert {
    /// Loads from a var builder rooted at the encoder (the `bert.` / `roberta.` prefix applied).
    /// `int8` quantizes the linear layers' weights (dynamic quantization; attention stays f32).
    pub fn load(vb: VarBuilder, cfg: &BertConfig, flavor: Flavor, int8: bool) -> Result<Self, ModelError> {
        cfg.check()?;
        let act = Act::parse(&cfg.hidden_act)?;
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        let emb = vb.pp("embeddings");
        let word =
            host(emb.pp("word_embeddings").get((cfg.vocab_size, h), "weight").map_err(weights)?).map_err(weights)?;
        let position =
            host(emb.pp("position_embeddings").get((cfg.max_position_embeddings, h), "weight").map_err(weights)?)
                .map_err(weights)?;
        let token_type = if cfg.type_vocab_size > 1 {
            let t = emb.pp("token_type_embeddings").get((cfg.type_vocab_size, h), "weight").map_err(weights)?;
            Some(host(t).map_err(weights)?)
        } else if cfg.type_vocab_size == 1 {
            // One type: its row is a constant, folded into every token below.
            let t = emb.pp("token_type_embeddings").get((1, h), "weight").map_err(weights)?;
            Some(host(t).map_err(weights)?)
        } else {
            None
        };
        let emb_norm = Norm::load(emb.pp("LayerNorm"), h).map_err(weights)?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|n| RawLayer::read(vb.pp("encoder").pp("layer").pp(n), h, i).map(|raw| raw.build(h, i, int8, None)))
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(weights)?;
        Ok(FastBert {
            word,
            position,
            token_type,
            emb_norm,
            layers,
            act,
            hidden: h,
            heads: cfg.num_attention_heads,
            inter: i,
            eps: cfg.layer_norm_eps as f32,
            position_offset: flavor.position_offset(cfg),
            max_positions: cfg.max_position_embeddings,
            vocab: cfg.vocab_size,
            isa: Isa::get(),
        })
    }

    /// Word + position + token-type embeddings, normalized: `[tokens, h]`.
    fn embed(&self, batch: &Batch) -> Result<Vec<f32>, ModelError> {
        let h = self.hidden;
        let mut x = vec![0f32; batch.total_tokens() * h];
        for s in 0..batch.len() {
            let start = batch.cu_seqlens[s];
            for t in 0..batch.seq_len(s) {
                let id = batch.input_ids[start + t] as usize;
                let pos = self.position_offset + t;
                if id >= self.vocab || pos >= self.max_positions {
                    return Err(ModelError::Forward(format!(
                        "token id {id} or position {pos} is outside the model's tables"
                    )));
                }
                let row = &mut x[(start + t) * h..(start + t + 1) * h];
                row.copy_from_slice(&self.word[id * h..(id + 1) * h]);
                ops::add_assign(row, &self.position[pos * h..(pos + 1) * h]);
                if let Some(tt) = &self.token_type {
                    let types = tt.len() / h;
                    let ty = if types == 1 { 0 } else { (batch.token_type_ids[start + t] as usize).min(types - 1) };
                    ops::add_assign(row, &tt[ty * h..(ty + 1) * h]);
                }
                ops::layer_norm(self.isa, row, &self.emb_norm.gamma, &self.emb_norm.beta, self.eps);
            }
        }
        Ok(x)
    }
}

impl Encoder for FastBert {
    fn hidden_size(&self) -> usize {
        self.hidden
    }

    fn weight_bytes(&self) -> u64 {
        let dense = |d: &Dense| d.bytes();
        let norm = |n: &Norm| 4 * (n.gamma.len() + n.beta.len());
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                dense(&l.qkv)
                    + dense(&l.attn_out)
                    + dense(&l.ffn_in)
                    + dense(&l.ffn_out)
                    + norm(&l.attn_norm)
                    + norm(&l.out_norm)
            })
            .sum();
        let tables = self.word.len() + self.position.len() + self.token_type.as_ref().map_or(0, Vec::len);
        (layers + 4 * tables + norm(&self.emb_norm)) as u64
    }

    fn encode(&self, batch: &Batch) -> Result<TokenStates, ModelError> {
        self.forward(batch, None)
    }
}

/// A layer's weights as the checkpoint holds them, before packing.
struct RawLayer {
    qkv: (Vec<f32>, Vec<f32>),
    attn_out: (Vec<f32>, Vec<f32>),
    ffn_in: (Vec<f32>, Vec<f32>),
    ffn_out: (Vec<f32>, Vec<f32>),
    attn_norm: Norm,
    out_norm: Norm,
}

impl RawLayer {
    fn read(vb: VarBuilder, h: usize, i: usize) -> candle_core::Result<Self> {
        let dense = |vb: VarBuilder, inp: usize, out: usize| -> candle_core::Result<(Vec<f32>, Vec<f32>)> {
            Ok((host(vb.get((out, inp), "weight")?)?, host(vb.get(out, "bias")?)?))
        };
        let sa = vb.pp("attention").pp("self");
        // Q, K and V as one [3h, h] weight: one GEMM.
        let (mut w, mut b) = (Vec::with_capacity(3 * h * h), Vec::with_capacity(3 * h));
        for name in ["query", "key", "value"] {
            let (wi, bi) = dense(sa.pp(name), h, h)?;
            w.extend(wi);
            b.extend(bi);
        }
        let ao = vb.pp("attention").pp("output");
        Ok(RawLayer {
            qkv: (w, b),
            attn_out: dense(ao.pp("dense"), h, h)?,
            ffn_in: dense(vb.pp("intermediate").pp("dense"), h, i)?,
            ffn_out: dense(vb.pp("output").pp("dense"), i, h)?,
            attn_norm: Norm::load(ao.pp("LayerNorm"), h)?,
            out_norm: Norm::load(vb.pp("output").pp("LayerNorm"), h)?,
        })
    }

    /// Packs the layer: f32, int8, or int8 smoothed against measured activation magnitudes.
    fn build(self, h: usize, i: usize, int8: bool, smooth: Option<&ActStats>) -> Layer {
        let make = |(w, b): (Vec<f32>, Vec<f32>), inp: usize, out: usize, act: Option<&Vec<f32>>| match act {
            Some(a) => Dense::new_smoothed(&w, b, inp, out, a, SMOOTH_ALPHA),
            None => Dense::new(&w, b, inp, out, int8),
        };
        Layer {
            qkv: make(self.qkv, h, 3 * h, smooth.map(|s| &s.qkv_in)),
            attn_out: make(self.attn_out, h, h, smooth.map(|s| &s.attn_out_in)),
            ffn_in: make(self.ffn_in, h, i, smooth.map(|s| &s.ffn_in_in)),
            ffn_out: make(self.ffn_out, i, h, smooth.map(|s| &s.ffn_out_in)),
            attn_norm: self.attn_norm,
            out_norm: self.out_norm,
        }
    }
}

/// How much of an activation outlier moves into the weight (SmoothQuant's α).
const SMOOTH_ALPHA: f32 = 0.5;

/// Per input channel, the largest magnitude each linear layer of a layer saw.
#[derive(Clone)]
struct ActStats {
    qkv_in: Vec<f32>,
    attn_out_in: Vec<f32>,
    ffn_in_in: Vec<f32>,
    ffn_out_in: Vec<f32>,
}

impl ActStats {
    fn new(h: usize, i: usize) -> Self {
        ActStats { qkv_in: vec![0.0; h], attn_out_in: vec![0.0; h], ffn_in_in: vec![0.0; h], ffn_out_in: vec![0.0; i] }
    }
}

fn record(max: &mut [f32], rows: &[f32]) {
    for row in rows.chunks_exact(max.len()) {
        for (m, v) in max.iter_mut().zip(row) {
            *m = m.max(v.abs());
        }
    }
}

impl FastBert {
    /// int8 with SmoothQuant: runs the f32 encoder over `calibration`, records each linear layer's
    /// per-channel input magnitudes, and quantizes every layer smoothed against them.
    pub fn load_int8_smoothed(
        vb: VarBuilder,
        cfg: &BertConfig,
        flavor: Flavor,
        calibration: &[Batch],
    ) -> Result<Self, ModelError> {
        let mut model = Self::load(vb.clone(), cfg, flavor, false)?;
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        let mut stats = vec![ActStats::new(h, i); model.layers.len()];
        for batch in calibration.iter().filter(|b| !b.is_empty()) {
            model.forward(batch, Some(&mut stats))?;
        }
        for (n, (layer, s)) in model.layers.iter_mut().zip(&stats).enumerate() {
            let raw = RawLayer::read(vb.pp("encoder").pp("layer").pp(n), h, i).map_err(weights)?;
            *layer = raw.build(h, i, true, Some(s));
        }
        Ok(model)
    }

    /// The encoder; with `stats`, also records each linear layer's input magnitudes.
    fn forward(&self, batch: &Batch, mut stats: Option<&mut Vec<ActStats>>) -> Result<TokenStates, ModelError> {
        let (h, t) = (self.hidden, batch.total_tokens());
        let mut x = self.embed(batch)?;
        let mut qkv = vec![0f32; t * 3 * h];
        let mut ctx = vec![0f32; t * h];
        let mut mid = vec![0f32; t * h];
        let mut inter = vec![0f32; t * self.inter];
        for (n, layer) in self.layers.iter().enumerate() {
            let mut stat = stats.as_deref_mut().map(|s| &mut s[n]);
            if let Some(s) = stat.as_deref_mut() {
                record(&mut s.qkv_in, &x);
            }
            let xm = MatRef { data: &x, rows: t, cols: h, ld: h };
            layer.qkv.forward(xm, &mut qkv, 3 * h, Epilogue::Bias(&layer.qkv.b));
            attention(self.isa, &qkv, &mut ctx, &batch.cu_seqlens, h, self.heads, false);
            if let Some(s) = stat.as_deref_mut() {
                record(&mut s.attn_out_in, &ctx);
            }
            let cm = MatRef { data: &ctx, rows: t, cols: h, ld: h };
            layer.attn_out.forward(cm, &mut mid, h, Epilogue::BiasResidual(&layer.attn_out.b, &x));
            norm_rows(self.isa, &mut mid, &layer.attn_norm, h, self.eps);
            if let Some(s) = stat.as_deref_mut() {
                record(&mut s.ffn_in_in, &mid);
            }
            let mm = MatRef { data: &mid, rows: t, cols: h, ld: h };
            layer.ffn_in.forward(mm, &mut inter, self.inter, self.act.epilogue(&layer.ffn_in.b));
            self.act.finish(self.isa, &mut inter);
            if let Some(s) = stat {
                record(&mut s.ffn_out_in, &inter);
            }
            let im = MatRef { data: &inter, rows: t, cols: self.inter, ld: self.inter };
            layer.ffn_out.forward(im, &mut x, h, Epilogue::BiasResidual(&layer.ffn_out.b, &mid));
            norm_rows(self.isa, &mut x, &layer.out_norm, h, self.eps);
        }
        Ok(TokenStates { hidden: h, data: x })
    }
}
