//! From parsed flags to a serving process: load every model, build the router, serve until a
//! signal, then drain.

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::path::PathBuf;

use aleph_engine::{
    human_bytes, load, ComputeScheduler, LoadRefused, Memory, ModelHandle, ModelRegistry, TokenizerPool,
};
use aleph_models::{Device, GpuStatus};
use anyhow::{anyhow, Context};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::cli::{ModelSpec, ServeArgs};
use crate::fetch::guard::Guard;
use crate::fetch::{FetchConfig, MediaFetcher};
use crate::http::keys::{ApiKeys, KeyLimits};
use crate::http::state::{Admin, AppState, Limits};
use crate::http::{self, HttpConfig};
use crate::memory;

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let specs = args.model_specs().map_err(|e| anyhow!(e))?;
    // A misspelt ALEPH_ATTENTION stops the start on every build, not only where candle would read it.
    aleph_models::AttentionKernel::Auto.resolve(false).map_err(|e| anyhow!(e))?;
    let ignored = args.no_effect_flags();
    if !ignored.is_empty() {
        tracing::info!(
            "{} select Infinity's Python machinery (torch.compile, BetterTransformer, ONNX/CTranslate2 engines) \
             or lengths Aleph always counts with the tokenizer: accepted, no effect",
            ignored.join(", ")
        );
    }
    if std::env::var_os("ALEPH_CALIBRATION_DATASET_URL").is_some() {
        tracing::info!("INFINITY_CALIBRATION_DATASET_URL is ignored: the int8 calibration corpus ships in the binary");
    }
    log_gpu_status(&specs);
    let metrics = install_metrics();
    let workers =
        args.tokenizer_workers.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    let pool = Arc::new(TokenizerPool::new(workers));
    let loader = Arc::new(Loader::new(&args, pool.clone()));
    let admin_on = !args.admin_key.is_empty();
    let budget = memory::budget(args.memory_budget.0).map_err(|e| anyhow!(e))?;
    for (device, limit) in &budget.0 {
        tracing::info!("memory budget on {device}: {} of weights", human_bytes(*limit));
    }
    let registry = ModelRegistry::new(Vec::new()).map_err(|e| anyhow!(e))?.with_budget(budget);
    let registry = Arc::new(if admin_on { registry.with_exact_names() } else { registry });
    let admin = Some(args.admin_key.clone()).filter(|k| !k.is_empty()).map(|key| Admin {
        key,
        args: args.clone(),
        loader: loader.clone(),
    });
    let state = Arc::new(app_state(&args, metrics, admin, pool.clone())?);
    if !state.keys.is_empty() {
        tracing::info!("{} API key(s) accepted", state.keys.len());
    }

    // The port opens first: /health answers 503 while the models load, so orchestrators can tell
    // "starting" from "dead".
    let server = if args.preload_only {
        None
    } else {
        let app = http::router(state.clone(), &http_config(&args));
        let addr = format!("{}:{}", args.host, args.port);
        let listener = tokio::net::TcpListener::bind(&addr).await.with_context(|| format!("binding {addr}"))?;
        tracing::info!("loading models; listening on http://{}", listener.local_addr()?);
        let drain = Duration::from_secs_f64(args.drain_timeout);
        let shutdown = drain_on_signal(state.clone(), drain);
        Some(tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(shutdown).await }))
    };
    // TEI's gRPC API on its own port, stopped once the HTTP server has drained.
    let (grpc_stop, stopped) = tokio::sync::watch::channel(false);
    let grpc = match (args.grpc_port, args.preload_only) {
        (Some(port), false) => {
            let (router, health) = crate::grpc::router(state.clone()).await?;
            let addr = format!("{}:{port}", args.host);
            let listener = tokio::net::TcpListener::bind(&addr).await.with_context(|| format!("binding {addr}"))?;
            tracing::info!("gRPC (tei.v1) on {}", listener.local_addr()?);
            let mut stopped = stopped.clone();
            let stop = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            tokio::spawn(async move { axum::serve(listener, router).with_graceful_shutdown(stop).await });
            Some(health)
        }
        _ => None,
    };

    let load = async {
        for spec in specs {
            registry.begin_load(&spec.served_name, &spec.model_id, Memory::new()).map_err(|refused| match refused {
                LoadRefused::Busy(_) => anyhow!(
                    "served model names must be unique: `{}` is used twice (set --served-model-name)",
                    spec.served_name
                ),
                LoadRefused::OverBudget(why) => anyhow!(why),
            })?;
            let (loader, registry) = (loader.clone(), registry.clone());
            tokio::task::spawn_blocking(move || loader.load_into(&registry, &spec)).await??;
        }
        anyhow::Ok(registry.clone())
    };
    let Some(mut server) = server else {
        let registry = load.await?;
        tracing::info!("models loaded in {:.2} s; --preload-only given, exiting", started.elapsed().as_secs_f64());
        registry.shutdown();
        return Ok(());
    };
    let registry = tokio::select! {
        registry = load => registry?,
        // A signal while loading: nothing is in flight, so stop now.
        served = &mut server => {
            served??;
            return Ok(());
        }
    };
    state.set_ready(registry.clone());
    if let Some(health) = &grpc {
        crate::grpc::mark_serving(health, &state).await;
    }
    tracing::info!(
        "ready: serving {} (ready in {:.2} s)",
        registry.names().join(", "),
        started.elapsed().as_secs_f64()
    );
    server.await??;
    let _ = grpc_stop.send(true);
    tracing::info!("stopped accepting; draining the models");
    tokio::task::spawn_blocking(move || registry.shutdown()).await?;
    Ok(())
}

/// The HTTP layer's shared state as the flags configure it (models are added once loaded).
pub(crate) fn app_state(
    args: &ServeArgs,
    metrics: Option<PrometheusHandle>,
    admin: Option<Admin>,
    pool: Arc<TokenizerPool>,
) -> anyhow::Result<AppState> {
    let keys = ApiKeys::new(
        &args.api_key,
        args.api_key_file.as_deref(),
        KeyLimits { max_in_flight: args.api_key_max_in_flight, tokens_per_second: args.api_key_tokens_per_second },
    )
    .map_err(|e| anyhow!(e))?;
    let fetcher = MediaFetcher::new(FetchConfig {
        max_bytes: args.media_max_bytes,
        // A request's downloads together may hold what one request body may.
        max_request_bytes: args.payload_limit.max(args.media_max_bytes),
        connect_timeout: Duration::from_secs_f64(args.media_timeout.clamp(0.001, 10.0)),
        timeout: Duration::from_secs_f64(args.media_timeout.max(0.001)),
        guard: Guard { allow_all: args.media_allow_private, allowed: args.media_allowed_networks.clone() },
    })
    .context("building the media HTTP client")?;
    let limits = Limits {
        max_client_batch_size: args.max_client_batch_size,
        max_string_chars: args.max_string_chars,
        max_media_items: args.max_media_items.min(args.max_client_batch_size),
        max_json_depth: args.max_json_depth,
    };
    Ok(AppState::new(limits, metrics, keys, admin, fetcher, pool))
}

pub(crate) fn http_config(args: &ServeArgs) -> HttpConfig {
    HttpConfig {
        url_prefix: args.url_prefix.clone(),
        redirect_slash: args.redirect_slash.clone(),
        permissive_cors: args.permissive_cors && !args.no_permissive_cors,
        payload_limit: args.payload_limit,
        proxy_root_path: args.proxy_root_path.clone(),
    }
}

/// Loads models with the process's shared parts: at start-up, and for the admin API while serving.
pub struct Loader {
    queue_size: usize,
    cache_root: PathBuf,
    cache_max_bytes: u64,
    pool: Arc<TokenizerPool>,
    /// Shares the cores among every model's batches (`--compute-scheduler fair`).
    scheduler: Option<Arc<ComputeScheduler>>,
}

impl Loader {
    pub fn new(args: &ServeArgs, pool: Arc<TokenizerPool>) -> Self {
        Loader {
            queue_size: args.queue_size,
            cache_root: args.vector_cache_root(),
            cache_max_bytes: args.vector_disk_cache_max_bytes,
            pool,
            scheduler: args.compute_scheduler.then(ComputeScheduler::new),
        }
    }

    /// Resolves, loads, warms and starts one model outside any registry (`aleph eval`, `aleph bench`):
    /// blocking, errors naming the model.
    pub fn load_alone(&self, spec: &ModelSpec) -> anyhow::Result<ModelHandle> {
        let dir = self.resolve(spec)?;
        let cache = spec.vector_disk_cache.then(|| (self.cache_root.clone(), self.cache_max_bytes));
        load::load_model(spec, dir, self.queue_size, cache, self.pool.clone(), self.scheduler.clone())
    }

    fn resolve(&self, spec: &ModelSpec) -> anyhow::Result<Option<PathBuf>> {
        let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
        load::resolve(spec, progress)
    }

    /// Resolves (downloading if needed), loads, warms and starts the model `registry` lists as loading under
    /// `spec.served_name`, held to the memory budget before its weights are read and again once they are; then it
    /// serves, or its entry says why not (blocking: call it off the async threads).
    pub fn load_into(&self, registry: &ModelRegistry, spec: &ModelSpec) -> anyhow::Result<()> {
        let name = spec.served_name.as_str();
        let loaded = self.load(registry, spec);
        let outcome = loaded.map(|handle| {
            let held = memory::held(spec, handle.info());
            (Arc::new(handle), held)
        });
        match registry.finish_load(name, outcome.map_err(|e| format!("{e:#}"))) {
            Ok(()) => Ok(()),
            Err((handle, why)) => {
                if let Some(handle) = handle {
                    handle.shutdown();
                }
                Err(anyhow!(why))
            }
        }
    }

    fn load(&self, registry: &ModelRegistry, spec: &ModelSpec) -> anyhow::Result<ModelHandle> {
        let dir = self.resolve(spec)?;
        registry.reserve(&spec.served_name, memory::expected(spec, dir.as_deref())).map_err(|e| anyhow!("{e}"))?;
        let cache = spec.vector_disk_cache.then(|| (self.cache_root.clone(), self.cache_max_bytes));
        load::load_model(spec, dir, self.queue_size, cache, self.pool.clone(), self.scheduler.clone())
    }
}

/// Says once what a CUDA build found: the GPUs it will use, or why the models on `--device auto` run on the CPU.
fn log_gpu_status(specs: &[ModelSpec]) {
    match aleph_models::gpu_status() {
        GpuStatus::NotBuilt => {}
        GpuStatus::Ready { devices } => tracing::info!("CUDA: {devices} GPU(s) usable"),
        GpuStatus::Unusable(why) if specs.iter().any(|s| s.device == Device::Auto) => {
            tracing::warn!("CUDA build serving on the CPU: {why}")
        }
        GpuStatus::Unusable(why) => tracing::info!("CUDA build, no GPU usable: {why}"),
    }
}

fn install_metrics() -> Option<PrometheusHandle> {
    let buckets = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
    let sizes = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0, 16384.0, 65536.0];
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Prefix("aleph_batch_".into()), &sizes))
        .and_then(|b| b.install_recorder())
        .map_err(|e| tracing::warn!("metrics disabled: {e}"))
        .ok()
}

/// Resolves on the first Ctrl-C or SIGTERM (what a terminal, systemd, Docker and Kubernetes send to stop). The
/// handlers are installed by this call, not at the first poll, so a signal from here on is caught.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, Signal, SignalKind};
        async fn recv(signal: Option<Signal>) {
            match signal {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        let (interrupt, terminate) = (signal(SignalKind::interrupt()).ok(), signal(SignalKind::terminate()).ok());
        async move {
            tokio::select! {
                _ = recv(interrupt) => {},
                _ = recv(terminate) => {},
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Resolves on SIGTERM or Ctrl-C once the drain is over: `/health` turns 503 and new API requests are
/// refused while in-flight ones finish, for at most `limit`. Then the server stops accepting.
async fn drain_on_signal(state: Arc<AppState>, limit: Duration) {
    shutdown_signal().await;
    state.begin_drain();
    tracing::info!("shutdown signal received; draining {} in-flight requests", state.in_flight());
    let deadline = Instant::now() + limit;
    while state.in_flight() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if state.in_flight() > 0 {
        tracing::warn!("drain timeout: {} requests still in flight", state.in_flight());
    }
}
