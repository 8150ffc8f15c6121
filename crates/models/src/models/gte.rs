//! Post-norm BERTs with rotary positions and a gated MLP, one definition for two families that differ only in
//! names, biases and defaults:
//! - GTE (gte-base-en-v1.5, ...): Alibaba's `NewModel` (`model_type: "new"`, remote code) and transformers 5's
//!   port (`"gte"`), which saves the same tensor names; `up_gate_proj` holds the up rows, then the gate rows.
//! - NomicBERT (nomic-embed-text-v1.5): `model_type: "nomic_bert"`, its remote code (contrastors) or
//!   transformers 5's port, the same tensor names (`attn.Wqkv`, `mlp.fc11` up, `mlp.fc12` gate, `norm1`,
//!   `norm2`, `emb_ln`); the remote code's config names its fields GPT-2's way (`n_embd`, ...). v2-moe
//!   (nomic-embed-text-v2-moe) makes every `moe_every_n_layers`-th MLP a mixture of experts
//!   (`mlp.router.layer`, `mlp.experts.mlp.{w1,w2}`, `mlp.experts.bias`: [`Moe`]).
//!
//! No position tables: rotary positions (rotate_half) on queries and keys; the activation goes on the gate;
//! optional token types; no final norm.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::Deserialize;

use crate::backend::{Activation, AttentionSpec, Norm, Ops};
use crate::batch::Batch;
use crate::encoder::TokenEncoder;
use crate::error::{weights, ModelError};
use crate::layers::moe::Moe;
use crate::layers::{rotary, Mlp, Positional, Scratch, SelfAttention, TextEmbeddings, Weights};

/// `config.json`, every field resolved with the defaults of the class the checkpoint names: `NewConfig` (the
/// remote code) or transformers' `GteConfig`.
#[derive(Debug, Clone, PartialEq)]
pub struct GteConfig {
    pub family: Family,
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
    /// The remote code's NTK scaling: `(factor, mixed_b)` (gte-large-en-v1.5, gte-multilingual-base).
    pub rope_ntk: Option<(f64, Option<f64>)>,
    pub pack_qkv: bool,
    /// NomicBERT's optional biases (GTE always has them on the projections, never on up/gate).
    pub qkv_bias: bool,
    pub mlp_up_bias: bool,
    pub mlp_down_bias: bool,
    /// The MLP is gated (GTE always; NomicBERT with `swiglu`).
    pub gated: bool,
    /// NomicBERT v2's experts: layer `n` is a mixture when `n % every == 1`.
    pub moe: Option<MoeConfig>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeConfig {
    pub every: usize,
    pub experts: usize,
    pub top_k: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Gte,
    Nomic,
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
    // NomicBERT's remote-code names (its config class subclasses GPT2Config).
    n_embd: Option<usize>,
    n_layer: Option<usize>,
    n_head: Option<usize>,
    n_inner: Option<usize>,
    n_positions: Option<usize>,
    activation_function: Option<String>,
    layer_norm_epsilon: Option<f64>,
    rotary_emb_base: Option<f64>,
    rotary_emb_fraction: Option<f64>,
    rotary_emb_interleaved: Option<bool>,
    rotary_emb_scale_base: Option<f64>,
    rotary_scaling_factor: Option<f64>,
    qkv_proj_bias: Option<bool>,
    mlp_fc1_bias: Option<bool>,
    mlp_fc2_bias: Option<bool>,
    prenorm: Option<bool>,
    use_rms_norm: Option<bool>,
    causal: Option<bool>,
    num_experts: Option<usize>,
    moe_every_n_layers: Option<usize>,
    moe_top_k: Option<usize>,
    moe_normalize_expert_weights: Option<bool>,
    pad_vocab_size_multiple: Option<usize>,
}

impl GteConfig {
    /// Reads `config.json` of `model_type` `new` or `gte`, refusing what Aleph does not compute.
    pub fn read(path: &std::path::Path, model_type: &str) -> Result<Self, ModelError> {
        let f: File = crate::error::read_json(path)?;
        if model_type == "nomic_bert" {
            return Self::nomic(f);
        }
        let native = model_type == "gte";
        let unsupported = |what: String| Err(ModelError::Unsupported(what));
        if let Some(p) = f.position_embedding_type.as_deref().filter(|p| *p != "rope") {
            return unsupported(format!("position_embedding_type `{p}` (only `rope`)"));
        }
        if f.logn_attention_scale == Some(true) {
            return unsupported("logn_attention_scale".into());
        }
        // NewEmbeddings reads `type` and `factor` (and NTK's optional `mixed_b`); any other type raises there.
        let rope_ntk = match f.rope_scaling.as_ref().filter(|s| !s.is_null()) {
            None => None,
            Some(s) => {
                let kind = s.get("type").or_else(|| s.get("rope_type")).and_then(|t| t.as_str());
                let factor = s.get("factor").and_then(|x| x.as_f64());
                match (kind, factor, native) {
                    (Some("ntk"), Some(factor), false) => Some((factor, s.get("mixed_b").and_then(|b| b.as_f64()))),
                    _ => return unsupported(format!("rope_scaling {s} (only the remote code's `ntk` with a factor)")),
                }
            }
        };
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
            family: Family::Gte,
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
            rope_ntk,
            pack_qkv: f.pack_qkv.unwrap_or(true),
            qkv_bias: true,
            mlp_up_bias: false,
            mlp_down_bias: true,
            gated: true,
            moe: None,
        };
        cfg.check()
    }

    /// NomicBERT, from transformers' `NomicBertConfig` names or the remote code's GPT-2 names (whose class
    /// defaults are GPT2Config's, overridden by NomicBertConfig's: rotary base 10000, fraction 0, biases on).
    fn nomic(f: File) -> Result<Self, ModelError> {
        let unsupported = |what: String| Err(ModelError::Unsupported(what));
        let remote = f.n_embd.is_some() || f.activation_function.is_some() || f.rotary_emb_fraction.is_some();
        if remote {
            if f.rotary_emb_fraction != Some(1.0) {
                return unsupported(format!(
                    "NomicBERT rotary_emb_fraction {:?} (only rotary positions on whole heads, 1.0)",
                    f.rotary_emb_fraction.unwrap_or(0.0)
                ));
            }
            if f.rotary_emb_interleaved == Some(true) || f.rotary_emb_scale_base.is_some() {
                return unsupported("NomicBERT interleaved or xPos rotary embeddings".into());
            }
            if f.rotary_scaling_factor.is_some_and(|s| s != 1.0) {
                return unsupported(format!("NomicBERT rotary_scaling_factor {:?}", f.rotary_scaling_factor));
            }
            if f.prenorm == Some(true) || f.use_rms_norm == Some(true) || f.causal == Some(true) {
                return unsupported("NomicBERT with prenorm, RMS norms or causal attention".into());
            }
        }
        // The remote code reads the expert fields only when `moe_every_n_layers` is positive.
        let moe = match f.moe_every_n_layers.filter(|&n| n > 0) {
            None => None,
            Some(every) => {
                let (Some(experts), Some(top_k)) = (f.num_experts, f.moe_top_k) else {
                    return unsupported("NomicBERT experts without num_experts and moe_top_k".into());
                };
                if top_k == 0 || top_k > experts || f.n_inner.is_none() {
                    return unsupported(format!("NomicBERT moe_top_k {top_k} of {experts} experts (n_inner set)"));
                }
                // Only megablocks' path reads it; the remote code's own layer never renormalizes.
                if f.moe_normalize_expert_weights == Some(true) {
                    return unsupported("NomicBERT moe_normalize_expert_weights: true".into());
                }
                Some(MoeConfig { every, experts, top_k })
            }
        };
        let act = f
            .activation_function
            .clone()
            .or(f.hidden_act.clone())
            .unwrap_or_else(|| if remote { "gelu_new" } else { "silu" }.into());
        // The remote code hands its MLPs a function, F.silu for `swiglu` and F.gelu (erf) for anything else
        // but `glu` (a sigmoid gate), so `gelu_new` there is erf GELU too.
        let (gated, hidden_act) = match act.as_str() {
            "swiglu" => (true, "silu".to_string()),
            _ if !remote => (true, act.clone()),
            "glu" => return unsupported("NomicBERT activation_function `glu` (a sigmoid gate)".into()),
            "geglu" => (true, "gelu".to_string()),
            _ => (false, "gelu".to_string()),
        };
        let mut theta = f.rotary_emb_base.unwrap_or(if remote { 10_000.0 } else { 1000.0 });
        if let Some(p) = f.rope_parameters.as_ref().filter(|p| !p.is_null()) {
            let kind = p.get("rope_type").and_then(|t| t.as_str()).unwrap_or("default");
            if kind != "default" {
                return unsupported(format!("rope_type `{kind}` (only the default rotary embedding)"));
            }
            theta = p.get("rope_theta").and_then(|t| t.as_f64()).unwrap_or(theta);
        }
        let hidden = f.n_embd.or(f.hidden_size).unwrap_or(768);
        let bias = |b: Option<bool>| if remote { b.unwrap_or(true) } else { false };
        // The remote embeddings round the vocabulary up to `pad_vocab_size_multiple`.
        let vocab = f.vocab_size.unwrap_or(if remote { 50_257 } else { 30_528 });
        let vocab = vocab.next_multiple_of(f.pad_vocab_size_multiple.filter(|_| remote).unwrap_or(1).max(1));
        GteConfig {
            family: Family::Nomic,
            vocab_size: vocab,
            hidden_size: hidden,
            num_hidden_layers: f.n_layer.or(f.num_hidden_layers).unwrap_or(12),
            num_attention_heads: f.n_head.or(f.num_attention_heads).unwrap_or(12),
            // The remote code's `n_inner` may be absent; the checkpoint's fc11 gives the width (see `load`).
            intermediate_size: f.n_inner.or(f.intermediate_size).unwrap_or(if remote { 0 } else { 3072 }),
            hidden_act,
            max_position_embeddings: f.n_positions.or(f.max_position_embeddings).unwrap_or(if remote {
                1024
            } else {
                2048
            }),
            type_vocab_size: f.type_vocab_size.unwrap_or(2),
            layer_norm_eps: f.layer_norm_epsilon.or(f.layer_norm_eps).unwrap_or(if remote { 1e-5 } else { 1e-12 }),
            rms_norm: false,
            rope_theta: theta,
            rope_ntk: None,
            pack_qkv: true,
            qkv_bias: bias(f.qkv_proj_bias),
            mlp_up_bias: bias(f.mlp_fc1_bias),
            mlp_down_bias: bias(f.mlp_fc2_bias),
            gated,
            moe,
        }
        .check()
    }

    fn check(self) -> Result<Self, ModelError> {
        let (h, heads) = (self.hidden_size, self.num_attention_heads);
        if heads == 0 || !h.is_multiple_of(heads) || !(h / heads).is_multiple_of(2) {
            return Err(ModelError::Unsupported(format!("hidden_size {h} over num_attention_heads {heads}")));
        }
        Ok(self)
    }
}

struct Layer<O: Ops> {
    attention: SelfAttention<O>,
    attn_norm: Norm<O::Param>,
    mlp: FeedForward<O>,
    mlp_norm: Norm<O::Param>,
}

enum FeedForward<O: Ops> {
    Dense(Mlp<O>),
    Experts(Moe<O>),
}

impl<O: Ops> FeedForward<O> {
    fn forward(&self, o: &O, x: &O::T, residual: &O::T, s: &mut Scratch<O>, out: &mut O::T) -> Result<(), ModelError> {
        match self {
            FeedForward::Dense(m) => m.forward(o, x, residual, s, out),
            FeedForward::Experts(m) => m.forward(o, x, residual, s, out),
        }
    }
}

/// NomicBERT v2's experts under `mlp`: `router.layer` `[experts, hidden]`; `experts.mlp.w1` and `w2`, each
/// `[experts · inter, hidden]` with expert `e`'s rows at `e · inter` (`w1` multiplies as a linear layer's
/// weight, `w2` as its transpose); `experts.bias`.
fn load_moe<O: Ops>(
    mlp: &Weights<O>,
    cfg: &MoeConfig,
    h: usize,
    i: usize,
    act: Activation,
) -> Result<Moe<O>, ModelError> {
    let vb = mlp.vb();
    let host = |t: Tensor| t.flatten_all().and_then(|t| t.to_vec1::<f32>()).map_err(weights);
    let (w1, w2) = (vb.get((cfg.experts * i, h), "experts.mlp.w1"), vb.get((cfg.experts * i, h), "experts.mlp.w2"));
    let (w1, w2) = (w1.map_err(weights)?, w2.map_err(weights)?);
    let experts = (0..cfg.experts)
        .map(|e| {
            let up = w1.narrow(0, e * i, i).map_err(weights)?;
            let down = w2.narrow(0, e * i, i).and_then(|t| t.t()?.contiguous()).map_err(weights)?;
            let (pu, pd) = (mlp.pp("experts.mlp.w1").pp(e), mlp.pp("experts.mlp.w2").pp(e));
            Ok((pu.linear_from(up, None)?, pd.linear_from(down, None)?))
        })
        .collect::<Result<Vec<_>, ModelError>>()?;
    Ok(Moe {
        router: host(vb.get((cfg.experts, h), "router.layer.weight").map_err(weights)?)?,
        experts,
        act,
        bias: host(vb.get(h, "experts.bias").map_err(weights)?)?,
        top_k: cfg.top_k,
    })
}

pub struct Gte<O: Ops> {
    embeddings: TextEmbeddings<O>,
    layers: Vec<Layer<O>>,
    head_dim: usize,
    inv_freq: Vec<f32>,
    weight_bytes: usize,
}

impl<O: Ops> Gte<O> {
    /// Loads from weights rooted where `embeddings.*` and `encoder.*` live (see [`root`]).
    pub fn load(w: &Weights<O>, cfg: &GteConfig) -> Result<Self, ModelError> {
        let (h, eps) = (cfg.hidden_size, cfg.layer_norm_eps);
        let start = w.bytes();
        let norm = |w: &Weights<O>| if cfg.rms_norm { w.rms_norm(h, eps, false) } else { w.layer_norm(h, eps) };
        let act = Activation::parse(&cfg.hidden_act)?;
        let spec = AttentionSpec::new(h, cfg.num_attention_heads, false);
        let emb = w.pp("embeddings");
        let nomic = cfg.family == Family::Nomic;
        // The MLP's width, from the checkpoint where the config may not say it (NomicBERT's `n_inner`).
        let up_name = match (nomic, cfg.gated) {
            (true, true) => "encoder.layers.0.mlp.fc11.weight",
            (true, false) => "encoder.layers.0.mlp.fc1.weight",
            (false, _) => "encoder.layer.0.mlp.up_gate_proj.weight",
        };
        let i = match (cfg.intermediate_size, w.vb().get_unchecked(up_name)) {
            (0, Ok(t)) => t.dims2().map_err(weights)?.0 / if nomic { 1 } else { 2 },
            (i, _) => i,
        };
        let layers = (0..cfg.num_hidden_layers)
            .map(|n| {
                let layer = if nomic {
                    let l = w.pp("encoder").pp("layers").pp(n);
                    let (a, mlp) = (l.pp("attn"), l.pp("mlp"));
                    // fc11 is the up (value) projection, fc12 the gate.
                    let ff = if let Some(moe) = cfg.moe.as_ref().filter(|m| n % m.every == 1) {
                        FeedForward::Experts(load_moe(&mlp, moe, h, i, act)?)
                    } else if cfg.gated {
                        FeedForward::Dense(Mlp::gated(
                            mlp.linear_cat(&[("fc12", i), ("fc11", i)], h, cfg.mlp_up_bias)?,
                            mlp.pp("fc2").linear(i, h, cfg.mlp_down_bias)?,
                            act,
                        ))
                    } else {
                        FeedForward::Dense(Mlp::plain(
                            mlp.pp("fc1").linear(h, i, cfg.mlp_up_bias)?,
                            mlp.pp("fc2").linear(i, h, cfg.mlp_down_bias)?,
                            act,
                        ))
                    };
                    Layer {
                        attention: SelfAttention {
                            qk_norm: None,
                            qkv: a.pp("Wqkv").linear(h, 3 * h, cfg.qkv_bias)?,
                            out: a.pp("out_proj").linear(h, h, cfg.qkv_bias)?,
                            spec,
                        },
                        attn_norm: norm(&l.pp("norm1"))?,
                        mlp: ff,
                        mlp_norm: norm(&l.pp("norm2"))?,
                    }
                } else {
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
                    Layer {
                        attention: SelfAttention { qk_norm: None, qkv, out: a.pp("o_proj").linear(h, h, true)?, spec },
                        attn_norm: norm(&l.pp("attn_ln"))?,
                        mlp: FeedForward::Dense(Mlp::gated(
                            mlp.pp("up_gate_proj").linear_from(gate_up, None)?,
                            mlp.pp("down_proj").linear(i, h, true)?,
                            act,
                        )),
                        mlp_norm: norm(&l.pp("mlp_ln"))?,
                    }
                };
                Ok(layer)
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let head_dim = h / cfg.num_attention_heads;
        let emb_norm = if nomic { w.pp("emb_ln") } else { emb.pp("LayerNorm") }.layer_norm(h, eps)?;
        let embeddings = TextEmbeddings::bert(&emb, cfg.vocab_size, h, None, cfg.type_vocab_size, emb_norm)?;
        Ok(Gte {
            embeddings: embeddings.with_max_len(cfg.max_position_embeddings),
            layers,
            head_dim,
            inv_freq: match cfg.rope_ntk {
                Some((factor, mixed_b)) => rotary::ntk_inv_freq(cfg.rope_theta, head_dim, factor, mixed_b),
                None => rotary::inv_freq(cfg.rope_theta, head_dim),
            },
            weight_bytes: w.bytes() - start,
        })
    }

    /// Every real token's final hidden state, packed like the batch: `[tokens, hidden]`.
    pub fn forward(&self, o: &O, batch: &Batch) -> Result<O::T, ModelError> {
        let tokens = batch.total_tokens();
        let positions: Vec<u32> = (0..batch.len()).flat_map(|s| 0..batch.seq_len(s) as u32).collect();
        let (cos, sin) = rotary::tables(o, &rotary::angles(&self.inv_freq, &positions), tokens, self.head_dim / 2)?;
        let mut x = self.embeddings.forward(o, batch)?;
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

impl<O: Ops> TokenEncoder<O> for Gte<O> {
    fn hidden_size(&self) -> usize {
        self.embeddings.hidden_size()
    }

    fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    fn forward(&self, o: &O, batch: &Batch) -> Result<O::T, ModelError> {
        Gte::forward(self, o, batch)
    }
}

/// Task checkpoints nest the encoder under `new.` (GTE's remote code), `gte.` or `nomic_bert.` (transformers'
/// ports).
pub fn root(vb: VarBuilder) -> VarBuilder {
    for prefix in ["new", "gte", "nomic_bert"] {
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
        let ntk = read(r#"{"rope_scaling": {"type": "ntk", "factor": 8.0}}"#, "new").unwrap();
        assert_eq!(ntk.rope_ntk, Some((8.0, None)));
        for (refused, field) in [
            (r#"{"rope_scaling": {"type": "linear", "factor": 2.0}}"#, "rope_scaling"),
            (r#"{"rope_scaling": {"type": "ntk"}}"#, "rope_scaling"),
            (r#"{"logn_attention_scale": true}"#, "logn"),
            (r#"{"position_embedding_type": "absolute"}"#, "absolute"),
            (r#"{"rope_parameters": {"rope_type": "yarn", "rope_theta": 7.0}}"#, "yarn"),
        ] {
            let err = read(refused, "new").unwrap_err().to_string();
            assert!(err.contains(field), "{refused}: {err}");
        }
    }

    #[test]
    fn nomic_reads_the_remote_codes_names_and_refuses_what_it_does_not_run() {
        let v15 = r#"{"n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 8192, "activation_function": "swiglu",
                      "rotary_emb_fraction": 1.0, "rotary_emb_base": 1000, "qkv_proj_bias": false,
                      "mlp_fc1_bias": false, "mlp_fc2_bias": false, "layer_norm_epsilon": 1e-12, "vocab_size": 30528}"#;
        let c = read(v15, "nomic_bert").unwrap();
        assert_eq!(
            (c.hidden_size, c.num_hidden_layers, c.max_position_embeddings, c.rope_theta),
            (768, 12, 8192, 1000.0)
        );
        assert!(c.gated && !c.qkv_bias && !c.mlp_up_bias && c.hidden_act == "silu");
        // No n_inner: the width comes from the checkpoint at load.
        assert_eq!(c.intermediate_size, 0);
        // v2's experts: read only with moe_every_n_layers, as the remote code reads them.
        let moe = r#"{"activation_function": "gelu", "rotary_emb_fraction": 1.0, "n_inner": 3072, "num_experts": 8"#;
        assert_eq!(read(&format!("{moe}}}"), "nomic_bert").unwrap().moe, None);
        let c = read(&format!(r#"{moe}, "moe_every_n_layers": 2, "moe_top_k": 2}}"#), "nomic_bert").unwrap();
        assert_eq!(c.moe, Some(MoeConfig { every: 2, experts: 8, top_k: 2 }));
        // transformers' own NomicBertConfig names and defaults.
        let native = read("{}", "nomic_bert").unwrap();
        assert_eq!((native.rope_theta, native.intermediate_size, native.layer_norm_eps), (1000.0, 3072, 1e-12));
        for (refused, what) in [
            (r#"{"activation_function": "swiglu", "rotary_emb_fraction": 0.5}"#, "rotary_emb_fraction"),
            (
                r#"{"activation_function": "swiglu", "rotary_emb_fraction": 1.0, "rotary_emb_interleaved": true}"#,
                "interleaved",
            ),
            (
                r#"{"activation_function": "swiglu", "rotary_emb_fraction": 1.0, "rotary_scaling_factor": 2.0}"#,
                "scaling",
            ),
            (
                r#"{"activation_function": "gelu", "rotary_emb_fraction": 1.0, "moe_every_n_layers": 2, "num_experts": 8}"#,
                "moe_top_k",
            ),
            (r#"{"activation_function": "swiglu", "rotary_emb_fraction": 1.0, "prenorm": true}"#, "prenorm"),
        ] {
            let err = read(refused, "nomic_bert").unwrap_err().to_string();
            assert!(err.contains(what), "{refused}: {err}");
        }
    }
}
