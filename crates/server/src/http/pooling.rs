//! vLLM's `POST /pooling`: a model's raw pooled outputs by task: `embed` (one vector per input), `token_embed`
//! (one vector per token), `classify` (class probabilities in label order, or logits). The engine computes
//! them; this maps vLLM's fields and answer shape.

use std::sync::Arc;

use aleph_engine::{EmbedSpec, Embedding, Input, ModelHandle};
use aleph_models::{OutputKind, Task};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::embeddings::f32_base64;
use super::error::ApiError;
use super::extract::ApiJson;
use super::schemas::{default_model, null_model, unix_now, EncodingFormat, InputItems};
use super::state::AppState;
use super::timing::{observe, timing_headers};
use super::validate::validate_inputs;

/// `POST /pooling`. Other vLLM fields are accepted and ignored.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct PoolingRequest {
    #[serde(default = "default_model", deserialize_with = "null_model")]
    pub model: String,
    /// A text, a list of texts, or token ids.
    #[schema(value_type = Object)]
    pub input: InputItems,
    /// `embed`, `token_embed` or `classify`; absent: the model's own task.
    #[serde(default)]
    pub task: Option<String>,
    #[serde(default)]
    pub encoding_format: Option<EncodingFormat>,
    /// `classify`: probabilities (the default), or logits with `false`.
    #[serde(default)]
    pub use_activation: Option<bool>,
}

/// One input's output: a vector, rows of vectors, or base64 of the f32 values.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum PoolingValue {
    Vector(Vec<f64>),
    Rows(Vec<Vec<f64>>),
    Base64(String),
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PoolingData {
    pub index: usize,
    pub object: &'static str,
    pub data: PoolingValue,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PoolingResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub data: Vec<PoolingData>,
    pub usage: super::score::ScoreUsage,
}

/// A model's pooled outputs by task (vLLM's Pooling API).
#[utoipa::path(
    post,
    path = "/pooling",
    tag = "embeddings",
    request_body = PoolingRequest,
    responses(
        (status = 200, description = "One output per input, in input order", body = PoolingResponse),
        (status = 400, description = "A task the model cannot run", body = super::error::ErrorBody),
        (status = 422, description = "The body does not match the schema", body = super::error::ErrorBody),
    )
)]
pub async fn pooling(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<PoolingRequest>,
) -> Result<Response, ApiError> {
    let model = state.registry()?.get(&req.model)?;
    let result = pool(&state, &model, req).await;
    observe(model.name(), "/pooling", &result);
    result
}

async fn pool(state: &AppState, model: &ModelHandle, req: PoolingRequest) -> Result<Response, ApiError> {
    let inputs = validate_inputs("input", req.input, &state.limits)?;
    let info = model.info();
    let task = match (req.task.as_deref(), &info.task) {
        (Some(t), _) => t.to_string(),
        (None, Task::Embed) => "embed".into(),
        (None, Task::MultiVector) => "token_embed".into(),
        (None, Task::Classify { .. } | Task::Rerank) => "classify".into(),
    };
    let base64 = match req.encoding_format {
        None | Some(EncodingFormat::Float) => false,
        Some(EncodingFormat::Base64) => true,
        Some(EncodingFormat::Sparse | EncodingFormat::Bytes | EncodingFormat::BytesOnly) => {
            return Err(ApiError::bad_request(
                "`encoding_format` on /pooling is float or base64 (bytes: /v1/embeddings)",
            )
            .with_param("encoding_format"))
        }
    };
    let unsupported = |what: &str| {
        ApiError::bad_request(format!(
            "model `{}` ({}) does not support the `{what}` task",
            model.name(),
            info.architecture
        ))
        .with_param("task")
    };
    let (values, run) = match task.as_str() {
        "embed" | "token_embed" => {
            let output = match (task.as_str(), &info.task) {
                ("embed", Task::Embed) => OutputKind::Default,
                ("token_embed", Task::MultiVector) => OutputKind::MultiVector,
                ("token_embed", Task::Embed) if info.token_outputs => OutputKind::Tokens,
                _ => return Err(unsupported(&task)),
            };
            let embedded = model.embed(inputs, &EmbedSpec { output, ..Default::default() }).await?;
            let values = embedded
                .embeddings
                .into_iter()
                .map(|e| match e {
                    Embedding::Dense(v) => Ok(value_of(vec![v], false, base64)),
                    Embedding::Multi(rows) => Ok(value_of(rows, true, base64)),
                    Embedding::Sparse(_) => Err(unsupported(&task)),
                })
                .collect::<Result<Vec<_>, _>>()?;
            (values, embedded.run)
        }
        "classify" => {
            let multi_label = match &info.task {
                Task::Classify { multi_label, .. } => *multi_label,
                // A cross-encoder's one logit goes through a sigmoid.
                Task::Rerank => true,
                _ => return Err(unsupported(&task)),
            };
            let texts: Vec<Input> = inputs;
            let out = model.run(texts).await?;
            let raw = req.use_activation == Some(false);
            let values = out
                .vectors
                .iter()
                .map(|logits| value_of(vec![aleph_engine::outputs::scores(logits, multi_label, raw)], false, base64))
                .collect();
            (values, out)
        }
        other => {
            return Err(ApiError::bad_request(format!(
                "task `{other}` is not supported (expected embed, token_embed or classify)"
            ))
            .with_param("task"))
        }
    };
    let body = PoolingResponse {
        id: format!("pool-{}", uuid::Uuid::new_v4().simple()),
        object: "list",
        created: unix_now() as u64,
        model: model.name().to_string(),
        data: values
            .into_iter()
            .enumerate()
            .map(|(index, data)| PoolingData { index, object: "pooling", data })
            .collect(),
        usage: super::score::ScoreUsage {
            prompt_tokens: run.prompt_tokens,
            total_tokens: run.prompt_tokens,
            completion_tokens: 0,
            prompt_tokens_details: None,
        },
    };
    Ok((timing_headers(run.tokenization_time, run.queue_time, run.inference_time), Json(body)).into_response())
}

/// Rows (`rows`: one per token) or the one vector, as floats widened to f64 (the digits Python clients print),
/// or base64 of the f32 values laid end to end.
fn value_of(mut vectors: Vec<Vec<f32>>, rows: bool, base64: bool) -> PoolingValue {
    if base64 {
        return PoolingValue::Base64(f32_base64(&vectors.concat()));
    }
    let wide = |v: Vec<f32>| v.into_iter().map(f64::from).collect::<Vec<f64>>();
    if rows {
        PoolingValue::Rows(vectors.into_iter().map(wide).collect())
    } else {
        PoolingValue::Vector(wide(vectors.pop().unwrap_or_default()))
    }
}
