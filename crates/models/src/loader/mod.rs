//! From a model folder to a runnable model: config dispatch, weights, tokenizer, pooling.

mod card;
mod checkpoint;
mod colpali;
mod colqwen2;
mod gpu;
mod siglip;
mod text;
mod towers;

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use candle_nn::VarBuilder;

use crate::backend::candle::Candle;
use crate::backend::cpu::Cpu;
use crate::backend::record::Recording;
use crate::backend::varlen::AttentionChoice;
pub use crate::backend::varlen::AttentionKernel;
use crate::batch::{Batch, Output};
use crate::config::ArchConfig;
pub use crate::config::Task;
use crate::error::{read_json, ModelError};
use crate::layers::Weights;
use crate::media::audio::{AudioFeatures, AudioLimits, AudioProcessor};
use crate::media::image::{ImageLimits, ImageProcessor, Pixels};
use crate::models::bert::Flavor;
use crate::models::clap::{Clap, ClapConfig};
use crate::models::clip::{Clip, ClipConfig};
use crate::pooling::{l2_normalize, Pooling, PoolingChoice};
use crate::tokenizer::TextTokenizer;
pub use checkpoint::{Checkpoint, MappedMatrix, MappedTensors};
pub use gpu::{gpu_available, gpu_memory_bytes, gpu_status, GpuStatus};
use towers::{Towers, TowersModel};

/// Runs one batch. Implementations own their weights; the engine calls them from one thread.
pub trait Model: Send + Sync {
    /// One output per tokenized sequence.
    fn forward(&self, batch: &Batch) -> Result<Output, ModelError>;

    /// One output per preprocessed image, for models with a vision tower.
    fn forward_images(&self, images: &[Pixels]) -> Result<Output, ModelError> {
        let _ = images;
        Err(ModelError::Unsupported("this model has no image input".into()))
    }

    /// One output per clip's features, for models with an audio tower.
    fn forward_audio(&self, clips: &[AudioFeatures]) -> Result<Output, ModelError> {
        let _ = clips;
        Err(ModelError::Unsupported("this model has no audio input".into()))
    }
}

/// Facts about a loaded model that the engine and the HTTP layer need.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    pub task: Task,
    /// What computes the model (`/models` reports its name).
    pub backend: Compute,
    pub architecture: String,
    /// Length of each output vector: the embedding size, or the number of logits.
    pub dim: usize,
    /// Longest input in tokens, special tokens included.
    pub window: usize,
    /// Whether the backend computes padded rectangles (so padding counts against the token budget).
    pub pads: bool,
    pub pooling: Pooling,
    pub normalize: bool,
    /// Bytes of weights the model keeps in memory (for candle: the memory-mapped safetensors).
    pub weight_bytes: u64,
    /// Whether the model embeds images (CLIP) besides text.
    pub image_input: bool,
    /// Token-equivalents one image costs in a batch (the vision tower's sequence length); with
    /// `image_pixels_per_token`, the part that does not depend on the image's size.
    pub image_cost: usize,
    /// For images processed at their own resolution: pixels per token, added to `image_cost` (0: fixed).
    pub image_pixels_per_token: usize,
    /// Whether the model embeds audio (CLAP) besides text.
    pub audio_input: bool,
    /// Token-equivalents one clip costs in a batch (the audio tower's first-stage tokens).
    pub audio_cost: usize,
    /// Whether the model honours every [`crate::OutputKind`] (unnormalized pooling, per-token states);
    /// models without it return their one output.
    pub token_outputs: bool,
    /// A sparse encoder (SPLADE): each output is one weight per vocabulary entry, mostly zero.
    pub sparse: bool,
    /// Whether the model returns its vocabulary weights as [`crate::OutputKind::Sparse`] (SPLADE; BGE-M3 beside
    /// its dense embedding).
    pub sparse_output: bool,
    /// The width of the ColBERT vectors the model returns as [`crate::OutputKind::MultiVector`] (BGE-M3).
    pub colbert_dim: Option<usize>,
    /// Named prompts from `config_sentence_transformers.json` (TEI's `prompt_name`, Cohere's `input_type`).
    pub prompts: crate::st_config::Prompts,
    /// Reranks through a prompt with an instruction (an LLM reranker): a request may give its own.
    pub takes_instruction: bool,
    /// The precision it computes at (`--dtype auto` resolved for its device and backend).
    pub dtype: DType,
    /// Tasks a request may pick an adapter by (jina-embeddings-v3's `lora_adaptations`), in adapter order.
    pub adapters: Vec<String>,
}

impl ModelInfo {
    /// A text model's facts with nothing else switched on: no media, no token outputs, no sparse or ColBERT
    /// outputs, no prompts; padding as the backend computes; not normalized, no weights counted. Each loader
    /// sets what differs (`ModelInfo { normalize: true, ..ModelInfo::new(..) }`).
    pub fn new(
        task: Task,
        backend: Compute,
        architecture: String,
        dim: usize,
        window: usize,
        pooling: Pooling,
    ) -> Self {
        ModelInfo {
            task,
            backend,
            architecture,
            dim,
            window,
            pads: backend.pads(),
            pooling,
            normalize: false,
            weight_bytes: 0,
            image_input: false,
            image_cost: 0,
            image_pixels_per_token: 0,
            audio_input: false,
            audio_cost: 0,
            token_outputs: false,
            sparse: false,
            sparse_output: false,
            colbert_dim: None,
            prompts: Default::default(),
            takes_instruction: false,
            dtype: DType::Float32,
            adapters: Vec::new(),
        }
    }

    /// Token-equivalents this preprocessed image costs.
    pub fn image_tokens(&self, pixels: &Pixels) -> usize {
        let by_size = pixels.width * pixels.height / self.image_pixels_per_token.max(1);
        self.image_cost + if self.image_pixels_per_token > 0 { by_size } else { 0 }
    }

    /// What `/models` lists and requests are checked against: the task's, plus media inputs.
    pub fn capabilities(&self) -> Vec<&'static str> {
        let mut caps = self.task.capabilities().to_vec();
        if self.image_input {
            caps.push("image_embed");
        }
        if self.audio_input {
            caps.push("audio_embed");
        }
        if self.sparse || self.sparse_output {
            caps.push("sparse");
        }
        if self.colbert_dim.is_some() {
            caps.push("colbert");
        }
        caps
    }

    /// Whether the model computes `kind` (the others return their one output).
    pub fn honours(&self, kind: crate::OutputKind) -> bool {
        use crate::OutputKind;
        match kind {
            OutputKind::Default => true,
            OutputKind::Unnormalized | OutputKind::Tokens => self.token_outputs,
            OutputKind::Sparse => self.sparse_output,
            OutputKind::MultiVector => self.colbert_dim.is_some(),
        }
    }
}

pub struct LoadedModel {
    pub model: std::sync::Arc<dyn Model>,
    pub tokenizer: TextTokenizer,
    /// Decodes and prepares images, for models with image input.
    pub images: Option<ImageProcessor>,
    /// Decodes audio and extracts features, for models with audio input.
    pub audio: Option<AudioProcessor>,
    pub info: ModelInfo,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    /// A GPU when this build has CUDA and one is present, else the CPU.
    #[default]
    Auto,
    Cpu,
    Cuda(usize),
}

impl FromStr for Device {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.to_ascii_lowercase();
        match s.as_str() {
            "auto" => Ok(Device::Auto),
            "cpu" => Ok(Device::Cpu),
            // Infinity's tensorrt is ONNX Runtime's TensorRT provider on a GPU: here, Aleph's CUDA path.
            "cuda" | "tensorrt" => Ok(Device::Cuda(0)),
            "mps" | "xla" | "npu" => {
                Err(format!("device `{s}` is not supported by Aleph (expected auto, cpu, cuda or cuda:N)"))
            }
            other => match other.strip_prefix("cuda:").and_then(|n| n.parse().ok()) {
                Some(n) => Ok(Device::Cuda(n)),
                None => Err(format!("unknown device `{other}` (expected auto, cpu, cuda or cuda:N)")),
            },
        }
    }
}

impl Device {
    /// Whether it computes on a GPU (`auto` where one is usable), known without creating the device.
    pub fn on_gpu(self) -> bool {
        match self {
            Device::Cpu => false,
            Device::Auto => gpu_available(),
            Device::Cuda(_) => true,
        }
    }

    /// The candle device, created anew: on a GPU each call has its own stream (and cuBLAS handle), so replicas
    /// on one GPU (`--device-id 0,0`) run side by side. `auto` is the first GPU when one is usable, else the CPU;
    /// a GPU asked for by name that cannot be used is an error saying why.
    fn candle(self) -> Result<candle_core::Device, ModelError> {
        match (self, gpu_status()) {
            (Device::Cpu, _) => Ok(candle_core::Device::Cpu),
            (Device::Auto, GpuStatus::Ready { .. }) => Device::Cuda(0).candle(),
            (Device::Auto, _) => Ok(candle_core::Device::Cpu),
            (Device::Cuda(n), GpuStatus::NotBuilt) => Err(ModelError::InvalidOption(format!(
                "cuda:{n}: this build has no GPU support (build it with scripts/cuda-build.sh)"
            ))),
            (Device::Cuda(n), GpuStatus::Unusable(why)) => {
                Err(ModelError::InvalidOption(format!("cuda:{n} is not usable: {why}")))
            }
            (Device::Cuda(n), &GpuStatus::Ready { devices }) if n >= devices => {
                Err(ModelError::InvalidOption(format!("cuda:{n} does not exist: the driver sees {devices} GPU(s)")))
            }
            (Device::Cuda(n), GpuStatus::Ready { .. }) => candle_core::Device::new_cuda_with_stream(n)
                .map_err(|e| ModelError::InvalidOption(format!("cuda:{n} is not usable ({e})"))),
        }
    }
}

/// Weight precision for compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DType {
    #[default]
    Auto,
    Float32,
    /// Linear layers with int8 weights and per-row dynamically quantized activations (CPU path).
    Int8,
    /// Half precision on candle (`--engine candle`, and GPUs).
    Float16,
    BFloat16,
}

impl DType {
    pub fn name(self) -> &'static str {
        match self {
            DType::Auto => "auto",
            DType::Float32 => "float32",
            DType::Int8 => "int8",
            DType::Float16 => "float16",
            DType::BFloat16 => "bfloat16",
        }
    }
}

impl FromStr for DType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(DType::Auto),
            "float32" | "fp32" | "f32" => Ok(DType::Float32),
            "int8" => Ok(DType::Int8),
            "float16" | "fp16" | "f16" | "half" => Ok(DType::Float16),
            "bfloat16" | "bf16" => Ok(DType::BFloat16),
            "fp8" => Err("dtype `fp8` is not supported (expected auto, float32, float16, bfloat16 or int8)".into()),
            other => {
                Err(format!("dtype `{other}` is not supported (expected auto, float32, float16, bfloat16 or int8)"))
            }
        }
    }
}

/// `--model-task`: what to serve a checkpoint as. `auto` follows the checkpoint (its architectures and
/// labels); the others insist, and a causal LM given `rerank` becomes an LLM reranker (Qwen3-Reranker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModelTask {
    #[default]
    Auto,
    Embed,
    Rerank,
    Classify,
}

impl ModelTask {
    pub fn name(self) -> &'static str {
        match self {
            ModelTask::Auto => "auto",
            ModelTask::Embed => "embed",
            ModelTask::Rerank => "rerank",
            ModelTask::Classify => "classify",
        }
    }

    /// Whether a model that loads as `task` is what was asked for.
    fn accepts(self, task: &Task) -> bool {
        match self {
            ModelTask::Auto => true,
            ModelTask::Embed => matches!(task, Task::Embed | Task::MultiVector),
            ModelTask::Rerank => *task == Task::Rerank,
            ModelTask::Classify => matches!(task, Task::Classify { .. }),
        }
    }
}

impl FromStr for ModelTask {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(ModelTask::Auto),
            "embed" | "embedding" | "embeddings" => Ok(ModelTask::Embed),
            "rerank" | "reranker" => Ok(ModelTask::Rerank),
            "classify" | "classification" => Ok(ModelTask::Classify),
            other => Err(format!("model task `{other}` (expected auto, embed, rerank or classify)")),
        }
    }
}

/// `--rerank-template`: how a decoder reranker puts each (query, document) pair into one prompt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RerankTemplate {
    /// The checkpoint's own, where Aleph knows it: Qwen3-Reranker's for Qwen3, mxbai-rerank-v2's for a
    /// Qwen2 checkpoint whose model card or folder names mxbai-rerank.
    #[default]
    Auto,
    /// The tokenizer's pair encoding, no prompt.
    None,
    /// Qwen3-Reranker's prompt ("yes" against "no").
    Qwen3,
    /// mxbai-rerank-v2's prompt ("1" against "0").
    Mxbai,
    /// A file whose text has `{instruction}`, `{query}` and `{document}` placeholders, tokenized whole.
    File(std::path::PathBuf),
}

impl FromStr for RerankTemplate {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(RerankTemplate::Auto),
            "none" => Ok(RerankTemplate::None),
            "qwen3" => Ok(RerankTemplate::Qwen3),
            "mxbai" => Ok(RerankTemplate::Mxbai),
            "" => Err("an empty rerank template (expected auto, none, qwen3, mxbai or a file)".into()),
            path => Ok(RerankTemplate::File(path.into())),
        }
    }
}

/// What computes a loaded model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compute {
    /// Aleph's own CPU kernels: packed batches, no padding.
    AlephCpu,
    /// candle's tensor ops, which pad each batch to its longest sequence.
    Candle,
    /// The weight-free debug engine.
    Debug,
}

impl Compute {
    /// The name `/models` reports.
    pub fn name(self) -> &'static str {
        match self {
            Compute::AlephCpu => "aleph-cpu",
            Compute::Candle => "candle",
            Compute::Debug => "debugengine",
        }
    }

    /// Whether padding counts against the token budget.
    pub fn pads(self) -> bool {
        self == Compute::Candle
    }
}

/// Which implementation computes the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// The fastest for the device: Aleph's own CPU kernels on CPU.
    #[default]
    Auto,
    /// candle's tensor ops: the reference path, and the one for other devices.
    Candle,
}

#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    pub pooling: PoolingChoice,
    pub dtype: DType,
    pub device: Device,
    pub backend: Backend,
    /// What a client's image may cost (models with image input).
    pub image_limits: ImageLimits,
    /// What a client's audio clip may cost (models with audio input).
    pub audio_limits: AudioLimits,
    /// `--trust-remote-code`: whether a model's `auto_map` counts (see [`check_remote_code`]).
    pub trust_remote_code: bool,
    /// `--model-task`.
    pub task: ModelTask,
    /// `--rerank-instruction`: an LLM reranker's instruction in place of its default.
    pub rerank_instruction: Option<String>,
    /// `--rerank-template`.
    pub rerank_template: RerankTemplate,
    /// How candle runs attention (unpadded on a GPU unless asked otherwise).
    pub attention: AttentionKernel,
}

/// The least memory the weights in `dir` can take once loaded at `dtype`, from the checkpoint's headers: each
/// stored number as wide as `dtype` keeps it (int8 one byte, bfloat16 two, float32 four) or as stored, if
/// narrower. The load's measured [`ModelInfo::weight_bytes`] is the real figure; this one is known before any
/// weight is read.
pub fn min_weight_bytes(dir: &Path, dtype: DType) -> Result<u64, ModelError> {
    let per_number = match dtype {
        DType::Int8 => 1,
        DType::Float16 | DType::BFloat16 => 2,
        DType::Auto | DType::Float32 => 4,
    };
    Checkpoint::find(dir)?.min_loaded_bytes(per_number)
}

/// Loads the model in `dir`, choosing the architecture from `config.json`.
pub fn load(dir: &Path, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    // A model2vec folder has no `model_type` to dispatch on: a lookup table, the same on every backend.
    if crate::models::static_model::is_static(dir) {
        return load_static(dir, opts, crate::models::static_model::load);
    }
    if let Some(module) = crate::models::static_model::sentence_transformers_module(dir) {
        return load_static(dir, opts, |dir| crate::models::static_model::load_sentence_transformers(dir, &module));
    }
    // What the config alone rules out is refused before the weights are read (an 8B checkpoint takes a
    // while); the loaded model's task is the final word.
    let arch = ArchConfig::read(dir)?;
    let causal_lm = arch.has_lm_head();
    let ruled_out = match (opts.task, arch.task()) {
        (ModelTask::Classify, t) => !matches!(t, Task::Classify { .. }),
        (ModelTask::Embed, t) => matches!(t, Task::Rerank | Task::Classify { .. }),
        (ModelTask::Rerank, t) => t != Task::Rerank && !causal_lm,
        (ModelTask::Auto, _) => false,
    };
    if ruled_out {
        return Err(ModelError::InvalidOption(format!(
            "--model-task {}: this checkpoint's config makes it {} ({})",
            opts.task.name(),
            arch.task().capabilities().join("/"),
            arch.architectures.first().map_or(arch.model_type.as_str(), String::as_str)
        )));
    }
    let mut loaded = load_as_configured(dir, arch, opts)?;
    // For vLLM's `messages` form: the checkpoint's chat template, where it ships one.
    if let Some(template) = crate::chat_template::ChatTemplate::read(dir) {
        loaded.tokenizer = loaded.tokenizer.with_chat_template(template);
    }
    if !opts.task.accepts(&loaded.info.task) {
        return Err(ModelError::InvalidOption(format!(
            "--model-task {}: this checkpoint loads as {} ({})",
            opts.task.name(),
            loaded.info.task.capabilities().join("/"),
            loaded.info.architecture
        )));
    }
    Ok(loaded)
}

/// A static model (model2vec's or sentence-transformers'): one table lookup per token, computed on the host in
/// f32 whatever the backend.
fn load_static(
    dir: &Path,
    opts: &LoadOptions,
    read: impl FnOnce(&Path) -> Result<LoadedModel, ModelError>,
) -> Result<LoadedModel, ModelError> {
    if !opts.task.accepts(&Task::Embed) {
        return Err(ModelError::InvalidOption(format!(
            "--model-task {}: a static model (model2vec, StaticEmbedding) only embeds",
            opts.task.name()
        )));
    }
    if matches!(opts.dtype, DType::Float16 | DType::BFloat16 | DType::Int8) {
        tracing::info!("a static model looks its vectors up in f32: --dtype {} changes nothing", opts.dtype.name());
    }
    let mut loaded = read(dir)?;
    loaded.info.dtype = DType::Float32;
    Ok(loaded)
}

fn load_as_configured(dir: &Path, arch: ArchConfig, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    check_remote_code(&arch, opts.trust_remote_code)?;
    let on_gpu = opts.device.on_gpu();
    let backend = if on_gpu { Backend::Candle } else { opts.backend };
    let dtype = compute_dtype(opts.dtype, &arch, on_gpu, backend)?;
    if backend == Backend::Candle {
        let place = if on_gpu { "a GPU" } else { "the CPU" };
        tracing::info!("candle computes in {} on {place}", dtype.name());
    }
    let mut loaded = load_family(dir, &arch, &LoadOptions { dtype, ..opts.clone() })?;
    loaded.info.dtype = dtype;
    Ok(loaded)
}

/// What `--dtype` computes at with `backend`, `auto` resolved: float16 on a GPU, as TEI and Infinity pick it
/// (bfloat16 where the checkpoint is stored in bf16, or where the family overflows in fp16), float32 on the
/// CPU. A precision the backend does not compute is refused, naming why.
fn compute_dtype(asked: DType, arch: &ArchConfig, on_gpu: bool, backend: Backend) -> Result<DType, ModelError> {
    let dtype = match asked {
        DType::Auto if !on_gpu => DType::Float32,
        DType::Auto if arch.stored_dtype() == Some("bfloat16") || overflows_in_fp16(arch) => DType::BFloat16,
        DType::Auto => DType::Float16,
        other => other,
    };
    match (backend, dtype) {
        (Backend::Auto, DType::Float16) => Err(ModelError::InvalidOption(
            "--dtype float16 runs on candle (--engine candle, or a GPU): Aleph's CPU kernels compute float32, \
             bfloat16 or int8"
                .into(),
        )),
        (Backend::Candle, DType::Int8) => Err(ModelError::InvalidOption(
            "--dtype int8 runs on Aleph's CPU kernels (--engine auto on a CPU device); candle computes float32, \
             float16 or bfloat16"
                .into(),
        )),
        (_, DType::Float16) if overflows_in_fp16(arch) => Err(ModelError::InvalidOption(format!(
            "--dtype float16: `{}` (Gemma 3) activations overflow float16, as its model card says; use bfloat16 \
             or float32",
            arch.model_type
        ))),
        _ => Ok(dtype),
    }
}

/// Families whose activations leave float16's range: EmbeddingGemma's card says they "do not support
/// float16" (transformers warns the same for Gemma 3).
fn overflows_in_fp16(arch: &ArchConfig) -> bool {
    arch.model_type == "gemma3_text"
}

/// The family's loader, with `opts.dtype` already resolved.
fn load_family(dir: &Path, arch: &ArchConfig, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    match arch.model_type.as_str() {
        "clip" => return load_clip(dir, arch, opts),
        "clap" => return load_clap(dir, arch, opts),
        "colpali" => return colpali::load_colpali(dir, arch, opts),
        "colqwen2" => return colqwen2::load_colqwen2(dir, arch, opts),
        "siglip" => return siglip::load_siglip(dir, arch, opts),
        "modernbert" => return text::load_modernbert(dir, arch, opts),
        "deberta-v2" => return text::load_deberta(dir, arch, opts),
        "new" | "gte" | "nomic_bert" => return text::load_gte(dir, arch, opts),
        "xlm-roberta" if runs_jina_v3(arch) => return text::load_jina_v3(dir, arch, opts),
        "gemma3_text" => return text::load_gemma3(dir, arch, opts),
        "qwen3" | "qwen2" | "mistral" | "llama" => return text::load_llama(dir, arch, opts),
        "qwen3_vl" => return text::load_qwen3_vl(dir, arch, opts),
        _ => {}
    }
    match Flavor::from_model_type(&arch.model_type) {
        Some(flavor) => text::load_bert_family(dir, arch, flavor, opts),
        None => Err(ModelError::Unsupported(format!(
            "model_type `{}` (architectures {:?}); supported: bert, roberta, xlm-roberta, camembert, mpnet, distilbert, deberta-v2, modernbert, new (GTE), gte, nomic_bert, qwen3, qwen3_vl (text), gemma3_text, qwen2, mistral, llama, clip, clap, colpali, colqwen2, siglip",
            arch.model_type, arch.architectures
        ))),
    }
}

/// JinaBERT v2's code (jina-embeddings-v2, jina-reranker-v1), which `model_type: bert` checkpoints name.
pub(crate) const JINA_BERT: &str = "jinaai/jina-bert-implementation";

/// Whether an `xlm-roberta` checkpoint's own code is jinaai/xlm-roberta-flash-implementation
/// (jina-embeddings-v3 and its fine-tunes, which may carry that code in their own repository).
pub(crate) fn runs_jina_v3(arch: &ArchConfig) -> bool {
    arch.model_type == "xlm-roberta"
        && (arch.remote_code_from(crate::models::jina_v3::REMOTE_CODE)
            || arch.remote_model_classes().any(|c| crate::config::code_in_repo(c) == "modeling_lora.XLMRobertaLoRA"))
}

/// Whether a `qwen2` checkpoint's own code is gte-Qwen2-instruct's `modeling_qwen` (also stella_en_v5's, and
/// named as `Alibaba-NLP/gte-Qwen2-7B-instruct--modeling_qwen.Qwen2Model` by fine-tunes): transformers' Qwen2
/// whose attention follows the config's `is_causal` (TEI reads that file the same way).
pub(crate) fn runs_gte_qwen2(arch: &ArchConfig) -> bool {
    let mut classes = arch.remote_model_classes().peekable();
    arch.model_type == "qwen2"
        && classes.peek().is_some()
        && classes.all(|c| crate::config::code_in_repo(c).starts_with("modeling_qwen.Qwen2"))
}

/// Aleph runs no Python. A model whose repository ships its own modeling code loads only if Aleph
/// implements that family (Alibaba's GTE `NewModel`, Nomic's `NomicBertModel`, JinaBERT v2, gte-Qwen2's
/// `modeling_qwen` where the config says `is_causal`); other remote
/// code is refused rather than run as the plain architecture its `model_type` names (jina's qk-post-norm
/// variant says `bert` too, and plain BERT would return wrong vectors). Without trust, transformers ignores
/// `auto_map` and so does Aleph.
pub fn check_remote_code(arch: &ArchConfig, trust: bool) -> Result<(), ModelError> {
    let Some(code) = arch.remote_model_code() else {
        return Ok(());
    };
    // Aleph's own implementations of that code (models::gte): Alibaba's NewModel, Nomic's NomicBertModel.
    if (arch.model_type == "new" && code.contains(".New"))
        || (arch.model_type == "nomic_bert" && code.contains(".NomicBert"))
        || (arch.model_type == "bert" && arch.remote_code_from(JINA_BERT))
        || runs_jina_v3(arch)
    {
        return Ok(());
    }
    if trust && runs_gte_qwen2(arch) {
        // That code reads `config.is_causal`, which transformers' Qwen2Config does not define.
        return match arch.is_causal {
            Some(_) => Ok(()),
            None => Err(ModelError::Unsupported(format!(
                "gte-Qwen2's modeling code ({code}) with no `is_causal` in config.json: which way it attends \
                 is unknown (gte-Qwen2-instruct says false; --no-trust-remote-code loads transformers' causal qwen2)"
            ))),
        };
    }
    if !trust {
        tracing::warn!(
            "config.json names remote code ({code}); --trust-remote-code is off, so it is ignored and the model \
             loads as transformers' own `{}`",
            arch.model_type
        );
        return Ok(());
    }
    Err(ModelError::Unsupported(format!(
        "this model ships its own modeling code (auto_map: {code}); Aleph runs no Python and does not implement \
         that code (--no-trust-remote-code loads the plain `{}` architecture instead, as transformers does)",
        arch.model_type
    )))
}

/// int8 smoothing statistics for a text model from the shipped calibration corpus (none when
/// `ALEPH_INT8_SMOOTHING=off`).
fn calibrate<M>(
    load: impl FnOnce(&Weights<'_, Recording<Cpu>>) -> Result<M, ModelError>,
    run: impl Fn(&M, &Recording<Cpu>, &Batch) -> Result<(), ModelError>,
    tokenizer: &TextTokenizer,
    vb: VarBuilder<'static>,
    mapped: Option<Arc<MappedTensors>>,
) -> Result<std::collections::HashMap<String, Vec<f32>>, ModelError> {
    tracing::info!("int8 linear layers ({} kernel)", crate::cpu::qgemm::kernel_name());
    if !smoothing_enabled() {
        return Ok(Default::default());
    }
    smoothing_stats(load, run, &calibration_batches(tokenizer)?, vb, mapped)
}

/// SmoothQuant's calibration for any family: loads it in f32 on a [`Recording`] backend, runs the
/// calibration batches through it, and returns each linear layer's per-channel input maxima.
fn smoothing_stats<M>(
    load: impl FnOnce(&Weights<'_, Recording<Cpu>>) -> Result<M, ModelError>,
    run: impl Fn(&M, &Recording<Cpu>, &Batch) -> Result<(), ModelError>,
    batches: &[Batch],
    vb: VarBuilder<'static>,
    mapped: Option<Arc<MappedTensors>>,
) -> Result<std::collections::HashMap<String, Vec<f32>>, ModelError> {
    let rec = Recording::new(Cpu::f32());
    let model = load(&Weights::new(vb, &rec).with_mapped(mapped))?;
    for batch in batches.iter().filter(|b| !b.is_empty()) {
        run(&model, &rec, batch)?;
    }
    drop(model);
    Ok(rec.into_maxima())
}

/// SmoothQuant for `--dtype int8`; `ALEPH_INT8_SMOOTHING=off` turns it off (for comparisons).
fn smoothing_enabled() -> bool {
    !matches!(std::env::var("ALEPH_INT8_SMOOTHING").as_deref(), Ok("off" | "0" | "false"))
}

/// The calibration corpus shipped in the binary, tokenized in batches of 32.
fn calibration_batches(tokenizer: &TextTokenizer) -> Result<Vec<Batch>, ModelError> {
    let lines: Vec<&str> = crate::quantize::CALIBRATION_TEXT.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    lines
        .chunks(32)
        .map(|chunk| {
            let mut batch = Batch::new();
            for line in chunk {
                let e = tokenizer.encode(line)?;
                batch.push(&e.ids, &e.type_ids);
            }
            Ok(batch)
        })
        .collect()
}

/// candle maps the files and pages weights in as they are used: the files' size is what it holds.
fn file_bytes(dir: &Path) -> Result<u64, ModelError> {
    Ok(Checkpoint::find(dir)?.bytes())
}

/// CLIP: text and images into one space, both L2-normalized as Infinity returns them.
fn load_clip(dir: &Path, arch: &ArchConfig, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    if opts.dtype == DType::Int8 {
        return Err(ModelError::InvalidOption("--dtype int8 is available for BERT-family encoders only".into()));
    }
    let cfg: ClipConfig = read_json(&dir.join("config.json"))?;
    let device = opts.device.candle()?;
    let vb = var_builder(dir, &device)?;
    // Aleph's own kernels on the CPU; candle elsewhere, or when asked.
    let model: Box<dyn Towers> = match backend_for(opts, &device) {
        Backend::Auto => Box::new(Clip::load(cpu_kernels(opts.dtype), vb, mapped(dir)?, &cfg)?),
        Backend::Candle => Box::new(Clip::load(candle_ops(&device, opts.dtype, opts.attention)?, vb, None, &cfg)?),
    };
    let backend = model.compute();
    let vision = &cfg.vision_config;
    let side = vision.image_size;
    let images = ImageProcessor::from_dir(dir)?.with_limits(opts.image_limits);
    if images.output_size() != (side, side) {
        return Err(ModelError::Unsupported(format!(
            "preprocessor_config.json makes {:?} images; the vision tower takes {side}x{side}",
            images.output_size()
        )));
    }
    let window = cfg.text_config.max_position_embeddings;
    let tokenizer = TextTokenizer::from_file(&dir.join("tokenizer.json"), window)?;
    let architecture = arch.architectures.first().cloned().unwrap_or_else(|| "CLIPModel".into());
    let info = ModelInfo {
        normalize: true,
        weight_bytes: if backend == Compute::Candle { file_bytes(dir)? } else { model.weight_bytes() },
        image_input: true,
        image_cost: (side / vision.patch_size.max(1)).pow(2) + 1,
        // The text tower reads its end-of-text token; images their class token.
        ..ModelInfo::new(Task::Embed, backend, architecture, model.dim(), window, Pooling::LastToken)
    };
    let model = std::sync::Arc::new(TowersModel { towers: model, normalize: true });
    Ok(LoadedModel { model, tokenizer, images: Some(images), audio: None, info })
}

/// CLAP: text and audio into one space, L2-normalized as transformers and Infinity return them.
fn load_clap(dir: &Path, arch: &ArchConfig, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    if opts.dtype == DType::Int8 {
        return Err(ModelError::InvalidOption("--dtype int8 is available for BERT-family encoders only".into()));
    }
    let cfg: ClapConfig = read_json(&dir.join("config.json"))?;
    let device = opts.device.candle()?;
    let vb = var_builder(dir, &device)?;
    let model: Box<dyn Towers> = match backend_for(opts, &device) {
        Backend::Auto => Box::new(Clap::load(cpu_kernels(opts.dtype), vb, mapped(dir)?, &cfg)?),
        Backend::Candle => Box::new(Clap::load(candle_ops(&device, opts.dtype, opts.attention)?, vb, None, &cfg)?),
    };
    let backend = model.compute();
    let audio = AudioProcessor::from_dir(dir)?.with_limits(opts.audio_limits);
    if audio.fusion() != cfg.audio_config.enable_fusion {
        let (extractor, model) = if audio.fusion() { ("`fusion`", "without") } else { ("`rand_trunc`", "with") };
        return Err(ModelError::BadFile {
            path: dir.join("preprocessor_config.json"),
            reason: format!("truncation {extractor} does not fit config.json's audio tower {model} feature fusion"),
        });
    }
    let window = Clap::<Cpu>::text_window(&cfg);
    let tokenizer = TextTokenizer::from_file(&dir.join("tokenizer.json"), window)?;
    let patch = crate::models::htsat::check_audio_config(&cfg.audio_config)?;
    let (dim, audio_cost) = (model.dim(), (cfg.audio_config.spec_size / patch).pow(2));
    let weight_bytes = if backend == Compute::Candle { file_bytes(dir)? } else { model.weight_bytes() };
    let architecture = arch.architectures.first().cloned().unwrap_or_else(|| "ClapModel".into());
    let info = ModelInfo {
        normalize: true,
        weight_bytes,
        audio_input: true,
        audio_cost,
        // The text tower pools its first token; clips average the final grid.
        ..ModelInfo::new(Task::Embed, backend, architecture, dim, window, Pooling::Cls)
    };
    let model = std::sync::Arc::new(TowersModel { towers: model, normalize: true });
    Ok(LoadedModel { model, tokenizer, images: None, audio: Some(audio), info })
}

fn normalized(mut vectors: Vec<Vec<f32>>) -> Vec<Vec<f32>> {
    vectors.iter_mut().for_each(|v| l2_normalize(v));
    vectors
}

/// What a late-interaction model over page images (ColPali, ColQwen2) reports: one vector per token;
/// `image_cost` is a page's tokens.
fn page_retriever_info(backend: Compute, dim: usize, window: usize, weight_bytes: u64, image_cost: usize) -> ModelInfo {
    ModelInfo {
        normalize: true,
        weight_bytes,
        image_input: true,
        image_cost,
        ..ModelInfo::new(Task::MultiVector, backend, String::new(), dim, window, Pooling::Mean)
    }
}

/// Which backend computes a model: Aleph's kernels on the CPU unless `--engine candle`; candle elsewhere.
/// Aleph's CPU kernels with the weights `--dtype` asks for (int8 is set up by each family's calibration).
fn cpu_kernels(dtype: DType) -> Cpu {
    match dtype {
        DType::BFloat16 => {
            tracing::info!("bf16 linear layers ({} kernel)", crate::cpu::bgemm::kernel_name());
            if let Some(cost) = crate::cpu::bgemm::cost_note() {
                tracing::warn!("--dtype bfloat16: {cost}");
            }
            Cpu::bf16()
        }
        _ => Cpu::f32(),
    }
}

/// candle at the resolved `dtype` on `device` (see [`compute_dtype`]), its attention as `attention` resolves
/// there (on a GPU, unpadded for the batches padding would cost most).
fn candle_ops(device: &candle_core::Device, dtype: DType, attention: AttentionKernel) -> Result<Candle, ModelError> {
    candle_with(device, dtype, attention.resolve(!device.is_cpu()).map_err(ModelError::InvalidOption)?)
}

/// candle at the resolved `dtype` on `device`, attention already resolved.
fn candle_with(device: &candle_core::Device, dtype: DType, attention: AttentionChoice) -> Result<Candle, ModelError> {
    let width = match dtype {
        DType::Auto | DType::Float32 => candle_core::DType::F32,
        DType::Float16 => candle_core::DType::F16,
        DType::BFloat16 => candle_core::DType::BF16,
        DType::Int8 => return Err(ModelError::InvalidOption("--dtype int8 runs on Aleph's CPU kernels".into())),
    };
    Candle::with_dtype(device.clone(), width)?.with_attention(attention)
}

fn backend_for(opts: &LoadOptions, device: &candle_core::Device) -> Backend {
    if device.is_cpu() {
        opts.backend
    } else {
        Backend::Candle
    }
}

/// The folder's weights as f32 on `device` (see [`Checkpoint`]).
/// The folder's safetensors kept mapped, for the tables Aleph's CPU kernels read in place.
fn mapped(dir: &Path) -> Result<Option<Arc<MappedTensors>>, ModelError> {
    Checkpoint::find(dir)?.mapped()
}

fn var_builder(dir: &Path, device: &candle_core::Device) -> Result<VarBuilder<'static>, ModelError> {
    Checkpoint::find(dir)?.var_builder(device)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arch(json: &str) -> ArchConfig {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn auto_is_float16_on_a_gpu_bfloat16_for_bf16_checkpoints_and_gemma3_and_float32_on_the_cpu() {
        let bert = arch(r#"{"model_type": "bert", "torch_dtype": "float32"}"#);
        let bf16 = arch(r#"{"model_type": "qwen3", "dtype": "bfloat16"}"#);
        let gemma = arch(r#"{"model_type": "gemma3_text"}"#);
        let auto = |a: &ArchConfig, gpu: bool| compute_dtype(DType::Auto, a, gpu, Backend::Candle).unwrap();
        assert_eq!(auto(&bert, true), DType::Float16);
        assert_eq!(auto(&bf16, true), DType::BFloat16);
        assert_eq!(auto(&gemma, true), DType::BFloat16);
        assert_eq!(auto(&bert, false), DType::Float32);
        assert_eq!(compute_dtype(DType::Auto, &bf16, false, Backend::Auto).unwrap(), DType::Float32);
    }

    #[test]
    fn a_precision_the_backend_cannot_compute_is_refused_naming_why() {
        let bert = arch(r#"{"model_type": "bert"}"#);
        let gemma = arch(r#"{"model_type": "gemma3_text"}"#);
        let err = |a: &ArchConfig, d: DType, b: Backend| compute_dtype(d, a, false, b).unwrap_err().to_string();
        assert!(err(&bert, DType::Float16, Backend::Auto).contains("--engine candle"));
        assert!(err(&bert, DType::Int8, Backend::Candle).contains("CPU kernels"));
        assert!(err(&gemma, DType::Float16, Backend::Candle).contains("overflow"));
        for d in [DType::Float32, DType::Float16, DType::BFloat16] {
            assert_eq!(compute_dtype(d, &bert, true, Backend::Candle).unwrap(), d);
        }
        assert_eq!(compute_dtype(DType::BFloat16, &gemma, false, Backend::Auto).unwrap(), DType::BFloat16);
    }
}
