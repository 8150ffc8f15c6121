use std::sync::Arc;

use aleph_engine::ModelRegistry;
use metrics_exporter_prometheus::PrometheusHandle;

/// Limits the HTTP layer enforces before any work is queued.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_client_batch_size: usize,
    pub max_string_chars: usize,
}

/// Shared by every handler.
pub struct AppState {
    pub registry: Arc<ModelRegistry>,
    pub limits: Limits,
    pub metrics: Option<PrometheusHandle>,
    pub api_key: Option<String>,
}
