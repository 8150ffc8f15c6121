//! The BERT family: BERT, RoBERTa, XLM-RoBERTa, CamemBERT, MPNet, DistilBERT (and CLAP's text tower), one
//! definition over [`Ops`]. RoBERTa's flavour only numbers positions from `pad_token_id + 1` and has a single
//! token type; MPNet is RoBERTa-numbered, has no token types, names its attention differently and adds a
//! learned bias by bucketed relative position to every layer's scores; DistilBERT is BERT without token types
//! under other names; JinaBERT v2 (jina's `bert` remote code) has no position table, adds ALiBi (a linear
//! penalty by distance, one slope per head) to every layer's scores and may have a gated (GLU) MLP.
//! Post-norm layers: attention and the MLP each add their input back, then layer-normalize. [`MlmHead`] is
//! the masked-LM head SPLADE reads.

use candle_nn::VarBuilder;
use serde::Deserialize;

use crate::backend::{Activation, AttentionSpec, Norm, Ops, Post, RelativeBias};
use crate::batch::Batch;
use crate::encoder::TokenEncoder;
use crate::error::ModelError;
use crate::layers::{Mlp, Positional, Scratch, SelfAttention, TextEmbeddings, Weights};

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
    /// MPNet's relative-position buckets (rows of `encoder.relative_attention_bias`); 0 for the others.
    pub relative_attention_num_buckets: usize,
    /// JinaBERT's feed-forward: `original` (BERT's), `geglu` or `reglu`.
    pub feed_forward_type: String,
    pub class: BertClass,
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
    MPNet,
    DistilBert,
    /// JinaBERT v2: `model_type: bert` with `auto_map` into jinaai/jina-bert-implementation.
    JinaBert,
}

impl BertClass {
    pub fn from_model_type(model_type: &str) -> Option<Self> {
        match model_type {
            "bert" => Some(BertClass::Bert),
            "roberta" => Some(BertClass::Roberta),
            "xlm-roberta" => Some(BertClass::XlmRoberta),
            "camembert" => Some(BertClass::Camembert),
            "clap_text_model" => Some(BertClass::ClapText),
            "mpnet" => Some(BertClass::MPNet),
            "distilbert" => Some(BertClass::DistilBert),
            _ => None,
        }
    }

    /// (vocab_size, pad_token_id, type_vocab_size, max_position_embeddings) as the class's `__init__`
    /// defaults them; the rest of the geometry is BERT-base's in every class.
    fn defaults(self) -> (usize, u32, usize, usize) {
        match self {
            BertClass::Bert | BertClass::JinaBert => (30522, 0, 2, 512),
            BertClass::Roberta => (50265, 1, 2, 512),
            BertClass::XlmRoberta | BertClass::Camembert => (30522, 1, 2, 512),
            BertClass::ClapText => (50265, 1, 1, 514),
            // MPNetConfig and DistilBertConfig have no token types.
            BertClass::MPNet => (30527, 1, 0, 512),
            BertClass::DistilBert => (30522, 0, 0, 512),
        }
    }

    /// Where the class keeps each layer's tensors.
    fn names(self) -> &'static LayerNames {
        match self {
            BertClass::MPNet => &LayerNames {
                layers: "encoder.layer",
                attention: "attention.attn",
                qkv: ["q", "k", "v"],
                attention_out: "attention.attn.o",
                attention_norm: "attention.LayerNorm",
                up: "intermediate.dense",
                down: "output.dense",
                out_norm: "output.LayerNorm",
            },
            BertClass::DistilBert => &LayerNames {
                layers: "transformer.layer",
                attention: "attention",
                qkv: ["q_lin", "k_lin", "v_lin"],
                attention_out: "attention.out_lin",
                attention_norm: "sa_layer_norm",
                up: "ffn.lin1",
                down: "ffn.lin2",
                out_norm: "output_layer_norm",
            },
            _ => &LayerNames {
                layers: "encoder.layer",
                attention: "attention.self",
                qkv: ["query", "key", "value"],
                attention_out: "attention.output.dense",
                attention_norm: "attention.output.LayerNorm",
                up: "intermediate.dense",
                down: "output.dense",
                out_norm: "output.LayerNorm",
            },
        }
    }
}

/// Tensor paths of one layer, relative to `{layers}.{n}`.
struct LayerNames {
    layers: &'static str,
    attention: &'static str,
    qkv: [&'static str; 3],
    attention_out: &'static str,
    attention_norm: &'static str,
    up: &'static str,
    down: &'static str,
    out_norm: &'static str,
}

/// `config.json` as written, any field possibly omitted. DistilBERT's own names (`dim`, `n_layers`, ...)
/// are read as the BERT fields they stand for.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct BertConfigFile {
    pub vocab_size: Option<usize>,
    #[serde(alias = "dim")]
    pub hidden_size: Option<usize>,
    #[serde(alias = "n_layers")]
    pub num_hidden_layers: Option<usize>,
    #[serde(alias = "n_heads")]
    pub num_attention_heads: Option<usize>,
    #[serde(alias = "hidden_dim")]
    pub intermediate_size: Option<usize>,
    #[serde(alias = "activation")]
    pub hidden_act: Option<String>,
    pub max_position_embeddings: Option<usize>,
    pub type_vocab_size: Option<usize>,
    pub layer_norm_eps: Option<f64>,
    pub pad_token_id: Option<u32>,
    pub position_embedding_type: Option<String>,
    pub relative_attention_num_buckets: Option<usize>,
    pub feed_forward_type: Option<String>,
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
            // DistilBERT's norms are built with a fixed 1e-12.
            layer_norm_eps: if class == BertClass::DistilBert { 1e-12 } else { self.layer_norm_eps.unwrap_or(1e-12) },
            pad_token_id: self.pad_token_id.unwrap_or(pad),
            position_embedding_type: self.position_embedding_type.unwrap_or_else(|| "absolute".into()),
            relative_attention_num_buckets: match class {
                BertClass::MPNet => self.relative_attention_num_buckets.unwrap_or(32),
                _ => 0,
            },
            feed_forward_type: self.feed_forward_type.unwrap_or_else(|| "original".into()),
            // MPNet and DistilBERT have no token types whatever the file says (their embeddings build no table).
            type_vocab_size: match class {
                BertClass::MPNet | BertClass::DistilBert => 0,
                _ => self.type_vocab_size.unwrap_or(types),
            },
            class,
        }
    }
}

impl BertConfig {
    /// What neither backend implements, refused at load with the field and its value. Both backends call
    /// this, so they refuse the same checkpoints.
    pub fn check(&self) -> Result<(), ModelError> {
        // JinaBERT's code adds ALiBi whatever the type says, and a position table only for `absolute`: every
        // released JinaBERT says `alibi`.
        let positions = if self.class == BertClass::JinaBert { "alibi" } else { "absolute" };
        if self.position_embedding_type != positions {
            return Err(ModelError::Unsupported(format!(
                "position_embedding_type `{}` (only `{positions}` is implemented for this model)",
                self.position_embedding_type
            )));
        }
        if !matches!(self.feed_forward_type.as_str(), "original" | "geglu" | "reglu") {
            return Err(ModelError::Unsupported(format!(
                "feed_forward_type `{}` (JinaBERT's original, geglu and reglu are implemented)",
                self.feed_forward_type
            )));
        }
        if self.class == BertClass::MPNet && self.relative_attention_num_buckets < 32 {
            // transformers buckets offsets into 32 whatever the table holds.
            return Err(ModelError::Unsupported(format!(
                "relative_attention_num_buckets {} (MPNet's buckets need 32)",
                self.relative_attention_num_buckets
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
            "bert" | "distilbert" => Some(Flavor::Bert),
            "roberta" | "xlm-roberta" | "camembert" | "mpnet" => Some(Flavor::Roberta),
            _ => None,
        }
    }

    /// The first position id of a sequence.
    pub fn position_offset(self, cfg: &BertConfig) -> usize {
        match self {
            Flavor::Bert => 0,
            // MPNetEmbeddings numbers from its fixed padding_idx 1, whatever pad_token_id says.
            Flavor::Roberta if cfg.class == BertClass::MPNet => 2,
            Flavor::Roberta => cfg.pad_token_id as usize + 1,
        }
    }

    /// The longest sequence the position table allows.
    pub fn max_len(self, cfg: &BertConfig) -> usize {
        cfg.max_position_embeddings.saturating_sub(self.position_offset(cfg))
    }
}

struct Layer<O: Ops> {
    attention: SelfAttention<O>,
    attn_norm: Norm<O::Param>,
    mlp: Mlp<O>,
    out_norm: Norm<O::Param>,
}

/// The encoder: embeddings and `num_hidden_layers` post-norm transformer layers.
pub struct Bert<O: Ops> {
    embeddings: TextEmbeddings<O>,
    layers: Vec<Layer<O>>,
    relative: Option<ScoreBias>,
    heads: usize,
    weight_bytes: usize,
}

/// A bias on the attention scores by relative offset, spread over each batch's offsets.
enum ScoreBias {
    /// MPNet's learned `[buckets, heads]` table.
    Buckets(Vec<f32>),
    /// ALiBi's slope per head: the bias is `−slope·|offset|`.
    Alibi(Vec<f32>),
}

impl ScoreBias {
    /// `[heads, 2·span − 1]`: the bias of every offset `−(span − 1) ..= span − 1`, per head.
    fn table(&self, heads: usize, span: usize) -> Vec<f32> {
        let width = 2 * span - 1;
        (0..heads * width)
            .map(|e| {
                let (head, d) = (e / width, (e % width) as i64 - (span as i64 - 1));
                match self {
                    ScoreBias::Buckets(r) => r.get(relative_bucket(d) * heads + head).copied().unwrap_or(0.0),
                    ScoreBias::Alibi(slopes) => -slopes[head] * d.unsigned_abs() as f32,
                }
            })
            .collect()
    }
}

/// ALiBi's slopes as JinaBERT computes them (in f64, then f32): for a power of two `n`, `2^(−8k/n)` for
/// `k = 1..=n`; otherwise those of the largest power of two `p < n`, then every other slope of `2p`'s.
pub fn alibi_slopes(n: usize) -> Vec<f32> {
    let pow2 = |n: usize| (1..=n).map(move |k| 2f64.powf(-8.0 / n as f64).powi(k as i32));
    if n == 0 {
        return Vec::new();
    }
    let p = 1usize << n.ilog2();
    let slopes: Vec<f64> =
        if p == n { pow2(n).collect() } else { pow2(p).chain(pow2(2 * p).step_by(2).take(n - p)).collect() };
    slopes.into_iter().map(|s| s as f32).collect()
}

/// MPNet's bucket for a key `offset` tokens after the query (`MPNetEncoder.relative_position_bucket` with its
/// fixed 32 buckets and max distance 128: 16 per direction, exact below 8, logarithmic beyond), in f32 as
/// torch computes it.
pub fn relative_bucket(offset: i64) -> usize {
    let (half, exact, max_distance) = (16i64, 8i64, 128f64);
    let n = -offset;
    let base = if n < 0 { half } else { 0 };
    let n = n.abs();
    let within = if n < exact {
        n
    } else {
        let log = (n as f32 / exact as f32).ln() / (max_distance / exact as f64).ln() as f32;
        (exact + (log * (half - exact) as f32) as i64).min(half - 1)
    };
    (base + within) as usize
}

impl<O: Ops> Bert<O> {
    /// Loads from weights rooted where `embeddings.*` and `encoder.*` live (see [`root`]).
    pub fn load(w: &Weights<O>, cfg: &BertConfig, flavor: Flavor) -> Result<Self, ModelError> {
        cfg.check()?;
        let act = Activation::parse(&cfg.hidden_act)?;
        let (h, i, eps) = (cfg.hidden_size, cfg.intermediate_size, cfg.layer_norm_eps);
        let start = w.bytes();
        let emb = w.pp("embeddings");
        let jina = cfg.class == BertClass::JinaBert;
        let positions = (!jina).then_some((cfg.max_position_embeddings, flavor.position_offset(cfg)));
        let norm = emb.pp("LayerNorm").layer_norm(h, eps)?;
        let embeddings = TextEmbeddings::bert(&emb, cfg.vocab_size, h, positions, cfg.type_vocab_size, norm)?
            .with_max_len(cfg.max_position_embeddings);
        let spec = AttentionSpec::new(h, cfg.num_attention_heads, false);
        // Kept on the host: each forward pass spreads it over the batch's offsets.
        let relative = match cfg.class {
            BertClass::MPNet => {
                let t = w.vb().pp("encoder").pp("relative_attention_bias");
                let table = t.get((cfg.relative_attention_num_buckets, cfg.num_attention_heads), "weight");
                let table = table.and_then(|t| t.flatten_all()?.to_vec1::<f32>()).map_err(crate::error::weights)?;
                Some(ScoreBias::Buckets(table))
            }
            BertClass::JinaBert => Some(ScoreBias::Alibi(alibi_slopes(cfg.num_attention_heads))),
            _ => None,
        };
        // JinaBERT's GLU: `gated_layers` holds the activated half's rows first, then the linear half's.
        let glu = match cfg.feed_forward_type.as_str() {
            "geglu" => Some(Activation::GeluErf),
            "reglu" => Some(Activation::Relu),
            _ => None,
        };
        let names = cfg.class.names();
        let layers = (0..cfg.num_hidden_layers)
            .map(|n| {
                let l = w.pp(names.layers).pp(n);
                let [q, k, v] = names.qkv;
                Ok(Layer {
                    attention: SelfAttention {
                        qk_norm: None,
                        qkv: l.pp(names.attention).linear_cat(&[(q, h), (k, h), (v, h)], h, true)?,
                        out: l.pp(names.attention_out).linear(h, h, true)?,
                        spec,
                    },
                    attn_norm: l.pp(names.attention_norm).layer_norm(h, eps)?,
                    mlp: match glu {
                        Some(glu) => Mlp::gated(
                            l.pp("mlp.gated_layers").linear(h, 2 * i, false)?,
                            l.pp("mlp.wo").linear(i, h, true)?,
                            glu,
                        ),
                        None => {
                            Mlp::plain(l.pp(names.up).linear(h, i, true)?, l.pp(names.down).linear(i, h, true)?, act)
                        }
                    },
                    out_norm: l.pp(if glu.is_some() { "mlp.layernorm" } else { names.out_norm }).layer_norm(h, eps)?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(Bert { embeddings, layers, relative, heads: cfg.num_attention_heads, weight_bytes: w.bytes() - start })
    }

    pub fn hidden_size(&self) -> usize {
        self.embeddings.hidden_size()
    }

    /// Bytes of weights the backend prepared for this encoder.
    pub fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    /// Every real token's final hidden state, packed like the batch: `[tokens, hidden]`.
    pub fn forward(&self, o: &O, batch: &Batch) -> Result<O::T, ModelError> {
        let mut x = self.embeddings.forward(o, batch)?;
        let seqs = o.seqs(&batch.cu_seqlens)?;
        let mut scratch = Scratch::new(o)?;
        let mut mid = o.empty()?;
        // The relative bias for every offset this batch has, per head: `[heads, 2·span − 1]`.
        let span = batch.max_len.max(1);
        let table = self.relative.as_ref().map(|r| r.table(self.heads, span));
        let positional = match &table {
            Some(t) => Positional::Relative(RelativeBias { table: t, span }),
            None => Positional::None,
        };
        for layer in &self.layers {
            layer.attention.forward(o, &x, &x, &seqs, positional, &mut scratch, &mut mid)?;
            o.norm(&mut mid, &layer.attn_norm)?;
            layer.mlp.forward(o, &mid, &mid, &mut scratch, &mut x)?;
            o.norm(&mut x, &layer.out_norm)?;
        }
        Ok(x)
    }
}

impl<O: Ops> TokenEncoder<O> for Bert<O> {
    fn hidden_size(&self) -> usize {
        self.embeddings.hidden_size()
    }

    fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    fn forward(&self, o: &O, batch: &Batch) -> Result<O::T, ModelError> {
        Bert::forward(self, o, batch)
    }
}

/// Where task checkpoints nest the encoder (`bert.`, `roberta.`, ...); `None` for a bare `BertModel`.
fn root_prefix(has: impl Fn(&str) -> bool) -> Option<&'static str> {
    ["bert", "roberta", "mpnet", "distilbert"]
        .into_iter()
        .find(|prefix| has(&format!("{prefix}.embeddings.word_embeddings.weight")))
}

/// The var builder rooted at the encoder (see [`root_prefix`]).
pub fn root(vb: VarBuilder) -> VarBuilder {
    match root_prefix(|name| vb.contains_tensor(name)) {
        Some(prefix) => vb.pp(prefix),
        None => vb,
    }
}

/// The encoder's weights within a whole checkpoint's, sharing its byte count.
pub fn encoder_weights<'a, O: Ops>(top: &Weights<'a, O>) -> Weights<'a, O> {
    match root_prefix(|name| top.contains(name)) {
        Some(prefix) => top.pp(prefix),
        None => top.clone(),
    }
}

/// A masked-LM head: `decoder(norm(act(transform(h))))`, one logit per vocabulary entry. The decoder's
/// weight is usually tied to the word embeddings, which `save_pretrained` then stores once.
pub struct MlmHead<O: Ops> {
    transform: O::Linear,
    act: Activation,
    norm: Norm<O::Param>,
    decoder: O::Linear,
    pub vocab: usize,
}

impl<O: Ops> MlmHead<O> {
    /// `top` is the checkpoint's root (where `cls.` / `lm_head.` / `vocab_*` live), `encoder` the
    /// encoder's (see [`root`]).
    pub fn load(top: &Weights<O>, encoder: &Weights<O>, cfg: &BertConfig) -> Result<Self, ModelError> {
        let (h, v) = (cfg.hidden_size, cfg.vocab_size);
        // (transform, its activation, norm, decoder, the decoder's separately stored bias)
        let (transform, act, norm, decoder, bias) = match cfg.class {
            BertClass::Bert => (
                "cls.predictions.transform.dense",
                cfg.hidden_act.as_str(),
                "cls.predictions.transform.LayerNorm",
                "cls.predictions.decoder",
                "cls.predictions.bias",
            ),
            BertClass::DistilBert => (
                "vocab_transform",
                cfg.hidden_act.as_str(),
                "vocab_layer_norm",
                "vocab_projector",
                "vocab_projector.bias",
            ),
            // RobertaLMHead and MPNetLMHead: GELU whatever `hidden_act` says.
            _ => ("lm_head.dense", "gelu", "lm_head.layer_norm", "lm_head.decoder", "lm_head.bias"),
        };
        if !top.contains(&format!("{transform}.weight")) {
            return Err(ModelError::Unsupported(format!(
                "SPLADE needs a masked-LM head; this checkpoint has no `{transform}.weight` (is it a *ForMaskedLM?)"
            )));
        }
        let vb = top.vb();
        let get = |name: &str, shape: &[usize]| vb.get(shape, name).map_err(crate::error::weights);
        let weight = if vb.contains_tensor(&format!("{decoder}.weight")) {
            get(&format!("{decoder}.weight"), &[v, h])?
        } else {
            encoder.vb().get((v, h), "embeddings.word_embeddings.weight").map_err(crate::error::weights)?
        };
        let bias_name =
            if vb.contains_tensor(&format!("{decoder}.bias")) { format!("{decoder}.bias") } else { bias.into() };
        let bias = get(&bias_name, &[v])?;
        Ok(MlmHead {
            transform: top.pp(transform).linear(h, h, true)?,
            act: Activation::parse(act)?,
            norm: top.pp(norm).layer_norm(h, cfg.layer_norm_eps)?,
            decoder: top.pp(decoder).linear_from(weight, Some(bias))?,
            vocab: v,
        })
    }

    /// The logits of every row of `x` (`[rows, hidden]` → `out` `[rows, vocab]`); `mid` is scratch.
    pub fn forward(&self, o: &O, x: &O::T, mid: &mut O::T, out: &mut O::T) -> Result<(), ModelError> {
        o.linear_fwd(x, &self.transform, Post::Act(self.act), mid)?;
        o.norm(mid, &self.norm)?;
        o.linear_fwd(mid, &self.decoder, Post::None, out)
    }
}
