//! The HTTP layer: routes, request decoding, auth, errors and response shapes. It never blocks; it
//! awaits the engine.

mod admin;
pub(crate) mod auth;
mod chat_input;
mod classify;
pub mod cohere;
mod embeddings;
pub mod error;
pub mod extract;
mod health;
pub mod keys;
mod models;
pub mod openapi;
mod pooling;
pub(crate) mod rerank;
pub mod schemas;
mod score;
pub mod state;
pub mod tei;
mod timing;
pub mod validate;
mod vllm_classify;
mod vllm_rerank;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use tower_http::cors::CorsLayer;
use utoipa_swagger_ui::SwaggerUi;

use error::ApiError;
use state::{AppState, Phase};

/// Router settings that come from the command line.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub url_prefix: String,
    pub redirect_slash: String,
    pub permissive_cors: bool,
    pub payload_limit: usize,
    /// `--proxy-root-path`: the prefix a reverse proxy strips, listed as the OpenAPI server.
    pub proxy_root_path: String,
}

/// The inference and model routes, relative to the prefix.
const API_ROUTES: &[&str] = &[
    "/embeddings",
    "/rerank",
    "/classify",
    "/models",
    "/embeddings_image",
    "/embeddings_audio",
    "/embed",
    "/embed_all",
    "/embed_sparse",
    "/predict",
    "/similarity",
    "/tokenize",
    "/decode",
    "/info",
    "/invocations",
    "/v2/embed",
    "/v2/rerank",
];

// The deprecated media routes are still served, as Infinity serves them.
#[allow(deprecated)]
pub fn router(state: Arc<AppState>, cfg: &HttpConfig) -> Router {
    let api = Router::new()
        .route("/embeddings", post(embeddings::embeddings))
        .route("/embeddings_image", post(embeddings::embeddings_image))
        .route("/embeddings_audio", post(embeddings::embeddings_audio))
        .route("/rerank", post(rerank::rerank))
        .route("/classify", post(classify::classify))
        .route("/score", post(score::score))
        .route("/pooling", post(pooling::pooling))
        .route("/models", get(models::models))
        .route("/models/{*id}", get(models::model))
        .route("/embed", post(tei::embed))
        .route("/embed_all", post(tei::embed_all))
        .route("/embed_sparse", post(tei::embed_sparse))
        .route("/predict", post(tei::predict))
        .route("/similarity", post(tei::similarity))
        .route("/tokenize", post(tei::tokenize))
        .route("/decode", post(tei::decode))
        .route("/info", get(tei::info))
        .route("/invocations", post(tei::root))
        .route("/", post(tei::root))
        .route("/v2/embed", post(cohere::embed))
        .route("/v2/rerank", post(cohere::rerank))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::require_key))
        .route_layer(middleware::from_fn_with_state(state.clone(), track_in_flight));

    let prefix = cfg.url_prefix.as_str();
    let mut app = Router::new().route("/health", get(health::health)).route("/metrics", get(health::metrics));
    app = if prefix.is_empty() { app.merge(api.clone()) } else { app.nest(prefix, api.clone()) };
    // OpenAI clients configured with a `/v1` base URL work without --url-prefix.
    if !prefix.ends_with("/v1") {
        app = app.nest(&format!("{prefix}/v1"), api);
    }
    if !prefix.is_empty() {
        app = app.route(&format!("{prefix}/health"), get(health::health));
    }
    if state.admin.is_some() {
        let admin = Router::new()
            .route("/admin/models", get(admin::list).post(admin::load))
            .route("/admin/models/{*model}", delete(admin::unload))
            .route_layer(middleware::from_fn_with_state(state.clone(), auth::require_admin_key));
        app = if prefix.is_empty() { app.merge(admin) } else { app.nest(prefix, admin) };
    }
    app = app.merge(
        SwaggerUi::new(format!("{prefix}/docs"))
            .url(format!("{prefix}/openapi.json"), openapi::document(prefix, &cfg.proxy_root_path)),
    );
    // Browsers GET `/` and are redirected to the docs; TEI's clients POST to it (an API route).
    if !cfg.redirect_slash.is_empty() {
        let target = cfg.redirect_slash.clone();
        app = app.route("/", get(move || async move { Redirect::temporary(&target) }));
    }
    let route_label_prefix = prefix.to_string();
    let mut app = app
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this route")
        })
        .layer(DefaultBodyLimit::max(cfg.payload_limit))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            let route = route_label(&route_label_prefix, req.uri().path());
            record_request(route, req, next)
        }));
    if cfg.permissive_cors {
        app = app.layer(CorsLayer::very_permissive());
    }
    app.with_state(state)
}

/// Counts API requests in flight, and refuses new ones once draining has begun.
pub(crate) async fn track_in_flight(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if state.phase() == Phase::Draining {
        let mut response = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
        response.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
        return response;
    }
    let _guard = state.enter();
    next.run(req).await
}

/// A bounded label for a request path: the API route it hits, or `other`.
fn route_label(prefix: &str, path: &str) -> &'static str {
    let rest = path.strip_prefix(prefix).unwrap_or(path);
    let rest = rest.strip_prefix("/v1").filter(|r| r.starts_with('/')).unwrap_or(rest);
    API_ROUTES.iter().chain(&["/health", "/metrics"]).find(|r| **r == rest).copied().unwrap_or("other")
}

async fn record_request(route: &'static str, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let response = next.run(req).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!("aleph_http_requests_total", "route" => route, "status" => status).increment(1);
    metrics::histogram!("aleph_http_request_duration_seconds", "route" => route)
        .record(started.elapsed().as_secs_f64());
    response.into_response()
}

#[cfg(test)]
mod tests {
    use super::route_label;

    #[test]
    fn route_labels_are_bounded() {
        assert_eq!(route_label("", "/embeddings"), "/embeddings");
        assert_eq!(route_label("", "/v1/embeddings"), "/embeddings");
        assert_eq!(route_label("/api", "/api/v1/models"), "/models");
        assert_eq!(route_label("", "/random/thing"), "other");
    }
}
