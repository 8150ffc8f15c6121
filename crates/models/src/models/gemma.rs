//! The Gemma decoder (`GemmaModel`), as PaliGemma runs it for retrieval: token embeddings scaled by
//! √hidden, RMS norms that scale by `1 + w`, rotary positions, grouped-query attention, a gated MLP and a
//! final norm. ColPali runs it attending in both directions: its prompts are all prefix (PaliGemma's prefix
//! attends bidirectionally).

use serde::Deserialize;

use crate::backend::{Activation, Norm, Ops};
use crate::error::ModelError;
use crate::layers::block::{pre_norm_stack, PreNormLayer};
use crate::layers::decoder::{load_decoder_layers, DecoderSpec};
use crate::layers::rotary::{angles, inv_freq, tables};
use crate::layers::Positional;
use crate::layers::Weights;

/// `GemmaConfig`; hub configs omit what equals the class defaults, so every field has them.
#[derive(Debug, Clone, Deserialize)]
pub struct GemmaConfig {
    #[serde(default = "crate::config::n::<256_000>")]
    pub vocab_size: usize,
    #[serde(default = "crate::config::n::<3072>")]
    pub hidden_size: usize,
    #[serde(default = "crate::config::n::<24_576>")]
    pub intermediate_size: usize,
    #[serde(default = "crate::config::n::<28>")]
    pub num_hidden_layers: usize,
    #[serde(default = "crate::config::n::<16>")]
    pub num_attention_heads: usize,
    #[serde(default = "crate::config::n::<16>")]
    pub num_key_value_heads: usize,
    #[serde(default = "crate::config::n::<256>")]
    pub head_dim: usize,
    /// Older configs name the MLP's activation here (and leave `hidden_act` at a stale `gelu`).
    #[serde(default)]
    pub hidden_activation: Option<String>,
    #[serde(default)]
    pub hidden_act: Option<String>,
    #[serde(default = "crate::config::n::<8192>")]
    pub max_position_embeddings: usize,
    #[serde(default = "eps")]
    pub rms_norm_eps: f64,
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_parameters: Option<RopeParameters>,
    /// transformers 4's name for a RoPE variant; only plain RoPE is implemented.
    #[serde(default)]
    pub rope_scaling: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RopeParameters {
    pub rope_theta: Option<f64>,
    pub rope_type: Option<String>,
}

fn eps() -> f64 {
    1e-6
}

impl GemmaConfig {
    fn theta(&self) -> Result<f64, ModelError> {
        if let Some(kind) = self.rope_parameters.as_ref().and_then(|r| r.rope_type.as_deref()) {
            if kind != "default" {
                return Err(ModelError::Unsupported(format!("Gemma rope_type `{kind}`")));
            }
        }
        if let Some(scaling) = self.rope_scaling.as_ref().filter(|v| !v.is_null()) {
            let kind = scaling.get("rope_type").or_else(|| scaling.get("type")).and_then(|t| t.as_str());
            if kind != Some("default") {
                return Err(ModelError::Unsupported(format!("Gemma rope_scaling `{scaling}` (only plain RoPE)")));
            }
        }
        Ok(self.rope_parameters.as_ref().and_then(|r| r.rope_theta).or(self.rope_theta).unwrap_or(10_000.0))
    }

    fn activation(&self) -> Result<Activation, ModelError> {
        let name = self.hidden_activation.as_deref().or(self.hidden_act.as_deref()).unwrap_or("gelu_pytorch_tanh");
        Activation::parse(name)
    }
}

pub struct Gemma<O: Ops> {
    embed: O::Param,
    layers: Vec<PreNormLayer<O>>,
    norm: Norm<O::Param>,
    hidden: usize,
    vocab: usize,
    /// `1 / θ^(2j / head_dim)`, as transformers computes it in f32.
    inv_freq: Vec<f32>,
}

impl<O: Ops> Gemma<O> {
    /// `w`: the decoder's root (holding `embed_tokens`, `layers`, `norm`); `causal`: how it attends.
    pub fn load(w: &Weights<O>, cfg: &GemmaConfig, causal: bool) -> Result<Self, ModelError> {
        let (h, hd) = (cfg.hidden_size, cfg.head_dim);
        let spec = DecoderSpec {
            hidden: h,
            intermediate: cfg.intermediate_size,
            layers: cfg.num_hidden_layers,
            heads: cfg.num_attention_heads,
            kv_heads: cfg.num_key_value_heads,
            head_dim: hd,
            act: cfg.activation()?,
            qkv_bias: false,
            eps: cfg.rms_norm_eps,
            norm_plus_one: true,
            causal,
        };
        spec.check("Gemma")?;
        let theta = cfg.theta()?;
        // Embeddings are scaled by √hidden, rounded to f32 first as transformers does; folded into the table.
        let table = w.vb().pp("embed_tokens").get((cfg.vocab_size, h), "weight").map_err(crate::error::weights)?;
        let table = (table * (h as f32).sqrt() as f64).map_err(crate::error::weights)?;
        Ok(Gemma {
            embed: w.param_from(table)?,
            layers: load_decoder_layers(w, &spec)?,
            norm: w.pp("norm").rms_norm(h, cfg.rms_norm_eps, true)?,
            hidden: h,
            vocab: cfg.vocab_size,
            inv_freq: inv_freq(theta, hd),
        })
    }

    pub fn hidden_size(&self) -> usize {
        self.hidden
    }

    /// Scaled token embeddings, `[ids, hidden]`.
    pub fn embed(&self, o: &O, ids: &[u32]) -> Result<O::T, ModelError> {
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= self.vocab) {
            return Err(ModelError::Forward(format!("token id {id} is outside the vocabulary")));
        }
        let mut x = o.empty()?;
        o.embed(&mut x, self.hidden, &[(&self.embed, ids)])?;
        Ok(x)
    }

    /// Final states of packed input embeddings `x` (`[tokens, hidden]`, sequences as `seqs`), each row at
    /// its position in `positions`.
    pub fn forward(&self, o: &O, x: &mut O::T, seqs: &O::Seqs, positions: &[u32]) -> Result<(), ModelError> {
        let (cos, sin) = tables(o, &angles(&self.inv_freq, positions), positions.len(), self.inv_freq.len())?;
        pre_norm_stack(o, &self.layers, x, seqs, Positional::Rotary(&cos, &sin))?;
        o.norm(x, &self.norm)
    }
}
