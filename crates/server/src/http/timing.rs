use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};

/// Where a request's time went, in milliseconds, as response headers.
pub fn timing_headers(tokenization: Duration, queue: Duration, inference: Duration) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, d) in [
        ("x-tokenization-time", tokenization),
        ("x-queue-time", queue),
        ("x-inference-time", inference),
    ] {
        if let Ok(v) = HeaderValue::from_str(&format!("{:.3}", d.as_secs_f64() * 1e3)) {
            headers.insert(HeaderName::from_static(name), v);
        }
    }
    headers
}
