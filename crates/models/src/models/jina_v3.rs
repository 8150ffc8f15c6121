//! jina-embeddings-v3: XLM-RoBERTa as jinaai/xlm-roberta-flash-implementation writes it (`model_type:
//! xlm-roberta`, `auto_map` to that code), with a LoRA adapter per task on every linear layer and embedding
//! table, chosen per sequence ([`Batch::adapters`]).
//!
//! - Post-norm blocks under `encoder.layers.N`: `mixer.Wqkv` (query, key, value rows), `mixer.out_proj`,
//!   `norm1`, `mlp.fc1`, `mlp.fc2`, `norm2`; `emb_ln` after the embeddings; biases everywhere.
//! - Rotary positions (`rotate_half`, the remote code's `rotary_emb_interleaved: false`) on whole heads,
//!   base `rotary_emb_base`; no position table; one token type.
//! - Every weight saved through torch's parametrization: `X.parametrizations.weight.original`, with the
//!   adapters' `X.parametrizations.weight.0.lora_A` and `lora_B`. A linear layer under adapter `t` computes
//!   with `W + s·B[t]·A[t]` (`A` `[rank, in]`, `B` `[out, rank]`); an embedding table with
//!   `E + s·A[t]·B[t]` (`A` `[rows, rank]`, `B` `[rank, hidden]`); `s = lora_alpha / lora_rank`.
//!
//! Aleph never merges: the low-rank term runs beside the base GEMM, `x·Wᵀ + (x·Aᵀ)·(s·B)ᵀ`, which costs
//! `2·rank` columns per layer and keeps one copy of the weights for every task. A batch mixing adapters runs
//! each adapter's sequences as a batch of their own.

use candle_core::{DType, Tensor};
use serde::Deserialize;

use crate::backend::{Activation, AttentionSpec, Norm, Ops, Post, ScoreBias};
use crate::batch::Batch;
use crate::encoder::TokenEncoder;
use crate::error::{weights, ModelError};
use crate::layers::{rotary, Weights};

/// The code that defines the family, as `auto_map` names it.
pub const REMOTE_CODE: &str = "jinaai/xlm-roberta-flash-implementation";

/// `config.json`, every field resolved with `XLMRobertaFlashConfig`'s defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct JinaV3Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub act: Activation,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    pub rotary_base: f64,
    /// The tasks, in adapter order (`lora_adaptations`).
    pub adapters: Vec<String>,
    pub lora_rank: usize,
    pub lora_alpha: f64,
    /// `load_trained_adapters`: false has the remote code initialise fresh adapters, whose product is zero.
    pub trained_adapters: bool,
}

#[derive(Debug, Default, Deserialize)]
struct File {
    vocab_size: Option<usize>,
    hidden_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    intermediate_size: Option<usize>,
    hidden_act: Option<String>,
    max_position_embeddings: Option<usize>,
    type_vocab_size: Option<usize>,
    layer_norm_eps: Option<f64>,
    position_embedding_type: Option<String>,
    rotary_emb_base: Option<f64>,
    rotary_emb_dim: Option<f64>,
    rotary_emb_interleaved: Option<bool>,
    rotary_emb_scale_base: Option<f64>,
    pad_vocab_size_multiple: Option<usize>,
    lora_adaptations: Option<Vec<String>>,
    lora_rank: Option<usize>,
    lora_alpha: Option<f64>,
    load_trained_adapters: Option<bool>,
}

impl JinaV3Config {
    pub fn read(path: &std::path::Path) -> Result<Self, ModelError> {
        let f: File = crate::error::read_json(path)?;
        let unsupported = |what: String| Err(ModelError::Unsupported(format!("jina-embeddings-v3 {what}")));
        if let Some(p) = f.position_embedding_type.as_deref().filter(|p| *p != "rotary") {
            return unsupported(format!("position_embedding_type `{p}` (only `rotary`)"));
        }
        if f.rotary_emb_interleaved == Some(true) || f.rotary_emb_scale_base.is_some() {
            return unsupported("with interleaved or xPos rotary embeddings".into());
        }
        let act = match f.hidden_act.as_deref().unwrap_or("gelu") {
            "gelu" => Activation::GeluErf,
            "gelu_new" | "gelu_fast" | "gelu_pytorch_tanh" => Activation::GeluTanh,
            other => return unsupported(format!("hidden_act `{other}`")),
        };
        let (hidden, heads) = (f.hidden_size.unwrap_or(1024), f.num_attention_heads.unwrap_or(16));
        if heads == 0 || !hidden.is_multiple_of(heads) || !(hidden / heads).is_multiple_of(2) {
            return unsupported(format!("hidden_size {hidden} over num_attention_heads {heads}"));
        }
        if let Some(d) = f.rotary_emb_dim.filter(|&d| d != (hidden / heads) as f64) {
            return unsupported(format!("rotary_emb_dim {d} (only whole heads, {})", hidden / heads));
        }
        let adapters = f.lora_adaptations.unwrap_or_default();
        let lora_rank = f.lora_rank.unwrap_or(4);
        if !adapters.is_empty() && lora_rank == 0 {
            return unsupported("lora_rank 0".into());
        }
        // XLMRobertaModel rounds the vocabulary up to `pad_vocab_size_multiple`.
        let vocab = f.vocab_size.unwrap_or(250_002).next_multiple_of(f.pad_vocab_size_multiple.unwrap_or(1).max(1));
        Ok(JinaV3Config {
            vocab_size: vocab,
            hidden_size: hidden,
            num_hidden_layers: f.num_hidden_layers.unwrap_or(24),
            num_attention_heads: heads,
            intermediate_size: f.intermediate_size.unwrap_or(4096),
            act,
            max_position_embeddings: f.max_position_embeddings.unwrap_or(8194),
            type_vocab_size: f.type_vocab_size.unwrap_or(1),
            layer_norm_eps: f.layer_norm_eps.unwrap_or(1e-5),
            rotary_base: f.rotary_emb_base.unwrap_or(10_000.0),
            adapters,
            lora_rank,
            lora_alpha: f.lora_alpha.unwrap_or(1.0),
            trained_adapters: f.load_trained_adapters.unwrap_or(false),
        })
    }

    /// The adapters the checkpoint's LoRA matrices hold (none when the remote code would start fresh ones).
    fn trained(&self) -> usize {
        if self.trained_adapters {
            self.adapters.len()
        } else {
            0
        }
    }

    fn scaling(&self) -> f64 {
        self.lora_alpha / self.lora_rank as f64
    }
}

/// Where the parametrized weight and its adapters live under a layer's prefix.
const PARAMETRIZED: &str = "parametrizations.weight";

/// The weight stored under `w`: torch's parametrized `original`, else a plain `weight`.
fn base_weight<O: Ops>(w: &Weights<O>, shape: (usize, usize)) -> Result<Tensor, ModelError> {
    let vb = w.vb();
    let original = format!("{PARAMETRIZED}.original");
    let name = if vb.contains_tensor(&original) { original.as_str() } else { "weight" };
    vb.get(shape, name).map_err(weights)
}

/// Adapter `t`'s `lora_A` and `lora_B` (`[adapters, …]` each), as stored.
fn lora_pair<O: Ops>(
    w: &Weights<O>,
    cfg: &JinaV3Config,
    a: (usize, usize),
    b: (usize, usize),
) -> Result<(Tensor, Tensor), ModelError> {
    let (n, vb) = (cfg.trained(), w.vb().pp(PARAMETRIZED).pp("0"));
    let lora_a = vb.get((n, a.0, a.1), "lora_A").map_err(weights)?;
    let lora_b = vb.get((n, b.0, b.1), "lora_B").map_err(weights)?;
    Ok((lora_a, lora_b))
}

/// A linear layer with a low-rank term per adapter: `down[t]` is `A[t]` (`[rank, in]`), `up[t]` is `s·B[t]`.
struct AdaptedLinear<O: Ops> {
    base: O::Linear,
    down: Vec<O::Linear>,
    up: Vec<O::Linear>,
}

/// Buffers the low-rank terms pass through.
struct LowRank<T> {
    low: T,
    base: T,
}

impl<O: Ops> AdaptedLinear<O> {
    fn load(w: &Weights<O>, inp: usize, out: usize, cfg: &JinaV3Config) -> Result<Self, ModelError> {
        let bias = w.vb().get(out, "bias").map_err(weights)?;
        let base = w.linear_from(base_weight(w, (out, inp))?, Some(bias))?;
        let (mut down, mut up) = (Vec::new(), Vec::new());
        if cfg.trained() > 0 {
            let r = cfg.lora_rank;
            let (a, b) = lora_pair(w, cfg, (r, inp), (out, r))?;
            for t in 0..cfg.trained() {
                let scaled = b.get(t).and_then(|b| b * cfg.scaling()).map_err(weights)?;
                down.push(w.pp("lora_down").pp(t).linear_from(a.get(t).map_err(weights)?, None)?);
                up.push(w.pp("lora_up").pp(t).linear_from(scaled, None)?);
            }
        }
        Ok(AdaptedLinear { base, down, up })
    }

    /// `out = post(x·Wᵀ + b + (x·A[t]ᵀ)·(s·B[t])ᵀ)`, the low-rank term only with an adapter. `out` must not be
    /// `x` or the residual.
    fn forward(
        &self,
        o: &O,
        x: &O::T,
        adapter: Option<usize>,
        post: Post<'_, O::T>,
        buf: &mut LowRank<O::T>,
        out: &mut O::T,
    ) -> Result<(), ModelError> {
        let Some(t) = adapter.filter(|&t| t < self.down.len()) else {
            return o.linear_fwd(x, &self.base, post, out);
        };
        o.linear_fwd(x, &self.down[t], Post::None, &mut buf.low)?;
        match post {
            Post::Act(act) => {
                o.linear_fwd(x, &self.base, Post::None, &mut buf.base)?;
                o.linear_fwd(&buf.low, &self.up[t], Post::Residual(&buf.base), out)?;
                o.activate(out, act)
            }
            other => {
                o.linear_fwd(x, &self.base, other, &mut buf.base)?;
                o.linear_fwd(&buf.low, &self.up[t], Post::Residual(&buf.base), out)
            }
        }
    }
}

struct Block<O: Ops> {
    qkv: AdaptedLinear<O>,
    out: AdaptedLinear<O>,
    norm1: Norm<O::Param>,
    fc1: AdaptedLinear<O>,
    fc2: AdaptedLinear<O>,
    norm2: Norm<O::Param>,
}

/// Word and token-type rows with their adapters, then `emb_ln`.
struct Embeddings<O: Ops> {
    word: O::Table,
    /// Per adapter: `A[t]` (`[vocab, rank]`) as a table, and `s·B[t]ᵀ` as a linear layer.
    word_down: Vec<O::Table>,
    word_up: Vec<O::Linear>,
    /// The token-type table without adapter, then with each adapter's term merged in (a few rows each).
    types: Vec<O::Table>,
    norm: Norm<O::Param>,
}

pub struct JinaV3<O: Ops> {
    embeddings: Embeddings<O>,
    blocks: Vec<Block<O>>,
    spec: AttentionSpec,
    act: Activation,
    vocab: usize,
    hidden: usize,
    rank: usize,
    /// How many adapters a sequence may name (untrained ones add nothing).
    adapters: usize,
    max_len: usize,
    inv_freq: Vec<f32>,
    weight_bytes: usize,
}

impl<O: Ops> JinaV3<O> {
    /// Loads from weights rooted where `embeddings.*`, `emb_ln` and `encoder.*` live (see [`root`]).
    pub fn load(w: &Weights<O>, cfg: &JinaV3Config) -> Result<Self, ModelError> {
        let start = w.bytes();
        let (h, i, eps) = (cfg.hidden_size, cfg.intermediate_size, cfg.layer_norm_eps);
        let emb = w.pp("embeddings");
        let word_w = emb.pp("word_embeddings");
        let parametrized = word_w.vb().contains_tensor(&format!("{PARAMETRIZED}.original"));
        let word = if parametrized {
            word_w.pp(PARAMETRIZED).table_at("original", cfg.vocab_size, h, 1.0)?
        } else {
            word_w.table(cfg.vocab_size, h)?
        };
        let (mut word_down, mut word_up) = (Vec::new(), Vec::new());
        if cfg.trained() > 0 {
            let (a, b) = lora_pair(&word_w, cfg, (cfg.vocab_size, cfg.lora_rank), (cfg.lora_rank, h))?;
            for t in 0..cfg.trained() {
                let up = b.get(t).and_then(|b| (b.t()? * cfg.scaling())?.contiguous()).map_err(weights)?;
                word_down.push(word_w.table_from(a.get(t).map_err(weights)?)?);
                word_up.push(word_w.pp("lora_up").pp(t).linear_from(up, None)?);
            }
        }
        let mut types = Vec::new();
        if cfg.type_vocab_size > 0 {
            let tw = emb.pp("token_type_embeddings");
            let base = base_weight(&tw, (cfg.type_vocab_size, h))?;
            types.push(tw.table_from(base.clone())?);
            if cfg.trained() > 0 {
                let (a, b) = lora_pair(&tw, cfg, (cfg.type_vocab_size, cfg.lora_rank), (cfg.lora_rank, h))?;
                for t in 0..cfg.trained() {
                    let merged = (|| {
                        let f32 = |x: Tensor| x.to_dtype(DType::F32);
                        let term = (f32(a.get(t)?)?.matmul(&f32(b.get(t)?)?)? * cfg.scaling())?;
                        (f32(base.clone())? + term)?.to_dtype(base.dtype())
                    })()
                    .map_err(weights)?;
                    types.push(tw.table_from(merged)?);
                }
            }
        }
        let norm = w.pp("emb_ln").layer_norm(h, eps)?;
        let blocks = (0..cfg.num_hidden_layers)
            .map(|n| {
                let l = w.pp("encoder").pp("layers").pp(n);
                let (mixer, mlp) = (l.pp("mixer"), l.pp("mlp"));
                Ok(Block {
                    qkv: AdaptedLinear::load(&mixer.pp("Wqkv"), h, 3 * h, cfg)?,
                    out: AdaptedLinear::load(&mixer.pp("out_proj"), h, h, cfg)?,
                    norm1: l.pp("norm1").layer_norm(h, eps)?,
                    fc1: AdaptedLinear::load(&mlp.pp("fc1"), h, i, cfg)?,
                    fc2: AdaptedLinear::load(&mlp.pp("fc2"), i, h, cfg)?,
                    norm2: l.pp("norm2").layer_norm(h, eps)?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let head_dim = h / cfg.num_attention_heads;
        Ok(JinaV3 {
            embeddings: Embeddings { word, word_down, word_up, types, norm },
            blocks,
            spec: AttentionSpec::new(h, cfg.num_attention_heads, false),
            act: cfg.act,
            vocab: cfg.vocab_size,
            hidden: h,
            rank: cfg.lora_rank,
            adapters: cfg.adapters.len(),
            max_len: cfg.max_position_embeddings,
            inv_freq: rotary::inv_freq(cfg.rotary_base, head_dim),
            weight_bytes: w.bytes() - start,
        })
    }

    /// `batch` with every sequence under one adapter (or none).
    fn run(&self, o: &O, batch: &Batch, adapter: Option<usize>) -> Result<O::T, ModelError> {
        if batch.max_len > self.max_len {
            return Err(ModelError::Forward(format!(
                "a sequence of {} tokens is longer than the model's {} positions",
                batch.max_len, self.max_len
            )));
        }
        if let Some(&id) = batch.input_ids.iter().find(|&&id| id as usize >= self.vocab) {
            return Err(ModelError::Forward(format!("token id {id} is outside the vocabulary")));
        }
        let tokens = batch.total_tokens();
        let mut buf = LowRank { low: o.empty()?, base: o.empty()? };
        let mut x = o.empty()?;
        // The remote code's tokenizer returns no segment ids: every token is type 0.
        let zeros = vec![0u32; tokens];
        let e = &self.embeddings;
        let mut tables = vec![(&e.word, &batch.input_ids[..])];
        let types = adapter.map_or(0, |t| t + 1).min(e.types.len().saturating_sub(1));
        tables.extend(e.types.get(types).map(|t| (t, &zeros[..])));
        match adapter.filter(|&t| t < e.word_down.len()) {
            Some(t) => {
                o.embed(&mut buf.base, self.hidden, &tables)?;
                o.embed(&mut buf.low, self.rank, &[(&e.word_down[t], &batch.input_ids[..])])?;
                o.linear_fwd(&buf.low, &e.word_up[t], Post::Residual(&buf.base), &mut x)?;
            }
            None => o.embed(&mut x, self.hidden, &tables)?,
        }
        o.norm(&mut x, &e.norm)?;

        let positions: Vec<u32> = (0..batch.len()).flat_map(|s| 0..batch.seq_len(s) as u32).collect();
        let half = self.spec.head_dim / 2;
        let (cos, sin) = rotary::tables(o, &rotary::angles(&self.inv_freq, &positions), tokens, half)?;
        let seqs = o.seqs(&batch.cu_seqlens)?;
        let (mut qkv, mut ctx, mut mid, mut inter) = (o.empty()?, o.empty()?, o.empty()?, o.empty()?);
        for b in &self.blocks {
            b.qkv.forward(o, &x, adapter, Post::None, &mut buf, &mut qkv)?;
            o.rotary(&mut qkv, &self.spec, &cos, &sin)?;
            o.attention(&qkv, &seqs, &self.spec, ScoreBias::None, &mut ctx)?;
            b.out.forward(o, &ctx, adapter, Post::Residual(&x), &mut buf, &mut mid)?;
            o.norm(&mut mid, &b.norm1)?;
            b.fc1.forward(o, &mid, adapter, Post::Act(self.act), &mut buf, &mut inter)?;
            b.fc2.forward(o, &inter, adapter, Post::Residual(&mid), &mut buf, &mut x)?;
            o.norm(&mut x, &b.norm2)?;
        }
        Ok(x)
    }
}

impl<O: Ops> TokenEncoder<O> for JinaV3<O> {
    fn hidden_size(&self) -> usize {
        self.hidden
    }

    fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    /// Each adapter's sequences as a batch of their own, the token states put back in batch order.
    fn forward(&self, o: &O, batch: &Batch) -> Result<O::T, ModelError> {
        let mut groups: Vec<(Option<u16>, Vec<usize>)> = Vec::new();
        for i in 0..batch.len() {
            let a = batch.adapter(i);
            match groups.iter_mut().find(|g| g.0 == a) {
                Some(g) => g.1.push(i),
                None => groups.push((a, vec![i])),
            }
        }
        if let Some(a) = groups.iter().filter_map(|g| g.0).find(|&a| a as usize >= self.adapters) {
            return Err(ModelError::Forward(format!("adapter {a} is not one of the model's {}", self.adapters)));
        }
        if groups.len() <= 1 {
            return self.run(o, batch, groups.first().and_then(|g| g.0).map(usize::from));
        }
        let mut parts = Vec::with_capacity(groups.len());
        let mut rows = vec![(0u32, 0u32); batch.total_tokens()];
        for (g, (adapter, which)) in groups.iter().enumerate() {
            parts.push(self.run(o, &batch.select(which), adapter.map(usize::from))?);
            let mut row = 0u32;
            for &i in which {
                for slot in &mut rows[batch.cu_seqlens[i]..batch.cu_seqlens[i + 1]] {
                    *slot = (g as u32, row);
                    row += 1;
                }
            }
        }
        let mut out = o.empty()?;
        o.gather_rows(&mut out, &parts.iter().collect::<Vec<_>>(), &rows)?;
        Ok(out)
    }
}

/// XLMRobertaLoRA saves the encoder under `roberta.`; a bare XLMRobertaModel at the root.
pub fn root(vb: candle_nn::VarBuilder) -> candle_nn::VarBuilder {
    if vb.contains_tensor("roberta.emb_ln.weight") {
        vb.pp("roberta")
    } else {
        vb
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Result<JinaV3Config, ModelError> {
        let path = std::env::temp_dir().join(format!("aleph-jina-v3-{}-{}.json", std::process::id(), json.len()));
        std::fs::write(&path, json).unwrap();
        let cfg = JinaV3Config::read(&path);
        std::fs::remove_file(&path).unwrap();
        cfg
    }

    #[test]
    fn defaults_are_the_remote_configs_and_what_is_not_built_is_refused() {
        let c = read("{}").unwrap();
        assert_eq!(
            (c.vocab_size, c.hidden_size, c.num_hidden_layers, c.max_position_embeddings),
            (250_002, 1024, 24, 8194)
        );
        assert_eq!((c.rotary_base, c.lora_rank, c.lora_alpha, c.trained()), (10_000.0, 4, 1.0, 0));
        assert_eq!((c.act, c.type_vocab_size, c.layer_norm_eps), (Activation::GeluErf, 1, 1e-5));
        let c = read(r#"{"lora_adaptations": ["a", "b"], "load_trained_adapters": true, "lora_rank": 2}"#).unwrap();
        assert_eq!((c.trained(), c.scaling()), (2, 0.5));
        assert_eq!(read(r#"{"vocab_size": 250002, "pad_vocab_size_multiple": 64}"#).unwrap().vocab_size, 250_048);
        for (refused, what) in [
            (r#"{"position_embedding_type": "absolute"}"#, "absolute"),
            (r#"{"position_embedding_type": "alibi"}"#, "alibi"),
            (r#"{"rotary_emb_interleaved": true}"#, "interleaved"),
            (r#"{"rotary_emb_dim": 32.0}"#, "rotary_emb_dim"),
            (r#"{"hidden_act": "relu"}"#, "relu"),
        ] {
            let err = read(refused).unwrap_err().to_string();
            assert!(err.contains(what), "{refused}: {err}");
        }
    }
}
