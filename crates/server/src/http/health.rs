//! `GET /health` and `GET /metrics`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::schemas::{unix_now, HealthBody};
use super::state::{AppState, Phase};

/// Readiness: 200 with the server time once every model is loaded and warm; 503 while loading and
/// while draining after SIGTERM.
#[utoipa::path(
    get,
    path = "/health",
    tag = "health",
    responses(
        (status = 200, description = "Serving", body = HealthBody),
        (status = 503, description = "Loading models, or draining", body = super::error::ErrorBody),
    )
)]
pub async fn health(State(state): State<Arc<AppState>>) -> Result<Json<HealthBody>, ApiError> {
    match state.phase() {
        Phase::Ready => Ok(Json(HealthBody { unix: unix_now() })),
        Phase::Loading => Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "loading models")),
        Phase::Draining => Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down")),
    }
}

/// Prometheus metrics in the text exposition format.
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    match &state.metrics {
        Some(handle) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], handle.render()).into_response(),
        None => (StatusCode::NOT_FOUND, "metrics are disabled").into_response(),
    }
}
