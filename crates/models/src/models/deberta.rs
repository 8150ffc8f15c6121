//! DeBERTa-v2 and v3 (mxbai-rerank-base/large-v1, the nli-deberta-v3 cross-encoders, DeBERTa-v3
//! classifiers), one definition over [`Ops`]: BERT's post-norm layers with disentangled attention. Each
//! score adds to `q_i·k_j` the query's content against the key's relative position (`c2p`) and the key's
//! content against the query's (`p2c`), offsets bucketed logarithmically past `position_buckets / 2`, the
//! position tables being the shared relative embeddings (layer-normed) through each layer's key and query
//! projections. Those tables depend on weights only, so they are computed once, at load.

use candle_core::{Module, Tensor};
use candle_nn::VarBuilder;
use serde::Deserialize;

use crate::backend::{Activation, AttentionSpec, Disentangled, Norm, Ops};
use crate::batch::Batch;
use crate::encoder::TokenEncoder;
use crate::error::{weights, ModelError};
use crate::layers::{Mlp, Positional, Scratch, SelfAttention, TextEmbeddings, Weights};

/// `config.json` as `DebertaV2Config` reads it; absent fields take that class's defaults (or, for the
/// fields the modeling code reads with `getattr`, the fallback it gives there).
#[derive(Debug, Clone, Deserialize)]
pub struct DebertaConfig {
    #[serde(default = "crate::config::n::<128100>")]
    pub vocab_size: usize,
    #[serde(default = "crate::config::n::<1536>")]
    pub hidden_size: usize,
    #[serde(default = "crate::config::n::<24>")]
    pub num_hidden_layers: usize,
    #[serde(default = "crate::config::n::<24>")]
    pub num_attention_heads: usize,
    #[serde(default = "crate::config::n::<6144>")]
    pub intermediate_size: usize,
    #[serde(default = "gelu")]
    pub hidden_act: String,
    #[serde(default = "crate::config::n::<512>")]
    pub max_position_embeddings: usize,
    #[serde(default)]
    pub type_vocab_size: usize,
    #[serde(default = "eps")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub relative_attention: bool,
    #[serde(default = "minus_one")]
    pub max_relative_positions: i64,
    #[serde(default = "minus_one")]
    pub position_buckets: i64,
    #[serde(default = "yes")]
    pub position_biased_input: bool,
    /// `"p2c|c2p"` or `["p2c", "c2p"]`.
    pub pos_att_type: Option<serde_json::Value>,
    #[serde(default)]
    pub share_att_key: bool,
    #[serde(default = "none")]
    pub norm_rel_ebd: String,
    #[serde(default)]
    pub conv_kernel_size: usize,
    pub embedding_size: Option<usize>,
    pub attention_head_size: Option<usize>,
    pub pooler_hidden_size: Option<usize>,
    #[serde(default = "gelu")]
    pub pooler_hidden_act: String,
}

fn gelu() -> String {
    "gelu".into()
}
fn none() -> String {
    "none".into()
}
fn eps() -> f64 {
    1e-7
}
fn minus_one() -> i64 {
    -1
}
fn yes() -> bool {
    true
}

impl DebertaConfig {
    /// The relative attention kinds in use (`c2p`, `p2c`), lower-cased as transformers splits them.
    pub fn pos_att_types(&self) -> Result<Vec<String>, ModelError> {
        let kinds: Vec<String> = match &self.pos_att_type {
            None | Some(serde_json::Value::Null) => vec![],
            Some(serde_json::Value::String(s)) => s.to_lowercase().split('|').map(|x| x.trim().to_string()).collect(),
            Some(serde_json::Value::Array(a)) => a.iter().filter_map(|x| x.as_str()).map(str::to_string).collect(),
            Some(other) => return Err(ModelError::Unsupported(format!("pos_att_type {other}"))),
        };
        Ok(kinds)
    }

    fn head_size(&self) -> usize {
        self.attention_head_size.unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// transformers' `max_relative_positions` after its fallback to the position table's length.
    fn max_relative(&self) -> usize {
        if self.max_relative_positions < 1 {
            self.max_position_embeddings
        } else {
            self.max_relative_positions as usize
        }
    }

    /// Rows of the relative embedding table on either side of zero (`att_span`).
    pub fn span(&self) -> usize {
        if self.position_buckets > 0 {
            self.position_buckets as usize
        } else {
            self.max_relative()
        }
    }

    /// What no backend implements, refused at load naming the field.
    pub fn check(&self) -> Result<(), ModelError> {
        let (h, heads) = (self.hidden_size, self.num_attention_heads);
        if heads == 0 || self.head_size() == 0 {
            return Err(ModelError::Unsupported(format!("num_attention_heads {heads} over hidden_size {h}")));
        }
        if self.conv_kernel_size > 0 {
            return Err(ModelError::Unsupported(format!(
                "conv_kernel_size {} (DeBERTa-v2's convolution after the first layer is not implemented)",
                self.conv_kernel_size
            )));
        }
        if self.embedding_size.is_some_and(|e| e != h) {
            return Err(ModelError::Unsupported(format!(
                "embedding_size {:?} differs from hidden_size {h} (the embedding projection is not implemented)",
                self.embedding_size
            )));
        }
        if self.pooler_hidden_size.is_some_and(|p| p != h) {
            return Err(ModelError::Unsupported(format!(
                "pooler_hidden_size {:?} (only hidden_size {h})",
                self.pooler_hidden_size
            )));
        }
        for kind in self.pos_att_types()? {
            if kind != "c2p" && kind != "p2c" {
                return Err(ModelError::Unsupported(format!("pos_att_type `{kind}` (supported: c2p, p2c)")));
            }
        }
        let rel_norm: Vec<String> = self.norm_rel_ebd.to_lowercase().split('|').map(|x| x.trim().to_string()).collect();
        if let Some(other) = rel_norm.iter().find(|x| *x != "none" && *x != "layer_norm") {
            return Err(ModelError::Unsupported(format!("norm_rel_ebd `{other}` (supported: none, layer_norm)")));
        }
        if self.position_buckets > 0 && self.position_buckets < 2 {
            return Err(ModelError::Unsupported(format!("position_buckets {}", self.position_buckets)));
        }
        Activation::parse(&self.hidden_act)?;
        Ok(())
    }
}

/// The table row offset `i − j` reads: `make_log_bucket_position` (when `position_buckets` is set), moved
/// to the table's centre and clamped, in f32 as torch computes it.
pub fn table_row(offset: i64, buckets: i64, max_position: i64, span: usize) -> u32 {
    let bucketed = if buckets > 0 && max_position > 0 {
        let mid = buckets / 2;
        let abs = if offset < mid && offset > -mid { mid - 1 } else { offset.abs() };
        if abs <= mid {
            offset
        } else {
            let ratio = (abs as f32 / mid as f32).ln() / ((max_position - 1) as f32 / mid as f32).ln();
            let log = (ratio * (mid - 1) as f32).ceil() + mid as f32;
            log as i64 * offset.signum()
        }
    } else {
        offset
    };
    (bucketed + span as i64).clamp(0, 2 * span as i64 - 1) as u32
}

struct Layer<O: Ops> {
    attention: SelfAttention<O>,
    /// The relative embeddings through this layer's key (c2p) and query (p2c) projections.
    pos_key: Option<O::Param>,
    pos_query: Option<O::Param>,
    attn_norm: Norm<O::Param>,
    mlp: Mlp<O>,
    out_norm: Norm<O::Param>,
}

pub struct Deberta<O: Ops> {
    embeddings: TextEmbeddings<O>,
    layers: Vec<Layer<O>>,
    relative: bool,
    buckets: i64,
    max_relative: i64,
    span: usize,
    weight_bytes: usize,
}

/// Where task checkpoints nest the encoder.
pub fn root(vb: VarBuilder) -> VarBuilder {
    if vb.contains_tensor("deberta.embeddings.word_embeddings.weight") {
        vb.pp("deberta")
    } else {
        vb
    }
}

impl<O: Ops> Deberta<O> {
    pub fn load(w: &Weights<O>, cfg: &DebertaConfig) -> Result<Self, ModelError> {
        cfg.check()?;
        let act = Activation::parse(&cfg.hidden_act)?;
        let (h, i, eps) = (cfg.hidden_size, cfg.intermediate_size, cfg.layer_norm_eps);
        let (heads, hd) = (cfg.num_attention_heads, cfg.head_size());
        let all = heads * hd;
        let start = w.bytes();
        let emb = w.pp("embeddings");
        let positions = cfg.position_biased_input.then_some((cfg.max_position_embeddings, 0));
        let norm = emb.pp("LayerNorm").layer_norm(h, eps)?;
        let embeddings = TextEmbeddings::bert(&emb, cfg.vocab_size, h, positions, cfg.type_vocab_size, norm)?;
        let kinds = cfg.pos_att_types()?;
        let (c2p, p2c) = (kinds.iter().any(|k| k == "c2p"), kinds.iter().any(|k| k == "p2c"));
        // transformers scales q·k and both position terms by 1/√(d · (1 + number of kinds)), whether or
        // not relative attention is on.
        let factor = 1 + c2p as usize + p2c as usize;
        let spec = AttentionSpec {
            heads,
            kv_heads: heads,
            head_dim: hd,
            scale: 1.0 / ((hd * factor) as f32).sqrt(),
            causal: false,
            window: None,
        };
        let span = cfg.span();
        // The relative embeddings every layer projects, normed once.
        let rel = if cfg.relative_attention {
            let enc = w.vb().pp("encoder");
            let mut rel = enc.get((2 * span, h), "rel_embeddings.weight").map_err(weights)?;
            if cfg.norm_rel_ebd.to_lowercase().split('|').any(|x| x.trim() == "layer_norm") {
                let norm = candle_nn::layer_norm(h, eps, enc.pp("LayerNorm")).map_err(weights)?;
                rel = norm.forward(&rel).map_err(weights)?;
            }
            Some(rel)
        } else {
            None
        };
        let project = |vb: VarBuilder, rel: &Tensor| -> Result<O::Param, ModelError> {
            let linear = candle_nn::linear(h, all, vb).map_err(weights)?;
            w.param_from(linear.forward(rel).map_err(weights)?)
        };
        let layers = (0..cfg.num_hidden_layers)
            .map(|n| {
                let l = w.pp("encoder.layer").pp(n);
                let att = l.pp("attention.self");
                let (mut pos_key, mut pos_query) = (None, None);
                if let Some(rel) = &rel {
                    let vb = att.vb();
                    let (kname, qname) =
                        if cfg.share_att_key { ("key_proj", "query_proj") } else { ("pos_key_proj", "pos_query_proj") };
                    if c2p {
                        pos_key = Some(project(vb.pp(kname), rel)?);
                    }
                    if p2c {
                        pos_query = Some(project(vb.pp(qname), rel)?);
                    }
                }
                Ok(Layer {
                    attention: SelfAttention {
                        qk_norm: None,
                        qkv: att.linear_cat(&[("query_proj", all), ("key_proj", all), ("value_proj", all)], h, true)?,
                        out: l.pp("attention.output.dense").linear(all, h, true)?,
                        spec,
                    },
                    pos_key,
                    pos_query,
                    attn_norm: l.pp("attention.output.LayerNorm").layer_norm(h, eps)?,
                    mlp: Mlp::plain(
                        l.pp("intermediate.dense").linear(h, i, true)?,
                        l.pp("output.dense").linear(i, h, true)?,
                        act,
                    ),
                    out_norm: l.pp("output.LayerNorm").layer_norm(h, eps)?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(Deberta {
            embeddings,
            layers,
            relative: cfg.relative_attention,
            buckets: cfg.position_buckets,
            max_relative: cfg.max_relative() as i64,
            span,
            weight_bytes: w.bytes() - start,
        })
    }

    /// The longest input: the absolute position table's, where the model has one (the relative table
    /// clamps far offsets, so it sets no limit).
    pub fn max_len(cfg: &DebertaConfig) -> usize {
        cfg.max_position_embeddings
    }
}

impl<O: Ops> TokenEncoder<O> for Deberta<O> {
    fn hidden_size(&self) -> usize {
        self.embeddings.hidden_size()
    }

    fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    fn forward(&self, o: &O, batch: &Batch) -> Result<O::T, ModelError> {
        let mut x = self.embeddings.forward(o, batch)?;
        let seqs = o.seqs(&batch.cu_seqlens)?;
        // The table row of every offset this batch has.
        let longest = batch.max_len.max(1);
        let rows: Vec<u32> = (0..2 * longest - 1)
            .map(|e| table_row(e as i64 - (longest as i64 - 1), self.buckets, self.max_relative, self.span))
            .collect();
        let mut scratch = Scratch::new(o)?;
        let mut mid = o.empty()?;
        for layer in &self.layers {
            let positional = if self.relative && (layer.pos_key.is_some() || layer.pos_query.is_some()) {
                Positional::Disentangled(Disentangled {
                    pos_key: layer.pos_key.as_ref(),
                    pos_query: layer.pos_query.as_ref(),
                    rows: &rows,
                    span: longest,
                })
            } else {
                Positional::None
            };
            layer.attention.forward(o, &x, &x, &seqs, positional, &mut scratch, &mut mid)?;
            o.norm(&mut mid, &layer.attn_norm)?;
            layer.mlp.forward(o, &mid, &mid, &mut scratch, &mut x)?;
            o.norm(&mut x, &layer.out_norm)?;
        }
        Ok(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_bucket_as_transformers_does() {
        // DeBERTa-v3: 256 buckets over 512 positions. Exact within ±128, logarithmic beyond, clamped.
        let row = |d| table_row(d, 256, 512, 256) as i64 - 256;
        assert_eq!((row(0), row(5), row(-5), row(127), row(-128), row(128)), (0, 5, -5, 127, -128, 128));
        // ceil(ln(129/128) / ln(511/128) · 127) + 128 = 129; the far end stays inside the table.
        assert_eq!(row(129), 129);
        assert_eq!(row(-129), -129);
        assert_eq!((row(511), row(-511)), (255, -255));
        // Past the position table the bucket passes the table's end and clamps.
        assert_eq!((row(1000), row(-1000)), (255, -256));
        // Without buckets the offset itself, clamped to the table.
        assert_eq!(table_row(3, -1, 512, 4), 7);
        assert_eq!(table_row(-9, -1, 512, 4), 0);
    }

    #[test]
    fn unimplemented_variants_are_refused_naming_the_field() {
        let cfg = |json: &str| serde_json::from_str::<DebertaConfig>(json).unwrap();
        for (json, field) in [
            (r#"{"conv_kernel_size": 3}"#, "conv_kernel_size"),
            (r#"{"embedding_size": 128, "hidden_size": 32, "num_attention_heads": 4}"#, "embedding_size"),
            (r#"{"pos_att_type": "p2p|c2p"}"#, "pos_att_type `p2p`"),
            (r#"{"norm_rel_ebd": "batch_norm"}"#, "norm_rel_ebd"),
            (r#"{"hidden_act": "mish"}"#, "hidden_act"),
        ] {
            let err = cfg(json).check().unwrap_err().to_string();
            assert!(err.contains(field), "{json}: {err}");
        }
        // DeBERTa-v3's configuration as its checkpoints write it is accepted.
        let v3 = r#"{"relative_attention": true, "pos_att_type": ["p2c", "c2p"], "position_buckets": 256,
                     "norm_rel_ebd": "layer_norm", "share_att_key": true, "hidden_size": 768,
                     "num_attention_heads": 12, "position_biased_input": false}"#;
        assert!(cfg(v3).check().is_ok());
        assert_eq!(cfg(v3).span(), 256);
    }
}
