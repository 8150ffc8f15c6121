use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::Response;

use super::error::ApiError;

/// Counts a request against the model that served it.
pub fn observe(model: &str, route: &'static str, result: &Result<Response, ApiError>) {
    let status = match result {
        Ok(r) => r.status(),
        Err(e) => e.status,
    };
    metrics::counter!(
        "aleph_requests_total",
        "model" => model.to_string(),
        "route" => route,
        "status" => status.as_u16().to_string()
    )
    .increment(1);
}

/// Where a request's time went, in milliseconds, as response headers.
pub fn timing_headers(tokenization: Duration, queue: Duration, inference: Duration) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, d) in [("x-tokenization-time", tokenization), ("x-queue-time", queue), ("x-inference-time", inference)] {
        if let Ok(v) = HeaderValue::from_str(&format!("{:.3}", d.as_secs_f64() * 1e3)) {
            headers.insert(HeaderName::from_static(name), v);
        }
    }
    headers
}
