//! Cohere's v2 API: `POST /v2/embed` and `POST /v2/rerank`, so the Cohere SDK and LiteLLM's `cohere/`
//! provider work unchanged. Errors keep the OpenAI envelope (the SDK reads any JSON body).

use std::collections::BTreeMap;
use std::sync::Arc;

use aleph_engine::{EmbedSpec, Embedding, Input, ModelHandle, RunOptions};
use aleph_models::quantize::EmbeddingDtype;
use aleph_models::tokenizer::Truncation;
use aleph_models::Task;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::embeddings::f32_base64;
use super::error::ApiError;
use super::extract::{parse, read_body, ApiJson};
use super::rerank::relevance;
use super::schemas::{default_model, null_default, null_model};
use super::state::AppState;
use super::timing::{observe, timing_headers};
use super::validate::{require_capability, validate_text, validate_texts};

/// `embedding_types` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddingType {
    Float,
    Int8,
    Uint8,
    Binary,
    Ubinary,
    Base64,
}

/// `truncate`: cut the end (the default), the start, or refuse long inputs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum CohereTruncate {
    None,
    Start,
    #[default]
    End,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct CohereEmbedRequest {
    #[serde(default = "default_model", deserialize_with = "null_model")]
    pub model: String,
    /// Texts to embed.
    #[serde(default)]
    pub texts: Option<Vec<String>>,
    /// Images as data URIs (for models that embed images).
    #[serde(default)]
    pub images: Option<Vec<String>>,
    /// `search_query`, `search_document`, `classification` or `clustering`: the model's prompt of that
    /// name (`query` / `document`, ...) is prepended when it has one.
    #[serde(default)]
    pub input_type: Option<String>,
    /// Default: `["float"]`.
    #[serde(default)]
    pub embedding_types: Option<Vec<EmbeddingType>>,
    #[serde(default, deserialize_with = "null_default")]
    pub truncate: CohereTruncate,
    /// Keep the first N dimensions (Matryoshka), renormalized.
    #[serde(default)]
    pub output_dimension: Option<i64>,
    /// Accepted: inputs are cut at the model's window.
    #[serde(default)]
    #[allow(dead_code)]
    pub max_tokens: Option<u64>,
}

#[derive(Debug, Default, Serialize, ToSchema)]
pub struct EmbeddingsByType {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub float: Option<Vec<Vec<f64>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub int8: Option<Vec<Vec<i32>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uint8: Option<Vec<Vec<i32>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binary: Option<Vec<Vec<i32>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ubinary: Option<Vec<Vec<i32>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base64: Option<Vec<String>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ApiVersion {
    pub version: &'static str,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Meta {
    pub api_version: ApiVersion,
    pub billed_units: BTreeMap<&'static str, usize>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CohereEmbedResponse {
    pub id: String,
    pub embeddings: EmbeddingsByType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub texts: Option<Vec<String>>,
    pub meta: Meta,
    pub response_type: &'static str,
}

/// Cohere v1's answer when no `embedding_types` are asked for.
#[derive(Debug, Serialize, ToSchema)]
pub struct CohereFloatsResponse {
    pub id: String,
    pub embeddings: Vec<Vec<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub texts: Option<Vec<String>>,
    pub meta: Meta,
    pub response_type: &'static str,
}

fn meta(unit: &'static str, n: usize) -> Meta {
    Meta { api_version: ApiVersion { version: "2" }, billed_units: BTreeMap::from([(unit, n)]) }
}

/// The model's prompt for a Cohere `input_type`, by the names models use for it.
fn prompt_for(model: &ModelHandle, input_type: &str) -> Option<String> {
    let names: &[&str] = match input_type {
        "search_query" => &["search_query", "query"],
        "search_document" => &["search_document", "document", "passage", "doc"],
        "classification" => &["classification"],
        "clustering" => &["clustering"],
        _ => &[],
    };
    let prompts = &model.info().prompts.prompts;
    names.iter().find(|n| prompts.contains_key(**n)).map(|n| n.to_string())
}

/// Cohere v2 embed: texts (or images) to embeddings of every requested type.
#[utoipa::path(post, path = "/v2/embed", tag = "cohere", request_body = CohereEmbedRequest,
    responses((status = 200, body = CohereEmbedResponse),
              (status = 400, body = super::error::ErrorBody), (status = 422, body = super::error::ErrorBody)))]
pub async fn embed(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<CohereEmbedRequest>,
) -> Result<Response, ApiError> {
    let model = state.registry()?.get(&req.model)?;
    let result = embed_inner(&state, &model, req, Version::V2).await;
    observe(model.name(), "/v2/embed", &result);
    result
}

/// Which Cohere embed response: v2 always answers by type; v1 answers a plain list of floats
/// (`embeddings_floats`) unless `embedding_types` is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// Whether a `/v1/embed` body is Cohere's (`texts`, `images`) rather than TEI's (`inputs`).
pub fn is_cohere_embed(body: &axum::body::Bytes) -> bool {
    #[derive(Deserialize)]
    struct Probe {
        texts: Option<serde::de::IgnoredAny>,
        images: Option<serde::de::IgnoredAny>,
        inputs: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Probe>(body).is_ok_and(|p| (p.texts.is_some() || p.images.is_some()) && p.inputs.is_none())
}

/// Cohere v1 embed (`cohere.Client.embed`, POST `/v1/embed`), from a body already read.
pub async fn embed_v1(state: &AppState, body: &axum::body::Bytes) -> Result<Response, ApiError> {
    let req: CohereEmbedRequest = super::extract::parse(body)?;
    let model = state.registry()?.get(&req.model)?;
    let result = embed_inner(state, &model, req, Version::V1).await;
    observe(model.name(), "/v1/embed", &result);
    result
}

async fn embed_inner(
    state: &AppState,
    model: &ModelHandle,
    req: CohereEmbedRequest,
    version: Version,
) -> Result<Response, ApiError> {
    let (inputs, texts) = match (req.texts, req.images) {
        (Some(texts), None) => {
            let texts = validate_texts("texts", texts, &state.limits)?;
            require_capability(model, &req.model, "embed", "model")?;
            // The model's prompt for the input type, else its default prompt (`--default-prompt-name`), which
            // the engine puts first.
            model.prompt(None).map_err(ApiError::bad_request)?;
            let inputs = texts.iter().cloned().map(Input::Text).collect();
            (inputs, Some(texts))
        }
        (None, Some(images)) => {
            let sources = super::validate::validate_media("images", images, &state.limits)?;
            require_capability(model, &req.model, "image_embed", "images")?;
            let bytes = state.fetcher.fetch_all(&sources, "image").await.map_err(|(i, e)| match e {
                crate::fetch::FetchError::Invalid(m) => ApiError::unprocessable(m).with_param(format!("images[{i}]")),
                crate::fetch::FetchError::Failed(m) => ApiError::bad_request(m).with_param(format!("images[{i}]")),
            })?;
            (bytes.into_iter().map(Input::Image).collect(), None)
        }
        _ => return Err(ApiError::unprocessable("send one of `texts` or `images`").with_param("texts")),
    };
    if model.info().task == Task::MultiVector {
        return Err(
            ApiError::bad_request("this model returns one vector per token: use /embeddings").with_param("model")
        );
    }
    let dim = model.info().dim;
    let dims = match req.output_dimension.filter(|&d| d != 0).or(model.default_dimensions().map(|d| d as i64)) {
        None | Some(0) => dim,
        Some(d) if d >= 1 && d as u64 <= dim as u64 => d as usize,
        Some(d) => {
            return Err(ApiError::bad_request(format!("output_dimension={d} is not between 1 and {dim}"))
                .with_param("output_dimension"))
        }
    };
    let truncation = match req.truncate {
        CohereTruncate::End => Truncation::new(true, false),
        CohereTruncate::Start => Truncation::new(true, true),
        CohereTruncate::None => Truncation::new(false, false),
    };
    let prompt_name = req.input_type.as_deref().and_then(|t| prompt_for(model, t));
    // The engine cuts to `output_dimension` and re-normalizes; each embedding type is quantized from these.
    let spec = EmbedSpec { prompt_name, dimensions: Some(dims), truncation, float32: true, ..Default::default() };
    let embedded = model.embed(inputs, &spec).await?;
    let out = embedded.run;
    let cut: Vec<Vec<f32>> = embedded
        .embeddings
        .into_iter()
        .map(|e| match e {
            Embedding::Dense(v) => v,
            Embedding::Sparse(_) | Embedding::Multi(_) => Vec::new(),
        })
        .collect();
    let floats_only = version == Version::V1 && req.embedding_types.is_none();
    let mut types = req.embedding_types.unwrap_or_else(|| vec![EmbeddingType::Float]);
    types.sort();
    types.dedup();
    let ints = |vs: Vec<Vec<f32>>| vs.into_iter().map(|v| v.into_iter().map(|x| x as i32).collect()).collect();
    let mut embeddings = EmbeddingsByType::default();
    for t in types {
        match t {
            EmbeddingType::Float => {
                embeddings.float = Some(cut.iter().map(|v| v.iter().map(|&x| x as f64).collect()).collect())
            }
            EmbeddingType::Base64 => embeddings.base64 = Some(cut.iter().map(|v| f32_base64(v)).collect()),
            EmbeddingType::Int8 => embeddings.int8 = Some(ints(model.quantize_as(EmbeddingDtype::Int8, &cut).await?)),
            EmbeddingType::Uint8 => {
                embeddings.uint8 = Some(ints(model.quantize_as(EmbeddingDtype::Uint8, &cut).await?))
            }
            EmbeddingType::Binary => {
                embeddings.binary = Some(ints(model.quantize_as(EmbeddingDtype::Binary, &cut).await?))
            }
            EmbeddingType::Ubinary => {
                embeddings.ubinary = Some(ints(model.quantize_as(EmbeddingDtype::Ubinary, &cut).await?))
            }
        }
    }
    let headers = timing_headers(out.tokenization_time, out.queue_time, out.inference_time);
    let id = uuid::Uuid::new_v4().to_string();
    let meta = meta("input_tokens", out.prompt_tokens);
    if floats_only {
        let body = CohereFloatsResponse {
            id,
            embeddings: embeddings.float.unwrap_or_default(),
            texts,
            meta,
            response_type: "embeddings_floats",
        };
        return Ok((headers, Json(body)).into_response());
    }
    let body = CohereEmbedResponse { id, embeddings, texts, meta, response_type: "embeddings_by_type" };
    Ok((headers, Json(body)).into_response())
}

/// A document to rerank: a string, or (Cohere v1, LiteLLM) an object with `text`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum CohereDocument {
    Text(String),
    Object { text: String },
}

impl CohereDocument {
    fn into_text(self) -> String {
        match self {
            CohereDocument::Text(t) | CohereDocument::Object { text: t } => t,
        }
    }
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct CohereRerankRequest {
    #[serde(default = "default_model", deserialize_with = "null_model")]
    pub model: String,
    pub query: String,
    pub documents: Vec<CohereDocument>,
    /// Return the best N (at least 1); all by default.
    #[serde(default)]
    pub top_n: Option<i64>,
    /// Echo each document as `{"text": ...}` in its result.
    #[serde(default, deserialize_with = "null_default")]
    pub return_documents: bool,
    /// Accepted: documents are cut at the model's window.
    #[serde(default)]
    #[allow(dead_code)]
    pub max_tokens_per_doc: Option<u64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CohereDocumentText {
    pub text: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CohereRerankResult {
    pub index: usize,
    pub relevance_score: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<CohereDocumentText>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CohereRerankResponse {
    pub id: String,
    pub results: Vec<CohereRerankResult>,
    pub meta: Meta,
}

/// Cohere v2 rerank: documents sorted by relevance to the query.
#[utoipa::path(post, path = "/v2/rerank", tag = "cohere", request_body = CohereRerankRequest,
    responses((status = 200, body = CohereRerankResponse), (status = 400, body = super::error::ErrorBody)))]
pub async fn rerank(State(state): State<Arc<AppState>>, request: Request) -> Result<Response, ApiError> {
    let body = read_body(request, &state).await?;
    // vLLM serves its own rerank on this path too.
    if super::vllm_rerank::is_vllm_rerank(&body) {
        return Ok(super::vllm_rerank::rerank_body(&state, &body, "/v2/rerank").await);
    }
    let req: CohereRerankRequest = parse(&body)?;
    let model = state.registry()?.get(&req.model)?;
    let result = rerank_inner(&state, &model, req).await;
    observe(model.name(), "/v2/rerank", &result);
    result
}

async fn rerank_inner(state: &AppState, model: &ModelHandle, req: CohereRerankRequest) -> Result<Response, ApiError> {
    let top_n = match req.top_n {
        Some(n) if n <= 0 => {
            return Err(ApiError::unprocessable(format!("`top_n` must be at least 1, got {n}")).with_param("top_n"))
        }
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None => usize::MAX,
    };
    let query = validate_text("query", req.query, &state.limits)?;
    let documents =
        validate_texts("documents", req.documents.into_iter().map(CohereDocument::into_text).collect(), &state.limits)?;
    require_capability(model, &req.model, "rerank", "model")?;
    let (scores, out) = relevance(model, &query, &documents, false, RunOptions::default()).await?;
    let mut results: Vec<CohereRerankResult> = scores
        .into_iter()
        .zip(documents)
        .enumerate()
        .map(|(index, (score, text))| CohereRerankResult {
            index,
            relevance_score: score as f64,
            document: req.return_documents.then_some(CohereDocumentText { text }),
        })
        .collect();
    results.sort_by(|a, b| b.relevance_score.total_cmp(&a.relevance_score));
    results.truncate(top_n);
    let body = CohereRerankResponse { id: uuid::Uuid::new_v4().to_string(), results, meta: meta("search_units", 1) };
    Ok((timing_headers(out.tokenization_time, out.queue_time, out.inference_time), Json(body)).into_response())
}
