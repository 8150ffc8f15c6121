//! `POST /classify`.

use std::sync::Arc;

use aleph_engine::{Input, ModelHandle};
use aleph_models::Task;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::extract::ApiJson;
use super::rerank::sigmoid;
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
pub async fn classify(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<ClassifyRequest>,
) -> Result<Response, ApiError> {
    let model = state.registry()?.get(&req.model)?;
    let result = predict(&state, &model, req).await;
    observe(model.name(), "/classify", &result);
    result
}

async fn predict(state: &AppState, model: &ModelHandle, req: ClassifyRequest) -> Result<Response, ApiError> {
    let texts = validate_texts("input", req.input.into_vec(), &state.limits)?;
    require_capability(model, &req.model, "classify", "model")?;
    let Task::Classify { labels, multi_label } = &model.info().task else {
        return Err(ApiError::bad_request("model cannot classify"));
    };
    let out = model.run(texts.into_iter().map(Input::Text).collect()).await?;
    let data = out.vectors.iter().map(|logits| label_scores(logits, labels, *multi_label, req.raw_scores)).collect();
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

/// Scores per label, best first: the logits, or their softmax (sigmoid for multi-label models).
pub fn label_scores(logits: &[f32], labels: &[String], multi_label: bool, raw: bool) -> Vec<ClassifyLabel> {
    let scores = scores(logits, multi_label, raw);
    let mut out: Vec<ClassifyLabel> =
        scores.into_iter().zip(labels).map(|(score, label)| ClassifyLabel { score, label: label.clone() }).collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score));
    out
}

/// Scores in label order: the logits, or their softmax (sigmoid each when `sigmoid`).
pub fn scores(logits: &[f32], sigmoid_each: bool, raw: bool) -> Vec<f32> {
    if raw {
        logits.to_vec()
    } else if sigmoid_each {
        logits.iter().map(|&x| sigmoid(x)).collect()
    } else {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let exps: Vec<f32> = logits.iter().map(|&x| (x - max).exp()).collect();
        let sum: f32 = exps.iter().sum();
        exps.iter().map(|e| e / sum).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> Vec<String> {
        vec!["a".into(), "b".into(), "c".into()]
    }

    #[test]
    fn softmax_sorted() {
        let out = label_scores(&[0.0, 2.0, 1.0], &labels(), false, false);
        assert_eq!(out.iter().map(|l| l.label.as_str()).collect::<Vec<_>>(), vec!["b", "c", "a"]);
        let total: f32 = out.iter().map(|l| l.score).sum();
        assert!((total - 1.0).abs() < 1e-6);
    }

    #[test]
    fn sigmoid_and_raw() {
        let out = label_scores(&[0.0, 2.0, -1.0], &labels(), true, false);
        assert!((out[2].score - sigmoid(-1.0)).abs() < 1e-7);
        assert_eq!(out[0].score, sigmoid(2.0));
        let raw = label_scores(&[0.0, 2.0, -1.0], &labels(), false, true);
        assert_eq!(raw.iter().map(|l| l.score).collect::<Vec<_>>(), vec![2.0, 0.0, -1.0]);
    }
}
