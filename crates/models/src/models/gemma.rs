//! The Gemma decoder (`GemmaModel`), as PaliGemma runs it for retrieval: token embeddings scaled by
//! √hidden, RMS norms that scale by `1 + w`, rotary positions, grouped-query attention, a gated MLP and a
//! final norm. ColPali runs it attending in both directions: its prompts are all prefix (PaliGemma's prefix
//! attends bidirectionally).

use serde::Deserialize;

use crate::backend::Activation;
use crate::error::ModelError;
use crate::layers::decoder::DecoderSpec;

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

impl GemmaConfig {
    /// The decoder this config describes; `causal`: how it attends.
    pub fn decoder(&self, causal: bool) -> Result<DecoderSpec, ModelError> {
        let h = self.hidden_size;
        Ok(DecoderSpec {
            vocab: self.vocab_size,
            hidden: h,
            intermediate: self.intermediate_size,
            layers: self.num_hidden_layers,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            act: self.activation()?,
            qkv_bias: false,
            eps: self.rms_norm_eps,
            qk_norm: false,
            norm_plus_one: true,
            causal,
            window: None,
            rope_theta: self.theta()?,
            embed_scale: Some((h as f32).sqrt()),
            attn_scale: None,
            sandwich: false,
            local: None,
        })
    }
}
