//! `POST /embeddings`.

use std::sync::Arc;

use aleph_engine::ModelHandle;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;

use super::error::ApiError;
use super::extract::ApiJson;
use super::schemas::{
    response_id, unix_now, EmbeddingObject, EmbeddingRequest, EmbeddingResponse, EmbeddingValue, EncodingFormat,
    Modality, Usage,
};
use super::state::{AppState, Limits};
use super::timing::{observe, timing_headers};

/// Create embeddings for text (or, on models that support it, images and audio).
#[utoipa::path(
    post,
    path = "/embeddings",
    tag = "embeddings",
    request_body = EmbeddingRequest,
    responses(
        (status = 200, description = "One vector per input, in input order", body = EmbeddingResponse),
        (status = 400, description = "The model cannot serve this request", body = super::error::ErrorBody),
        (status = 404, description = "Unknown model (when several are served)", body = super::error::ErrorBody),
        (status = 422, description = "The body does not match the schema", body = super::error::ErrorBody),
        (status = 429, description = "The model's queue is full", body = super::error::ErrorBody),
    )
)]
pub async fn embeddings(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<EmbeddingRequest>,
) -> Result<Response, ApiError> {
    let model = state.registry.get(&req.model)?;
    let result = embed(&state, model, req).await;
    observe(model.name(), "/embeddings", &result);
    result
}

async fn embed(state: &AppState, model: &ModelHandle, req: EmbeddingRequest) -> Result<Response, ApiError> {
    check_modality(model, &req.model, req.modality)?;
    let texts = validate_texts(req.input.into_vec(), &state.limits)?;
    let dims = validate_dimensions(req.dimensions, model.info().dim)?;

    let result = model.embed(texts).await?;
    let data = result
        .embeddings
        .into_iter()
        .enumerate()
        .map(|(index, mut v)| {
            v.truncate(dims);
            let embedding = match req.encoding_format {
                EncodingFormat::Float => EmbeddingValue::Float(v),
                EncodingFormat::Base64 => EmbeddingValue::Base64(f32_base64(&v)),
            };
            EmbeddingObject {
                object: "embedding",
                embedding,
                index,
            }
        })
        .collect();
    let body = EmbeddingResponse {
        object: "list",
        data,
        model: model.name().to_string(),
        usage: Usage::tokens(result.prompt_tokens),
        id: response_id(),
        created: unix_now() as u64,
    };
    let headers: HeaderMap = timing_headers(result.tokenization_time, result.queue_time, result.inference_time);
    Ok((headers, Json(body)).into_response())
}

/// 400 unless the model can embed this modality.
fn check_modality(model: &ModelHandle, requested: &str, modality: Modality) -> Result<(), ApiError> {
    let caps = model.info().task.capabilities();
    if caps.contains(&modality.capability()) {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "model `{requested}` does not support `{}`; it supports: {}",
        modality.capability(),
        caps.join(", ")
    ))
    .with_param("modality"))
}

/// Strips each input (as Infinity does) and enforces the count and length limits (422).
pub fn validate_texts(texts: Vec<String>, limits: &Limits) -> Result<Vec<String>, ApiError> {
    if texts.is_empty() {
        return Err(ApiError::unprocessable("`input` must hold at least 1 item").with_param("input"));
    }
    if texts.len() > limits.max_client_batch_size {
        return Err(ApiError::unprocessable(format!(
            "`input` holds {} items; at most {} are allowed per request",
            texts.len(),
            limits.max_client_batch_size
        ))
        .with_param("input"));
    }
    texts
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let stripped = t.trim();
            let chars = stripped.chars().count();
            if chars > limits.max_string_chars {
                return Err(ApiError::unprocessable(format!(
                    "input[{i}] has {chars} characters; at most {} are allowed",
                    limits.max_string_chars
                ))
                .with_param(format!("input[{i}]")));
            }
            Ok(if stripped.len() == t.len() {
                t
            } else {
                stripped.to_string()
            })
        })
        .collect()
}

/// `dimensions`: absent or 0 keeps the whole vector, 1..=dim keeps a prefix, anything else is a 400.
pub fn validate_dimensions(dimensions: Option<i64>, dim: usize) -> Result<usize, ApiError> {
    match dimensions {
        None | Some(0) => Ok(dim),
        Some(d) if d >= 1 && d as u64 <= dim as u64 => Ok(d as usize),
        Some(d) => Err(ApiError::bad_request(format!(
            "dimensions={d} is not in a valid range: select between 1 and {dim}"
        ))
        .with_param("dimensions")),
    }
}

/// Little-endian f32 bytes, base64: what the OpenAI SDK decodes.
pub fn f32_base64(v: &[f32]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dimensions_range() {
        assert_eq!(validate_dimensions(None, 384).unwrap(), 384);
        assert_eq!(validate_dimensions(Some(0), 384).unwrap(), 384);
        assert_eq!(validate_dimensions(Some(8), 384).unwrap(), 8);
        assert_eq!(validate_dimensions(Some(384), 384).unwrap(), 384);
        assert_eq!(validate_dimensions(Some(385), 384).unwrap_err().status.as_u16(), 400);
        assert_eq!(validate_dimensions(Some(-1), 384).unwrap_err().status.as_u16(), 400);
    }

    #[test]
    fn texts_are_stripped_and_limited() {
        let limits = Limits {
            max_client_batch_size: 2,
            max_string_chars: 5,
        };
        assert_eq!(validate_texts(vec![" ab ".into()], &limits).unwrap(), vec!["ab"]);
        assert_eq!(validate_texts(vec![], &limits).unwrap_err().status.as_u16(), 422);
        assert_eq!(
            validate_texts(vec!["a".into(); 3], &limits)
                .unwrap_err()
                .status
                .as_u16(),
            422
        );
        let e = validate_texts(vec!["ok".into(), "toolong".into()], &limits).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input[1]"));
    }

    #[test]
    fn base64_is_little_endian_f32() {
        assert_eq!(f32_base64(&[-20.0, -11.0]), "AACgwQAAMME=");
    }
}
