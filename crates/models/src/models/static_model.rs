//! Static embeddings: a table lookup per token and a mean, no network. Two readers of one table, each with its
//! library's rules:
//! - a model2vec folder (`StaticModel.encode`): `model.safetensors` with `embeddings` (and, for
//!   vocabulary-quantized models, each token's `weights` and its row in `mapping`), `config.json` with `normalize`
//!   and `max_length`, and the tokenizer;
//! - a sentence-transformers `StaticEmbedding` module (`SentenceTransformer.encode`): `embedding.weight` (or
//!   model2vec's tensors, folded the same way) and `tokenizer.json` in the module's folder, `Normalize` after it,
//!   the prompts of `config_sentence_transformers.json`.

use std::path::Path;

use crate::batch::{Batch, Output};
use crate::error::ModelError;
use crate::loader::{Compute, LoadedModel, Model, ModelInfo, Task};
use crate::pooling::Pooling;
use crate::st_config::{PostModule, Prompts, SentenceTransformerConfig};
use crate::tokenizer::{StaticRules, TextTokenizer};

/// A tensor's shape and its values in f32.
type ShapedValues = (Vec<usize>, Vec<f32>);

/// The longest input when the config sets no `max_length` (model2vec: no limit): the CPU's token budget.
const UNLIMITED_WINDOW: usize = 16_384;

pub struct StaticModel {
    /// `rows × dim`, f32.
    table: Vec<f32>,
    dim: usize,
    /// Per token id: a scale (vocabulary quantization keeps each token's norm here).
    weights: Option<Vec<f32>>,
    /// Per token id: its row of `table`.
    mapping: Option<Vec<u32>>,
    normalize: bool,
}

/// Whether `dir` holds a model2vec static model: a `config.json` with no `model_type` (or `model2vec`) beside
/// an `embeddings` table.
pub fn is_static(dir: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join("config.json")) else { return false };
    let Ok(config) = serde_json::from_str::<serde_json::Value>(&text) else { return false };
    let kind = config.get("model_type").and_then(|t| t.as_str());
    matches!(kind, None | Some("model2vec"))
        && dir.join("model.safetensors").exists()
        && config.get("architectures").is_none_or(|a| a.to_string().contains("StaticModel"))
}

pub fn load(dir: &Path) -> Result<LoadedModel, ModelError> {
    let config: serde_json::Value = crate::error::read_json(&dir.join("config.json"))?;
    let normalize = config.get("normalize").and_then(|v| v.as_bool()).unwrap_or(false);
    let max_length = match config.get("max_length") {
        // Written by model2vec 0.10 and later; `null` means no limit, an absent key the old default of 512.
        Some(serde_json::Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| bad(dir, "`max_length` is not a count"))? as usize),
        None => Some(512),
    };
    let tokenizer = TextTokenizer::from_file(&dir.join("tokenizer.json"), max_length.unwrap_or(UNLIMITED_WINDOW))?;
    let (vocab, unk) = tokenizer.vocabulary();
    let model = StaticModel::read(dir, vocab.len(), normalize)?;
    // model2vec's character pre-cut: max_length times the median token length (numpy's median, as an int).
    let char_limit = max_length.map(|n| n * median_length(&vocab));
    let tokenizer = tokenizer.with_static_rules(StaticRules { char_limit, unk });
    Ok(model.into_loaded(tokenizer, Default::default()))
}

/// The `StaticEmbedding` module of a sentence-transformers folder (`dir`), its files in `module_dir`: every
/// token kept (unknown ones too), no special tokens, cut only where `tokenizer.json` itself truncates (its
/// `max_seq_length` is infinite); an empty text is a zero vector (`EmbeddingBag`'s mean of nothing).
pub fn load_sentence_transformers(dir: &Path, module_dir: &Path) -> Result<LoadedModel, ModelError> {
    let st = SentenceTransformerConfig::read(dir)?;
    let mut normalize = false;
    for module in &st.post {
        match module {
            PostModule::Normalize => normalize = true,
            PostModule::Dense(_) => {
                return Err(ModelError::Unsupported(
                    "a Dense module after a StaticEmbedding module is not implemented".into(),
                ))
            }
        }
    }
    if st.pooling.is_some() || st.splade.is_some() {
        return Err(ModelError::Unsupported(
            "a StaticEmbedding module pools by itself: a Pooling module after it is not implemented".into(),
        ));
    }
    let path = module_dir.join("tokenizer.json");
    let cut = saved_truncation(&path)?;
    let tokenizer = TextTokenizer::from_file(&path, cut.unwrap_or(UNLIMITED_WINDOW))?;
    let (vocab, _) = tokenizer.vocabulary();
    let model = StaticModel::read(module_dir, vocab.len(), normalize)?;
    let tokenizer = tokenizer.with_static_rules(StaticRules { char_limit: None, unk: None });
    Ok(model.into_loaded(tokenizer, st.prompts))
}

/// The token cut `tokenizer.json` asks for (`truncation.max_length`), which `Tokenizer.encode_batch` applies.
fn saved_truncation(path: &Path) -> Result<Option<usize>, ModelError> {
    let json: serde_json::Value = crate::error::read_json(path)?;
    let cut = json.get("truncation").filter(|t| !t.is_null());
    let Some(cut) = cut else { return Ok(None) };
    if cut.get("direction").and_then(|d| d.as_str()).is_some_and(|d| d != "Right") {
        return Err(ModelError::Unsupported(format!(
            "{}: truncation from the left is not implemented for static models",
            path.display()
        )));
    }
    let max = cut.get("max_length").and_then(|m| m.as_u64());
    max.map(|m| Some(m as usize)).ok_or_else(|| ModelError::BadFile {
        path: path.to_path_buf(),
        reason: "`truncation` without a `max_length`".into(),
    })
}

/// The module folder of a sentence-transformers model whose first module is `StaticEmbedding` (sentence-
/// transformers 6 saves it at the root, earlier versions in `0_StaticEmbedding/`), if `dir` holds one.
pub fn sentence_transformers_module(dir: &Path) -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string(dir.join("modules.json")).ok()?;
    let modules: Vec<serde_json::Value> = serde_json::from_str(&text).ok()?;
    let first = modules.first()?;
    let kind = first.get("type")?.as_str()?;
    (kind.rsplit('.').next() == Some("StaticEmbedding"))
        .then(|| dir.join(first.get("path").and_then(|p| p.as_str()).unwrap_or_default()))
}

/// `int(np.median(lengths))` of the tokens' character counts.
fn median_length(vocab: &[String]) -> usize {
    let mut lengths: Vec<usize> = vocab.iter().map(|t| t.chars().count()).collect();
    lengths.sort_unstable();
    match lengths.len() {
        0 => 0,
        n if n % 2 == 1 => lengths[n / 2],
        n => (lengths[n / 2 - 1] + lengths[n / 2]) / 2,
    }
}

fn bad(dir: &Path, reason: &str) -> ModelError {
    ModelError::BadFile { path: dir.join("model.safetensors"), reason: reason.to_string() }
}

impl StaticModel {
    /// The table in `dir/model.safetensors`: model2vec's `embeddings` (with `weights` and `mapping` where the
    /// vocabulary was quantized) or sentence-transformers' `embedding.weight`, checked against a vocabulary of
    /// `vocab` tokens.
    fn read(dir: &Path, vocab: usize, normalize: bool) -> Result<Self, ModelError> {
        let path = dir.join("model.safetensors");
        let tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu)
            .map_err(|e| ModelError::BadFile { path: path.clone(), reason: e.to_string() })?;
        let read = |name: &str| -> Result<Option<ShapedValues>, ModelError> {
            let Some(t) = tensors.get(name) else { return Ok(None) };
            let dims = t.dims().to_vec();
            let values = t
                .to_dtype(candle_core::DType::F32)
                .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
                .map_err(|e| bad(dir, &format!("`{name}`: {e}")))?;
            Ok(Some((dims, values)))
        };
        let (dims, table) =
            read("embeddings")?.or(read("embedding.weight")?).ok_or_else(|| bad(dir, "no `embeddings` table"))?;
        let [rows, dim] = dims[..] else {
            return Err(bad(dir, "`embeddings` is not a [rows, dim] table"));
        };
        let weights = read("weights")?.map(|(_, w)| w);
        let mapping = read("mapping")?.map(|(_, m)| m.into_iter().map(|r| r as u32).collect::<Vec<u32>>());
        if mapping.is_none() && rows != vocab {
            return Err(bad(dir, &format!("{rows} table rows for a vocabulary of {vocab} tokens")));
        }
        if mapping.as_ref().is_some_and(|m| m.len() < vocab || m.iter().any(|&r| r as usize >= rows)) {
            return Err(bad(dir, "`mapping` does not map every token to a row of the table"));
        }
        if weights.as_ref().is_some_and(|w| w.len() < vocab) {
            return Err(bad(dir, "`weights` has fewer entries than the vocabulary"));
        }
        Ok(StaticModel { table, dim, weights, mapping, normalize })
    }

    fn into_loaded(self, tokenizer: TextTokenizer, prompts: Prompts) -> LoadedModel {
        let info = ModelInfo {
            normalize: self.normalize,
            prompts,
            ..ModelInfo::new(
                Task::Embed,
                Compute::AlephCpu,
                "StaticModel".into(),
                self.dim,
                tokenizer.window(),
                Pooling::Mean,
            )
        };
        LoadedModel { model: std::sync::Arc::new(self), tokenizer, images: None, audio: None, info }
    }

    /// The mean of the tokens' rows (each scaled by its weight), L2-normalized if the model normalizes; zeros
    /// for a text with no tokens.
    fn embed(&self, ids: &[u32]) -> Result<Vec<f32>, ModelError> {
        let mut sum = vec![0f32; self.dim];
        for &id in ids {
            let row = match &self.mapping {
                Some(m) => m.get(id as usize).copied(),
                None => Some(id),
            };
            let start = row.map(|r| r as usize * self.dim).filter(|&s| s + self.dim <= self.table.len());
            let Some(start) = start else {
                return Err(ModelError::BadTokenId { id, vocab: self.table.len() / self.dim.max(1) });
            };
            let scale = self.weights.as_ref().and_then(|w| w.get(id as usize)).copied().unwrap_or(1.0);
            for (s, &x) in sum.iter_mut().zip(&self.table[start..start + self.dim]) {
                *s += x * scale;
            }
        }
        if !ids.is_empty() {
            let n = ids.len() as f32;
            sum.iter_mut().for_each(|s| *s /= n);
        }
        if self.normalize {
            let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt() + 1e-32;
            sum.iter_mut().for_each(|s| *s /= norm);
        }
        Ok(sum)
    }
}

impl Model for StaticModel {
    fn forward(&self, batch: &Batch) -> Result<Output, ModelError> {
        let vectors = (0..batch.len())
            .map(|i| self.embed(&batch.input_ids[batch.cu_seqlens[i]..batch.cu_seqlens[i + 1]]))
            .collect::<Result<_, _>>()?;
        Ok(Output { vectors })
    }
}
