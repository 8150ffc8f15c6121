//! Qwen3 (`Qwen3Model`, or the model inside `Qwen3ForCausalLM`) as Qwen3-Embedding runs it: the
//! Llama-style decoder (`layers::decoder`) with per-head RMS norms on queries and keys, causal attention,
//! rotary positions; the sentence-transformers files pool the last token and normalize.

use serde::Deserialize;

use crate::backend::Activation;
use crate::error::ModelError;
use crate::layers::decoder::DecoderSpec;
use crate::tokenizer::PairTemplate;

/// `Qwen3Config`; hub configs omit what equals the class defaults, so every field has them.
#[derive(Debug, Clone, Deserialize)]
pub struct Qwen3Config {
    #[serde(default = "crate::config::n::<151_936>")]
    pub vocab_size: usize,
    #[serde(default = "crate::config::n::<4096>")]
    pub hidden_size: usize,
    #[serde(default = "crate::config::n::<22_016>")]
    pub intermediate_size: usize,
    #[serde(default = "crate::config::n::<32>")]
    pub num_hidden_layers: usize,
    #[serde(default = "crate::config::n::<32>")]
    pub num_attention_heads: usize,
    /// `None` (or absent) means as many as the query heads.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    #[serde(default = "crate::config::n::<128>")]
    pub head_dim: usize,
    #[serde(default = "silu")]
    pub hidden_act: String,
    #[serde(default = "crate::config::n::<32_768>")]
    pub max_position_embeddings: usize,
    #[serde(default = "eps")]
    pub rms_norm_eps: f64,
    #[serde(default)]
    pub attention_bias: bool,
    /// transformers 4's rotary base; 5 keeps it in `rope_parameters`.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_parameters: Option<serde_json::Value>,
    /// transformers 4's name for a scaled rotary variant.
    #[serde(default)]
    pub rope_scaling: Option<serde_json::Value>,
    #[serde(default)]
    pub use_sliding_window: bool,
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
}

fn silu() -> String {
    "silu".into()
}

fn eps() -> f64 {
    1e-6
}

impl Qwen3Config {
    /// The decoder this config describes, refusing what Aleph does not run (naming the field).
    pub fn decoder(&self) -> Result<DecoderSpec, ModelError> {
        let unsupported = |what: String| Err(ModelError::Unsupported(what));
        let sliding = self.layer_types.iter().flatten().any(|t| t != "full_attention");
        if self.use_sliding_window || sliding {
            return unsupported("Qwen3 sliding-window attention (use_sliding_window / layer_types)".into());
        }
        let mut theta = self.rope_theta.unwrap_or(10_000.0);
        for rope in [&self.rope_parameters, &self.rope_scaling].into_iter().flatten().filter(|v| !v.is_null()) {
            let kind = rope.get("rope_type").or_else(|| rope.get("type")).and_then(|t| t.as_str());
            if kind.is_some_and(|k| k != "default") {
                return unsupported(format!("Qwen3 rope type `{}` (only the default rotary embedding)", rope));
            }
            theta = rope.get("rope_theta").and_then(|t| t.as_f64()).unwrap_or(theta);
        }
        Ok(DecoderSpec {
            vocab: self.vocab_size,
            hidden: self.hidden_size,
            intermediate: self.intermediate_size,
            layers: self.num_hidden_layers,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads.unwrap_or(self.num_attention_heads),
            head_dim: self.head_dim,
            act: Activation::parse(&self.hidden_act)?,
            qkv_bias: self.attention_bias,
            eps: self.rms_norm_eps,
            norm_plus_one: false,
            qk_norm: true,
            causal: true,
            window: None,
            rope_theta: theta,
            embed_scale: None,
            attn_scale: None,
            sandwich: false,
            local: None,
        })
    }
}

/// Qwen3-Reranker's default instruction (also a template file's, where `--rerank-instruction` gives none).
pub const DEFAULT_INSTRUCTION: &str = "Given a web search query, retrieve relevant passages that answer the query";

/// Qwen3-Reranker's prompt, as its model card builds it (with `instruction`, or the card's default).
pub fn reranker_template(instruction: Option<String>) -> PairTemplate {
    PairTemplate {
        prefix: "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the \
                 Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"
            .into(),
        pieces: vec!["<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}".into()],
        suffix: "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n".into(),
        instruction: Some(instruction.unwrap_or_else(|| DEFAULT_INSTRUCTION.into())),
        instruction_format: "{instruction}".into(),
        special_tokens: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_rope_formats_and_refuses_what_it_does_not_run() {
        let cfg = |json: &str| serde_json::from_str::<Qwen3Config>(json).unwrap();
        assert_eq!(cfg("{}").decoder().unwrap().rope_theta, 10_000.0);
        assert_eq!(cfg(r#"{"rope_theta": 1000000}"#).decoder().unwrap().rope_theta, 1e6);
        let v5 = cfg(r#"{"rope_parameters": {"rope_type": "default", "rope_theta": 1000000}}"#).decoder().unwrap();
        assert_eq!((v5.rope_theta, v5.kv_heads, v5.qk_norm), (1e6, 32, true));
        for bad in [
            r#"{"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}"#,
            r#"{"use_sliding_window": true}"#,
            r#"{"layer_types": ["full_attention", "sliding_attention"]}"#,
        ] {
            assert!(cfg(bad).decoder().is_err(), "{bad}");
        }
    }
}
