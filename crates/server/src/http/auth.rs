//! Bearer-key authentication for the API routes.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::state::AppState;

/// Lets the request through only with `Authorization: Bearer <key>`. The comparison takes the same
/// time wherever the keys differ, and the key is never logged.
pub async fn require_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Result<Response, ApiError> {
    let Some(expected) = state.api_key.as_deref() else {
        return Ok(next.run(req).await);
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    match given {
        Some(key) if bool::from(key.as_bytes().ct_eq(expected.as_bytes())) => Ok(next.run(req).await),
        Some(_) => Err(ApiError::new(StatusCode::UNAUTHORIZED, "invalid API key")),
        None => Err(ApiError::new(StatusCode::UNAUTHORIZED, "missing API key: send `Authorization: Bearer <key>`")),
    }
}
