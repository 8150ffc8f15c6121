//! The Llama-style decoder that Gemma, Qwen2 (and the later decoder families) share: token embeddings,
//! pre-norm layers of RMS norms, rotary grouped-query attention and a gated MLP, a final norm. Tensor names
//! are transformers' for every such family (`embed_tokens`, `layers.N.{input_layernorm,
//! self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj}`, `norm`); what differs
//! between families is data in [`DecoderSpec`]. Gemma 3 adds sandwich norms (`post_attention_layernorm`
//! normalizes the attention's output, `pre_feedforward_layernorm` / `post_feedforward_layernorm` wrap the
//! MLP) and local layers with their own window and rotary base.

use crate::backend::{Activation, AttentionSpec, Norm, Ops};
use crate::batch::Batch;
use crate::encoder::TokenEncoder;
use crate::error::ModelError;

use super::block::{LayerBuffers, PreNormLayer, SandwichNorms};
use super::rotary::{angles, inv_freq, tables};
use super::{Mlp, Positional, SelfAttention, TextEmbeddings, Weights};

/// A decoder stack's geometry.
#[derive(Debug, Clone)]
pub struct DecoderSpec {
    pub vocab: usize,
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
    /// Per-head RMS norms on queries and keys (`self_attn.{q,k}_norm`: Qwen3, Gemma 3).
    pub qk_norm: bool,
    pub causal: bool,
    /// Keys at most this many tokens behind the query (Mistral's sliding window).
    pub window: Option<usize>,
    pub rope_theta: f64,
    /// Gemma multiplies its token embeddings by √hidden.
    pub embed_scale: Option<f32>,
    /// Multiplies `q·k` (Gemma 3's `query_pre_attn_scalar^-½`); `None`: `1/√head_dim`.
    pub attn_scale: Option<f32>,
    /// Gemma 3's sandwich norms around each block's output.
    pub sandwich: bool,
    /// Layers that attend within a window, with their own rotary base (Gemma 3's sliding layers).
    pub local: Option<LocalLayers>,
}

/// Which layers are local, and how they attend.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalLayers {
    /// One flag per layer: `true` for a local one.
    pub layers: Vec<bool>,
    /// As [`AttentionSpec::window`]: keys at most this many tokens away (behind, when causal).
    pub window: usize,
    pub rope_theta: f64,
}

impl DecoderSpec {
    pub fn attention(&self) -> AttentionSpec {
        AttentionSpec {
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            scale: self.attn_scale.unwrap_or(1.0 / (self.head_dim as f32).sqrt()),
            causal: self.causal,
            window: self.window,
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
        if self.local.as_ref().is_some_and(|l| l.layers.len() != self.layers) {
            return Err(ModelError::Unsupported(format!("{family} with layer_types not one per layer")));
        }
        Ok(())
    }

    fn is_local(&self, layer: usize) -> bool {
        self.local.as_ref().is_some_and(|l| l.layers[layer])
    }
}

struct DecoderLayer<O: Ops> {
    block: PreNormLayer<O>,
    sandwich: Option<SandwichNorms<O::Param>>,
    local: bool,
}

pub struct Decoder<O: Ops> {
    weight_bytes: usize,
    embeddings: TextEmbeddings<O>,
    layers: Vec<DecoderLayer<O>>,
    norm: Norm<O::Param>,
    /// `1 / θ^(2j / head_dim)`, as transformers computes it in f32; the local layers' from their own θ.
    inv_freq: Vec<f32>,
    local_freq: Option<Vec<f32>>,
}

impl<O: Ops> Decoder<O> {
    /// `w`: the decoder's root (holding `embed_tokens`, `layers`, `norm`); `family` names it in refusals.
    pub fn load(w: &Weights<O>, spec: &DecoderSpec, family: &str) -> Result<Self, ModelError> {
        spec.check(family)?;
        let start = w.bytes();
        let (v, h) = (spec.vocab, spec.hidden);
        // Gemma's scale multiplies each row as it is read, rounded to f32 first as transformers does.
        let table = w.pp("embed_tokens").scaled_table(v, h, spec.embed_scale.unwrap_or(1.0))?;
        let embeddings = TextEmbeddings::from_table(table, v, h);
        let (layers, norm) = (load_layers(w, spec)?, w.pp("norm").rms_norm(h, spec.eps, spec.norm_plus_one)?);
        let inv_freq = inv_freq(spec.rope_theta, spec.head_dim);
        let local_freq = spec.local.as_ref().map(|l| super::rotary::inv_freq(l.rope_theta, spec.head_dim));
        Ok(Decoder { weight_bytes: w.bytes() - start, embeddings, layers, norm, inv_freq, local_freq })
    }

    pub fn hidden_size(&self) -> usize {
        self.embeddings.hidden_size()
    }

    /// Token embeddings, `[ids, hidden]`.
    pub fn embed(&self, o: &O, ids: &[u32]) -> Result<O::T, ModelError> {
        self.embeddings.ids(o, ids)
    }

    /// Final states of packed input embeddings `x` (`[tokens, hidden]`, sequences as `seqs`), each row at
    /// its position in `positions`.
    pub fn forward(&self, o: &O, x: &mut O::T, seqs: &O::Seqs, positions: &[u32]) -> Result<(), ModelError> {
        let table = |f: &[f32]| tables(o, &angles(f, positions), positions.len(), f.len());
        let global = table(&self.inv_freq)?;
        let local = self.local_freq.as_deref().map(table).transpose()?;
        let mut buffers = LayerBuffers::new(o)?;
        for l in &self.layers {
            let (cos, sin) = match &local {
                Some(t) if l.local => t,
                _ => &global,
            };
            match &l.sandwich {
                None => l.block.forward(o, x, seqs, Positional::Rotary(cos, sin), &mut buffers)?,
                Some(norms) => {
                    l.block.forward_sandwiched(o, x, seqs, Positional::Rotary(cos, sin), norms, &mut buffers)?
                }
            }
        }
        o.norm(x, &self.norm)
    }
}

/// As a text embedder (Qwen3-Embedding): each sequence of the batch from position 0.
impl<O: Ops> TokenEncoder<O> for Decoder<O> {
    fn hidden_size(&self) -> usize {
        self.embeddings.hidden_size()
    }

    fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    fn forward(&self, o: &O, batch: &Batch) -> Result<O::T, ModelError> {
        let mut x = self.embeddings.forward(o, batch)?;
        Decoder::forward(self, o, &mut x, &o.seqs(&batch.cu_seqlens)?, &positions(&batch.cu_seqlens, 0))?;
        Ok(x)
    }
}

/// Where a decoder's tensors live: the root of a `*Model` checkpoint, `model.` in a `*ForCausalLM` one.
pub fn root(vb: candle_nn::VarBuilder) -> candle_nn::VarBuilder {
    let prefix = root_prefix(|name| vb.contains_tensor(name));
    match prefix.strip_suffix('.') {
        Some(p) => p.split('.').fold(vb, |vb, part| vb.pp(part)),
        None => vb,
    }
}

/// Where a checkpoint keeps its decoder, as a tensor-name prefix: `model.` (a `*ForCausalLM`),
/// `model.language_model.` (a vision-language model's, Qwen3-VL's), or none (a bare `*Model`).
pub fn root_prefix(has: impl Fn(&str) -> bool) -> &'static str {
    ["model.language_model.", "model."].into_iter().find(|p| has(&format!("{p}embed_tokens.weight"))).unwrap_or("")
}

/// Each row's position within its sequence, counting from `first`.
pub fn positions(cu: &[usize], first: u32) -> Vec<u32> {
    cu.windows(2).flat_map(|w| (0..(w[1] - w[0]) as u32).map(move |t| t + first)).collect()
}

/// The stack under `w` (`layers.N.*`).
fn load_layers<O: Ops>(w: &Weights<O>, spec: &DecoderSpec) -> Result<Vec<DecoderLayer<O>>, ModelError> {
    let (h, hd, i) = (spec.hidden, spec.head_dim, spec.intermediate);
    let norm = |w: Weights<O>, width: usize| w.rms_norm(width, spec.eps, spec.norm_plus_one);
    (0..spec.layers)
        .map(|n| {
            let l = w.pp("layers").pp(n);
            let sa = l.pp("self_attn");
            let mlp = l.pp("mlp");
            let parts = [("q_proj", spec.heads * hd), ("k_proj", spec.kv_heads * hd), ("v_proj", spec.kv_heads * hd)];
            let local = spec.is_local(n);
            let attention = spec.attention().windowed(match (&spec.local, local) {
                (Some(l), true) => Some(l.window),
                _ => spec.window,
            });
            // Gemma 3 names the MLP's pre-norm `pre_feedforward_layernorm` and gives
            // `post_attention_layernorm` to the attention's output.
            let (norm2, sandwich) = match spec.sandwich {
                false => (norm(l.pp("post_attention_layernorm"), h)?, None),
                true => (
                    norm(l.pp("pre_feedforward_layernorm"), h)?,
                    Some((norm(l.pp("post_attention_layernorm"), h)?, norm(l.pp("post_feedforward_layernorm"), h)?)),
                ),
            };
            let block = PreNormLayer {
                norm1: l.pp("input_layernorm").rms_norm(h, spec.eps, spec.norm_plus_one)?,
                attention: SelfAttention {
                    qk_norm: match spec.qk_norm {
                        true => Some((
                            sa.pp("q_norm").rms_norm(hd, spec.eps, spec.norm_plus_one)?,
                            sa.pp("k_norm").rms_norm(hd, spec.eps, spec.norm_plus_one)?,
                        )),
                        false => None,
                    },
                    qkv: sa.linear_cat(&parts, h, spec.qkv_bias)?,
                    out: sa.pp("o_proj").linear(spec.heads * hd, h, false)?,
                    spec: attention,
                },
                norm2,
                mlp: Mlp::gated(
                    mlp.linear_cat(&[("gate_proj", i), ("up_proj", i)], h, false)?,
                    mlp.pp("down_proj").linear(i, h, false)?,
                    spec.act,
                ),
            };
            Ok(DecoderLayer { block, sandwich, local })
        })
        .collect()
}
