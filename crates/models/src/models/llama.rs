//! The Llama-style decoders causal LLM embedders and rerankers are built on, as one config reader over
//! `layers::decoder`: Llama (`llama`), Mistral (`mistral`: e5-mistral-7b-instruct, SFR-Embedding-Mistral; every
//! layer attends within a sliding window), Qwen2 (`qwen2`: biases on q, k and v; mxbai-rerank-v2) and Qwen3
//! (`qwen3`: per-head query/key norms; Qwen3-Embedding and Qwen3-Reranker). They differ in defaults, biases,
//! norms and windows only; the sentence-transformers files pool the last token. `is_causal: false` in the config
//! makes them bidirectional (gte-Qwen2-instruct). Checkpoints that ship other modeling code are refused by the
//! loader's remote-code check.

use serde::Deserialize;

use crate::backend::Activation;
use crate::error::ModelError;
use crate::layers::decoder::DecoderSpec;
use crate::tokenizer::PairTemplate;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Llama,
    Mistral,
    Qwen2,
    Qwen3,
    /// Qwen3-VL's language model (`text_config` of a `qwen3_vl` checkpoint): Qwen3's layers with their own
    /// defaults. Its multimodal rotary embedding gives text tokens one position on all three axes, which is
    /// the plain rotary embedding.
    Qwen3Vl,
}

impl Family {
    pub fn from_model_type(model_type: &str) -> Option<Self> {
        match model_type {
            "llama" => Some(Family::Llama),
            "mistral" => Some(Family::Mistral),
            "qwen2" => Some(Family::Qwen2),
            "qwen3" => Some(Family::Qwen3),
            _ => None,
        }
    }

    /// Qwen3's per-head query and key norms (and its head width of 128 by default).
    fn qk_norm(self) -> bool {
        matches!(self, Family::Qwen3 | Family::Qwen3Vl)
    }

    pub fn name(self) -> &'static str {
        match self {
            Family::Llama => "Llama",
            Family::Mistral => "Mistral",
            Family::Qwen2 => "Qwen2",
            Family::Qwen3 => "Qwen3",
            Family::Qwen3Vl => "Qwen3-VL",
        }
    }
}

/// `config.json` as written; what it omits is the class default of its family (see [`LlamaConfig::read`]).
#[derive(Debug, Clone, Default, Deserialize)]
struct File {
    vocab_size: Option<usize>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    hidden_act: Option<String>,
    max_position_embeddings: Option<usize>,
    rms_norm_eps: Option<f64>,
    rope_theta: Option<f64>,
    rope_parameters: Option<serde_json::Value>,
    rope_scaling: Option<serde_json::Value>,
    /// Mistral's (4096 by default, on every layer; `null` for none) and Qwen2's (with `use_sliding_window`).
    #[serde(default, deserialize_with = "present")]
    sliding_window: Option<Option<usize>>,
    use_sliding_window: Option<bool>,
    layer_types: Option<Vec<String>>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    /// `false` makes every layer attend both ways: transformers (5.5 on) builds a bidirectional mask for a config
    /// that says so, and gte-Qwen2-instruct's own modeling code reads the same field.
    is_causal: Option<bool>,
}

/// Tells an omitted `sliding_window` (`None`: the class default) from an explicit `null` (`Some(None)`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<usize>>, D::Error> {
    Option::<usize>::deserialize(d).map(Some)
}

/// A resolved config: the decoder and its longest input.
#[derive(Debug, Clone)]
pub struct LlamaConfig {
    pub family: Family,
    pub spec: DecoderSpec,
    pub max_position_embeddings: usize,
}

impl LlamaConfig {
    /// Reads `config.json` of `family`, refusing what Aleph does not run (naming the field).
    pub fn read(path: &std::path::Path, family: Family) -> Result<Self, ModelError> {
        let f: File = crate::error::read_json(path)?;
        Self::from_file(f, family)
    }

    /// A config nested in another (`text_config` of a `qwen3_vl` checkpoint); `null` or absent is every default.
    pub fn from_value(
        path: &std::path::Path,
        value: Option<&serde_json::Value>,
        family: Family,
    ) -> Result<Self, ModelError> {
        let f = match value.filter(|v| !v.is_null()) {
            Some(v) => File::deserialize(v)
                .map_err(|e| ModelError::BadFile { path: path.to_path_buf(), reason: format!("text_config: {e}") })?,
            None => File::default(),
        };
        Self::from_file(f, family)
    }

    fn from_file(f: File, family: Family) -> Result<Self, ModelError> {
        let name = family.name();
        let unsupported = |what: String| Err(ModelError::Unsupported(format!("{name} {what}")));
        // (vocab, hidden, intermediate, kv heads, max positions) as each class's __init__ has them.
        let (vocab, hidden, inter, kv, positions) = match family {
            Family::Llama => (32_000, 4096, 11_008, None, 2048),
            Family::Mistral => (32_000, 4096, 14_336, Some(8), 4096 * 32),
            Family::Qwen2 | Family::Qwen3 => (151_936, 4096, 22_016, Some(32), 32_768),
            Family::Qwen3Vl => (151_936, 4096, 22_016, Some(32), 128_000),
        };
        let heads = f.num_attention_heads.unwrap_or(32);
        let hidden = f.hidden_size.unwrap_or(hidden);
        if f.attention_bias == Some(true) || f.mlp_bias == Some(true) {
            return unsupported("with attention_bias or mlp_bias (biases on the output and MLP projections)".into());
        }
        if f.layer_types.iter().flatten().any(|t| t != "full_attention") {
            return unsupported("layer_types other than full_attention (sliding-window layers)".into());
        }
        let causal = f.is_causal.unwrap_or(true);
        let window = match family {
            Family::Mistral => f.sliding_window.unwrap_or(Some(4096)),
            // Qwen2 and Qwen3 window only their layers past max_window_layers, and only with use_sliding_window.
            Family::Qwen2 | Family::Qwen3 | Family::Qwen3Vl if f.use_sliding_window == Some(true) => {
                return unsupported("use_sliding_window (windows on the upper layers only)".into())
            }
            _ => None,
        };
        // Qwen3VLTextConfig's `default_theta`; the others' RotaryEmbedding default.
        let mut theta = f.rope_theta.unwrap_or(if family == Family::Qwen3Vl { 500_000.0 } else { 10_000.0 });
        for rope in [&f.rope_parameters, &f.rope_scaling].into_iter().flatten().filter(|v| !v.is_null()) {
            let kind = rope.get("rope_type").or_else(|| rope.get("type")).and_then(|t| t.as_str());
            if kind.is_some_and(|k| k != "default") {
                return unsupported(format!("rope type `{rope}` (only the default rotary embedding)"));
            }
            theta = rope.get("rope_theta").and_then(|t| t.as_f64()).unwrap_or(theta);
        }
        let spec = DecoderSpec {
            vocab: f.vocab_size.unwrap_or(vocab),
            hidden,
            intermediate: f.intermediate_size.unwrap_or(inter),
            layers: f.num_hidden_layers.unwrap_or(32),
            heads,
            kv_heads: f.num_key_value_heads.or(kv).unwrap_or(heads),
            head_dim: f.head_dim.unwrap_or(if family.qk_norm() { 128 } else { hidden / heads.max(1) }),
            act: Activation::parse(f.hidden_act.as_deref().unwrap_or("silu"))?,
            qkv_bias: family == Family::Qwen2,
            eps: f.rms_norm_eps.unwrap_or(1e-6),
            norm_plus_one: false,
            qk_norm: family.qk_norm(),
            causal,
            // transformers' sliding mask keeps keys `j > i − window` (`window − 1` tokens behind); its
            // bidirectional one keeps `|i − j| ≤ window`.
            window: window.map(|w| if causal { w.saturating_sub(1) } else { w }),
            rope_theta: theta,
            embed_scale: None,
            attn_scale: None,
            sandwich: false,
            local: None,
        };
        Ok(LlamaConfig { family, spec, max_position_embeddings: f.max_position_embeddings.unwrap_or(positions) })
    }
}

/// mxbai-rerank-v2's prompt (a Qwen2 causal LM), as mixedbread's `mxbai_rerank.MxbaiRerankV2` builds it: Qwen's
/// chat frame around the query, a newline, the document, a newline and the task, each tokenized on its own
/// without special tokens; a given instruction goes before the query. The score is "1" against "0".
pub fn mxbai_reranker_template(instruction: Option<String>) -> PairTemplate {
    PairTemplate {
        prefix: "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n\
                 <|im_start|>user\n"
            .into(),
        pieces: vec![
            "{instruction}query: {query}".into(),
            "\n".into(),
            "document: {document}".into(),
            "\n".into(),
            "You are a search relevance expert who evaluates how well documents match search queries. For each \
             query-document pair, carefully analyze the semantic relationship between them, then provide your \
             binary relevance judgment (0 for not relevant, 1 for relevant).\nRelevance:"
                .into(),
        ],
        suffix: "<|im_end|>\n<|im_start|>assistant\n".into(),
        instruction,
        instruction_format: Some("instruction: {instruction}\n".into()),
        special_tokens: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str, family: Family) -> Result<LlamaConfig, ModelError> {
        LlamaConfig::from_file(serde_json::from_str(json).unwrap(), family)
    }

    #[test]
    fn defaults_are_each_classes_and_refusals_name_the_field() {
        let m = read("{}", Family::Mistral).unwrap();
        assert_eq!((m.spec.kv_heads, m.spec.window, m.spec.qkv_bias), (8, Some(4095), false));
        assert_eq!(read(r#"{"sliding_window": null}"#, Family::Mistral).unwrap().spec.window, None);
        let q = read(r#"{"rope_theta": 1000000.0}"#, Family::Qwen2).unwrap();
        assert_eq!((q.spec.kv_heads, q.spec.qkv_bias, q.spec.rope_theta, q.spec.window), (32, true, 1e6, None));
        let q3 =
            read(r#"{"rope_parameters": {"rope_type": "default", "rope_theta": 1000000}}"#, Family::Qwen3).unwrap();
        assert_eq!((q3.spec.rope_theta, q3.spec.kv_heads, q3.spec.head_dim, q3.spec.qk_norm), (1e6, 32, 128, true));
        assert_eq!(read("{}", Family::Qwen3).unwrap().spec.rope_theta, 10_000.0);
        // Qwen3VLTextConfig's own defaults (its `default_theta`, 128,000 positions), read from a nested value.
        let v = LlamaConfig::from_value(std::path::Path::new("config.json"), None, Family::Qwen3Vl).unwrap();
        assert_eq!((v.spec.rope_theta, v.max_position_embeddings, v.spec.head_dim), (500_000.0, 128_000, 128));
        assert!(v.spec.qk_norm && !v.spec.qkv_bias && v.spec.causal);
        let nested = serde_json::json!({"hidden_size": 64, "num_attention_heads": 4, "rope_parameters":
            {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20], "mrope_interleaved": true}});
        let v = LlamaConfig::from_value(std::path::Path::new("config.json"), Some(&nested), Family::Qwen3Vl).unwrap();
        assert_eq!((v.spec.rope_theta, v.spec.hidden, v.spec.kv_heads), (5e6, 64, 32));
        let l = read(r#"{"num_attention_heads": 8, "hidden_size": 64}"#, Family::Llama).unwrap();
        assert_eq!((l.spec.kv_heads, l.spec.head_dim, l.max_position_embeddings), (8, 8, 2048));
        for (json, family, what) in [
            (r#"{"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}"#, Family::Llama, "rope type"),
            (r#"{"attention_bias": true}"#, Family::Llama, "attention_bias"),
            (r#"{"use_sliding_window": true}"#, Family::Qwen2, "use_sliding_window"),
            (r#"{"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}"#, Family::Qwen3, "rope type"),
            (r#"{"use_sliding_window": true}"#, Family::Qwen3, "use_sliding_window"),
            (r#"{"layer_types": ["full_attention", "sliding_attention"]}"#, Family::Qwen3, "layer_types"),
            // Qwen3's attention_bias puts a bias on o_proj too, which the decoder does not have.
            (r#"{"attention_bias": true}"#, Family::Qwen3, "attention_bias"),
        ] {
            let e = read(json, family).unwrap_err().to_string();
            assert!(e.contains(what), "{json}: {e}");
        }
    }

    #[test]
    fn is_causal_false_attends_both_ways_and_windows_either_side() {
        assert!(read("{}", Family::Qwen2).unwrap().spec.causal);
        let q = read(r#"{"is_causal": false}"#, Family::Qwen2).unwrap();
        assert!(!q.spec.causal);
        let m = read(r#"{"is_causal": false, "sliding_window": 6}"#, Family::Mistral).unwrap();
        assert_eq!((m.spec.causal, m.spec.window), (false, Some(6)));
        assert_eq!(read(r#"{"sliding_window": 6}"#, Family::Mistral).unwrap().spec.window, Some(5));
    }
}
