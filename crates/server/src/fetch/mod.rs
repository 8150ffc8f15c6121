//! Turns a media reference from a request (a `data:` URI or an http(s) URL) into bytes, with the
//! limits a public endpoint needs: size cap, timeouts, and the SSRF guard of [`guard`].

pub mod guard;

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aleph_models::media::data_uri;
use futures_util::future::try_join_all;
use reqwest::redirect::Policy;

/// How media URLs are fetched.
#[derive(Debug, Clone)]
pub struct FetchConfig {
    /// Largest media item in bytes (downloaded or in a data URI).
    pub max_bytes: usize,
    /// Most bytes all the downloads of one request may hold together.
    pub max_request_bytes: usize,
    pub connect_timeout: Duration,
    /// The whole download, redirects included.
    pub timeout: Duration,
    /// Which addresses URLs may reach.
    pub guard: guard::Guard,
}

/// Why a media reference gave no bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// Neither a data URI nor an http(s) URL: a schema problem (422).
    Invalid(String),
    /// The reference is well-formed but its bytes could not be had (400).
    Failed(String),
}

const MAX_REDIRECTS: usize = 5;

pub struct MediaFetcher {
    client: reqwest::Client,
    cfg: FetchConfig,
}

impl MediaFetcher {
    pub fn new(cfg: FetchConfig) -> Result<Self, reqwest::Error> {
        let g = cfg.guard.clone();
        let redirects = Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
            }
            if !matches!(attempt.url().scheme(), "http" | "https") {
                let scheme = attempt.url().scheme().to_string();
                return attempt.error(format!("redirect to a `{scheme}` URL"));
            }
            match literal_ip(attempt.url()) {
                Some(ip) if !g.permits(ip) => attempt.error(guard::refused(ip)),
                _ => attempt.follow(),
            }
        });
        let mut builder = reqwest::Client::builder()
            // A proxy would resolve names itself, past the guard.
            .no_proxy()
            .connect_timeout(cfg.connect_timeout)
            .timeout(cfg.timeout)
            .redirect(redirects)
            .user_agent(concat!("aleph/", env!("CARGO_PKG_VERSION")));
        if !cfg.guard.allow_all {
            builder = builder.dns_resolver(Arc::new(guard::GuardedResolver(cfg.guard.clone())));
        }
        Ok(MediaFetcher { client: builder.build()?, cfg })
    }

    /// Fetches every reference concurrently; the first failure fails the lot. `kind` ("image",
    /// "audio") is what a data URI's declared type must be.
    pub async fn fetch_all(&self, sources: &[String], kind: &str) -> Result<Vec<Vec<u8>>, (usize, FetchError)> {
        // Shared by the request's downloads, so 32 URLs cannot hold 32 × max_bytes at once.
        let budget = AtomicUsize::new(self.cfg.max_request_bytes);
        let budget = &budget;
        try_join_all(
            sources
                .iter()
                .enumerate()
                .map(|(i, s)| async move { self.fetch(s, kind, budget).await.map_err(|e| (i, e)) }),
        )
        .await
    }

    async fn fetch(&self, source: &str, kind: &str, budget: &AtomicUsize) -> Result<Vec<u8>, FetchError> {
        let source = source.trim();
        if source.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("data:")) {
            // Decoding megabytes of base64 is CPU work: off the async I/O threads.
            let (owned, max) = (source.to_string(), self.cfg.max_bytes);
            let d = tokio::task::spawn_blocking(move || data_uri::parse(&owned, max))
                .await
                .map_err(|_| FetchError::Failed("decoding the data URI failed".into()))?
                .map_err(|e| FetchError::Failed(e.to_string()))?;
            if let Some(mime) = d.mime.as_deref() {
                if !mime.starts_with(&format!("{kind}/")) && mime != "application/octet-stream" {
                    return Err(FetchError::Failed(format!("the data URI declares `{mime}`; expected {kind}/*")));
                }
            }
            return Ok(d.bytes);
        }
        let url = reqwest::Url::parse(source).map_err(|_| {
            FetchError::Invalid("expected a data URI (data:<type>;base64,...) or an http(s) URL".to_string())
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(FetchError::Invalid(format!(
                "`{}` URLs are not fetched; use http(s) or a data URI",
                url.scheme()
            )));
        }
        if let Some(ip) = literal_ip(&url) {
            if !self.cfg.guard.permits(ip) {
                return Err(FetchError::Failed(guard::refused(ip)));
            }
        }
        self.download(url, budget).await.map_err(FetchError::Failed)
    }

    async fn download(&self, url: reqwest::Url, budget: &AtomicUsize) -> Result<Vec<u8>, String> {
        let shown = redact(&url);
        let fail = |e: reqwest::Error| format!("fetching {shown} failed: {}", error_chain(&e.without_url()));
        let mut resp = self.client.get(url.clone()).send().await.map_err(fail)?;
        if !resp.status().is_success() {
            return Err(format!("fetching {shown} failed: HTTP {}", resp.status()));
        }
        let max = self.cfg.max_bytes;
        if resp.content_length().is_some_and(|n| n > max as u64) {
            return Err(format!("{shown} is larger than the {max}-byte limit"));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(fail)? {
            if body.len() + chunk.len() > max {
                return Err(format!("{shown} is larger than the {max}-byte limit"));
            }
            let n = chunk.len();
            if budget.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| left.checked_sub(n)).is_err() {
                let total = self.cfg.max_request_bytes;
                return Err(format!("the request's media add up to more than the {total}-byte limit per request"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

fn literal_ip(url: &reqwest::Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
        url::Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
        url::Host::Domain(_) => None,
    }
}

/// The URL without credentials or query, for messages.
fn redact(url: &reqwest::Url) -> String {
    format!("{}://{}{}", url.scheme(), url.host_str().unwrap_or(""), url.path())
}

/// An error and its causes on one line: reqwest's own message hides the guard's reason.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let msg = s.to_string();
        if !parts.iter().any(|p| p.contains(&msg)) {
            parts.push(msg);
        }
        cur = s.source();
    }
    parts.join(": ")
}
