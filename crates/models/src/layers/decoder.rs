//! The Llama-style decoder layer that Gemma, Qwen2 (and the later decoder families) share: RMS norms,
//! rotary grouped-query attention, a gated MLP. Tensor names are transformers' for every such family
//! (`layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj}`).

use crate::backend::{Activation, AttentionSpec, Ops};
use crate::error::ModelError;

use super::block::PreNormLayer;
use super::{FeedForward, GatedMlp, SelfAttention, Weights};

/// A decoder stack's geometry.
#[derive(Debug, Clone, Copy)]
pub struct DecoderSpec {
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub act: Activation,
    /// Whether q, k and v carry biases (Qwen2); o never does.
    pub qkv_bias: bool,
    pub eps: f64,
    /// Gemma's norms scale by `1 + w`.
    pub norm_plus_one: bool,
    pub causal: bool,
}

impl DecoderSpec {
    pub fn attention(&self) -> AttentionSpec {
        AttentionSpec {
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            scale: 1.0 / (self.head_dim as f32).sqrt(),
            causal: self.causal,
            window: None,
        }
    }

    /// Refuses geometry no backend can run, naming it.
    pub fn check(&self, family: &str) -> Result<(), ModelError> {
        if self.heads == 0
            || self.kv_heads == 0
            || !self.heads.is_multiple_of(self.kv_heads)
            || self.head_dim == 0
            || !self.head_dim.is_multiple_of(2)
        {
            return Err(ModelError::Unsupported(format!(
                "{family} with {} heads over {} key-value heads of width {}",
                self.heads, self.kv_heads, self.head_dim
            )));
        }
        Ok(())
    }
}

/// The stack under `w` (`layers.N.*`).
pub fn load_decoder_layers<O: Ops>(w: &Weights<O>, spec: &DecoderSpec) -> Result<Vec<PreNormLayer<O>>, ModelError> {
    let (h, hd, i) = (spec.hidden, spec.head_dim, spec.intermediate);
    let attention = spec.attention();
    (0..spec.layers)
        .map(|n| {
            let l = w.pp("layers").pp(n);
            let sa = l.pp("self_attn");
            let mlp = l.pp("mlp");
            let parts = [("q_proj", spec.heads * hd), ("k_proj", spec.kv_heads * hd), ("v_proj", spec.kv_heads * hd)];
            Ok(PreNormLayer {
                norm1: l.pp("input_layernorm").rms_norm(h, spec.eps, spec.norm_plus_one)?,
                attention: SelfAttention {
                    qkv: sa.linear_cat(&parts, h, spec.qkv_bias)?,
                    out: sa.pp("o_proj").linear(spec.heads * hd, h, false)?,
                    spec: attention,
                },
                norm2: l.pp("post_attention_layernorm").rms_norm(h, spec.eps, spec.norm_plus_one)?,
                mlp: FeedForward::Gated(GatedMlp {
                    gate_up: mlp.linear_cat(&[("gate_proj", i), ("up_proj", i)], h, false)?,
                    down: mlp.pp("down_proj").linear(i, h, false)?,
                    act: spec.act,
                }),
            })
        })
        .collect()
}
