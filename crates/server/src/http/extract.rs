//! Request bodies: JSON decoded into a typed request, every failure an [`ApiError`] that names the
//! field at fault.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// Like `axum::Json`, but rejections are 413 / 422 in the OpenAI envelope.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "request body is larger than the payload limit")
            } else {
                ApiError::bad_request(format!("cannot read request body: {rejection}"))
            }
        })?;
        parse(&bytes).map(ApiJson)
    }
}

/// Decodes a JSON body, reporting the path of the offending field.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        None => return Err(ApiError::unprocessable("request body is empty: a JSON object is required")),
        // serde would also read a struct from a JSON array; the API takes objects only.
        Some(b'{') => {}
        Some(_) => return Err(ApiError::unprocessable("request body must be a JSON object")),
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let message = if inner.is_syntax() || inner.is_eof() {
            format!("malformed JSON: {inner}")
        } else if path == "." {
            format!("invalid request: {inner}")
        } else {
            format!("invalid value for `{path}`: {inner}")
        };
        let err = ApiError::unprocessable(message);
        if path == "." || inner.is_syntax() || inner.is_eof() {
            err
        } else {
            err.with_param(path)
        }
    })?;
    // Only whitespace may follow the object.
    de.end().map_err(|e| ApiError::unprocessable(format!("malformed JSON: {e}")))?;
    Ok(value)
}
