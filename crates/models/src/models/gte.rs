//! GTE (gte-base-en-v1.5, gte-reranker-base, ...): Alibaba's `NewModel` (`model_type: "new"`, remote code) and
//! transformers 5's port of it (`model_type: "gte"`), which saves the same tensor names. A post-norm BERT
//! without position tables: rotary positions on queries and keys, a gated MLP (`up_gate_proj` holds the up
//! rows, then the gate rows; the activation goes on the gate), optional token types, no final norm.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::Deserialize;

use crate::backend::{Activation, AttentionSpec, Norm, Ops};
use crate::batch::Batch;
use crate::encoder::{Encoder, TokenStates};
use crate::error::{weights, ModelError};
use crate::layers::{rotary, GatedMlp, Positional, Scratch, SelfAttention, Weights};

/// `config.json`, every field resolved with the defaults of the class the checkpoint names: `NewConfig` (the
/// remote code) or transformers' `GteConfig`.
#[derive(Debug, Clone, PartialEq)]
pub struct GteConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: String,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    pub rms_norm: bool,
    pub rope_theta: f64,
    pub pack_qkv: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct File {
    vocab_size: Option<usize>,
    hidden_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    intermediate_size: Option<usize>,
    hidden_act: Option<String>,
    max_position_embeddings: Option<usize>,
    type_vocab_size: Option<usize>,
    layer_norm_eps: Option<f64>,
    layer_norm_type: Option<String>,
    position_embedding_type: Option<String>,
    rope_theta: Option<f64>,
    rope_scaling: Option<serde_json::Value>,
    rope_parameters: Option<serde_json::Value>,
    pack_qkv: Option<bool>,
    logn_attention_scale: Option<bool>,
}

impl GteConfig {
    /// Reads `config.json` of `model_type` `new` or `gte`, refusing what Aleph does not compute.
    pub fn read(path: &std::path::Path, model_type: &str) -> Result<Self, ModelError> {
        let f: File = crate::error::read_json(path)?;
        let native = model_type == "gte";
        let unsupported = |what: String| Err(ModelError::Unsupported(what));
        if let Some(p) = f.position_embedding_type.as_deref().filter(|p| *p != "rope") {
            return unsupported(format!("position_embedding_type `{p}` (only `rope`)"));
        }
        if f.logn_attention_scale == Some(true) {
            return unsupported("logn_attention_scale".into());
        }
        if let Some(scaling) = f.rope_scaling.as_ref().filter(|s| !s.is_null()) {
            // NewModel's NTK scaling (gte-large-en-v1.5, gte-multilingual-base): not implemented yet.
            return unsupported(format!("rope_scaling {scaling} (only unscaled rotary positions)"));
        }
        let mut theta = f.rope_theta.unwrap_or(if native { 160_000.0 } else { 10_000.0 });
        if let Some(p) = f.rope_parameters.as_ref().filter(|p| !p.is_null()) {
            let kind = p.get("rope_type").and_then(|t| t.as_str()).unwrap_or("default");
            if kind != "default" {
                return unsupported(format!("rope_type `{kind}` (only the default rotary embedding)"));
            }
            theta = p.get("rope_theta").and_then(|t| t.as_f64()).unwrap_or(theta);
        }
        let rms_norm = match f.layer_norm_type.as_deref().unwrap_or("layer_norm") {
            "layer_norm" => false,
            "rms_norm" => true,
            other => return unsupported(format!("layer_norm_type `{other}`")),
        };
        let cfg = GteConfig {
            vocab_size: f.vocab_size.unwrap_or(if native { 250_048 } else { 30_528 }),
            hidden_size: f.hidden_size.unwrap_or(768),
            num_hidden_layers: f.num_hidden_layers.unwrap_or(12),
            num_attention_heads: f.num_attention_heads.unwrap_or(12),
            intermediate_size: f.intermediate_size.unwrap_or(3072),
            hidden_act: f.hidden_act.unwrap_or_else(|| "gelu".into()),
            max_position_embeddings: f.max_position_embeddings.unwrap_or(if native { 8192 } else { 2048 }),
            type_vocab_size: f.type_vocab_size.unwrap_or(1),
            layer_norm_eps: f.layer_norm_eps.unwrap_or(1e-12),
            rms_norm,
            rope_theta: theta,
            pack_qkv: f.pack_qkv.unwrap_or(true),
        };
        let (h, heads) = (cfg.hidden_size, cfg.num_attention_heads);
        if heads == 0 || !h.is_multiple_of(heads) || !(h / heads).is_multiple_of(2) {
            return unsupported(format!("hidden_size {h} over num_attention_heads {heads}"));
        }
        Ok(cfg)
    }
}

struct Layer<O: Ops> {
    attention: SelfAttention<O>,
    attn_norm: Norm<O::Param>,
    mlp: GatedMlp<O>,
    mlp_norm: Norm<O::Param>,
}

pub struct Gte<O: Ops> {
    word: O::Param,
    token_type: Option<O::Param>,
    emb_norm: Norm<O::Param>,
    layers: Vec<Layer<O>>,
    hidden: usize,
    vocab: usize,
    types: usize,
    max_positions: usize,
    head_dim: usize,
    inv_freq: Vec<f32>,
    weight_bytes: usize,
}

impl<O: Ops> Gte<O> {
    /// Loads from weights rooted where `embeddings.*` and `encoder.*` live (see [`root`]).
    pub fn load(w: &Weights<O>, cfg: &GteConfig) -> Result<Self, ModelError> {
        let (h, i, eps) = (cfg.hidden_size, cfg.intermediate_size, cfg.layer_norm_eps);
        let start = w.bytes();
        let norm = |w: &Weights<O>| if cfg.rms_norm { w.rms_norm(h, eps, false) } else { w.layer_norm(h, eps) };
        let act = Activation::parse(&cfg.hidden_act)?;
        let spec = AttentionSpec::new(h, cfg.num_attention_heads, false);
        let emb = w.pp("embeddings");
        let layers = (0..cfg.num_hidden_layers)
            .map(|n| {
                let l = w.pp("encoder").pp("layer").pp(n);
                let a = l.pp("attention");
                let qkv = if cfg.pack_qkv {
                    a.pp("qkv_proj").linear(h, 3 * h, true)?
                } else {
                    a.linear_cat(&[("q_proj", h), ("k_proj", h), ("v_proj", h)], h, true)?
                };
                // Up rows, then gate rows; the backend's gated MLP wants the gate first.
                let mlp = l.pp("mlp");
                let up_gate = mlp.vb().get((2 * i, h), "up_gate_proj.weight").map_err(weights)?;
                let gate_up = Tensor::cat(
                    &[up_gate.narrow(0, i, i).map_err(weights)?, up_gate.narrow(0, 0, i).map_err(weights)?],
                    0,
                )
                .map_err(weights)?;
                Ok(Layer {
                    attention: SelfAttention { qkv, out: a.pp("o_proj").linear(h, h, true)?, spec },
                    attn_norm: norm(&l.pp("attn_ln"))?,
                    mlp: GatedMlp {
                        gate_up: mlp.pp("up_gate_proj").linear_from(gate_up, None)?,
                        down: mlp.pp("down_proj").linear(i, h, true)?,
                        act,
                    },
                    mlp_norm: norm(&l.pp("mlp_ln"))?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let head_dim = h / cfg.num_attention_heads;
        Ok(Gte {
            word: emb.pp("word_embeddings").table(cfg.vocab_size, h)?,
            token_type: match cfg.type_vocab_size {
                0 => None,
                types => Some(emb.pp("token_type_embeddings").table(types, h)?),
            },
            emb_norm: emb.pp("LayerNorm").layer_norm(h, eps)?,
            layers,
            hidden: h,
            vocab: cfg.vocab_size,
            types: cfg.type_vocab_size,
            max_positions: cfg.max_position_embeddings,
            head_dim,
            inv_freq: rotary::inv_freq(cfg.rope_theta, head_dim),
            weight_bytes: w.bytes() - start,
        })
    }

    /// Every real token's final hidden state, packed like the batch: `[tokens, hidden]`.
    pub fn forward(&self, o: &O, batch: &Batch) -> Result<O::T, ModelError> {
        let tokens = batch.total_tokens();
        if let Some(&id) = batch.input_ids.iter().find(|&&id| id as usize >= self.vocab) {
            return Err(ModelError::Forward(format!("token id {id} is outside the vocabulary")));
        }
        if batch.max_len > self.max_positions {
            return Err(ModelError::Forward(format!("a sequence is longer than {} tokens", self.max_positions)));
        }
        let positions: Vec<u32> = (0..batch.len()).flat_map(|s| 0..batch.seq_len(s) as u32).collect();
        let (cos, sin) = rotary::tables(o, &rotary::angles(&self.inv_freq, &positions), tokens, self.head_dim / 2)?;
        let types: Vec<u32> = match self.types {
            0 | 1 => vec![0; tokens],
            n => batch.token_type_ids.iter().map(|&t| t.min(n as u32 - 1)).collect(),
        };
        let mut tables = vec![(&self.word, &batch.input_ids[..])];
        if let Some(tt) = &self.token_type {
            tables.push((tt, &types[..]));
        }
        let mut x = o.empty()?;
        o.embed(&mut x, self.hidden, &tables)?;
        o.norm(&mut x, &self.emb_norm)?;
        let seqs = o.seqs(&batch.cu_seqlens)?;
        let mut scratch = Scratch::new(o)?;
        let mut mid = o.empty()?;
        for l in &self.layers {
            l.attention.forward(o, &x, &x, &seqs, Positional::Rotary(&cos, &sin), &mut scratch, &mut mid)?;
            o.norm(&mut mid, &l.attn_norm)?;
            l.mlp.forward(o, &mid, &mid, &mut scratch, &mut x)?;
            o.norm(&mut x, &l.mlp_norm)?;
        }
        Ok(x)
    }
}

/// A GTE encoder with the backend that computes it.
pub struct GteEncoder<O: Ops> {
    ops: O,
    model: Gte<O>,
}

impl<O: Ops> GteEncoder<O> {
    pub fn load(ops: O, vb: VarBuilder, cfg: &GteConfig) -> Result<Self, ModelError> {
        let model = Gte::load(&Weights::new(root(vb), &ops), cfg)?;
        Ok(GteEncoder { ops, model })
    }
}

impl<O: Ops> Encoder for GteEncoder<O> {
    fn hidden_size(&self) -> usize {
        self.model.hidden
    }

    fn weight_bytes(&self) -> u64 {
        self.model.weight_bytes as u64
    }

    fn encode(&self, batch: &Batch) -> Result<TokenStates, ModelError> {
        let x = self.model.forward(&self.ops, batch)?;
        Ok(TokenStates { hidden: self.model.hidden, data: self.ops.download(x)? })
    }
}

/// Task checkpoints nest the encoder under `new.` (the remote code) or `gte.` (transformers' port).
pub fn root(vb: VarBuilder) -> VarBuilder {
    for prefix in ["new", "gte"] {
        if vb.contains_tensor(&format!("{prefix}.embeddings.word_embeddings.weight")) {
            return vb.pp(prefix);
        }
    }
    vb
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str, model_type: &str) -> Result<GteConfig, ModelError> {
        let path = std::env::temp_dir().join(format!("aleph-gte-{}-{model_type}.json", std::process::id()));
        std::fs::write(&path, json).unwrap();
        let cfg = GteConfig::read(&path, model_type);
        std::fs::remove_file(&path).unwrap();
        cfg
    }

    #[test]
    fn defaults_follow_the_class_and_unimplemented_options_are_refused() {
        // NewConfig (the remote code) and transformers' GteConfig default differently.
        let new = read("{}", "new").unwrap();
        assert_eq!((new.vocab_size, new.max_position_embeddings, new.rope_theta), (30_528, 2048, 10_000.0));
        let native = read("{}", "gte").unwrap();
        assert_eq!((native.vocab_size, native.max_position_embeddings, native.rope_theta), (250_048, 8192, 160_000.0));
        assert_eq!(
            read(r#"{"rope_parameters": {"rope_type": "default", "rope_theta": 7.0}}"#, "gte").unwrap().rope_theta,
            7.0
        );
        assert!(read(r#"{"layer_norm_type": "rms_norm"}"#, "new").unwrap().rms_norm);
        for (refused, field) in [
            (r#"{"rope_scaling": {"type": "ntk", "factor": 2.0}}"#, "rope_scaling"),
            (r#"{"logn_attention_scale": true}"#, "logn"),
            (r#"{"position_embedding_type": "absolute"}"#, "absolute"),
            (r#"{"rope_parameters": {"rope_type": "yarn", "rope_theta": 7.0}}"#, "yarn"),
        ] {
            let err = read(refused, "new").unwrap_err().to_string();
            assert!(err.contains(field), "{refused}: {err}");
        }
    }
}
