//! `EngineArgs` as the engine reads it: the keyword options the Python package passes, parsed into a
//! [`ModelSpec`] with the same parsers and defaults as the command line.

use std::path::PathBuf;
use std::str::FromStr;

use aleph_engine::spec::{default_served_name, Engine, ModelSpec};
use aleph_models::quantize::EmbeddingDtype;
use aleph_models::{DType, Device, ModelTask, PoolingChoice, RerankTemplate};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `--vector-disk-cache-max-bytes`' default.
pub const VECTOR_CACHE_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// The options, as strings and numbers; names as `EngineArgs`' fields (Aleph's extra ones as the flags').
#[derive(Debug, Default)]
pub struct Options {
    model_name_or_path: String,
    served_model_name: Option<String>,
    revision: Option<String>,
    engine: Option<String>,
    batch_size: Option<usize>,
    max_batch_tokens: Option<usize>,
    device: Option<String>,
    device_id: Vec<usize>,
    dtype: Option<String>,
    pooling_method: Option<String>,
    embedding_dtype: Option<String>,
    trust_remote_code: Option<bool>,
    model_warmup: Option<bool>,
    vector_disk_cache_path: Option<String>,
    model_task: Option<String>,
    rerank_template: Option<String>,
    rerank_instruction: Option<String>,
    default_prompt_name: Option<String>,
    truncate_dim: Option<usize>,
    compute_weight: Option<f64>,
    queue_size: Option<usize>,
    max_request_tokens: Option<usize>,
    tokenizer_workers: Option<usize>,
    media_max_pixels: Option<u64>,
    media_max_seconds: Option<f64>,
}

/// (the spec, the vector cache's folder, the queue's size, tokenizer threads)
pub type Parsed = (ModelSpec, Option<PathBuf>, usize, Option<usize>);

impl Options {
    pub fn from_dict(d: Option<&Bound<'_, PyDict>>) -> PyResult<Options> {
        let mut o = Options::default();
        let Some(d) = d else {
            return Err(PyTypeError::new_err("model_name_or_path is required"));
        };
        for (key, value) in d.iter() {
            let key: String = key.extract()?;
            if value.is_none() {
                continue;
            }
            let bad = |e: PyErr| PyTypeError::new_err(format!("`{key}`: {e}"));
            macro_rules! set {
                ($field:ident) => {
                    o.$field = value.extract().map_err(bad)?
                };
            }
            match key.as_str() {
                "model_name_or_path" => set!(model_name_or_path),
                "served_model_name" => set!(served_model_name),
                "revision" => set!(revision),
                "engine" => set!(engine),
                "batch_size" => set!(batch_size),
                "max_batch_tokens" => set!(max_batch_tokens),
                "device" => set!(device),
                "device_id" => set!(device_id),
                "dtype" => set!(dtype),
                "pooling_method" => set!(pooling_method),
                "embedding_dtype" => set!(embedding_dtype),
                "trust_remote_code" => set!(trust_remote_code),
                "model_warmup" => set!(model_warmup),
                "vector_disk_cache_path" => set!(vector_disk_cache_path),
                "model_task" => set!(model_task),
                "rerank_template" => set!(rerank_template),
                "rerank_instruction" => set!(rerank_instruction),
                "default_prompt_name" => set!(default_prompt_name),
                "truncate_dim" => set!(truncate_dim),
                "compute_weight" => set!(compute_weight),
                "queue_size" => set!(queue_size),
                "max_request_tokens" => set!(max_request_tokens),
                "tokenizer_workers" => set!(tokenizer_workers),
                "media_max_pixels" => set!(media_max_pixels),
                "media_max_seconds" => set!(media_max_seconds),
                other => return Err(PyTypeError::new_err(format!("unknown engine option `{other}`"))),
            }
        }
        Ok(o)
    }

    /// Parsed as the command line parses the same flags; `Err` names the option.
    pub fn model_spec(self) -> Result<Parsed, String> {
        fn parse<T: FromStr<Err = String>>(name: &str, v: Option<String>, default: &str) -> Result<T, String> {
            let v = v.unwrap_or_else(|| default.to_string());
            v.parse().map_err(|e| format!("{name}: {e}"))
        }
        let id = self.model_name_or_path.trim().to_string();
        if id.is_empty() {
            return Err("model_name_or_path: a model is required".into());
        }
        if self.batch_size == Some(0) {
            return Err("batch_size must be at least 1".into());
        }
        let engine: Engine = parse("engine", self.engine, "auto")?;
        let device: Device = parse("device", self.device, "auto")?;
        let dtype: DType = parse("dtype", self.dtype, "auto")?;
        let pooling: PoolingChoice = parse("pooling_method", self.pooling_method, "auto")?;
        let embedding_dtype: EmbeddingDtype = parse("embedding_dtype", self.embedding_dtype, "float32")?;
        let task: ModelTask = parse("model_task", self.model_task, "auto")?;
        let rerank_template: RerankTemplate = parse("rerank_template", self.rerank_template, "auto")?;
        let served_name = self.served_model_name.filter(|s| !s.is_empty()).unwrap_or_else(|| default_served_name(&id));
        let cache = self.vector_disk_cache_path.filter(|p| !p.is_empty()).map(PathBuf::from);
        let spec = ModelSpec {
            model_id: id,
            served_name,
            revision: self.revision.filter(|r| !r.is_empty()),
            engine,
            batch_size: self.batch_size,
            max_batch_tokens: self.max_batch_tokens,
            device,
            device_ids: self.device_id,
            dtype,
            pooling,
            embedding_dtype,
            trust_remote_code: self.trust_remote_code.unwrap_or(true),
            task,
            rerank_instruction: self.rerank_instruction.filter(|s| !s.is_empty()),
            rerank_template,
            vector_disk_cache: cache.is_some(),
            default_prompt_name: self.default_prompt_name.filter(|s| !s.is_empty()),
            truncate_dim: self.truncate_dim.unwrap_or(0),
            warmup: self.model_warmup.unwrap_or(true),
            max_image_pixels: self.media_max_pixels.unwrap_or(64 * 1024 * 1024),
            max_audio_seconds: self.media_max_seconds.unwrap_or(600.0),
            max_request_tokens: self.max_request_tokens.unwrap_or(0),
            compute_weight: self.compute_weight.unwrap_or(1.0),
        };
        Ok((spec, cache, self.queue_size.unwrap_or(32_000), self.tokenizer_workers))
    }
}
