//! ModernBERT (gte-modernbert-base, modernbert-embed, gte-reranker-modernbert), one definition over [`Ops`]:
//! pre-norm layers without biases, rotary positions with one base for global layers and another for local
//! ones, local layers attending within a sliding window (`|i − j| ≤ local_attention / 2`), every
//! `global_attn_every_n_layers`-th layer global, and a GeGLU MLP. The first layer has no attention norm (the
//! embeddings' norm precedes it).

use candle_nn::VarBuilder;
use serde::Deserialize;

use crate::backend::{Activation, AttentionSpec, Norm, Ops};
use crate::batch::Batch;
use crate::encoder::TokenEncoder;
use crate::error::ModelError;
use crate::layers::{rotary, Mlp, Positional, Scratch, SelfAttention, TextEmbeddings, Weights};

/// `config.json` as transformers 4.x and 5.x write it; absent fields take `ModernBertConfig`'s defaults.
#[derive(Debug, Clone, Deserialize)]
pub struct ModernBertConfig {
    #[serde(default = "crate::config::n::<50368>")]
    pub vocab_size: usize,
    #[serde(default = "crate::config::n::<768>")]
    pub hidden_size: usize,
    #[serde(default = "crate::config::n::<1152>")]
    pub intermediate_size: usize,
    #[serde(default = "crate::config::n::<22>")]
    pub num_hidden_layers: usize,
    #[serde(default = "crate::config::n::<12>")]
    pub num_attention_heads: usize,
    #[serde(default = "gelu")]
    pub hidden_activation: String,
    #[serde(default = "crate::config::n::<8192>")]
    pub max_position_embeddings: usize,
    #[serde(default = "eps")]
    pub norm_eps: f64,
    #[serde(default)]
    pub norm_bias: bool,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub mlp_bias: bool,
    #[serde(default = "crate::config::n::<128>")]
    pub local_attention: usize,
    /// transformers 4.x: every n-th layer (from 0) is global.
    #[serde(default = "crate::config::n::<3>")]
    pub global_attn_every_n_layers: usize,
    /// transformers 5.x: `full_attention` or `sliding_attention` per layer (wins over the above).
    pub layer_types: Option<Vec<String>>,
    /// transformers 4.x's rotary bases; `local_rope_theta: null` means the global one.
    #[serde(default = "global_theta")]
    pub global_rope_theta: f64,
    #[serde(default = "local_theta", deserialize_with = "nullable")]
    pub local_rope_theta: Option<f64>,
    /// transformers 5.x: `{full_attention: {rope_theta, rope_type}, sliding_attention: {...}}`.
    pub rope_parameters: Option<std::collections::BTreeMap<String, RopeParameters>>,
    pub rope_scaling: Option<serde_json::Value>,
    #[serde(default = "cls")]
    pub classifier_pooling: String,
    #[serde(default)]
    pub classifier_bias: bool,
    #[serde(default = "gelu")]
    pub classifier_activation: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RopeParameters {
    pub rope_theta: Option<f64>,
    #[serde(default = "default_rope")]
    pub rope_type: String,
}

fn gelu() -> String {
    "gelu".into()
}
fn cls() -> String {
    "cls".into()
}
fn default_rope() -> String {
    "default".into()
}
fn eps() -> f64 {
    1e-5
}
fn global_theta() -> f64 {
    160_000.0
}
fn local_theta() -> Option<f64> {
    Some(10_000.0)
}
fn nullable<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Option::<f64>::deserialize(d)
}

impl ModernBertConfig {
    /// Whether layer `n` attends globally.
    pub fn global(&self, n: usize) -> bool {
        match &self.layer_types {
            Some(types) => types.get(n).is_none_or(|t| t != "sliding_attention"),
            None => n.is_multiple_of(self.global_attn_every_n_layers.max(1)),
        }
    }

    /// The rotary base of global (`true`) or local layers, and the rotary type, from whichever fields the
    /// config has.
    fn rope(&self, global: bool) -> (f64, String) {
        let key = if global { "full_attention" } else { "sliding_attention" };
        let legacy =
            if global { self.global_rope_theta } else { self.local_rope_theta.unwrap_or(self.global_rope_theta) };
        match self.rope_parameters.as_ref().and_then(|p| p.get(key)) {
            Some(p) => (p.rope_theta.unwrap_or(legacy), p.rope_type.clone()),
            None => (legacy, "default".into()),
        }
    }

    /// What no backend implements, refused at load naming the field.
    pub fn check(&self) -> Result<(), ModelError> {
        let (h, heads) = (self.hidden_size, self.num_attention_heads);
        if heads == 0 || !h.is_multiple_of(heads) || !(h / heads).is_multiple_of(2) {
            return Err(ModelError::Unsupported(format!("hidden_size {h} over num_attention_heads {heads}")));
        }
        for global in [true, false] {
            let (_, kind) = self.rope(global);
            if kind != "default" {
                return Err(ModelError::Unsupported(format!("rope_type `{kind}` (only the default rotary embedding)")));
            }
        }
        if let Some(scaling) = self.rope_scaling.as_ref().filter(|s| !s.is_null()) {
            let kind = scaling.get("rope_type").or_else(|| scaling.get("type")).and_then(|t| t.as_str());
            if kind != Some("default") {
                return Err(ModelError::Unsupported(format!(
                    "rope_scaling {scaling} (only the default rotary embedding)"
                )));
            }
        }
        if !matches!(self.classifier_pooling.as_str(), "cls" | "mean") {
            return Err(ModelError::Unsupported(format!("classifier_pooling `{}`", self.classifier_pooling)));
        }
        Ok(())
    }
}

struct Layer<O: Ops> {
    /// None in the first layer.
    attn_norm: Option<Norm<O::Param>>,
    attention: SelfAttention<O>,
    mlp_norm: Norm<O::Param>,
    mlp: Mlp<O>,
    global: bool,
}

pub struct ModernBert<O: Ops> {
    embeddings: TextEmbeddings<O>,
    layers: Vec<Layer<O>>,
    final_norm: Norm<O::Param>,
    head_dim: usize,
    /// Inverse rotary frequencies of global and local layers.
    global_freq: Vec<f32>,
    local_freq: Vec<f32>,
    weight_bytes: usize,
}

impl<O: Ops> ModernBert<O> {
    /// Loads from weights rooted where `embeddings.*` and `layers.*` live (see [`root`]).
    pub fn load(w: &Weights<O>, cfg: &ModernBertConfig) -> Result<Self, ModelError> {
        cfg.check()?;
        let (h, i, eps) = (cfg.hidden_size, cfg.intermediate_size, cfg.norm_eps);
        let start = w.bytes();
        let norm = |w: &Weights<O>| -> Result<Norm<O::Param>, ModelError> {
            if cfg.norm_bias {
                w.layer_norm(h, eps)
            } else {
                Ok(Norm {
                    kind: crate::backend::NormKind::Layer,
                    weight: w.param(h, "weight")?,
                    bias: None,
                    eps: eps as f32,
                })
            }
        };
        let act = Activation::parse(&cfg.hidden_activation)?;
        let base = AttentionSpec::new(h, cfg.num_attention_heads, false);
        let layers = (0..cfg.num_hidden_layers)
            .map(|n| {
                let l = w.pp("layers").pp(n);
                let global = cfg.global(n);
                Ok(Layer {
                    attn_norm: if n == 0 { None } else { Some(norm(&l.pp("attn_norm"))?) },
                    attention: SelfAttention {
                        qk_norm: None,
                        qkv: l.pp("attn").pp("Wqkv").linear(h, 3 * h, cfg.attention_bias)?,
                        out: l.pp("attn").pp("Wo").linear(h, h, cfg.attention_bias)?,
                        spec: base.windowed((!global).then_some(cfg.local_attention / 2)),
                    },
                    mlp_norm: norm(&l.pp("mlp_norm"))?,
                    mlp: Mlp::gated(
                        l.pp("mlp").pp("Wi").linear(h, 2 * i, cfg.mlp_bias)?,
                        l.pp("mlp").pp("Wo").linear(i, h, cfg.mlp_bias)?,
                        act,
                    ),
                    global,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let head_dim = h / cfg.num_attention_heads;
        Ok(ModernBert {
            embeddings: TextEmbeddings::words(&w.pp("embeddings").pp("tok_embeddings"), cfg.vocab_size, h)?
                .with_norm(norm(&w.pp("embeddings").pp("norm"))?)
                .with_max_len(cfg.max_position_embeddings),
            layers,
            final_norm: norm(&w.pp("final_norm"))?,
            head_dim,
            global_freq: rotary::inv_freq(cfg.rope(true).0, head_dim),
            local_freq: rotary::inv_freq(cfg.rope(false).0, head_dim),
            weight_bytes: w.bytes() - start,
        })
    }

    /// Every real token's final hidden state, packed like the batch: `[tokens, hidden]`.
    pub fn forward(&self, o: &O, batch: &Batch) -> Result<O::T, ModelError> {
        let tokens = batch.total_tokens();
        let positions: Vec<u32> = (0..batch.len()).flat_map(|s| 0..batch.seq_len(s) as u32).collect();
        let cols = self.head_dim / 2;
        let (gcos, gsin) = rotary::tables(o, &rotary::angles(&self.global_freq, &positions), tokens, cols)?;
        let (lcos, lsin) = rotary::tables(o, &rotary::angles(&self.local_freq, &positions), tokens, cols)?;
        let mut x = self.embeddings.forward(o, batch)?;
        let seqs = o.seqs(&batch.cu_seqlens)?;
        let mut scratch = Scratch::new(o)?;
        let (mut normed, mut mid) = (o.empty()?, o.empty()?);
        for l in &self.layers {
            let input = match &l.attn_norm {
                Some(norm) => {
                    o.norm_to(&x, norm, &mut normed)?;
                    &normed
                }
                None => &x,
            };
            let positional = if l.global { Positional::Rotary(&gcos, &gsin) } else { Positional::Rotary(&lcos, &lsin) };
            l.attention.forward(o, input, &x, &seqs, positional, &mut scratch, &mut mid)?;
            o.norm_to(&mid, &l.mlp_norm, &mut normed)?;
            l.mlp.forward(o, &normed, &mid, &mut scratch, &mut x)?;
        }
        o.norm(&mut x, &self.final_norm)?;
        Ok(x)
    }
}

impl<O: Ops> TokenEncoder<O> for ModernBert<O> {
    fn hidden_size(&self) -> usize {
        self.embeddings.hidden_size()
    }

    fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    fn forward(&self, o: &O, batch: &Batch) -> Result<O::T, ModelError> {
        ModernBert::forward(self, o, batch)
    }
}

/// Task checkpoints nest the encoder under `model.`; a bare `ModernBertModel` does not.
pub fn root(vb: VarBuilder) -> VarBuilder {
    if vb.contains_tensor("model.embeddings.tok_embeddings.weight") {
        vb.pp("model")
    } else {
        vb
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> ModernBertConfig {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn reads_layer_types_and_rotary_bases_of_both_config_formats() {
        // transformers 4.x (answerdotai/ModernBERT-base's keys): every third layer global.
        let legacy = parse(
            r#"{"num_hidden_layers": 4, "global_attn_every_n_layers": 3, "global_rope_theta": 160000.0,
                               "local_rope_theta": 10000.0}"#,
        );
        assert_eq!((0..4).map(|n| legacy.global(n)).collect::<Vec<_>>(), [true, false, false, true]);
        assert_eq!((legacy.rope(true).0, legacy.rope(false).0), (160000.0, 10000.0));
        // Nothing said: ModernBertConfig's defaults.
        let bare = parse("{}");
        assert_eq!((bare.rope(true).0, bare.rope(false).0, bare.local_attention), (160000.0, 10000.0, 128));
        assert!(bare.global(0) && !bare.global(1) && bare.global(3));
        // A null local base: transformers 4.x used the global one for local layers too.
        assert_eq!(parse(r#"{"global_rope_theta": 80000.0, "local_rope_theta": null}"#).rope(false).0, 80000.0);
        // transformers 5.x: per-layer types and rope parameters win.
        let new = parse(
            r#"{"layer_types": ["sliding_attention", "full_attention"], "global_attn_every_n_layers": 3,
                "rope_parameters": {"full_attention": {"rope_theta": 5.0, "rope_type": "default"},
                                    "sliding_attention": {"rope_theta": 7.0, "rope_type": "default"}}}"#,
        );
        assert!(!new.global(0) && new.global(1));
        assert_eq!((new.rope(true).0, new.rope(false).0), (5.0, 7.0));
        // Scaled rotary embeddings are refused, naming them.
        let scaled = parse(r#"{"rope_parameters": {"full_attention": {"rope_theta": 5.0, "rope_type": "yarn"}}}"#);
        assert!(scaled.check().unwrap_err().to_string().contains("yarn"));
        assert!(parse(r#"{"rope_scaling": {"rope_type": "linear", "factor": 2.0}}"#).check().is_err());
        assert!(parse(r#"{"classifier_pooling": "max"}"#).check().is_err());
    }
}
