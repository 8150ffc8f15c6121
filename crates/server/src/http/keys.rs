//! API keys (`--api-key`, `--api-key-file`) and each key's limits: requests in flight at once, and tokens per
//! second through a bucket that holds one second's worth. A key past its limit gets 429 with `Retry-After`;
//! other keys are not affected. Keys are compared in constant time and never logged: metrics and messages use
//! the key's name.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use aleph_engine::usage::TokenMeter;
use axum::http::StatusCode;
use subtle::ConstantTimeEq;

use super::error::ApiError;

/// What one key may use; zero means no limit.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct KeyLimits {
    pub max_in_flight: usize,
    pub tokens_per_second: f64,
}

/// One API key with its limits and what it uses now.
pub struct ApiKey {
    key: String,
    pub name: String,
    pub limits: KeyLimits,
    in_flight: AtomicUsize,
    /// Tokens left to spend (negative: owed by requests already admitted) and when that was computed.
    bucket: Mutex<(f64, Instant)>,
}

impl ApiKey {
    fn new(key: String, name: String, limits: KeyLimits) -> Self {
        let full = limits.tokens_per_second;
        ApiKey { key, name, limits, in_flight: AtomicUsize::new(0), bucket: Mutex::new((full, Instant::now())) }
    }

    /// Admits one request, or says why not and when to retry (seconds).
    pub fn admit(self: &Arc<Self>) -> Result<KeyInFlight, ApiError> {
        let max = self.limits.max_in_flight;
        let was = self.in_flight.fetch_add(1, Ordering::SeqCst);
        let guard = KeyInFlight(self.clone());
        if max > 0 && was >= max {
            return Err(self.refuse("in_flight", format!("has {max} requests in flight, its limit"), 1));
        }
        let rate = self.limits.tokens_per_second;
        if rate > 0.0 {
            let left = self.refill();
            if left <= 0.0 {
                let wait = (-left / rate).ceil().max(1.0) as u64;
                return Err(self.refuse("tokens", format!("used its {rate} tokens per second"), wait));
            }
        }
        Ok(guard)
    }

    /// The bucket topped up for the time since it was last read, at most one second's worth.
    fn refill(&self) -> f64 {
        let mut bucket = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let rate = self.limits.tokens_per_second;
        bucket.0 = (bucket.0 + now.duration_since(bucket.1).as_secs_f64() * rate).min(rate);
        bucket.1 = now;
        bucket.0
    }

    fn refuse(&self, reason: &'static str, what: String, retry_after_secs: u64) -> ApiError {
        metrics::counter!("aleph_key_rejections_total", "key" => self.name.clone(), "reason" => reason).increment(1);
        let mut err = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("API key `{}` {what}; retry in {retry_after_secs} s", self.name),
        );
        err.retry_after_secs = Some(retry_after_secs);
        err
    }
}

impl TokenMeter for ApiKey {
    fn charge(&self, tokens: usize) {
        if self.limits.tokens_per_second > 0.0 {
            self.refill();
            self.bucket.lock().unwrap_or_else(|p| p.into_inner()).0 -= tokens as f64;
        }
        metrics::counter!("aleph_key_tokens_total", "key" => self.name.clone()).increment(tokens as u64);
    }
}

/// A request admitted under a key, counted in its in-flight total until dropped.
pub struct KeyInFlight(Arc<ApiKey>);

impl KeyInFlight {
    pub fn key(&self) -> &Arc<ApiKey> {
        &self.0
    }
}

impl Drop for KeyInFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Every accepted key. Empty: the API is open.
#[derive(Default)]
pub struct ApiKeys(Vec<Arc<ApiKey>>);

impl ApiKeys {
    /// The keys of `--api-key` (named `key-1`, `key-2`, ... in order) with the default limits, then those of
    /// the key file.
    pub fn new(flag_keys: &[String], file: Option<&Path>, defaults: KeyLimits) -> Result<Self, String> {
        let mut keys: Vec<ApiKey> = flag_keys
            .iter()
            .map(|k| k.trim())
            .filter(|k| !k.is_empty())
            .enumerate()
            .map(|(i, k)| ApiKey::new(k.to_string(), format!("key-{}", i + 1), defaults))
            .collect();
        if let Some(file) = file {
            let text = std::fs::read_to_string(file).map_err(|e| format!("--api-key-file {}: {e}", file.display()))?;
            for (n, line) in text.lines().enumerate() {
                let at = |why: String| format!("--api-key-file {} line {}: {why}", file.display(), n + 1);
                let line = line.split('#').next().unwrap_or("").trim();
                let mut words = line.split_whitespace();
                let Some(key) = words.next() else { continue };
                let (mut name, mut limits) = (format!("key-{}", keys.len() + 1), defaults);
                for word in words {
                    let (field, value) =
                        word.split_once('=').ok_or_else(|| at(format!("`{word}` is not field=value")))?;
                    let number = || at(format!("{field}: `{value}` is not a number"));
                    match field {
                        "name" if !value.is_empty() => name = value.to_string(),
                        "max_in_flight" => limits.max_in_flight = value.parse().map_err(|_| number())?,
                        "tokens_per_second" => {
                            let rate: f64 = value.parse().map_err(|_| number())?;
                            if !(rate >= 0.0 && rate.is_finite()) {
                                return Err(number());
                            }
                            limits.tokens_per_second = rate;
                        }
                        _ => {
                            return Err(at(format!("unknown field `{field}` (name, max_in_flight, tokens_per_second)")))
                        }
                    }
                }
                keys.push(ApiKey::new(key.to_string(), name, limits));
            }
        }
        for (i, k) in keys.iter().enumerate() {
            if keys[..i].iter().any(|o| o.key == k.key) {
                return Err(format!("API key `{}` is given twice", k.name));
            }
            if keys[..i].iter().any(|o| o.name == k.name) {
                return Err(format!("two API keys are named `{}`", k.name));
            }
        }
        Ok(ApiKeys(keys.into_iter().map(Arc::new).collect()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The key equal to `given`. Every key is compared, each in constant time, whichever matches.
    pub fn find(&self, given: &str) -> Option<&Arc<ApiKey>> {
        let mut found = None;
        for k in &self.0 {
            if bool::from(k.key.as_bytes().ct_eq(given.as_bytes())) {
                found = Some(k);
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("aleph-keys-{}-{}", std::process::id(), text.len()));
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn keys_come_from_the_flag_and_the_file() {
        let path = file("# team keys\nsk-a name=search max_in_flight=2\n\nsk-b tokens_per_second=50 # batch jobs\n");
        let keys = ApiKeys::new(&["sk-flag".into()], Some(&path), KeyLimits { max_in_flight: 9, ..Default::default() })
            .unwrap();
        assert_eq!(keys.len(), 3);
        let flag = keys.find("sk-flag").unwrap();
        assert_eq!((flag.name.as_str(), flag.limits.max_in_flight), ("key-1", 9));
        let a = keys.find("sk-a").unwrap();
        assert_eq!((a.name.as_str(), a.limits), ("search", KeyLimits { max_in_flight: 2, tokens_per_second: 0.0 }));
        let b = keys.find("sk-b").unwrap();
        assert_eq!((b.name.as_str(), b.limits), ("key-3", KeyLimits { max_in_flight: 9, tokens_per_second: 50.0 }));
        assert!(keys.find("sk-c").is_none() && keys.find("").is_none());
    }

    #[test]
    fn bad_lines_are_named() {
        for (text, want) in [
            ("sk-a max_in_flight=two\n", "line 1: max_in_flight: `two` is not a number"),
            ("sk-a\nsk-b colour=red\n", "line 2: unknown field `colour`"),
            ("sk-a tokens_per_second=-1\n", "line 1: tokens_per_second"),
            ("sk-a\nsk-a\n", "given twice"),
            ("sk-a name=x\nsk-b name=x\n", "two API keys are named `x`"),
        ] {
            let err = ApiKeys::new(&[], Some(&file(text)), KeyLimits::default()).err().expect(text);
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn limits_refuse_with_retry_after() {
        let keys =
            ApiKeys::new(&[], Some(&file("sk max_in_flight=1 tokens_per_second=10\n")), KeyLimits::default()).unwrap();
        let key = keys.find("sk").unwrap();
        let first = key.admit().expect("within both limits");
        let second = key.admit().err().expect("one in flight is the limit");
        assert_eq!((second.status, second.retry_after_secs), (StatusCode::TOO_MANY_REQUESTS, Some(1)));
        assert!(second.message.contains("`key-1` has 1 requests in flight"), "{}", second.message);
        drop(first);
        // 35 tokens from a bucket of 10 leave 25 owed: two and a half seconds at 10 per second.
        key.charge(35);
        let third = key.admit().err().expect("the bucket is empty");
        assert_eq!(third.retry_after_secs, Some(3), "{}", third.message);
        assert!(third.message.contains("used its 10 tokens per second"), "{}", third.message);
    }
}
