//! `POST /rerank`: each (query, document) pair is one queue item, so pairs batch across requests.

use std::sync::Arc;

use aleph_engine::{Input, ModelHandle};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::extract::ApiJson;
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
pub async fn rerank(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<RerankRequest>,
) -> Result<Response, ApiError> {
    let model = state.registry()?.get(&req.model)?;
    let result = score(&state, model, req).await;
    observe(model.name(), "/rerank", &result);
    result
}

async fn score(state: &AppState, model: &ModelHandle, req: RerankRequest) -> Result<Response, ApiError> {
    require_capability(model, &req.model, "rerank", "model")?;
    let top_n = match req.top_n {
        Some(n) if n <= 0 => {
            return Err(ApiError::unprocessable(format!("`top_n` must be greater than 0, got {n}")).with_param("top_n"))
        }
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None => usize::MAX,
    };
    let query = validate_text("query", req.query, &state.limits)?;
    let documents = validate_texts("documents", req.documents, &state.limits)?;
    let inputs = documents
        .iter()
        .map(|d| Input::Pair(query.clone(), d.clone()))
        .collect();
    let out = model.run(inputs).await?;

    let mut results: Vec<RerankResult> = out
        .vectors
        .iter()
        .zip(documents)
        .enumerate()
        .map(|(index, (logits, doc))| {
            let logit = logits.first().copied().unwrap_or(f32::NAN);
            RerankResult {
                relevance_score: if req.raw_scores { logit } else { sigmoid(logit) },
                index,
                document: req.return_documents.then_some(doc),
            }
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
    Ok((
        timing_headers(out.tokenization_time, out.queue_time, out.inference_time),
        Json(body),
    )
        .into_response())
}

pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}
