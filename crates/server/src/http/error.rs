//! The one error type of the HTTP layer: every failure leaves as JSON in the OpenAI envelope
//! `{"error": {"message", "type", "param", "code"}}`, with `code` the HTTP status as Infinity sends it,
//! and the message again as `detail`, where FastAPI (and so Infinity's own client) looks for it. TEI's
//! routes answer in TEI's shape instead ([`super::tei::TeiError`]).

use aleph_engine::EngineError;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub param: Option<String>,
    pub retry_after_secs: Option<u64>,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
    /// The message as FastAPI carries it: a string, or for a 422 a list of `{loc, msg, type}` (the
    /// shape Infinity's generated client parses).
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorDetail {
    pub message: String,
    /// OpenAI's error class, e.g. `invalid_request_error`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// The HTTP status code.
    pub code: u16,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into(), param: None, retry_after_secs: None }
    }

    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// 400: the request is well-formed but cannot be served as asked.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 422: the body does not match the schema.
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 415: the body is not JSON.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, message)
    }

    fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::FORBIDDEN => "permission_error",
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let detail = if self.status == StatusCode::UNPROCESSABLE_ENTITY {
            // FastAPI's validation error: where in the body, what is wrong.
            let mut loc = vec![serde_json::Value::from("body")];
            if let Some(param) = &self.param {
                loc.extend(param.split(['.', '[']).filter(|p| !p.is_empty()).map(|p| {
                    let p = p.trim_end_matches(']');
                    p.parse::<u64>().map(serde_json::Value::from).unwrap_or_else(|_| serde_json::Value::from(p))
                }));
            }
            serde_json::json!([{"loc": loc, "msg": self.message, "type": "value_error"}])
        } else {
            serde_json::Value::from(self.message.clone())
        };
        let body = ErrorBody {
            detail,
            error: ErrorDetail {
                kind: self.kind(),
                message: self.message,
                param: self.param,
                code: self.status.as_u16(),
            },
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after_secs {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let status = match &e {
            EngineError::UnknownModel { .. } => StatusCode::NOT_FOUND,
            EngineError::Overloaded { .. } => StatusCode::TOO_MANY_REQUESTS,
            EngineError::Inference(_) | EngineError::Tokenization(_) => StatusCode::INTERNAL_SERVER_ERROR,
            EngineError::ShuttingDown(_) | EngineError::NotReady { .. } => StatusCode::SERVICE_UNAVAILABLE,
            EngineError::BadMedia(_) => StatusCode::BAD_REQUEST,
            EngineError::TooManyTokens { .. } | EngineError::InvalidInput(_) => StatusCode::UNPROCESSABLE_ENTITY,
            EngineError::Unsupported(_) => StatusCode::BAD_REQUEST,
        };
        let mut err = ApiError::new(status, e.to_string());
        match e {
            EngineError::UnknownModel { .. } => err.param = Some("model".into()),
            EngineError::NotReady { .. } => {
                err.param = Some("model".into());
                err.retry_after_secs = Some(1);
            }
            EngineError::Overloaded { .. } => err.retry_after_secs = Some(1),
            EngineError::BadMedia(_) | EngineError::InvalidInput(_) => err.param = Some("input".into()),
            _ => {}
        }
        err
    }
}
