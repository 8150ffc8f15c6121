//! `GET /models`.

use std::sync::Arc;

use aleph_engine::ModelHandle;
use axum::extract::{Path, State};
use axum::Json;

use super::error::ApiError;
use super::schemas::{unix_now, ModelInfoBody, ModelList, ModelStatsBody};
use super::state::AppState;

/// List the served models with their capabilities and queue statistics.
#[utoipa::path(get, path = "/models", tag = "models", responses((status = 200, body = ModelList)))]
pub async fn models(State(state): State<Arc<AppState>>) -> Result<Json<ModelList>, ApiError> {
    let registry = state.registry()?;
    let data = registry.ready().iter().map(|m| describe(m)).collect();
    let weight_bytes_total =
        registry.entries().iter().filter_map(|e| e.handle.as_ref()).map(|h| h.info().weight_bytes).sum();
    let memory_budget = registry.budget().0.clone();
    let memory_held = if memory_budget.is_empty() { Default::default() } else { registry.held() };
    Ok(Json(ModelList {
        object: "list",
        data,
        process_resident_bytes: resident_bytes(),
        weight_bytes_total,
        memory_budget,
        memory_held,
    }))
}

/// One served model, by its served name (OpenAI's `GET /models/{model}`; the name may hold slashes).
#[utoipa::path(
    get,
    path = "/models/{model}",
    tag = "models",
    params(("model" = String, Path, description = "The served model name")),
    responses(
        (status = 200, body = ModelInfoBody),
        (status = 404, description = "No model is served under this name", body = super::error::ErrorBody),
    )
)]
pub async fn model(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<ModelInfoBody>, ApiError> {
    let registry = state.registry()?;
    // Exact names only: unlike inference routes, a lookup by name must not answer for another model.
    let id = id.trim_start_matches('/');
    registry.ready().iter().find(|m| m.name() == id).map(|m| Json(describe(m))).ok_or_else(|| {
        ApiError::not_found(format!("model `{id}` is not served here; served models: {}", registry.names().join(", ")))
            .with_param("model")
    })
}

fn describe(m: &ModelHandle) -> ModelInfoBody {
    let s = m.stats();
    ModelInfoBody {
        id: m.name().to_string(),
        stats: ModelStatsBody {
            queue_fraction: s.queue_depth as f64 / s.queue_limit.max(1) as f64,
            queue_absolute: s.queue_depth,
            results_pending: 0,
            batch_size: s.batch_size,
            running_batches: s.running_batches,
            last_batch_size: s.last_batch_size,
            batches_total: s.batches,
            batches_failed: s.failed_batches,
            replicas: m.replicas(),
        },
        object: "model",
        owned_by: "infinity",
        created: unix_now() as u64,
        backend: m.info().backend.name(),
        capabilities: m.info().capabilities(),
        weight_bytes: m.info().weight_bytes,
    }
}

/// The process's resident memory, from `/proc/self/statm` (0 where that does not exist).
fn resident_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .unwrap_or(0);
    pages * 4096
}
