//! Bearer-key authentication for the API routes (the keys and their limits: [`super::keys`]) and, with its own
//! key, the admin routes.

use std::sync::Arc;

use aleph_engine::usage::TokenMeter;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::state::AppState;

/// With `--api-key` set, lets the request through only with `Authorization: Bearer <key>` of a known key
/// within its limits; the tokens the request feeds the models are charged to that key.
pub async fn require_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Result<Response, ApiError> {
    if state.keys.is_empty() {
        return Ok(next.run(req).await);
    }
    let key = match bearer(&req) {
        Some(given) => state.keys.find(given).ok_or_else(|| invalid("API key"))?,
        None => return Err(missing("API key")),
    };
    let admitted = key.admit()?;
    let meter: Arc<dyn TokenMeter> = admitted.key().clone();
    Ok(aleph_engine::usage::metered(meter, next.run(req)).await)
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

/// The key an `Authorization: Bearer …` header carries (HTTP and gRPC alike).
pub(crate) fn bearer(req: &Request) -> Option<&str> {
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
}

/// The comparison takes the same time wherever the keys differ, and the key is never logged.
fn check_bearer(req: &Request, expected: &str, what: &str) -> Result<(), ApiError> {
    match bearer(req) {
        Some(key) if bool::from(key.as_bytes().ct_eq(expected.as_bytes())) => Ok(()),
        Some(_) => Err(invalid(what)),
        None => Err(missing(what)),
    }
}

fn invalid(what: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, format!("invalid {what}"))
}

fn missing(what: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, format!("missing {what}: send `Authorization: Bearer <key>`"))
}
