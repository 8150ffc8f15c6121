//! From a model folder to a runnable model: config dispatch, weights, tokenizer, pooling.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use candle_nn::VarBuilder;

use crate::architectures::bert::{self, Bert, BertConfig};
use crate::batch::{Batch, Output};
use crate::config::ArchConfig;
use crate::error::{read_json, ModelError};
use crate::pooling::{l2_normalize, pool_sequence, Pooling, PoolingChoice};
use crate::st_config::SentenceTransformerConfig;
use crate::tokenizer::TextTokenizer;

/// Runs one batch. Implementations own their weights; the engine calls them from one thread.
pub trait Model: Send + Sync {
    fn forward(&self, batch: &Batch) -> Result<Output, ModelError>;
}

/// What a served model can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    Embed,
}

impl Task {
    /// The capability names Infinity reports in `/models`.
    pub fn capabilities(self) -> &'static [&'static str] {
        match self {
            Task::Embed => &["embed"],
        }
    }
}

/// Facts about a loaded model that the engine and the HTTP layer need.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    pub task: Task,
    /// The compute backend, as `/models` reports it.
    pub backend: &'static str,
    pub architecture: String,
    /// Length of each output vector.
    pub dim: usize,
    /// Longest input in tokens, special tokens included.
    pub window: usize,
    /// Whether the backend computes padded rectangles (so padding counts against the token budget).
    pub pads: bool,
    pub pooling: Pooling,
    pub normalize: bool,
}

pub struct LoadedModel {
    pub model: Box<dyn Model>,
    pub tokenizer: TextTokenizer,
    pub info: ModelInfo,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    #[default]
    Cpu,
}

impl FromStr for Device {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "cpu" | "auto" => Ok(Device::Cpu),
            other => Err(format!(
                "device `{other}` is not available in this build (expected cpu or auto)"
            )),
        }
    }
}

/// Weight precision for compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DType {
    #[default]
    Auto,
    Float32,
}

impl FromStr for DType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(DType::Auto),
            "float32" | "fp32" | "f32" => Ok(DType::Float32),
            other => Err(format!(
                "dtype `{other}` is not supported on cpu (expected auto or float32)"
            )),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    pub pooling: PoolingChoice,
    pub dtype: DType,
    pub device: Device,
}

/// Loads the model in `dir`, choosing the architecture from `config.json`.
pub fn load(dir: &Path, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    let arch = ArchConfig::read(dir)?;
    match arch.model_type.as_str() {
        "bert" => load_bert_embedder(dir, &arch, opts),
        other => Err(ModelError::Unsupported(format!(
            "model_type `{other}` (architectures {:?}); supported: bert",
            arch.architectures
        ))),
    }
}

fn load_bert_embedder(dir: &Path, arch: &ArchConfig, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    let cfg: BertConfig = read_json(&dir.join("config.json"))?;
    let st = SentenceTransformerConfig::read(dir)?;
    let window = st
        .max_seq_length
        .unwrap_or(cfg.max_position_embeddings)
        .min(cfg.max_position_embeddings);
    let pooling = match opts.pooling {
        PoolingChoice::Fixed(p) => p,
        // A plain transformers folder has no pooling module: sentence-transformers then uses mean.
        PoolingChoice::Auto => st.pooling.unwrap_or(Pooling::Mean),
    };
    let tokenizer = TextTokenizer::from_file(&dir.join("tokenizer.json"), window)?;
    let vb = var_builder(dir)?;
    let encoder = Bert::load(bert::root(vb), &cfg)?;
    let info = ModelInfo {
        task: Task::Embed,
        backend: "candle",
        architecture: arch
            .architectures
            .first()
            .cloned()
            .unwrap_or_else(|| "BertModel".into()),
        dim: cfg.hidden_size,
        window,
        pads: true,
        pooling,
        normalize: st.normalize,
    };
    let model = BertEmbedder {
        encoder,
        pooling,
        normalize: st.normalize,
    };
    Ok(LoadedModel {
        model: Box::new(model),
        tokenizer,
        info,
    })
}

/// Memory-maps the folder's safetensors: `model.safetensors`, or the shards an index names.
fn var_builder(dir: &Path) -> Result<VarBuilder<'static>, ModelError> {
    let files = safetensors_files(dir)?;
    for f in &files {
        if !f.exists() {
            return Err(ModelError::MissingFile(f.clone()));
        }
    }
    // SAFETY: the files are memory-mapped read-only; Aleph never writes to model files, and a
    // concurrent writer is outside what any HF loader guards against.
    unsafe { VarBuilder::from_mmaped_safetensors(&files, candle_core::DType::F32, &candle_core::Device::Cpu) }.map_err(
        |e| ModelError::BadFile {
            path: files[0].clone(),
            reason: e.to_string(),
        },
    )
}

fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let single = dir.join("model.safetensors");
    let index = dir.join("model.safetensors.index.json");
    if single.exists() || !index.exists() {
        return Ok(vec![single]);
    }
    #[derive(serde::Deserialize)]
    struct Index {
        weight_map: std::collections::BTreeMap<String, String>,
    }
    let idx: Index = read_json(&index)?;
    let mut shards: Vec<String> = idx.weight_map.into_values().collect();
    shards.sort();
    shards.dedup();
    Ok(shards.into_iter().map(|s| dir.join(s)).collect())
}

struct BertEmbedder {
    encoder: Bert,
    pooling: Pooling,
    normalize: bool,
}

impl Model for BertEmbedder {
    fn forward(&self, batch: &Batch) -> Result<Output, ModelError> {
        if batch.is_empty() {
            return Ok(Output::default());
        }
        let states = bert::to_host(&self.encoder.forward(batch)?)?;
        let (l, h) = (batch.max_len, self.encoder.hidden_size());
        let embeddings = (0..batch.len())
            .map(|i| {
                let mut v = Vec::with_capacity(h);
                pool_sequence(
                    self.pooling,
                    &states[i * l * h..(i + 1) * l * h],
                    batch.seq_len(i),
                    h,
                    &mut v,
                );
                if self.normalize {
                    l2_normalize(&mut v);
                }
                v
            })
            .collect();
        Ok(Output { embeddings })
    }
}
