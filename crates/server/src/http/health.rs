//! `GET /health` and `GET /metrics`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::schemas::{unix_now, HealthBody};
use super::state::AppState;

/// Liveness: 200 with the server time once the models are loaded.
#[utoipa::path(get, path = "/health", tag = "health", responses((status = 200, body = HealthBody)))]
pub async fn health() -> Json<HealthBody> {
    Json(HealthBody { unix: unix_now() })
}

/// Prometheus metrics in the text exposition format.
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    match &state.metrics {
        Some(handle) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], handle.render()).into_response(),
        None => (StatusCode::NOT_FOUND, "metrics are disabled").into_response(),
    }
}
