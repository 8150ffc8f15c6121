//! The BERT-family encoder on candle: BERT, RoBERTa and XLM-RoBERTa share it; RoBERTa's flavour only
//! numbers positions from `pad_token_id + 1` and has a single token type.
//!
//! Layer structs mirror the checkpoint's tensor names (`encoder.layer.N.attention.self.query`, ...), so
//! a missing or mis-shaped weight is an error that names it. Query, key and value are fused into one
//! matrix at load time: one GEMM instead of three.

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Embedding, LayerNorm, VarBuilder};
use serde::Deserialize;

use crate::batch::Batch;
use crate::encoder::{Encoder, TokenStates};
use crate::error::{weights, ModelError};

/// A BERT-family encoder's geometry, every field resolved: from the checkpoint's `config.json`, or, where
/// the file omits one, the default of the transformers config class the checkpoint was saved from
/// ([`BertClass`]); `save_pretrained` drops fields equal to those defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: String,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    pub pad_token_id: u32,
    pub position_embedding_type: String,
}

/// The transformers config classes whose checkpoints this encoder reads; their defaults differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BertClass {
    Bert,
    Roberta,
    XlmRoberta,
    Camembert,
    /// CLAP's text tower (`ClapTextConfig`, a RoBERTa).
    ClapText,
}

impl BertClass {
    pub fn from_model_type(model_type: &str) -> Option<Self> {
        match model_type {
            "bert" => Some(BertClass::Bert),
            "roberta" => Some(BertClass::Roberta),
            "xlm-roberta" => Some(BertClass::XlmRoberta),
            "camembert" => Some(BertClass::Camembert),
            "clap_text_model" => Some(BertClass::ClapText),
            _ => None,
        }
    }

    /// (vocab_size, pad_token_id, type_vocab_size, max_position_embeddings) as the class's `__init__`
    /// defaults them; the rest of the geometry is BERT-base's in every class.
    fn defaults(self) -> (usize, u32, usize, usize) {
        match self {
            BertClass::Bert => (30522, 0, 2, 512),
            BertClass::Roberta => (50265, 1, 2, 512),
            BertClass::XlmRoberta | BertClass::Camembert => (30522, 1, 2, 512),
            BertClass::ClapText => (50265, 1, 1, 514),
        }
    }
}

/// `config.json` as written, any field possibly omitted.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct BertConfigFile {
    pub vocab_size: Option<usize>,
    pub hidden_size: Option<usize>,
    pub num_hidden_layers: Option<usize>,
    pub num_attention_heads: Option<usize>,
    pub intermediate_size: Option<usize>,
    pub hidden_act: Option<String>,
    pub max_position_embeddings: Option<usize>,
    pub type_vocab_size: Option<usize>,
    pub layer_norm_eps: Option<f64>,
    pub pad_token_id: Option<u32>,
    pub position_embedding_type: Option<String>,
}

impl BertConfigFile {
    /// Fills what the file omits with `class`'s defaults.
    pub fn resolve(self, class: BertClass) -> BertConfig {
        let (vocab, pad, types, positions) = class.defaults();
        BertConfig {
            vocab_size: self.vocab_size.unwrap_or(vocab),
            hidden_size: self.hidden_size.unwrap_or(768),
            num_hidden_layers: self.num_hidden_layers.unwrap_or(12),
            num_attention_heads: self.num_attention_heads.unwrap_or(12),
            intermediate_size: self.intermediate_size.unwrap_or(3072),
            hidden_act: self.hidden_act.unwrap_or_else(|| "gelu".into()),
            max_position_embeddings: self.max_position_embeddings.unwrap_or(positions),
            type_vocab_size: self.type_vocab_size.unwrap_or(types),
            layer_norm_eps: self.layer_norm_eps.unwrap_or(1e-12),
            pad_token_id: self.pad_token_id.unwrap_or(pad),
            position_embedding_type: self.position_embedding_type.unwrap_or_else(|| "absolute".into()),
        }
    }
}

impl BertConfig {
    /// What neither backend implements, refused at load with the field and its value. Both backends call
    /// this, so they refuse the same checkpoints.
    pub fn check(&self) -> Result<(), ModelError> {
        if self.position_embedding_type != "absolute" {
            return Err(ModelError::Unsupported(format!(
                "position_embedding_type `{}` (only `absolute` is implemented)",
                self.position_embedding_type
            )));
        }
        if self.num_attention_heads == 0 || !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(ModelError::Unsupported(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            )));
        }
        Ok(())
    }
}

/// The activations transformers names in `hidden_act`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Activation {
    GeluErf,
    GeluTanh,
    Relu,
    /// OpenAI CLIP's `x * sigmoid(1.702 x)`.
    QuickGelu,
    /// `x · sigmoid(x)`, the gate of Llama-style MLPs.
    Silu,
}

impl Activation {
    pub(crate) fn parse(name: &str) -> Result<Self, ModelError> {
        match name {
            "gelu" => Ok(Activation::GeluErf),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(Activation::GeluTanh),
            "relu" => Ok(Activation::Relu),
            "quick_gelu" => Ok(Activation::QuickGelu),
            "silu" | "swish" => Ok(Activation::Silu),
            other => Err(ModelError::Unsupported(format!("hidden_act `{other}`"))),
        }
    }

    pub(crate) fn apply(self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Activation::QuickGelu => x * candle_nn::ops::sigmoid(&(x * 1.702)?)?,
            Activation::GeluErf => x.gelu_erf(),
            Activation::GeluTanh => x.gelu(),
            Activation::Relu => x.relu(),
            Activation::Silu => candle_nn::ops::silu(x),
        }
    }
}

/// A linear layer with its weight stored transposed (`[in, out]`), ready for `x @ w`.
pub(crate) struct Dense {
    weight_t: Tensor,
    bias: Tensor,
}

impl Dense {
    pub(crate) fn load(vb: VarBuilder, inp: usize, out: usize) -> candle_core::Result<Self> {
        let w = vb.get((out, inp), "weight")?;
        let b = vb.get(out, "bias")?;
        Ok(Dense { weight_t: w.t()?.contiguous()?, bias: b })
    }

    /// Concatenates several layers with the same input into one wider layer.
    pub(crate) fn fuse(parts: Vec<(Tensor, Tensor)>) -> candle_core::Result<Self> {
        let (ws, bs): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
        let w = Tensor::cat(&ws, 0)?;
        let b = Tensor::cat(&bs, 0)?;
        Ok(Dense { weight_t: w.t()?.contiguous()?, bias: b })
    }

    /// `x`: `[rows, in]` → `[rows, out]`.
    pub(crate) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.matmul(&self.weight_t)?.broadcast_add(&self.bias)
    }
}

struct Embeddings {
    word: Embedding,
    position: Embedding,
    token_type: Option<Embedding>,
    norm: LayerNorm,
}

impl Embeddings {
    fn load(vb: VarBuilder, cfg: &BertConfig) -> candle_core::Result<Self> {
        let h = cfg.hidden_size;
        let word = candle_nn::embedding(cfg.vocab_size, h, vb.pp("word_embeddings"))?;
        let position = candle_nn::embedding(cfg.max_position_embeddings, h, vb.pp("position_embeddings"))?;
        let token_type = if cfg.type_vocab_size > 0 {
            Some(candle_nn::embedding(cfg.type_vocab_size, h, vb.pp("token_type_embeddings"))?)
        } else {
            None
        };
        let norm = candle_nn::layer_norm(h, cfg.layer_norm_eps, vb.pp("LayerNorm"))?;
        Ok(Embeddings { word, position, token_type, norm })
    }

    /// `ids`, `type_ids`: `[b, l]`; `positions`: `[l]`. Returns `[b, l, h]`.
    fn forward(&self, ids: &Tensor, type_ids: &Tensor, positions: &Tensor) -> candle_core::Result<Tensor> {
        let mut x = self.word.forward(ids)?;
        if let Some(tt) = &self.token_type {
            x = (x + tt.forward(type_ids)?)?;
        }
        x = x.broadcast_add(&self.position.forward(positions)?)?;
        self.norm.forward(&x)
    }
}

struct Layer {
    qkv: Dense,
    attn_out: Dense,
    attn_norm: LayerNorm,
    intermediate: Dense,
    output: Dense,
    out_norm: LayerNorm,
}

impl Layer {
    fn load(vb: VarBuilder, cfg: &BertConfig) -> candle_core::Result<Self> {
        let h = cfg.hidden_size;
        let sa = vb.pp("attention").pp("self");
        let part = |name: &str| -> candle_core::Result<(Tensor, Tensor)> {
            Ok((sa.pp(name).get((h, h), "weight")?, sa.pp(name).get(h, "bias")?))
        };
        let qkv = Dense::fuse(vec![part("query")?, part("key")?, part("value")?])?;
        let ao = vb.pp("attention").pp("output");
        Ok(Layer {
            qkv,
            attn_out: Dense::load(ao.pp("dense"), h, h)?,
            attn_norm: candle_nn::layer_norm(h, cfg.layer_norm_eps, ao.pp("LayerNorm"))?,
            intermediate: Dense::load(vb.pp("intermediate").pp("dense"), h, cfg.intermediate_size)?,
            output: Dense::load(vb.pp("output").pp("dense"), cfg.intermediate_size, h)?,
            out_norm: candle_nn::layer_norm(h, cfg.layer_norm_eps, vb.pp("output").pp("LayerNorm"))?,
        })
    }
}

/// How a checkpoint of the family numbers positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Bert,
    /// RoBERTa / XLM-R: positions start after the padding index.
    Roberta,
}

impl Flavor {
    pub fn from_model_type(model_type: &str) -> Option<Self> {
        match model_type {
            "bert" => Some(Flavor::Bert),
            "roberta" | "xlm-roberta" | "camembert" => Some(Flavor::Roberta),
            _ => None,
        }
    }

    /// The first position id of a sequence.
    pub fn position_offset(self, cfg: &BertConfig) -> usize {
        match self {
            Flavor::Bert => 0,
            Flavor::Roberta => cfg.pad_token_id as usize + 1,
        }
    }

    /// The longest sequence the position table allows.
    pub fn max_len(self, cfg: &BertConfig) -> usize {
        cfg.max_position_embeddings.saturating_sub(self.position_offset(cfg))
    }
}

/// The encoder: embeddings and `num_hidden_layers` transformer layers.
pub struct Bert {
    embeddings: Embeddings,
    layers: Vec<Layer>,
    act: Activation,
    heads: usize,
    hidden: usize,
    position_offset: u32,
    /// With one token type (RoBERTa, XLM-R) the tokenizer's segment ids are not model inputs.
    use_type_ids: bool,
    weight_bytes: u64,
    device: Device,
}

impl Bert {
    /// Loads from a var builder rooted where `embeddings.*` and `encoder.*` live (the `bert.` prefix, if
    /// any, already applied).
    pub fn load(vb: VarBuilder, cfg: &BertConfig, flavor: Flavor) -> Result<Self, ModelError> {
        cfg.check()?;
        let act = Activation::parse(&cfg.hidden_act)?;
        let embeddings = Embeddings::load(vb.pp("embeddings"), cfg).map_err(weights)?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::load(vb.pp("encoder").pp("layer").pp(i), cfg))
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(weights)?;
        Ok(Bert {
            embeddings,
            layers,
            act,
            heads: cfg.num_attention_heads,
            hidden: cfg.hidden_size,
            position_offset: flavor.position_offset(cfg) as u32,
            use_type_ids: cfg.type_vocab_size > 1,
            weight_bytes: 0,
            device: vb.device().clone(),
        })
    }

    /// Runs the batch padded to its longest sequence. Returns `[b, l, h]` states.
    pub fn forward(&self, batch: &Batch) -> candle_core::Result<Tensor> {
        let (b, l) = (batch.len(), batch.max_len);
        let mut ids = vec![0u32; b * l];
        let mut type_ids = vec![0u32; b * l];
        // Additive attention bias: 0 for real keys, a huge negative for padding.
        let mut bias = vec![f32::MIN; b * l];
        for i in 0..b {
            let (start, end) = (batch.cu_seqlens[i], batch.cu_seqlens[i + 1]);
            let n = end - start;
            ids[i * l..i * l + n].copy_from_slice(&batch.input_ids[start..end]);
            if self.use_type_ids {
                type_ids[i * l..i * l + n].copy_from_slice(&batch.token_type_ids[start..end]);
            }
            bias[i * l..i * l + n].fill(0.0);
        }
        let dev = &self.device;
        let ids = Tensor::from_vec(ids, (b, l), dev)?;
        let type_ids = Tensor::from_vec(type_ids, (b, l), dev)?;
        let bias = Tensor::from_vec(bias, (b, 1, 1, l), dev)?;
        let positions = Tensor::arange(self.position_offset, self.position_offset + l as u32, dev)?;

        let x = self.embeddings.forward(&ids, &type_ids, &positions)?;
        let mut x = x.reshape((b * l, self.hidden))?;
        for layer in &self.layers {
            x = self.layer_forward(layer, &x, &bias, b, l)?;
        }
        x.reshape((b, l, self.hidden))
    }

    fn layer_forward(
        &self,
        layer: &Layer,
        x: &Tensor,
        bias: &Tensor,
        b: usize,
        l: usize,
    ) -> candle_core::Result<Tensor> {
        let (h, nh) = (self.hidden, self.heads);
        let hd = h / nh;
        let qkv = layer.qkv.forward(x)?.reshape((b, l, 3, nh, hd))?;
        let split = |i: usize| -> candle_core::Result<Tensor> {
            qkv.narrow(2, i, 1)?.squeeze(2)?.transpose(1, 2)?.contiguous()
        };
        let q = (split(0)? * (1.0 / (hd as f64).sqrt()))?;
        let (k, v) = (split(1)?, split(2)?);
        let scores = q.matmul(&k.t()?)?.broadcast_add(bias)?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let ctx = probs.matmul(&v)?.transpose(1, 2)?.reshape((b * l, h))?;
        let attn = layer.attn_norm.forward(&(layer.attn_out.forward(&ctx)? + x)?)?;
        let inter = self.act.apply(&layer.intermediate.forward(&attn)?)?;
        layer.out_norm.forward(&(layer.output.forward(&inter)? + attn)?)
    }
}

impl Encoder for Bert {
    fn hidden_size(&self) -> usize {
        self.hidden
    }

    fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    fn encode(&self, batch: &Batch) -> Result<TokenStates, ModelError> {
        let padded = self.forward(batch)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        Ok(TokenStates::from_padded(&padded, batch, self.hidden))
    }
}

/// The var builder rooted at the encoder: task checkpoints nest it under `bert.` or `roberta.`, a
/// bare `BertModel` / `XLMRobertaModel` does not.
pub fn root(vb: VarBuilder) -> VarBuilder {
    for prefix in ["bert", "roberta"] {
        if vb.contains_tensor(&format!("{prefix}.embeddings.word_embeddings.weight")) {
            return vb.pp(prefix);
        }
    }
    vb
}
