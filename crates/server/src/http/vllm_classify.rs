//! vLLM's classify request on `/classify`: told apart from Infinity's by what only vLLM sends (its activation and
//! truncation fields) and answered in vLLM's shape: per input its `probs` in label order (softmax, or a sigmoid
//! each for multi-label models and cross-encoders; the logits with `use_activation: false`), the best `label`
//! and `num_classes`.

use aleph_engine::{Input, RunOptions};
use aleph_models::Task;
use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::embeddings::truncation;
use super::error::ApiError;
use super::extract::parse;
use super::schemas::{default_model, null_default, null_model, present, InputItems, TruncationSide};
use super::state::AppState;
use super::timing::{observe, timing_headers};
use super::validate::validate_inputs;

/// Whether `body` is vLLM's classify request: it names a field only vLLM's has, and not Infinity's `raw_scores`.
pub fn is_vllm_classify(body: &Bytes) -> bool {
    let Ok(serde_json::Value::Object(fields)) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    !fields.contains_key("raw_scores") && super::vllm_rerank::VLLM_ONLY.iter().any(|k| fields.contains_key(*k))
}

#[derive(Debug, Deserialize)]
struct VllmClassifyRequest {
    #[serde(default = "default_model", deserialize_with = "null_model")]
    model: String,
    input: InputItems,
    #[serde(default)]
    use_activation: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    truncate_prompt_tokens: Option<Option<i64>>,
    #[serde(default, deserialize_with = "null_default")]
    truncation_side: TruncationSide,
}

#[derive(Debug, Serialize)]
struct VllmClassification {
    index: usize,
    label: String,
    probs: Vec<f64>,
    num_classes: usize,
}

#[derive(Debug, Serialize)]
struct VllmUsage {
    prompt_tokens: usize,
    total_tokens: usize,
    completion_tokens: usize,
    prompt_tokens_details: Option<()>,
}

#[derive(Debug, Serialize)]
struct VllmClassifyResponse {
    id: String,
    object: &'static str,
    created: u64,
    model: String,
    data: Vec<VllmClassification>,
    usage: VllmUsage,
}

/// vLLM's classify, from a body already read.
pub async fn classify_body(state: &AppState, body: &Bytes) -> Response {
    let result = match parse::<VllmClassifyRequest>(body) {
        Ok(req) => match state.registry().and_then(|r| Ok(r.get(&req.model)?)) {
            Ok(model) => {
                let result = classify(state, &model, req).await;
                observe(model.name(), "/classify", &result);
                result
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn classify(
    state: &AppState,
    model: &aleph_engine::ModelHandle,
    req: VllmClassifyRequest,
) -> Result<Response, ApiError> {
    let inputs = validate_inputs("input", req.input, &state.limits)?;
    let (labels, multi_label) = match &model.info().task {
        Task::Classify { labels, multi_label } => (labels.clone(), *multi_label),
        // A cross-encoder's one logit goes through a sigmoid, as vLLM classifies with one label.
        Task::Rerank => (vec!["LABEL_0".to_string()], true),
        _ => {
            return Err(ApiError::bad_request(format!(
                "model `{}` does not support the Classification API",
                model.name()
            ))
            .with_param("model"))
        }
    };
    let truncation = truncation(model, req.truncate_prompt_tokens, req.truncation_side)?;
    let inputs: Vec<Input> = inputs;
    let out = model.run_with(inputs, RunOptions { truncation, ..RunOptions::default() }).await?;
    let raw = req.use_activation == Some(false);
    let data = out
        .vectors
        .iter()
        .enumerate()
        .map(|(index, logits)| {
            let probs = aleph_engine::outputs::scores(logits, multi_label, raw);
            let best = (0..probs.len()).max_by(|&a, &b| probs[a].total_cmp(&probs[b])).unwrap_or(0);
            VllmClassification {
                index,
                label: labels.get(best).cloned().unwrap_or_default(),
                probs: probs.iter().map(|&p| p as f64).collect(),
                num_classes: labels.len(),
            }
        })
        .collect();
    let body = VllmClassifyResponse {
        id: format!("classify-{}", uuid::Uuid::new_v4().simple()),
        object: "list",
        created: super::schemas::unix_now() as u64,
        model: model.name().to_string(),
        data,
        usage: VllmUsage {
            prompt_tokens: out.prompt_tokens,
            total_tokens: out.prompt_tokens,
            completion_tokens: 0,
            prompt_tokens_details: None,
        },
    };
    Ok((timing_headers(out.tokenization_time, out.queue_time, out.inference_time), Json(body)).into_response())
}
