use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use aleph_engine::{ModelRegistry, TokenizerPool};
use axum::http::StatusCode;
use metrics_exporter_prometheus::PrometheusHandle;

use super::error::ApiError;
use super::keys::ApiKeys;
use crate::cli::ServeArgs;
use crate::fetch::MediaFetcher;
use crate::startup::Loader;

/// Limits the HTTP layer enforces before any work is queued.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_client_batch_size: usize,
    pub max_string_chars: usize,
    /// Images or audio clips per request.
    pub max_media_items: usize,
    /// Deepest nesting of objects and arrays in a request body.
    pub max_json_depth: usize,
}

/// What the admin API needs: its key, the process's flags (a model loaded at run time takes the non-model ones
/// from them) and the loader the start-up used.
pub struct Admin {
    pub key: String,
    pub args: ServeArgs,
    pub loader: Arc<Loader>,
}

/// Where the process is in its life: the port opens while models load, and stays open while it drains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Loading = 0,
    Ready = 1,
    Draining = 2,
}

/// Shared by every handler.
pub struct AppState {
    registry: OnceLock<Arc<ModelRegistry>>,
    phase: AtomicU8,
    in_flight: AtomicUsize,
    pub limits: Limits,
    pub metrics: Option<PrometheusHandle>,
    /// The API keys; none: the API is open.
    pub keys: ApiKeys,
    /// The admin API, when `--admin-key` is set.
    pub admin: Option<Admin>,
    /// Fetches media URLs and decodes data URIs.
    pub fetcher: MediaFetcher,
    /// The CPU pool the models tokenize on; routes that only tokenize use it too.
    pool: Arc<TokenizerPool>,
}

impl AppState {
    pub fn new(
        limits: Limits,
        metrics: Option<PrometheusHandle>,
        keys: ApiKeys,
        admin: Option<Admin>,
        fetcher: MediaFetcher,
        pool: Arc<TokenizerPool>,
    ) -> Self {
        AppState {
            registry: OnceLock::new(),
            phase: AtomicU8::new(Phase::Loading as u8),
            in_flight: AtomicUsize::new(0),
            limits,
            metrics,
            keys,
            admin,
            fetcher,
            pool,
        }
    }

    pub fn pool(&self) -> &TokenizerPool {
        &self.pool
    }

    /// The served models, or 503 while they are still loading.
    pub fn registry(&self) -> Result<&Arc<ModelRegistry>, ApiError> {
        self.registry
            .get()
            .ok_or_else(|| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "models are still loading; retry shortly"))
    }

    /// Every model is loaded and warm: start serving.
    pub fn set_ready(&self, registry: Arc<ModelRegistry>) {
        let _ = self.registry.set(registry);
        let _ =
            self.phase.compare_exchange(Phase::Loading as u8, Phase::Ready as u8, Ordering::SeqCst, Ordering::SeqCst);
    }

    pub fn begin_drain(&self) {
        self.phase.store(Phase::Draining as u8, Ordering::SeqCst);
    }

    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::SeqCst) {
            0 => Phase::Loading,
            1 => Phase::Ready,
            _ => Phase::Draining,
        }
    }

    /// Counts a request in until the guard drops.
    pub fn enter(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }
}

/// One API request being served; dropping it (response sent, or client gone) counts it out.
pub struct InFlight(Arc<AppState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}
