//! Gemma 3's text decoder (`gemma3_text`, `Gemma3TextModel`) as EmbeddingGemma runs it: the Llama-style
//! decoder (`layers::decoder`) with Gemma's `1 + w` RMS norms and √hidden embedding scale, sandwich norms,
//! per-head query/key norms, `query_pre_attn_scalar` for the attention scale, and local layers that attend
//! within a window with their own rotary base. `use_bidirectional_attention` (EmbeddingGemma) makes every
//! layer attend both ways, the local ones within `|i − j| < sliding_window / 2 + 1`; the
//! sentence-transformers files pool the mean and add their Dense layers.

use serde::Deserialize;

use crate::backend::Activation;
use crate::error::ModelError;
use crate::layers::decoder::{DecoderSpec, LocalLayers};

/// `Gemma3TextConfig` as written; what it omits is the class default.
#[derive(Debug, Clone, Deserialize)]
pub struct Gemma3Config {
    #[serde(default = "crate::config::n::<262_208>")]
    pub vocab_size: usize,
    #[serde(default = "crate::config::n::<2304>")]
    pub hidden_size: usize,
    #[serde(default = "crate::config::n::<9216>")]
    pub intermediate_size: usize,
    #[serde(default = "crate::config::n::<26>")]
    pub num_hidden_layers: usize,
    #[serde(default = "crate::config::n::<8>")]
    pub num_attention_heads: usize,
    #[serde(default = "crate::config::n::<4>")]
    pub num_key_value_heads: usize,
    #[serde(default = "crate::config::n::<256>")]
    pub head_dim: usize,
    #[serde(default = "tanh_gelu")]
    pub hidden_activation: String,
    #[serde(default = "crate::config::n::<131_072>")]
    pub max_position_embeddings: usize,
    #[serde(default = "eps")]
    pub rms_norm_eps: f64,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default = "crate::config::n::<256>")]
    pub query_pre_attn_scalar: usize,
    /// `null` is allowed by the class; absent means 4096. Bidirectional, every transformers version reads
    /// `w` as `|i − j| < w / 2 + 1`; 4.56-4.57 also wrote that halved value back on saving, so a config they
    /// saved reads back narrower than the model they saved it from (5 writes the value it read).
    #[serde(default = "window", deserialize_with = "nullable")]
    pub sliding_window: Option<usize>,
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    /// transformers 4's way to say which layers are global: every `sliding_window_pattern`-th.
    #[serde(default = "crate::config::n::<6>")]
    pub sliding_window_pattern: usize,
    #[serde(default)]
    pub attn_logit_softcapping: Option<f64>,
    #[serde(default)]
    pub use_bidirectional_attention: bool,
    /// transformers 5.5 on turns `false` into bidirectional masks whose windows differ from
    /// `use_bidirectional_attention`'s; no checkpoint says it, so it is refused rather than guessed.
    #[serde(default)]
    pub is_causal: Option<bool>,
    /// transformers 5: `{"full_attention": {...}, "sliding_attention": {...}}`, each with `rope_type` and
    /// `rope_theta`.
    #[serde(default)]
    pub rope_parameters: Option<serde_json::Value>,
    /// transformers 4: the global layers' base, the local layers' base, and a scaling of the global ones.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_local_base_freq: Option<f64>,
    #[serde(default)]
    pub rope_scaling: Option<serde_json::Value>,
}

fn tanh_gelu() -> String {
    "gelu_pytorch_tanh".into()
}

fn eps() -> f64 {
    1e-6
}

fn window() -> Option<usize> {
    Some(4096)
}

fn nullable<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    Option::<usize>::deserialize(d)
}

impl Gemma3Config {
    /// Whether layer `n` is local (`sliding_attention`), refusing layer types Aleph does not run.
    fn local(&self, n: usize) -> Result<bool, ModelError> {
        match &self.layer_types {
            Some(types) => match types.get(n).map(String::as_str) {
                Some("sliding_attention") => Ok(true),
                Some("full_attention") => Ok(false),
                other => Err(ModelError::Unsupported(format!("Gemma3 layer_types[{n}] {other:?}"))),
            },
            None => Ok(!(n + 1).is_multiple_of(self.sliding_window_pattern.max(1))),
        }
    }

    /// The rotary base of the global layers and of the local ones, refusing scaled variants.
    fn thetas(&self) -> Result<(f64, f64), ModelError> {
        let (mut global, mut local) =
            (self.rope_theta.unwrap_or(1_000_000.0), self.rope_local_base_freq.unwrap_or(10_000.0));
        let check = |rope: &serde_json::Value, theta: &mut f64| {
            let kind = rope.get("rope_type").or_else(|| rope.get("type")).and_then(|t| t.as_str());
            if kind.is_some_and(|k| k != "default") {
                return Err(ModelError::Unsupported(format!(
                    "Gemma3 rope type `{rope}` (only the default rotary embedding)"
                )));
            }
            *theta = rope.get("rope_theta").and_then(|t| t.as_f64()).unwrap_or(*theta);
            Ok(())
        };
        if let Some(scaling) = self.rope_scaling.as_ref().filter(|v| !v.is_null()) {
            check(scaling, &mut global)?;
        }
        if let Some(params) = self.rope_parameters.as_ref().filter(|v| !v.is_null()) {
            match (params.get("full_attention"), params.get("sliding_attention")) {
                (None, None) => check(params, &mut global)?,
                (full, sliding) => {
                    full.filter(|v| !v.is_null()).map(|f| check(f, &mut global)).transpose()?;
                    sliding.filter(|v| !v.is_null()).map(|s| check(s, &mut local)).transpose()?;
                }
            }
        }
        Ok((global, local))
    }

    /// The decoder this config describes, refusing what Aleph does not run (naming the field).
    pub fn decoder(&self) -> Result<DecoderSpec, ModelError> {
        let unsupported = |what: String| Err(ModelError::Unsupported(what));
        if self.attention_bias {
            return unsupported("Gemma3 with attention_bias".into());
        }
        if let Some(cap) = self.attn_logit_softcapping {
            return unsupported(format!("Gemma3 attn_logit_softcapping {cap}"));
        }
        if self.is_causal == Some(false) {
            return unsupported(
                "Gemma3 with is_causal false (use_bidirectional_attention is how Gemma3 says it)".into(),
            );
        }
        let layers = (0..self.num_hidden_layers).map(|n| self.local(n)).collect::<Result<Vec<_>, _>>()?;
        let (global_theta, local_theta) = self.thetas()?;
        let local = match (layers.iter().any(|&l| l), self.sliding_window) {
            (false, _) => None,
            (true, None) => return unsupported("Gemma3 sliding layers with sliding_window null".into()),
            // transformers keeps keys with `i − j < w` (causal) or, bidirectional, `|i − j| < w / 2 + 1`.
            (true, Some(w)) if w > 0 => Some(LocalLayers {
                layers,
                window: if self.use_bidirectional_attention { w / 2 } else { w - 1 },
                rope_theta: local_theta,
            }),
            (true, Some(w)) => return unsupported(format!("Gemma3 sliding_window {w}")),
        };
        let h = self.hidden_size;
        Ok(DecoderSpec {
            vocab: self.vocab_size,
            hidden: h,
            intermediate: self.intermediate_size,
            layers: self.num_hidden_layers,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            act: Activation::parse(&self.hidden_activation)?,
            qkv_bias: false,
            eps: self.rms_norm_eps,
            norm_plus_one: true,
            qk_norm: true,
            causal: !self.use_bidirectional_attention,
            window: None,
            rope_theta: global_theta,
            embed_scale: Some((h as f32).sqrt()),
            attn_scale: Some((self.query_pre_attn_scalar as f32).powf(-0.5)),
            sandwich: true,
            local,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> Result<DecoderSpec, ModelError> {
        serde_json::from_str::<Gemma3Config>(json).unwrap().decoder()
    }

    #[test]
    fn reads_both_formats_with_the_class_defaults() {
        let d = spec("{}").unwrap();
        let local = d.local.clone().unwrap();
        assert_eq!((d.layers, d.causal, d.rope_theta, local.rope_theta, local.window), (26, true, 1e6, 1e4, 4095));
        // Every sixth layer is global.
        assert_eq!(local.layers.iter().filter(|l| !**l).count(), 4);
        assert!(!local.layers[5] && local.layers[4]);
        assert_eq!(d.attn_scale, Some(1.0 / 16.0));
        let v4 = spec(
            r#"{"num_hidden_layers": 4, "sliding_window_pattern": 2, "rope_theta": 5e5,
            "rope_local_base_freq": 100.0, "use_bidirectional_attention": true, "sliding_window": 512}"#,
        )
        .unwrap();
        let local = v4.local.unwrap();
        assert_eq!(
            (local.layers, local.window, local.rope_theta, v4.rope_theta),
            (vec![true, false, true, false], 256, 100.0, 5e5)
        );
        assert!(!v4.causal);
        let v5 = spec(
            r#"{"num_hidden_layers": 2, "layer_types": ["full_attention", "sliding_attention"],
            "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                                "sliding_attention": {"rope_type": "default", "rope_theta": 10.0}}}"#,
        )
        .unwrap();
        let local = v5.local.unwrap();
        assert_eq!((local.layers, local.rope_theta, v5.rope_theta), (vec![false, true], 10.0, 1e6));
    }

    #[test]
    fn refuses_what_it_does_not_run_naming_the_field() {
        for (json, what) in [
            (r#"{"rope_scaling": {"rope_type": "linear", "factor": 8.0}}"#, "rope type"),
            (r#"{"rope_parameters": {"full_attention": {"rope_type": "yarn"}, "sliding_attention": {}}}"#, "rope type"),
            (r#"{"attn_logit_softcapping": 50.0}"#, "attn_logit_softcapping"),
            (r#"{"sliding_window": null}"#, "sliding_window"),
            (r#"{"num_hidden_layers": 1, "layer_types": ["chunked_attention"]}"#, "layer_types"),
            (r#"{"is_causal": false}"#, "is_causal"),
        ] {
            let e = spec(json).unwrap_err().to_string();
            assert!(e.contains(what), "{json}: {e}");
        }
    }
}
