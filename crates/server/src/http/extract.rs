//! Request bodies: JSON decoded into a typed request, every failure an [`ApiError`] that names the
//! field at fault.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::error::ApiError;
use super::state::AppState;

/// Like `axum::Json`, but rejections are 413 / 422 in the OpenAI envelope.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<AppState>> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        read_json(req, state).await.map(ApiJson)
    }
}

/// Reads a request's JSON body: the content type, the payload limit, the nesting limit, then the schema.
pub async fn read_json<T: DeserializeOwned>(req: Request, state: &Arc<AppState>) -> Result<T, ApiError> {
    parse(&read_body(req, state).await?)
}

/// A request's body, checked for content type, size and nesting, not yet parsed (for routes that look at
/// it before choosing a schema).
pub async fn read_body(req: Request, state: &Arc<AppState>) -> Result<Bytes, ApiError> {
    check_content_type(req.headers())?;
    let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "request body is larger than the payload limit")
        } else {
            ApiError::bad_request(format!("cannot read request body: {rejection}"))
        }
    })?;
    check_depth(&bytes, state.limits.max_json_depth)?;
    Ok(bytes)
}

/// A body is read as JSON when it says it is (`application/json`, `application/*+json`, any
/// parameters) or says nothing (no header, or an empty one, as FastAPI reads it); anything else, a header that
/// does not parse as a media type included, is a 415.
pub fn check_content_type(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(axum::http::header::CONTENT_TYPE) else {
        return Ok(());
    };
    let Ok(text) = value.to_str() else {
        return Err(ApiError::unsupported_media_type(
            "the Content-Type header is not text: send the body as application/json",
        ));
    };
    if text.trim().is_empty() {
        return Ok(());
    }
    let essence = text.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    let json =
        essence == "application/json" || essence.strip_prefix("application/").is_some_and(|sub| sub.ends_with("+json"));
    if json {
        return Ok(());
    }
    Err(ApiError::unsupported_media_type(format!(
        "Content-Type `{text}` is not JSON: send the body as application/json"
    )))
}

/// Refuses JSON nested deeper than `max` objects and arrays (`--max-json-depth`), before it is parsed.
pub fn check_depth(bytes: &[u8], max: usize) -> Result<(), ApiError> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return Err(ApiError::unprocessable(format!(
                        "JSON is nested deeper than {max} levels (--max-json-depth)"
                    )));
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        let with = |v: &str| {
            let mut h = axum::http::HeaderMap::new();
            h.insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_str(v).unwrap());
            check_content_type(&h).map_err(|e| e.status.as_u16())
        };
        assert_eq!(check_content_type(&axum::http::HeaderMap::new()), Ok(()));
        assert_eq!(with("application/json"), Ok(()));
        assert_eq!(with("Application/JSON; charset=utf-8"), Ok(()));
        assert_eq!(with("application/vnd.api+json"), Ok(()));
        assert_eq!(with("text/plain"), Err(415));
        assert_eq!(with("application/x-www-form-urlencoded"), Err(415));
        assert_eq!(with("garbage"), Err(415));
        // Headers that do not parse as a media type: no type before the parameters, bytes that are not text.
        assert_eq!(with("; charset=utf-8"), Err(415));
        assert_eq!(with("/"), Err(415));
        let mut h = axum::http::HeaderMap::new();
        h.insert(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_bytes(b"application/\xffjson").unwrap(),
        );
        assert_eq!(check_content_type(&h).map_err(|e| e.status.as_u16()), Err(415));
        // An empty header says nothing, as no header does.
        assert_eq!(with(""), Ok(()));
    }

    #[test]
    fn depth_counts_brackets_outside_strings() {
        assert!(check_depth(br#"{"a": [[1]], "b": "[[[[[[["}"#, 3).is_ok());
        assert!(check_depth(br#"{"a": [[[1]]]}"#, 3).is_err());
        assert!(check_depth(br#"{"a": "\"[[[[", "b": 1}"#, 1).is_ok());
    }
}
