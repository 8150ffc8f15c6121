//! From a [`ModelSpec`] to a started [`ModelHandle`]: the files found (or downloaded), the model loaded on its
//! device with its replicas, its batching and vector cache set. The server, `aleph eval`/`bench` and the Python
//! package all load through here.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use aleph_models::media::audio::AudioLimits;
use aleph_models::media::image::ImageLimits;
use aleph_models::{hub, Backend, Device, LoadOptions};
use anyhow::{anyhow, Context};

use crate::cache::CacheConfig;
use crate::spec::{Engine, ModelSpec};
use crate::{ComputeScheduler, HandleConfig, ModelHandle, TokenizerPool};

/// The model's folder: local, in the HF cache, or downloaded from the hub (with a progress bar when
/// `progress`); `None` for the debug engine.
pub fn resolve(spec: &ModelSpec, progress: bool) -> anyhow::Result<Option<PathBuf>> {
    match spec.engine {
        Engine::Debug => Ok(None),
        Engine::Auto | Engine::Candle => {
            let dir = hub::resolve(&spec.model_id, spec.revision.as_deref(), progress)
                .with_context(|| format!("loading model `{}`", spec.model_id))?;
            Ok(Some(dir))
        }
    }
}

/// Resolves, loads and starts one model (with its replicas). Errors name the model.
pub fn load_model(
    spec: &ModelSpec,
    dir: Option<PathBuf>,
    queue_size: usize,
    cache: Option<(PathBuf, u64)>,
    pool: Arc<TokenizerPool>,
    scheduler: Option<Arc<ComputeScheduler>>,
) -> anyhow::Result<ModelHandle> {
    let t0 = Instant::now();
    let ctx = || format!("loading model `{}`", spec.model_id);
    let opts = LoadOptions {
        pooling: spec.pooling,
        dtype: spec.dtype,
        device: spec.device,
        backend: if spec.engine == Engine::Candle { Backend::Candle } else { Backend::Auto },
        image_limits: ImageLimits { max_pixels: spec.max_image_pixels },
        audio_limits: AudioLimits { max_seconds: spec.max_audio_seconds },
        trust_remote_code: spec.trust_remote_code,
        task: spec.task,
        rerank_instruction: spec.rerank_instruction.clone(),
        rerank_template: spec.rerank_template.clone(),
        // On a GPU, unpadded where padding costs most; ALEPH_ATTENTION=padded|unpadded|auto overrides it.
        attention: Default::default(),
    };
    let on_gpus = !spec.device_ids.is_empty()
        && (matches!(spec.device, Device::Cuda(_)) || (spec.device == Device::Auto && aleph_models::gpu_available()));
    let first_opts = match (on_gpus, spec.device_ids.first()) {
        (true, Some(&id)) => LoadOptions { device: Device::Cuda(id), ..opts.clone() },
        _ => opts.clone(),
    };
    let (loaded, source) = match &dir {
        None => (aleph_models::debug::load_debug(), "the debug engine".to_string()),
        Some(dir) => (aleph_models::load(dir, &first_opts).with_context(ctx)?, dir.display().to_string()),
    };
    if let Some(name) = &spec.default_prompt_name {
        loaded.info.prompts.get(name).map_err(|e| anyhow!("--default-prompt-name for `{}`: {e}", spec.model_id))?;
    }
    let (batch_size, max_batch_tokens) =
        spec.batching(loaded.info.backend == aleph_models::Compute::Candle && first_opts.device.on_gpu());
    if max_batch_tokens < loaded.info.window {
        return Err(anyhow!(
            "--max-batch-tokens {} is smaller than the window of `{}` ({} tokens): one full input would not fit",
            max_batch_tokens,
            spec.model_id,
            loaded.info.window
        ));
    }
    tracing::info!(
        model = spec.served_name,
        "loaded {} from {} ({}, dim {}, window {}, {:?} pooling{}) in {:.2} s; batches of up to {} sequences, {} \
         tokens{}",
        spec.model_id,
        source,
        loaded.info.architecture,
        loaded.info.dim,
        loaded.info.window,
        loaded.info.pooling,
        if loaded.info.normalize { ", normalized" } else { "" },
        t0.elapsed().as_secs_f64(),
        batch_size,
        max_batch_tokens,
        if loaded.info.pads { " (padding counted)" } else { "" }
    );
    // Infinity's data parallelism: a copy per listed GPU; on the CPU the replicas share the weights
    // (the cores are shared anyway), each running its own batches.
    let mut more_replicas = Vec::new();
    for &id in spec.device_ids.iter().skip(1) {
        if on_gpus {
            let dir = dir.as_ref().ok_or_else(|| anyhow!("the debug engine has no GPU replicas"))?;
            let replica = aleph_models::load(dir, &LoadOptions { device: Device::Cuda(id), ..opts.clone() })
                .with_context(|| format!("loading `{}` on cuda:{id}", spec.model_id))?;
            more_replicas.push(replica.model);
        } else {
            more_replicas.push(loaded.model.clone());
        }
    }
    let vector_cache = match cache {
        Some((root, max_bytes)) => Some(CacheConfig {
            dir: root.join(cache_folder_name(&spec.served_name)),
            max_bytes,
            fingerprint: fingerprint(spec, dir.as_deref(), loaded.info.backend.name()),
        }),
        None => None,
    };
    if let Some(c) = &vector_cache {
        tracing::info!(
            model = spec.served_name,
            "vector disk cache in {} (at most {} bytes)",
            c.dir.display(),
            c.max_bytes
        );
    }
    let config = HandleConfig {
        batch_size,
        max_batch_tokens,
        queue_size,
        warmup: spec.warmup,
        embedding_dtype: spec.embedding_dtype,
        max_request_tokens: spec.max_request_tokens,
        vector_cache,
        model_id: spec.model_id.clone(),
        revision: spec.revision.clone(),
        default_prompt_name: spec.default_prompt_name.clone(),
        truncate_dim: spec.truncate_dim,
        compute_weight: spec.compute_weight,
        dtype: loaded.info.dtype.name(),
    };
    ModelHandle::start(spec.served_name.clone(), loaded, more_replicas, config, pool, scheduler).with_context(ctx)
}

/// A served name as one folder name.
fn cache_folder_name(served: &str) -> String {
    served.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '.') { c } else { '_' }).collect()
}

/// What decides a model's outputs: where it came from, the files as loaded (name, size, modification
/// time), and the options that change the computation. Any change gives a new fingerprint, so stale
/// entries are never served; they age out of the bounded folder.
fn fingerprint(spec: &ModelSpec, dir: Option<&std::path::Path>, backend: &str) -> String {
    let mut files = Vec::new();
    if let Some(dir) = dir {
        collect_files(dir, dir, 0, &mut files);
    }
    files.sort();
    format!(
        "aleph-v1|{}|{}|{:?}|{}|{}|{:?}|{:?}|{}",
        spec.model_id,
        spec.revision.as_deref().unwrap_or(""),
        spec.engine,
        backend,
        spec.dtype.name(),
        spec.pooling,
        spec.device,
        files.join(";")
    )
}

fn collect_files(root: &std::path::Path, dir: &std::path::Path, depth: usize, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        // Follows links: the HF cache's snapshot files are links into blobs/.
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        if meta.is_dir() {
            if depth < 2 {
                collect_files(root, &path, depth + 1, out);
            }
            continue;
        }
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = path.strip_prefix(root).unwrap_or(&path).display().to_string();
        out.push(format!("{name}:{}:{modified}", meta.len()));
    }
}
