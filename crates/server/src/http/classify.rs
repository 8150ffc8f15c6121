//! `POST /classify`.

use std::sync::Arc;

use aleph_engine::{LabelScore, ModelHandle};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::extract::{parse, read_body};
use super::schemas::{response_id, unix_now, ClassifyLabel, ClassifyRequest, ClassifyResponse, Usage};
use super::state::AppState;
use super::timing::{observe, timing_headers};
use super::validate::{require_capability, validate_texts};

/// Classify texts: every label with its score, best first.
#[utoipa::path(
    post,
    path = "/classify",
    tag = "classify",
    request_body = ClassifyRequest,
    responses(
        (status = 200, description = "Per input, all labels sorted by score", body = ClassifyResponse),
        (status = 400, description = "The model cannot classify", body = super::error::ErrorBody),
        (status = 422, description = "The body does not match the schema", body = super::error::ErrorBody),
        (status = 429, description = "The model's queue is full", body = super::error::ErrorBody),
    )
)]
pub async fn classify(State(state): State<Arc<AppState>>, request: Request) -> Result<Response, ApiError> {
    let body = read_body(request, &state).await?;
    // vLLM's classify answers in its own shape.
    if super::vllm_classify::is_vllm_classify(&body) {
        return Ok(super::vllm_classify::classify_body(&state, &body).await);
    }
    let req: ClassifyRequest = parse(&body)?;
    let model = state.registry()?.get(&req.model)?;
    let result = predict(&state, &model, req).await;
    observe(model.name(), "/classify", &result);
    result
}

async fn predict(state: &AppState, model: &ModelHandle, req: ClassifyRequest) -> Result<Response, ApiError> {
    let texts = validate_texts("input", req.input.into_vec(), &state.limits)?;
    require_capability(model, &req.model, "classify", "model")?;
    let (labels, out) = model.classify(texts, req.raw_scores).await?;
    let data = labels
        .into_iter()
        .map(|l| l.into_iter().map(|LabelScore { label, score }| ClassifyLabel { score, label }).collect())
        .collect();
    let body = ClassifyResponse {
        object: "classify",
        data,
        model: model.name().to_string(),
        usage: Usage::tokens(out.prompt_tokens),
        id: response_id(),
        created: unix_now() as u64,
    };
    Ok((timing_headers(out.tokenization_time, out.queue_time, out.inference_time), Json(body)).into_response())
}
