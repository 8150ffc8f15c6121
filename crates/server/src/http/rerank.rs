//! `POST /rerank`: each (query, document) pair is one queue item, so pairs batch across requests.

use std::sync::Arc;

use aleph_engine::{ModelHandle, RunOptions, RunResult};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::extract::{parse, read_body};
use super::schemas::{response_id, unix_now, RerankRequest, RerankResponse, RerankResult, Usage};
use super::state::AppState;
use super::timing::{observe, timing_headers};
use super::validate::{require_capability, validate_text, validate_texts};

/// Score documents against a query with a cross-encoder, best first.
#[utoipa::path(
    post,
    path = "/rerank",
    tag = "rerank",
    request_body = RerankRequest,
    responses(
        (status = 200, description = "Documents sorted by relevance", body = RerankResponse),
        (status = 400, description = "The model cannot rerank", body = super::error::ErrorBody),
        (status = 422, description = "The body does not match the schema", body = super::error::ErrorBody),
        (status = 429, description = "The model's queue is full", body = super::error::ErrorBody),
    )
)]
pub async fn rerank(State(state): State<Arc<AppState>>, request: Request) -> Result<Response, ApiError> {
    let body = read_body(request, &state).await?;
    // TEI's clients send `texts`, Infinity's and Cohere's `documents`: one path, two shapes.
    if super::tei::is_tei_rerank(&body) {
        return Ok(super::tei::rerank_body(&state, &body).await);
    }
    if super::vllm_rerank::is_vllm_rerank(&body) {
        return Ok(super::vllm_rerank::rerank_body(&state, &body, "/rerank").await);
    }
    let req: RerankRequest = parse(&body)?;
    let model = state.registry()?.get(&req.model)?;
    let result = score(&state, &model, req).await;
    observe(model.name(), "/rerank", &result);
    result
}

/// Relevance of each document to the query: a cross-encoder's `sigmoid(logit)` (or the logit), or a
/// late-interaction model's MaxSim averaged over query tokens (or the sum); with what it cost.
pub async fn relevance(
    model: &ModelHandle,
    query: &str,
    documents: &[String],
    raw_scores: bool,
    opts: RunOptions,
) -> Result<(Vec<f32>, RunResult), ApiError> {
    relevance_with(model, query, documents, None, raw_scores, opts).await
}

/// [`relevance`] with a request's own instruction for an LLM reranker's prompt.
pub async fn relevance_with(
    model: &ModelHandle,
    query: &str,
    documents: &[String],
    instruction: Option<&str>,
    raw_scores: bool,
    opts: RunOptions,
) -> Result<(Vec<f32>, RunResult), ApiError> {
    if instruction.is_some() && !model.info().takes_instruction {
        return Err(ApiError::unprocessable(
            "`instruction` is for LLM rerankers (Qwen3-Reranker); this model has no prompt to put it in",
        )
        .with_param("instruction"));
    }
    Ok(model.relevance(query, documents, instruction, raw_scores, opts).await?)
}

async fn score(state: &AppState, model: &ModelHandle, req: RerankRequest) -> Result<Response, ApiError> {
    let top_n = match req.top_n {
        Some(n) if n <= 0 => {
            return Err(ApiError::unprocessable(format!("`top_n` must be greater than 0, got {n}")).with_param("top_n"))
        }
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None => usize::MAX,
    };
    let query = validate_text("query", req.query, &state.limits)?;
    let documents = validate_texts("documents", req.documents, &state.limits)?;
    // Schema problems (422) first, as Infinity's validation does, then what the model can do (400).
    require_capability(model, &req.model, "rerank", "model")?;
    let instruction = req.instruction.as_deref();
    let (scores, out) =
        relevance_with(model, &query, &documents, instruction, req.raw_scores, RunOptions::default()).await?;
    let mut results: Vec<RerankResult> = scores
        .into_iter()
        .zip(documents)
        .enumerate()
        .map(|(index, (relevance_score, doc))| RerankResult {
            relevance_score,
            index,
            document: req.return_documents.then_some(doc),
        })
        .collect();
    // Stable: equal scores keep document order.
    results.sort_by(|a, b| b.relevance_score.total_cmp(&a.relevance_score));
    results.truncate(top_n);
    let body = RerankResponse {
        object: "rerank",
        results,
        model: model.name().to_string(),
        usage: Usage::tokens(out.prompt_tokens),
        id: response_id(),
        created: unix_now() as u64,
    };
    Ok((timing_headers(out.tokenization_time, out.queue_time, out.inference_time), Json(body)).into_response())
}
