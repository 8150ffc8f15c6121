//! Bearer-key authentication for the API routes and, with its own key, the admin routes.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::state::AppState;

/// Lets the request through only with `Authorization: Bearer <key>` when `--api-key` is set.
pub async fn require_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Result<Response, ApiError> {
    if let Some(expected) = state.api_key.as_deref() {
        check_bearer(&req, expected, "API key")?;
    }
    Ok(next.run(req).await)
}

/// The admin routes: only with `Authorization: Bearer <admin key>`, never with the API key.
pub async fn require_admin_key(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Some(admin) = state.admin.as_ref() else {
        return Err(ApiError::not_found("no such route"));
    };
    check_bearer(&req, &admin.key, "admin key")?;
    Ok(next.run(req).await)
}

/// The comparison takes the same time wherever the keys differ, and the key is never logged.
fn check_bearer(req: &Request, expected: &str, what: &str) -> Result<(), ApiError> {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    match given {
        Some(key) if bool::from(key.as_bytes().ct_eq(expected.as_bytes())) => Ok(()),
        Some(_) => Err(ApiError::new(StatusCode::UNAUTHORIZED, format!("invalid {what}"))),
        None => {
            Err(ApiError::new(StatusCode::UNAUTHORIZED, format!("missing {what}: send `Authorization: Bearer <key>`")))
        }
    }
}
