//! The HTTP load generator: prepared request bodies sent `concurrency` at a time over keep-alive
//! connections, every answer checked, latencies kept. `loadgen` and `aleph bench` both drive it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// What to send, and how.
#[derive(Clone)]
pub struct LoadPlan {
    /// The route's full URL.
    pub url: String,
    /// Request bodies (JSON), sent in order and again from the first once all were sent.
    pub bodies: Arc<Vec<Bytes>>,
    /// Requests to send, the first `warmup` of them not measured.
    pub requests: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    pub warmup: usize,
    /// An answer must hold this many `"index":` fields (one per embedding or reranked document); `None`
    /// checks the status only.
    pub expect_indices: Option<usize>,
    pub api_key: Option<String>,
    /// Each worker pauses this long after each answer: a steady trickle rather than a closed loop.
    pub pause: Duration,
    /// No new request starts this long after the measured ones began (the bodies may run out first).
    pub deadline: Option<Duration>,
    /// Called after each answer (a progress bar).
    pub on_answer: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl LoadPlan {
    pub fn new(url: impl Into<String>, bodies: Vec<Bytes>, concurrency: usize) -> Self {
        LoadPlan {
            url: url.into(),
            requests: bodies.len(),
            bodies: Arc::new(bodies),
            concurrency: concurrency.max(1),
            warmup: 0,
            expect_indices: None,
            api_key: None,
            pause: Duration::ZERO,
            deadline: None,
            on_answer: None,
        }
    }
}

/// What a load run measured.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    /// Latencies of the measured requests that succeeded, sorted.
    pub latencies: Vec<Duration>,
    pub errors: Vec<String>,
    /// From the first measured request's start to the last answer.
    pub seconds: f64,
}

impl LoadReport {
    /// The `p` quantile (0..=1) of the latencies in milliseconds, nearest rank; NaN when none succeeded.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let idx = ((self.latencies.len() as f64 - 1.0) * p.clamp(0.0, 1.0)).round() as usize;
        self.latencies[idx].as_secs_f64() * 1e3
    }

    pub fn requests(&self) -> usize {
        self.latencies.len()
    }

    pub fn requests_per_s(&self) -> f64 {
        self.latencies.len() as f64 / self.seconds.max(1e-9)
    }
}

/// Sends the plan's requests from the current tokio runtime (a current-thread one keeps the load
/// generator on one core) and returns once every worker has stopped.
pub async fn run(plan: LoadPlan) -> LoadReport {
    let client: Client<_, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).pool_max_idle_per_host(plan.concurrency).build_http();
    let next = Arc::new(AtomicUsize::new(0));
    let measured_start = Arc::new(Mutex::new(None::<Instant>));
    let plan = Arc::new(plan);
    let mut workers = Vec::new();
    for _ in 0..plan.concurrency {
        let (client, next, start, plan) = (client.clone(), next.clone(), measured_start.clone(), plan.clone());
        workers.push(tokio::spawn(async move { worker(&client, &plan, &next, &start).await }));
    }
    let mut report = LoadReport::default();
    for w in workers {
        match w.await {
            Ok((latencies, errors)) => {
                report.latencies.extend(latencies);
                report.errors.extend(errors);
            }
            Err(e) => report.errors.push(format!("load worker failed: {e}")),
        }
    }
    let start = *measured_start.lock().unwrap_or_else(|e| e.into_inner());
    report.seconds = start.map(|s| s.elapsed().as_secs_f64()).unwrap_or_default();
    report.latencies.sort();
    report
}

type Pool = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

async fn worker(
    client: &Pool,
    plan: &LoadPlan,
    next: &AtomicUsize,
    start: &Mutex<Option<Instant>>,
) -> (Vec<Duration>, Vec<String>) {
    let (mut latencies, mut errors) = (Vec::new(), Vec::new());
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= plan.requests || plan.bodies.is_empty() {
            break;
        }
        let measured = i >= plan.warmup;
        if measured {
            let began = *start.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(Instant::now);
            if plan.deadline.is_some_and(|d| began.elapsed() >= d) {
                break;
            }
        }
        let t0 = Instant::now();
        match send(client, plan, plan.bodies[i % plan.bodies.len()].clone()).await {
            Ok(()) if measured => latencies.push(t0.elapsed()),
            Ok(()) => {}
            Err(e) => errors.push(e),
        }
        if let Some(f) = &plan.on_answer {
            f();
        }
        if !plan.pause.is_zero() {
            tokio::time::sleep(plan.pause).await;
        }
    }
    (latencies, errors)
}

/// One request; an error says what was wrong with the answer.
async fn send(client: &Pool, plan: &LoadPlan, body: Bytes) -> Result<(), String> {
    let mut req = Request::post(&plan.url).header("content-type", "application/json");
    if let Some(k) = &plan.api_key {
        req = req.header("authorization", format!("Bearer {k}"));
    }
    let req = req.body(Full::new(body)).map_err(|e| e.to_string())?;
    let resp = client.request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    if status != 200 {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body[..body.len().min(200)])));
    }
    if let Some(expected) = plan.expect_indices {
        let count = body.windows(8).filter(|w| w == b"\"index\":").count();
        if count != expected {
            return Err(format!("{count} results for {expected} inputs"));
        }
    }
    Ok(())
}
