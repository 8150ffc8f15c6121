//! From parsed flags to a serving process: load every model, build the router, serve until a
//! signal, then drain.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aleph_engine::{HandleConfig, ModelHandle, ModelRegistry, TokenizerPool};
use aleph_models::media::audio::AudioLimits;
use aleph_models::media::image::ImageLimits;
use aleph_models::{hub, Backend, LoadOptions};
use anyhow::{anyhow, Context};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::cli::{Engine, ModelSpec, ServeArgs};
use crate::fetch::guard::Guard;
use crate::fetch::{FetchConfig, MediaFetcher};
use crate::http::state::{AppState, Limits};
use crate::http::{self, HttpConfig};

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let specs = args.model_specs().map_err(|e| anyhow!(e))?;
    let metrics = install_metrics();
    let workers =
        args.tokenizer_workers.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    let pool = Arc::new(TokenizerPool::new(workers));
    let fetcher = MediaFetcher::new(FetchConfig {
        max_bytes: args.media_max_bytes,
        // A request's downloads together may hold what one request body may.
        max_request_bytes: args.payload_limit.max(args.media_max_bytes),
        connect_timeout: Duration::from_secs_f64(args.media_timeout.clamp(0.001, 10.0)),
        timeout: Duration::from_secs_f64(args.media_timeout.max(0.001)),
        guard: Guard { allow_all: args.media_allow_private, allowed: args.media_allowed_networks.clone() },
    })
    .context("building the media HTTP client")?;
    let state = Arc::new(AppState::new(
        Limits {
            max_client_batch_size: args.max_client_batch_size,
            max_string_chars: args.max_string_chars,
            max_media_items: args.max_media_items.min(args.max_client_batch_size),
            max_json_depth: args.max_json_depth,
        },
        metrics,
        Some(args.api_key.clone()).filter(|k| !k.is_empty()),
        fetcher,
    ));

    // The port opens first: /health answers 503 while the models load, so orchestrators can tell
    // "starting" from "dead".
    let server = if args.preload_only {
        None
    } else {
        let app = http::router(
            state.clone(),
            &HttpConfig {
                url_prefix: args.url_prefix.clone(),
                redirect_slash: args.redirect_slash.clone(),
                permissive_cors: args.permissive_cors && !args.no_permissive_cors,
                payload_limit: args.payload_limit,
            },
        );
        let addr = format!("{}:{}", args.host, args.port);
        let listener = tokio::net::TcpListener::bind(&addr).await.with_context(|| format!("binding {addr}"))?;
        tracing::info!("loading models; listening on http://{}", listener.local_addr()?);
        let drain = Duration::from_secs_f64(args.drain_timeout);
        let shutdown = drain_on_signal(state.clone(), drain);
        Some(tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(shutdown).await }))
    };

    let load = async {
        let mut handles = Vec::new();
        for spec in specs {
            let pool = pool.clone();
            let queue_size = args.queue_size;
            let handle = tokio::task::spawn_blocking(move || load_model(&spec, queue_size, pool)).await??;
            handles.push(Arc::new(handle));
        }
        anyhow::Ok(Arc::new(ModelRegistry::new(handles).map_err(|e| anyhow!(e))?))
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
    tracing::info!(
        "ready: serving {} (ready in {:.2} s)",
        registry.names().join(", "),
        started.elapsed().as_secs_f64()
    );
    server.await??;
    tracing::info!("stopped accepting; draining the models");
    tokio::task::spawn_blocking(move || registry.shutdown()).await?;
    Ok(())
}

/// Resolves, loads and starts one model. Errors name the model.
fn load_model(spec: &ModelSpec, queue_size: usize, pool: Arc<TokenizerPool>) -> anyhow::Result<ModelHandle> {
    let t0 = Instant::now();
    let ctx = || format!("loading model `{}`", spec.model_id);
    let opts = LoadOptions {
        pooling: spec.pooling_method.parse().map_err(|e: String| anyhow!("--pooling-method: {e}"))?,
        dtype: spec.dtype.parse().map_err(|e: String| anyhow!("--dtype: {e}"))?,
        device: spec.device.parse().map_err(|e: String| anyhow!("--device: {e}"))?,
        backend: if spec.engine == Engine::Candle { Backend::Candle } else { Backend::Auto },
        image_limits: ImageLimits { max_pixels: spec.max_image_pixels },
        audio_limits: AudioLimits { max_seconds: spec.max_audio_seconds },
    };
    let (loaded, source) = match spec.engine {
        Engine::Debug => (aleph_models::debug::load_debug(), "the debug engine".to_string()),
        Engine::Auto | Engine::Candle => {
            let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
            let dir = hub::resolve(&spec.model_id, spec.revision.as_deref(), progress).with_context(ctx)?;
            (aleph_models::load(&dir, &opts).with_context(ctx)?, dir.display().to_string())
        }
    };
    if spec.max_batch_tokens < loaded.info.window {
        return Err(anyhow!(
            "--max-batch-tokens {} is smaller than the window of `{}` ({} tokens): one full input would not fit",
            spec.max_batch_tokens,
            spec.model_id,
            loaded.info.window
        ));
    }
    tracing::info!(
        model = spec.served_name,
        "loaded {} from {} ({}, dim {}, window {}, {:?} pooling{}) in {:.2} s",
        spec.model_id,
        source,
        loaded.info.architecture,
        loaded.info.dim,
        loaded.info.window,
        loaded.info.pooling,
        if loaded.info.normalize { ", normalized" } else { "" },
        t0.elapsed().as_secs_f64()
    );
    let config = HandleConfig {
        batch_size: spec.batch_size,
        max_batch_tokens: spec.max_batch_tokens,
        queue_size,
        warmup: spec.warmup,
        embedding_dtype: spec.embedding_dtype.parse().map_err(|e: String| anyhow!("--embedding-dtype: {e}"))?,
        max_request_tokens: spec.max_request_tokens,
    };
    ModelHandle::start(spec.served_name.clone(), loaded, config, pool).with_context(ctx)
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

/// Resolves on SIGTERM or Ctrl-C once the drain is over: `/health` turns 503 and new API requests are
/// refused while in-flight ones finish, for at most `limit`. Then the server stops accepting.
async fn drain_on_signal(state: Arc<AppState>, limit: Duration) {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
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
