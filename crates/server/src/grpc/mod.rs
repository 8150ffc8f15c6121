//! TEI's gRPC API (`tei.v1`, TEI's proto/tei.proto, generated into crates/tei-proto) on its own port (`--grpc-port`): Info, Embed, Predict,
//! Rerank and Tokenize over the same engine and the same TEI semantics as the HTTP routes (crate::http::tei),
//! with gRPC's health service and reflection. `--api-key` guards the `tei.v1` services as it guards the HTTP
//! API; health and reflection stay open, as in TEI.

mod service;

use std::sync::Arc;

use aleph_engine::usage::TokenMeter;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tonic_health::server::HealthReporter;

use crate::http::state::AppState;

/// The messages and service traits generated from TEI's proto (crates/tei-proto).
pub use aleph_tei_proto as pb;

pub use service::Tei;

/// The gRPC services as one router, and the health reporter to mark them serving once the models are loaded.
pub async fn router(state: Arc<AppState>) -> anyhow::Result<(axum::Router, HealthReporter)> {
    let (health, health_service) = tonic_health::server::health_reporter();
    // Info and Tokenize answer as soon as a model is there; Embed, Predict and Rerank wait for their kind.
    for name in ALL_SERVICES {
        health.set_service_status(*name, tonic_health::ServingStatus::NotServing).await;
    }
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::DESCRIPTOR_SET)
        .build_v1()?;
    let tei = Tei::new(state.clone());
    let routes = tonic::service::Routes::new(health_service)
        .add_service(reflection)
        .add_service(pb::info_server::InfoServer::new(tei.clone()))
        .add_service(pb::embed_server::EmbedServer::new(tei.clone()))
        .add_service(pb::predict_server::PredictServer::new(tei.clone()))
        .add_service(pb::rerank_server::RerankServer::new(tei.clone()))
        .add_service(pb::tokenize_server::TokenizeServer::new(tei));
    let router = routes
        .into_axum_router()
        .layer(middleware::from_fn_with_state(state.clone(), require_key))
        .layer(middleware::from_fn_with_state(state, crate::http::track_in_flight));
    Ok((router, health))
}

const ALL_SERVICES: &[&str] = &["tei.v1.Info", "tei.v1.Tokenize", "tei.v1.Embed", "tei.v1.Predict", "tei.v1.Rerank"];

/// Marks serving what the loaded models can do, as TEI's health watcher does: Info and Tokenize always, Embed
/// for an embedder, Predict for a classifier or reranker, Rerank for a reranker.
pub async fn mark_serving(health: &HealthReporter, state: &AppState) {
    let Ok(registry) = state.registry() else { return };
    let capabilities: Vec<&'static str> =
        registry.ready().iter().flat_map(|m| m.info().capabilities().to_vec()).collect();
    let has = |c: &str| capabilities.contains(&c);
    for (service, serving) in [
        ("tei.v1.Info", true),
        ("tei.v1.Tokenize", true),
        ("tei.v1.Embed", has("embed") || has("sparse")),
        ("tei.v1.Predict", has("classify") || has("rerank")),
        ("tei.v1.Rerank", has("rerank")),
    ] {
        let status =
            if serving { tonic_health::ServingStatus::Serving } else { tonic_health::ServingStatus::NotServing };
        health.set_service_status(service, status).await;
    }
}

/// With `--api-key` set, the `tei.v1` services need `authorization: Bearer <key>` of a known key within its
/// limits (gRPC's UNAUTHENTICATED otherwise, as TEI answers); the tokens of unary calls are charged to it.
async fn require_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if state.keys.is_empty() || !req.uri().path().starts_with("/tei.v1.") {
        return next.run(req).await;
    }
    let Some(key) = crate::http::auth::bearer(&req).and_then(|k| state.keys.find(k)) else {
        return grpc_error(tonic::Status::unauthenticated("No valid auth token"));
    };
    let admitted = match key.admit() {
        Ok(admitted) => admitted,
        Err(e) => return grpc_error(tonic::Status::resource_exhausted(e.message)),
    };
    let meter: Arc<dyn TokenMeter> = admitted.key().clone();
    aleph_engine::usage::metered(meter, next.run(req)).await
}

fn grpc_error(status: tonic::Status) -> Response {
    status.into_http::<axum::body::Body>().into_response()
}
