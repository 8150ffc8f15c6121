//! vLLM's `POST /score` (and `/v1/score`): a score per pair of texts, by whatever the model scores with: a
//! cross-encoder's relevance, an embedder's cosine, a ColBERT model's MaxSim. The pairs are one to one, one to
//! many or many to many by position, as vLLM pairs them; the engine computes the scores.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::ApiError;
use super::extract::ApiJson;
use super::schemas::{default_model, f32_as_f64, null_model, unix_now};
use super::state::AppState;
use super::timing::{observe, timing_headers};
use super::validate::validate_text;

/// One side of vLLM's score request: a text, or a list of texts.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ScoreSide {
    One(ScoreItem),
    Many(Vec<ScoreItem>),
}

/// A text, or vLLM's multimodal `{"content": [parts]}` (refused: Aleph scores texts).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ScoreItem {
    Text(String),
    Content {
        #[serde(rename = "content")]
        #[schema(value_type = Object)]
        _content: serde::de::IgnoredAny,
    },
}

/// `POST /score`: the left side in `queries`, `data_1` or `text_1`; the right side in `documents`, `items`,
/// `data_2` or `text_2` (vLLM's four spellings). Other vLLM fields are accepted and ignored.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ScoreRequest {
    #[serde(default = "default_model", deserialize_with = "null_model")]
    pub model: String,
    pub queries: Option<ScoreSide>,
    pub documents: Option<ScoreSide>,
    pub items: Option<ScoreSide>,
    pub data_1: Option<ScoreSide>,
    pub data_2: Option<ScoreSide>,
    pub text_1: Option<ScoreSide>,
    pub text_2: Option<ScoreSide>,
    /// A cross-encoder's sigmoid (the default), or its raw logit with `false`.
    #[serde(default)]
    pub use_activation: Option<bool>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ScoreData {
    pub index: usize,
    pub object: &'static str,
    #[serde(serialize_with = "f32_as_f64")]
    pub score: f32,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ScoreUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
    pub completion_tokens: usize,
    pub prompt_tokens_details: Option<()>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ScoreResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub data: Vec<ScoreData>,
    pub usage: ScoreUsage,
}

/// Score pairs of texts (vLLM's Score API).
#[utoipa::path(
    post,
    path = "/score",
    tag = "rerank",
    request_body = ScoreRequest,
    responses(
        (status = 200, description = "One score per pair, in pair order", body = ScoreResponse),
        (status = 400, description = "Unpairable inputs, or a model that scores no pairs", body = super::error::ErrorBody),
        (status = 422, description = "The body does not match the schema", body = super::error::ErrorBody),
    )
)]
pub async fn score(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<ScoreRequest>,
) -> Result<Response, ApiError> {
    let model = state.registry()?.get(&req.model)?;
    let result = score_pairs(&state, &model, req).await;
    observe(model.name(), "/score", &result);
    result
}

async fn score_pairs(
    state: &AppState,
    model: &aleph_engine::ModelHandle,
    req: ScoreRequest,
) -> Result<Response, ApiError> {
    let (left_name, left) = side(&[("queries", req.queries), ("data_1", req.data_1), ("text_1", req.text_1)])?;
    let (right_name, right) =
        side(&[("documents", req.documents), ("items", req.items), ("data_2", req.data_2), ("text_2", req.text_2)])?;
    let left = texts(left_name, left, state)?;
    let right = texts(right_name, right, state)?;
    let pairs: Vec<(String, String)> = match (left.len(), right.len()) {
        (0, _) | (_, 0) => return Err(ApiError::bad_request("both sides need at least one text")),
        (1, _) => right.into_iter().map(|r| (left[0].clone(), r)).collect(),
        (l, r) if l == r => left.into_iter().zip(right).collect(),
        (l, r) => {
            return Err(ApiError::bad_request(format!("Input lengths must be either 1:1, 1:N or N:N (got {l}:{r})")))
        }
    };
    if pairs.len() > state.limits.max_client_batch_size {
        return Err(ApiError::unprocessable(format!(
            "{} pairs; at most {} are allowed per request",
            pairs.len(),
            state.limits.max_client_batch_size
        )));
    }
    let raw = req.use_activation == Some(false);
    let (scores, out) = model.score_pairs(&pairs, raw).await?;
    let body = ScoreResponse {
        id: format!("score-{}", uuid::Uuid::new_v4().simple()),
        object: "list",
        created: unix_now() as u64,
        model: model.name().to_string(),
        data: scores
            .into_iter()
            .enumerate()
            .map(|(index, score)| ScoreData { index, object: "score", score })
            .collect(),
        usage: ScoreUsage {
            prompt_tokens: out.prompt_tokens,
            total_tokens: out.prompt_tokens,
            completion_tokens: 0,
            prompt_tokens_details: None,
        },
    };
    Ok((timing_headers(out.tokenization_time, out.queue_time, out.inference_time), Json(body)).into_response())
}

/// The one spelling of a side the request used.
fn side(spellings: &[(&'static str, Option<ScoreSide>)]) -> Result<(&'static str, ScoreSide), ApiError> {
    let mut given = spellings.iter().filter_map(|(name, s)| s.clone().map(|s| (*name, s)));
    let names = spellings.iter().map(|(n, _)| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    let first = given.next().ok_or_else(|| ApiError::unprocessable(format!("one of {names} is required")))?;
    if given.next().is_some() {
        return Err(ApiError::unprocessable(format!("send one of {names}, not several")));
    }
    Ok(first)
}

/// The texts of one side, each checked against the limits; `content` parts refused.
pub fn texts(field: &str, side: ScoreSide, state: &AppState) -> Result<Vec<String>, ApiError> {
    let items = match side {
        ScoreSide::One(item) => vec![item],
        ScoreSide::Many(items) => items,
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            ScoreItem::Text(t) => validate_text(&format!("{field}[{i}]"), t, &state.limits),
            ScoreItem::Content { .. } => {
                Err(ApiError::bad_request("multimodal score inputs (`content` parts) are not supported; send texts")
                    .with_param(format!("{field}[{i}]")))
            }
        })
        .collect()
}
