//! One model's serving options, parsed: what the `aleph` command line, the admin API and the Python package's
//! `EngineArgs` all reduce to before anything loads.

use aleph_models::quantize::EmbeddingDtype;
use aleph_models::{DType, Device, ModelTask, PoolingChoice, RerankTemplate};

/// Everything needed to load and serve one model, every option already parsed: a bad value is refused
/// before anything is downloaded or loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    pub model_id: String,
    pub served_name: String,
    pub revision: Option<String>,
    pub engine: Engine,
    /// `--batch-size`, `--max-batch-tokens`: `None` takes the device's default ([`ModelSpec::batching`]).
    pub batch_size: Option<usize>,
    pub max_batch_tokens: Option<usize>,
    pub device: Device,
    /// `--device-id`: the GPU ordinals (or, on the CPU, the count) of the replicas; empty means one.
    pub device_ids: Vec<usize>,
    pub dtype: DType,
    pub pooling: PoolingChoice,
    pub embedding_dtype: EmbeddingDtype,
    pub trust_remote_code: bool,
    pub task: ModelTask,
    pub rerank_instruction: Option<String>,
    pub rerank_template: RerankTemplate,
    pub vector_disk_cache: bool,
    /// `--default-prompt-name`, checked against the model's prompts at load.
    pub default_prompt_name: Option<String>,
    /// `--truncate-dim` (0: none), checked against the model's width at load.
    pub truncate_dim: usize,
    pub warmup: bool,
    /// `--media-max-pixels`, applied by the model's image processor.
    pub max_image_pixels: u64,
    /// `--media-max-seconds`, applied by the model's audio processor.
    pub max_audio_seconds: f64,
    /// `--max-request-tokens`, enforced by the model's handle.
    pub max_request_tokens: usize,
    /// `--compute-weight`.
    pub compute_weight: f64,
}

/// Batching on the CPU: what Infinity defaults to; 16k tokens keep a batch's activations in cache-sized pieces.
const CPU_BATCHING: (usize, usize) = (32, 16384);
/// Batching on a GPU: hundreds of sequences per pass keep its cores busy, and 32k tokens (padding included for
/// padded batches) stay well within a GPU's memory for encoder-sized models.
const GPU_BATCHING: (usize, usize) = (256, 32768);

impl ModelSpec {
    /// (sequences, tokens) per forward pass: what was asked, else the default for where the model runs.
    pub fn batching(&self, on_gpu: bool) -> (usize, usize) {
        let (items, tokens) = if on_gpu { GPU_BATCHING } else { CPU_BATCHING };
        (self.batch_size.unwrap_or(items), self.max_batch_tokens.unwrap_or(tokens))
    }
}

/// Which backend computes a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Auto,
    Candle,
    Debug,
}

impl Engine {
    /// Infinity's engines that select Python machinery; Aleph runs its own instead.
    pub fn python_name(s: &str) -> Option<&'static str> {
        match s.to_ascii_lowercase().as_str() {
            "torch" => Some("torch"),
            "optimum" => Some("optimum"),
            "ctranslate2" => Some("ctranslate2"),
            _ => None,
        }
    }
}

impl std::str::FromStr for Engine {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if Engine::python_name(s).is_some() {
            return Ok(Engine::Auto);
        }
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Engine::Auto),
            "candle" => Ok(Engine::Candle),
            "debugengine" | "debug" => Ok(Engine::Debug),
            "neuron" => Err("engine `neuron` runs on AWS Inferentia through Python; Aleph does not support it \
                             (use auto or candle)"
                .into()),
            other => Err(format!(
                "unknown engine `{other}` (expected auto, candle or debugengine; torch, optimum and ctranslate2 \
                 are read as auto)"
            )),
        }
    }
}

/// Infinity's rule: the last two parts of the model id's path.
pub fn default_served_name(model_id: &str) -> String {
    let parts: Vec<&str> = model_id.trim_end_matches('/').split('/').filter(|p| !p.is_empty()).collect();
    parts[parts.len().saturating_sub(2)..].join("/")
}
