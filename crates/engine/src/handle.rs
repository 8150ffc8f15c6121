//! One served model: its tokenizer, queue, batcher and inference threads.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aleph_models::quantize::{quantize, Calibration, EmbeddingDtype, CALIBRATION_TEXT};
use aleph_models::tokenizer::Truncation;
use aleph_models::{
    AudioProcessor, Compute, ImageProcessor, LoadedModel, Model, ModelError, ModelInfo, OutputKind, Task, TextTokenizer,
};
use tokio::sync::oneshot;

use crate::cache::{CacheConfig, Cached, VectorCache};
use crate::warmup::{calibrate, warmup, warmup_audio, warmup_images};

use crate::batcher::BatchPolicy;
use crate::error::EngineError;
use crate::prepared::Prepared;
use crate::queue::{Queue, Reply};
use crate::scheduler::{ComputeScheduler, ComputeSlot};
use crate::tokenize::TokenizerPool;
use crate::worker::{spawn_batcher, spawn_inference, WorkerStats};

/// Scheduling limits for one model.
#[derive(Debug, Clone)]
pub struct HandleConfig {
    /// Most sequences per forward pass.
    pub batch_size: usize,
    /// Most tokens per forward pass (padded tokens when the backend pads).
    pub max_batch_tokens: usize,
    /// Most items waiting in the queue before requests are refused.
    pub queue_size: usize,
    /// Run the largest batch once at start-up.
    pub warmup: bool,
    /// How embeddings leave the server (`--embedding-dtype`).
    pub embedding_dtype: EmbeddingDtype,
    /// Most tokens one request may feed the model, after truncation (0: no limit).
    pub max_request_tokens: usize,
    /// `--vector-disk-cache`: where outputs are kept, if they are.
    pub vector_cache: Option<CacheConfig>,
    /// Where the model came from (`--model-id`, `--revision`) and the precision it computes in, as
    /// `/info` reports them.
    pub model_id: String,
    pub revision: Option<String>,
    pub dtype: &'static str,
    /// `--default-prompt-name`: the prompt for texts whose request names none.
    pub default_prompt_name: Option<String>,
    /// `--truncate-dim`: the dimensions of an embedding whose request asks for none (0: all).
    pub truncate_dim: usize,
    /// `--compute-weight`: this model's share of the cores under contention, relative to the others'.
    pub compute_weight: f64,
}

/// One input to a model: a text, a (query, document) pair for a cross-encoder, or an encoded image
/// (PNG, JPEG, ...) for a model with a vision tower.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Text(String),
    Pair(String, String),
    /// A (query, document) pair for an LLM reranker, with the request's own instruction for its prompt.
    InstructedPair {
        query: String,
        document: String,
        instruction: String,
    },
    /// Token ids of the model's own vocabulary, used as given (no special tokens are added).
    Ids(Vec<u32>),
    Image(Vec<u8>),
    /// An encoded audio clip (WAV, FLAC, MP3, OGG) for a model with an audio tower.
    Audio(Vec<u8>),
}

/// How a request wants its inputs handled; the default is what Infinity's routes do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RunOptions {
    /// What to do with texts past the model's window.
    pub truncation: Truncation,
    /// What each text wants back (needs [`ModelInfo::token_outputs`] unless it is the default).
    pub output: OutputKind,
    /// The adapter texts run with: an index into [`ModelInfo::adapters`] (jina-embeddings-v3's task LoRA).
    pub adapter: Option<u16>,
}

/// Outputs for one request, in input order, with what they cost.
#[derive(Debug, Clone, Default)]
pub struct RunResult {
    /// One vector per input: an embedding, or a classifier's logits.
    pub vectors: Vec<Vec<f32>>,
    /// Tokens fed to the model, special tokens included, after truncation (an image counts the
    /// vision tower's tokens).
    pub prompt_tokens: usize,
    pub tokenization_time: Duration,
    /// The longest any item waited for a batch.
    pub queue_time: Duration,
    /// The longest forward pass among the request's batches.
    pub inference_time: Duration,
    /// How many of the outputs came from the vector disk cache.
    pub cache_hits: usize,
}

/// A snapshot of a model's scheduling state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelStats {
    pub queue_depth: usize,
    pub queue_limit: usize,
    pub batch_size: usize,
    pub running_batches: usize,
    pub last_batch_size: usize,
    pub batches: usize,
    pub failed_batches: usize,
}

pub struct ModelHandle {
    name: String,
    info: ModelInfo,
    tokenizer: Arc<TextTokenizer>,
    images: Option<Arc<ImageProcessor>>,
    audio: Option<Arc<AudioProcessor>>,
    pool: Arc<TokenizerPool>,
    queue: Arc<Queue>,
    config: HandleConfig,
    /// Per-dimension ranges for int8 / uint8 output, measured at start-up.
    calibration: Option<Calibration>,
    stats: Arc<WorkerStats>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    cache: Option<Arc<VectorCache>>,
    replicas: usize,
    /// Ranges for int8 / uint8 requested per request (Cohere's `embedding_types`), measured on first use.
    lazy_calibration: tokio::sync::OnceCell<Calibration>,
}

impl ModelHandle {
    /// Warms the model up (if configured) and starts its threads: one inference thread for the loaded
    /// model and one for each of `more_replicas` (copies on other devices, or the same model again),
    /// all fed by the one queue.
    pub fn start(
        name: String,
        loaded: LoadedModel,
        more_replicas: Vec<Arc<dyn Model>>,
        config: HandleConfig,
        pool: Arc<TokenizerPool>,
        scheduler: Option<Arc<ComputeScheduler>>,
    ) -> Result<Self, ModelError> {
        let LoadedModel { model, tokenizer, images, audio, info } = loaded;
        let scheduled = scheduler.filter(|_| info.backend == Compute::AlephCpu);
        let slot = ComputeSlot::new(scheduled, &name, config.compute_weight);
        if config.truncate_dim > 0 && (config.truncate_dim > info.dim || info.task != Task::Embed || info.sparse) {
            return Err(ModelError::InvalidOption(format!(
                "--truncate-dim {} does not fit model `{name}` ({} dimensions, {:?}{})",
                config.truncate_dim,
                info.dim,
                info.task,
                if info.sparse { ", sparse" } else { "" }
            )));
        }
        let cache = match &config.vector_cache {
            Some(c) => Some(Arc::new(VectorCache::open(c).map_err(|e| {
                ModelError::InvalidOption(format!("--vector-disk-cache: cannot use {}: {e}", c.dir.display()))
            })?)),
            None => None,
        };
        // Warm-up takes its turns like any batch: a model loading while others serve does not stall them.
        if config.warmup {
            slot.run(|| warmup(&name, model.as_ref(), &tokenizer, &info, &config))?;
            if let Some(images) = &images {
                slot.run(|| warmup_images(&name, model.as_ref(), images, &info, &config))?;
            }
            if let Some(audio) = &audio {
                slot.run(|| warmup_audio(&name, model.as_ref(), audio, &info, &config))?;
            }
        }
        let calibration = if config.embedding_dtype.needs_calibration() && info.task == Task::Embed {
            Some(slot.run(|| calibrate(model.as_ref(), &tokenizer, config.batch_size))?)
        } else {
            None
        };
        let policy = BatchPolicy { max_items: config.batch_size, max_tokens: config.max_batch_tokens, pads: info.pads };
        let queue = Arc::new(Queue::new(&name, config.queue_size));
        let stats = Arc::new(WorkerStats::default());
        // Rendezvous: the batcher holds the next batch until the model takes it.
        let (tx, rx) = crossbeam_channel::bounded(0);
        let mut threads = vec![spawn_batcher(name.clone(), queue.clone(), policy, tx)];
        let replicas = 1 + more_replicas.len();
        for (i, replica) in std::iter::once(model).chain(more_replicas).enumerate() {
            threads.push(spawn_inference(name.clone(), i, replica, rx.clone(), stats.clone(), slot.clone()));
        }
        Ok(ModelHandle {
            name,
            info,
            tokenizer: Arc::new(tokenizer),
            images: images.map(Arc::new),
            audio: audio.map(Arc::new),
            pool,
            queue,
            config,
            calibration,
            stats,
            threads: Mutex::new(threads),
            cache,
            replicas,
            lazy_calibration: tokio::sync::OnceCell::new(),
        })
    }

    /// Quantizes an embedding to `dtype`, whatever `--embedding-dtype` says. int8 / uint8 need the
    /// calibration ranges: the start-up ones, or ones measured now, once, by running the shipped corpus
    /// through the model's own queue.
    pub async fn quantize_as(&self, dtype: EmbeddingDtype, vectors: &[Vec<f32>]) -> Result<Vec<Vec<f32>>, EngineError> {
        let calibration = if !dtype.needs_calibration() {
            None
        } else if let Some(c) = &self.calibration {
            Some(c)
        } else {
            Some(
                self.lazy_calibration
                    .get_or_try_init(|| async {
                        let lines: Vec<Input> = CALIBRATION_TEXT
                            .lines()
                            .map(str::trim)
                            .filter(|l| !l.is_empty())
                            .map(|l| Input::Text(l.to_string()))
                            .collect();
                        let out = self.compute(lines, RunOptions::default()).await?.0;
                        Calibration::from_vectors(&out.vectors)
                            .ok_or_else(|| EngineError::Inference("calibration produced no vectors".into()))
                    })
                    .await?,
            )
        };
        Ok(vectors.iter().map(|v| quantize(dtype, v, calibration)).collect())
    }

    /// Inference threads behind the queue (`--device-id`).
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// The vector disk cache, when `--vector-disk-cache` is on.
    pub fn vector_cache(&self) -> Option<&VectorCache> {
        self.cache.as_deref()
    }

    /// The text to prepend for a request naming `requested`, else `--default-prompt-name`'s, else the one the
    /// model's sentence-transformers config names `default_prompt_name` (as `SentenceTransformer.encode` applies
    /// it), if any; or why there is none.
    pub fn prompt(&self, requested: Option<&str>) -> Result<Option<&str>, String> {
        if let Some(name) = requested.or(self.config.default_prompt_name.as_deref()) {
            return self.info.prompts.get(name).map(Some);
        }
        // sentence-transformers takes `.get(default_prompt_name)`: a name it does not define is no prompt.
        let prompts = &self.info.prompts;
        Ok(prompts.default_prompt_name.as_deref().and_then(|n| prompts.prompts.get(n)).map(String::as_str))
    }

    /// The dimensions an embedding request that names none gets: `--truncate-dim`, if set.
    pub fn default_dimensions(&self) -> Option<usize> {
        (self.config.truncate_dim > 0).then_some(self.config.truncate_dim)
    }

    /// The model's tokenizer (for `/tokenize` and `/decode`).
    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    /// Applies `--embedding-dtype` to an embedding already cut to its requested dimensions.
    pub fn quantize(&self, v: &[f32]) -> Vec<f32> {
        quantize(self.config.embedding_dtype, v, self.calibration.as_ref())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    pub fn config(&self) -> &HandleConfig {
        &self.config
    }

    pub fn stats(&self) -> ModelStats {
        ModelStats {
            queue_depth: self.queue.depth(),
            queue_limit: self.config.queue_size,
            batch_size: self.config.batch_size,
            running_batches: self.stats.running.load(Ordering::Relaxed),
            last_batch_size: self.stats.last_batch_size.load(Ordering::Relaxed),
            batches: self.stats.batches.load(Ordering::Relaxed),
            failed_batches: self.stats.failed_batches.load(Ordering::Relaxed),
        }
    }

    /// Runs `inputs` through the model. Dropping the returned future abandons its queued items before
    /// they cost compute.
    pub async fn run(&self, inputs: Vec<Input>) -> Result<RunResult, EngineError> {
        self.run_with(inputs, RunOptions::default()).await
    }

    /// Like [`Self::run`], with the request's truncation and output choices.
    pub async fn run_with(&self, inputs: Vec<Input>, opts: RunOptions) -> Result<RunResult, EngineError> {
        if !self.info.honours(opts.output) {
            let what = match opts.output {
                OutputKind::Sparse => "no sparse (lexical) weights",
                OutputKind::MultiVector => "no ColBERT vectors",
                _ => "no per-token states or unnormalized vectors",
            };
            return Err(EngineError::Unsupported(format!(
                "model `{}` ({}) returns its one output only: {what}",
                self.name, self.info.architecture
            )));
        }
        let Some(cache) = self.cache.clone() else {
            return self.compute(inputs, opts).await.map(|(result, _)| result);
        };
        // Hashing and file reads happen on the pool, off the async threads.
        let lookup = {
            let cache = cache.clone();
            self.pool.run(move || {
                let found: Vec<_> = inputs
                    .iter()
                    .map(|input| {
                        let key = cache.key(input, &opts);
                        (key, cache.get(&key))
                    })
                    .collect();
                (inputs, found)
            })
        };
        let (inputs, found) = lookup.await.ok_or_else(|| EngineError::Tokenization("cache lookup panicked".into()))?;
        let misses: Vec<Input> =
            inputs.into_iter().zip(&found).filter(|(_, (_, hit))| hit.is_none()).map(|(i, _)| i).collect();
        let hits = found.len() - misses.len();
        metrics::counter!("aleph_vector_cache_hits_total", "model" => self.name.clone()).increment(hits as u64);
        metrics::counter!("aleph_vector_cache_misses_total", "model" => self.name.clone())
            .increment(misses.len() as u64);
        let (computed, costs) =
            if misses.is_empty() { (RunResult::default(), Vec::new()) } else { self.compute(misses, opts).await? };
        let mut fresh = computed.vectors.into_iter().zip(costs);
        let mut to_store = Vec::new();
        let mut result = RunResult { vectors: Vec::with_capacity(found.len()), cache_hits: hits, ..computed };
        for (key, hit) in found {
            match hit {
                Some(c) => {
                    result.prompt_tokens += c.cost;
                    result.vectors.push(c.vector);
                }
                None => {
                    let (vector, cost) = fresh.next().ok_or_else(|| EngineError::Inference("missing output".into()))?;
                    to_store.push((key, Cached { vector: vector.clone(), cost }));
                    result.vectors.push(vector);
                }
            }
        }
        if !to_store.is_empty() {
            self.pool.spawn(move || {
                for (key, cached) in to_store {
                    cache.put(&key, &cached);
                }
            });
        }
        Ok(result)
    }

    /// Prepares, queues and awaits `inputs`; the outputs, and what each input cost.
    async fn compute(&self, inputs: Vec<Input>, opts: RunOptions) -> Result<(RunResult, Vec<usize>), EngineError> {
        let started = Instant::now();
        let prepared = self.prepare(inputs, opts).await?;
        let tokenization_time = started.elapsed();
        metrics::histogram!("aleph_tokenization_duration_seconds", "model" => self.name.clone())
            .record(tokenization_time.as_secs_f64());
        let costs: Vec<usize> = prepared.iter().map(Prepared::cost).collect();
        let prompt_tokens: usize = costs.iter().sum();
        let limit = self.config.max_request_tokens;
        if limit > 0 && prompt_tokens > limit {
            return Err(EngineError::TooManyTokens { tokens: prompt_tokens, limit });
        }

        let (replies, receivers): (Vec<Reply>, Vec<_>) = prepared.iter().map(|_| oneshot::channel()).unzip();
        self.queue.push_all(&self.name, prepared.into_iter().zip(replies).collect())?;
        crate::usage::charge(prompt_tokens);

        let mut result = RunResult {
            vectors: Vec::with_capacity(receivers.len()),
            prompt_tokens,
            tokenization_time,
            ..RunResult::default()
        };
        for rx in receivers {
            let out = rx.await.map_err(|_| EngineError::ShuttingDown(self.name.clone()))??;
            result.queue_time = result.queue_time.max(out.queue_time);
            result.inference_time = result.inference_time.max(out.inference_time);
            result.vectors.push(out.vector);
        }
        metrics::histogram!("aleph_queue_duration_seconds", "model" => self.name.clone())
            .record(result.queue_time.as_secs_f64());
        Ok((result, costs))
    }

    /// Tokenizes texts and decodes images on the pool, split into one chunk per pool thread.
    async fn prepare(&self, inputs: Vec<Input>, opts: RunOptions) -> Result<Vec<Prepared>, EngineError> {
        let has_media = inputs.iter().any(|i| matches!(i, Input::Image(_) | Input::Audio(_)));
        // Media cost far more than texts to prepare: one per job, so they spread over the pool.
        let chunk = if has_media { 1 } else { inputs.len().div_ceil(self.pool.workers()).max(16) };
        let mut jobs = Vec::new();
        let mut inputs = inputs.into_iter();
        loop {
            let part: Vec<Input> = inputs.by_ref().take(chunk).collect();
            if part.is_empty() {
                break;
            }
            let tok = self.tokenizer.clone();
            let images = self.images.clone();
            let audio = self.audio.clone();
            let info = self.info.clone();
            jobs.push(self.pool.run(move || {
                part.into_iter()
                    .map(|input| match input {
                        Input::Text(t) => tok
                            .encode_with(&t, opts.truncation)
                            .map(|e| Prepared::Tokens(e, opts.output, opts.adapter))
                            .map_err(tokenization),
                        Input::Pair(a, b) => tok.encode_pair(&a, &b).map(Prepared::from).map_err(tokenization),
                        Input::InstructedPair { query, document, instruction } => tok
                            .encode_instructed_pair(&query, &document, &instruction)
                            .map(Prepared::from)
                            .map_err(tokenization),
                        Input::Ids(ids) => tok
                            .from_ids(&ids, opts.truncation)
                            .map(|e| Prepared::Tokens(e, opts.output, opts.adapter))
                            .map_err(tokenization),
                        Input::Image(bytes) => match &images {
                            Some(p) => p
                                .process(&bytes)
                                .map(|pixels| Prepared::Image { cost: info.image_tokens(&pixels), pixels })
                                .map_err(|e| EngineError::BadMedia(e.to_string())),
                            None => Err(EngineError::BadMedia("this model does not take images".into())),
                        },
                        Input::Audio(bytes) => match &audio {
                            Some(p) => p
                                .process(&bytes)
                                .map(|features| Prepared::Audio { features, cost: info.audio_cost })
                                .map_err(|e| EngineError::BadMedia(e.to_string())),
                            None => Err(EngineError::BadMedia("this model does not take audio".into())),
                        },
                    })
                    .collect::<Result<Vec<_>, _>>()
            }));
        }
        let mut out = Vec::new();
        for job in jobs {
            let part = job.await.ok_or_else(|| EngineError::Tokenization("preprocessing panicked".into()))??;
            out.extend(part);
        }
        Ok(out)
    }

    /// Stops accepting work, lets queued work finish, and joins the threads.
    pub fn shutdown(&self) {
        self.queue.close();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

fn tokenization(e: ModelError) -> EngineError {
    match e {
        ModelError::InputTooLong { .. } | ModelError::BadTokenId { .. } => EngineError::InvalidInput(e.to_string()),
        e => EngineError::Tokenization(e.to_string()),
    }
}
