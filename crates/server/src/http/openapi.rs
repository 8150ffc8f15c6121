//! The OpenAPI document served at `{prefix}/openapi.json` and browsed at `{prefix}/docs`.

use utoipa::OpenApi;

use super::{classify, embeddings, error, health, models, rerank, schemas};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Aleph",
        description = "Embeddings, reranking and classification over an Infinity- and OpenAI-compatible API. \
                       Every inference route is also served under `/v1`."
    ),
    paths(
        embeddings::embeddings,
        embeddings::embeddings_image,
        embeddings::embeddings_audio,
        rerank::rerank,
        classify::classify,
        models::models,
        health::health
    ),
    components(schemas(
        schemas::EmbeddingRequest,
        schemas::MediaEmbeddingRequest,
        schemas::EmbeddingResponse,
        schemas::EmbeddingObject,
        schemas::EmbeddingValue,
        schemas::StringOrList,
        schemas::EncodingFormat,
        schemas::Modality,
        schemas::Usage,
        schemas::RerankRequest,
        schemas::RerankResponse,
        schemas::RerankResult,
        schemas::ClassifyRequest,
        schemas::ClassifyResponse,
        schemas::ClassifyLabel,
        schemas::ModelList,
        schemas::ModelInfoBody,
        schemas::ModelStatsBody,
        schemas::HealthBody,
        error::ErrorBody,
        error::ErrorDetail,
    ))
)]
pub struct ApiDoc;

/// The document, with the URL prefix as its server so "try it out" calls the right paths.
pub fn document(url_prefix: &str) -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    if !url_prefix.is_empty() {
        doc.servers = Some(vec![utoipa::openapi::Server::new(url_prefix)]);
    }
    doc
}
