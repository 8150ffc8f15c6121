//! The OpenAPI document served at `{prefix}/openapi.json` and browsed at `{prefix}/docs`.

use utoipa::OpenApi;

use super::{admin, classify, cohere, embeddings, error, health, models, pooling, rerank, schemas, score, tei};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Aleph",
        description = "Embeddings, reranking and classification over Infinity's and OpenAI's API (every \
                       inference route is also served under `/v1`), TEI's (`/embed`, `/predict`, ...) and \
                       Cohere's v2 (`/v2/embed`, `/v2/rerank`)."
    ),
    paths(
        embeddings::embeddings,
        embeddings::embeddings_image,
        embeddings::embeddings_audio,
        rerank::rerank,
        classify::classify,
        score::score,
        pooling::pooling,
        models::models,
        models::model,
        health::health,
        tei::embed,
        tei::embed_all,
        tei::embed_sparse,
        tei::predict,
        tei::similarity,
        tei::tokenize,
        tei::decode,
        tei::info,
        tei::root,
        cohere::embed,
        cohere::rerank,
        admin::list,
        admin::load,
        admin::unload
    ),
    components(schemas(
        schemas::EmbeddingRequest,
        schemas::MediaEmbeddingRequest,
        schemas::EmbeddingResponse,
        schemas::EmbeddingObject,
        schemas::EmbeddingValue,
        schemas::StringOrList,
        schemas::EncodingFormat,
        schemas::EmbeddingOutput,
        schemas::Modality,
        schemas::Usage,
        schemas::RerankRequest,
        pooling::PoolingRequest,
        pooling::PoolingResponse,
        pooling::PoolingData,
        pooling::PoolingValue,
        score::ScoreRequest,
        score::ScoreSide,
        score::ScoreItem,
        score::ScoreResponse,
        score::ScoreData,
        score::ScoreUsage,
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
        tei::TeiErrorBody,
        tei::EmbedRequest,
        tei::PredictRequest,
        tei::Prediction,
        tei::TeiRerankRequest,
        tei::Rank,
        tei::SimilarityRequest,
        tei::SimilarityInputs,
        tei::SimilarityParameters,
        tei::TokenizeRequest,
        tei::SimpleToken,
        tei::DecodeRequest,
        tei::Info,
        tei::Direction,
        cohere::CohereEmbedRequest,
        cohere::CohereEmbedResponse,
        cohere::CohereFloatsResponse,
        cohere::EmbeddingsByType,
        cohere::EmbeddingType,
        cohere::CohereTruncate,
        cohere::Meta,
        cohere::ApiVersion,
        cohere::CohereRerankRequest,
        cohere::CohereRerankResponse,
        cohere::CohereRerankResult,
        cohere::CohereDocument,
        cohere::CohereDocumentText,
        admin::AdminModel,
        admin::AdminModelList,
        crate::cli::ModelOptions,
    ))
)]
pub struct ApiDoc;

/// The document, with the proxy's root path and the URL prefix as its server, so "try it out" calls
/// the paths a browser can reach.
pub fn document(url_prefix: &str, proxy_root_path: &str) -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    let root = proxy_root_path.trim_end_matches('/');
    let server = format!("{root}{url_prefix}");
    if !server.is_empty() {
        doc.servers = Some(vec![utoipa::openapi::Server::new(server)]);
    }
    doc
}
