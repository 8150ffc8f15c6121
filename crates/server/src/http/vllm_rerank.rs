//! vLLM's rerank request on `/rerank`, `/v1/rerank` and `/v2/rerank`: told apart from Infinity's and Cohere's by
//! what only vLLM sends (its scoring fields, `content` parts), and answered in
//! vLLM's shape: every result carries `document: {"text"}`, `top_n` 0 means all, and the scores are vLLM's (a
//! cross-encoder's relevance, an embedder's cosine, ColBERT's MaxSim), computed as `/score` computes them.

use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use super::extract::parse;
use super::schemas::{default_model, f32_as_f64, null_model};
use super::score::{texts, ScoreItem, ScoreSide};
use super::state::AppState;
use super::timing::{observe, timing_headers};

/// Fields of vLLM's rerank request that neither Infinity's nor Cohere's has.
pub(super) const VLLM_ONLY: &[&str] = &[
    "use_activation",
    "truncate_prompt_tokens",
    "truncation_side",
    "max_tokens_per_query",
    "mm_processor_kwargs",
    "activation",
    "softmax",
];

/// Whether `body` is vLLM's rerank request: it names a vLLM-only field or gives multimodal `content` parts, and
/// it has none of Infinity's or Cohere's own fields (`return_documents`, `raw_scores`, `instruction`,
/// `rank_fields`). A body that could be either is Infinity's (or Cohere's on `/v2/rerank`): so `top_n: 0` and
/// a lone document string alone stay Infinity's 422s; with a vLLM field they are vLLM's "all" and one document.
pub fn is_vllm_rerank(body: &Bytes) -> bool {
    let Ok(serde_json::Value::Object(fields)) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    let theirs =
        ["return_documents", "raw_scores", "instruction", "rank_fields"].iter().any(|k| fields.contains_key(*k));
    let only_vllm = VLLM_ONLY.iter().any(|k| fields.contains_key(*k));
    let documents = fields.get("documents");
    let one_part = documents.is_some_and(|d| d.get("content").is_some());
    let parts = documents
        .and_then(|d| d.as_array())
        .is_some_and(|ds| ds.iter().any(|d| d.get("content").is_some()) && !ds.iter().any(|d| d.get("text").is_some()));
    !theirs && (only_vllm || one_part || parts)
}

#[derive(Debug, Deserialize)]
struct VllmRerankRequest {
    #[serde(default = "default_model", deserialize_with = "null_model")]
    model: String,
    query: ScoreItem,
    documents: ScoreSide,
    /// 0 (the default) or less: every document.
    #[serde(default)]
    top_n: i64,
    /// A cross-encoder's sigmoid (the default), or its raw logit with `false`.
    #[serde(default)]
    use_activation: Option<bool>,
}

#[derive(Debug, Serialize)]
struct VllmDocument {
    text: String,
}

#[derive(Debug, Serialize)]
struct VllmRerankResult {
    index: usize,
    document: VllmDocument,
    #[serde(serialize_with = "f32_as_f64")]
    relevance_score: f32,
}

#[derive(Debug, Serialize)]
struct VllmUsage {
    prompt_tokens: usize,
    total_tokens: usize,
}

#[derive(Debug, Serialize)]
struct VllmRerankResponse {
    id: String,
    model: String,
    usage: VllmUsage,
    results: Vec<VllmRerankResult>,
}

/// vLLM's rerank, from a body already read; `route` names it in the metrics.
pub async fn rerank_body(state: &AppState, body: &Bytes, route: &'static str) -> Response {
    let result = match parse::<VllmRerankRequest>(body) {
        Ok(req) => match state.registry().and_then(|r| Ok(r.get(&req.model)?)) {
            Ok(model) => {
                let result = rerank(state, &model, req).await;
                observe(model.name(), route, &result);
                result
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn rerank(
    state: &AppState,
    model: &aleph_engine::ModelHandle,
    req: VllmRerankRequest,
) -> Result<Response, ApiError> {
    let query = texts("query", ScoreSide::One(req.query), state)?.remove(0);
    let documents = texts("documents", req.documents, state)?;
    if documents.is_empty() {
        return Err(ApiError::bad_request("`documents` needs at least one document").with_param("documents"));
    }
    if documents.len() > state.limits.max_client_batch_size {
        return Err(ApiError::unprocessable(format!(
            "{} documents; at most {} are allowed per request",
            documents.len(),
            state.limits.max_client_batch_size
        ))
        .with_param("documents"));
    }
    let pairs: Vec<(String, String)> = documents.iter().map(|d| (query.clone(), d.clone())).collect();
    let (scores, out) = model.score_pairs(&pairs, req.use_activation == Some(false)).await?;
    let mut results: Vec<VllmRerankResult> = scores
        .into_iter()
        .zip(documents)
        .enumerate()
        .map(|(index, (relevance_score, text))| VllmRerankResult {
            index,
            document: VllmDocument { text },
            relevance_score,
        })
        .collect();
    // Stable: equal scores keep document order.
    results.sort_by(|a, b| b.relevance_score.total_cmp(&a.relevance_score));
    if req.top_n > 0 {
        results.truncate(usize::try_from(req.top_n).unwrap_or(usize::MAX));
    }
    let body = VllmRerankResponse {
        id: format!("rerank-{}", uuid::Uuid::new_v4().simple()),
        model: model.name().to_string(),
        usage: VllmUsage { prompt_tokens: out.prompt_tokens, total_tokens: out.prompt_tokens },
        results,
    };
    Ok((timing_headers(out.tokenization_time, out.queue_time, out.inference_time), Json(body)).into_response())
}
