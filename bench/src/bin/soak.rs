//! Load and soak: mixed routes and sizes at high concurrency against a running Aleph, every response
//! checked against the same request's solo answer, the server's memory sampled throughout.
//!
//!   soak --url http://127.0.0.1:7996 --pid <aleph pid> --corpus ../shared/data/stsbenchmark.tsv.gz \
//!        --embed-model mini --rerank-model rerank --classify-model classify --requests 20000 --concurrency 256
//!
//! The CPU path computes each sequence the same way whatever it is batched with, so the check is exact:
//! a response must equal its solo answer byte for byte in `data` / `results`.
//!
//! With `--churn-model-id DIR --admin-key KEY` (the server started with that `--admin-key`), one more task loads
//! that model through `POST /admin/models`, checks its answers against the first load's, and unloads it with
//! `DELETE /admin/models/{name}`, over and over while the load runs; the server's resident memory after each
//! unload is reported beside the one before the first load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "http://127.0.0.1:7996")]
    url: String,
    /// The server's pid, to sample its resident memory.
    #[arg(long)]
    pid: Option<u32>,
    #[arg(long)]
    corpus: String,
    #[arg(long)]
    embed_model: String,
    #[arg(long)]
    rerank_model: Option<String>,
    #[arg(long)]
    classify_model: Option<String>,
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
    /// Distinct request bodies, each checked against its solo answer.
    #[arg(long, default_value_t = 300)]
    templates: usize,
    /// A model to load and unload at runtime while the load runs (needs `--admin-key`).
    #[arg(long, requires = "admin_key")]
    churn_model_id: Option<String>,
    /// The server's `--admin-key`.
    #[arg(long)]
    admin_key: Option<String>,
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// One request; the status and body.
async fn send(
    client: &HttpClient,
    method: &str,
    url: &str,
    auth: Option<&str>,
    body: Bytes,
) -> anyhow::Result<(u16, Bytes)> {
    let mut req = Request::builder().method(method).uri(url).header("content-type", "application/json");
    if let Some(key) = auth {
        req = req.header("authorization", format!("Bearer {key}"));
    }
    let resp = client.request(req.body(Full::new(body))?).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

/// What the churn task saw: cycles completed, answers differing from the first load's, failures (with the
/// first reason), and the resident set after each unload (KiB).
#[derive(Default)]
struct Churn {
    cycles: usize,
    mismatches: usize,
    failures: Vec<String>,
    rss_after_unload_kb: Vec<u64>,
}

/// Loads, checks and unloads `model_id` as `churned` until `done` is set.
async fn churn(client: HttpClient, args: Arc<Args>, corpus: Arc<Vec<String>>, done: Arc<AtomicUsize>) -> Churn {
    let (url, key) = (args.url.clone(), args.admin_key.clone().unwrap_or_default());
    let model_id = args.churn_model_id.clone().unwrap_or_default();
    let mut out = Churn::default();
    let bodies: Vec<Bytes> = (0..8)
        .map(|i| {
            let input: Vec<&String> = (0..1 + i % 4).map(|k| &corpus[(i * 131 + k * 17) % corpus.len()]).collect();
            Bytes::from(json!({"model": "churned", "input": input}).to_string())
        })
        .collect();
    let mut first: Vec<Value> = Vec::new();
    while done.load(Ordering::Relaxed) == 0 {
        let cycle = async {
            let load = json!({"model_id": model_id, "served_model_name": "churned"}).to_string();
            let (status, body) = send(&client, "POST", &format!("{url}/admin/models"), Some(&key), load.into()).await?;
            anyhow::ensure!(status == 202, "load answered {status}: {}", String::from_utf8_lossy(&body));
            loop {
                let (_, body) = send(&client, "GET", &format!("{url}/admin/models"), Some(&key), Bytes::new()).await?;
                let list: Value = serde_json::from_slice(&body)?;
                let state = list["data"]
                    .as_array()
                    .and_then(|d| d.iter().find(|e| e["name"] == "churned"))
                    .map(|e| e["state"].clone())
                    .unwrap_or(Value::Null);
                match state.as_str() {
                    Some("ready") => break,
                    Some("loading") => tokio::time::sleep(Duration::from_millis(20)).await,
                    _ => anyhow::bail!("the churned model is {state} after its load"),
                }
            }
            let mut mismatches = 0;
            for (i, b) in bodies.iter().enumerate() {
                let (status, body) = send(&client, "POST", &format!("{url}/embeddings"), None, b.clone()).await?;
                anyhow::ensure!(status == 200, "embeddings answered {status}: {}", String::from_utf8_lossy(&body));
                let data = serde_json::from_slice::<Value>(&body)?["data"].clone();
                match first.get(i) {
                    Some(f) if *f != data => mismatches += 1,
                    Some(_) => {}
                    None => first.push(data),
                }
            }
            let del = format!("{url}/admin/models/churned");
            let (status, body) = send(&client, "DELETE", &del, Some(&key), Bytes::new()).await?;
            anyhow::ensure!(status == 200, "unload answered {status}: {}", String::from_utf8_lossy(&body));
            anyhow::Ok(mismatches)
        };
        match cycle.await {
            Ok(m) => {
                out.cycles += 1;
                out.mismatches += m;
                if let Some(kb) = args.pid.and_then(rss_kb) {
                    out.rss_after_unload_kb.push(kb);
                }
            }
            Err(e) => {
                out.failures.push(e.to_string());
                // Leave nothing loaded behind a failed cycle before the next try.
                let del = format!("{url}/admin/models/churned");
                let _ = send(&client, "DELETE", &del, Some(&key), Bytes::new()).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    out
}

struct Template {
    route: &'static str,
    body: Bytes,
    /// The field compared with the solo answer.
    field: &'static str,
}

fn templates(args: &Args, corpus: &[String]) -> Vec<Template> {
    let pick = |i: usize| corpus[(i * 7919) % corpus.len()].clone();
    (0..args.templates)
        .map(|t| {
            let kind = t % 4;
            if kind == 1 {
                if let Some(m) = &args.rerank_model {
                    let docs: Vec<String> = (0..2 + t % 7).map(|k| pick(t * 13 + k)).collect();
                    let body = json!({"model": m, "query": pick(t), "documents": docs, "raw_scores": true});
                    return Template { route: "/rerank", body: Bytes::from(body.to_string()), field: "results" };
                }
            }
            if kind == 2 {
                if let Some(m) = &args.classify_model {
                    let input: Vec<String> = (0..1 + t % 4).map(|k| pick(t * 17 + k)).collect();
                    let body = json!({"model": m, "input": input, "raw_scores": true});
                    return Template { route: "/classify", body: Bytes::from(body.to_string()), field: "data" };
                }
            }
            // Embeddings of mixed sizes: 1–16 inputs, some of them long (several sentences joined).
            let n = 1 + (t * 5) % 16;
            let input: Vec<String> = (0..n)
                .map(|k| {
                    if (t + k) % 9 == 0 {
                        (0..12).map(|j| pick(t + k + j)).collect::<Vec<_>>().join(" ")
                    } else {
                        pick(t * 31 + k)
                    }
                })
                .collect();
            let body = json!({"model": args.embed_model, "input": input});
            Template { route: "/embeddings", body: Bytes::from(body.to_string()), field: "data" }
        })
        .collect()
}

fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Arc::new(Args::parse());
    let corpus = Arc::new(aleph_bench::load_sentences(&args.corpus)?);
    let templates = Arc::new(templates(&args, &corpus));
    let client: HttpClient =
        Client::builder(TokioExecutor::new()).pool_max_idle_per_host(args.concurrency).build_http();

    // Solo answers, one request at a time.
    let mut solo = Vec::with_capacity(templates.len());
    for t in templates.iter() {
        let (status, body) = send(&client, "POST", &format!("{}{}", args.url, t.route), None, t.body.clone()).await?;
        anyhow::ensure!(status == 200, "solo {} answered {status}: {}", t.route, String::from_utf8_lossy(&body));
        let v: Value = serde_json::from_slice(&body)?;
        solo.push(v[t.field].clone());
    }
    let solo = Arc::new(solo);
    // The baseline for the churned model's unloads: the server warm, before anything is loaded at runtime.
    let rss_before = args.pid.and_then(rss_kb);

    // Memory, sampled every 500 ms while the load runs.
    let samples = Arc::new(Mutex::new(Vec::<(f64, u64)>::new()));
    let started = Instant::now();
    let done = Arc::new(AtomicUsize::new(0));
    let sampler = args.pid.map(|pid| {
        let (samples, done) = (samples.clone(), done.clone());
        std::thread::spawn(move || {
            while done.load(Ordering::Relaxed) == 0 {
                if let Some(kb) = rss_kb(pid) {
                    samples.lock().unwrap().push((started.elapsed().as_secs_f64(), kb));
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    });

    let churner = args
        .churn_model_id
        .is_some()
        .then(|| tokio::spawn(churn(client.clone(), args.clone(), corpus.clone(), done.clone())));

    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (client, templates, solo, next, url) =
            (client.clone(), templates.clone(), solo.clone(), next.clone(), args.url.clone());
        let total = args.requests;
        tasks.push(tokio::spawn(async move {
            let mut statuses: HashMap<u16, usize> = HashMap::new();
            let (mut mismatches, mut transport, mut max_latency) = (0usize, 0usize, Duration::ZERO);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return (statuses, mismatches, transport, max_latency);
                }
                let t = &templates[i % templates.len()];
                let t0 = Instant::now();
                match send(&client, "POST", &format!("{url}{}", t.route), None, t.body.clone()).await {
                    Ok((status, body)) => {
                        max_latency = max_latency.max(t0.elapsed());
                        *statuses.entry(status).or_default() += 1;
                        if status == 200 {
                            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                            if v[t.field] != solo[i % templates.len()] {
                                mismatches += 1;
                            }
                        }
                    }
                    Err(_) => transport += 1,
                }
            }
        }));
    }
    let mut statuses: HashMap<u16, usize> = HashMap::new();
    let (mut mismatches, mut transport, mut max_latency) = (0, 0, Duration::ZERO);
    for t in tasks {
        let (s, m, e, l) = t.await?;
        for (k, v) in s {
            *statuses.entry(k).or_default() += v;
        }
        mismatches += m;
        transport += e;
        max_latency = max_latency.max(l);
    }
    let secs = started.elapsed().as_secs_f64();
    done.store(1, Ordering::Relaxed);
    let churned = match churner {
        Some(task) => Some(task.await?),
        None => None,
    };
    if let Some(s) = sampler {
        let _ = s.join();
    }
    let samples = samples.lock().unwrap().clone();
    let mut routes: HashMap<&str, usize> = HashMap::new();
    for i in 0..args.requests {
        *routes.entry(templates[i % templates.len()].route).or_default() += 1;
    }
    println!(
        "{}",
        json!({
            "requests": args.requests, "concurrency": args.concurrency, "templates": templates.len(),
            "routes": routes, "seconds": secs, "requests_per_s": args.requests as f64 / secs,
            "statuses": statuses, "mismatches_vs_solo": mismatches, "transport_errors": transport,
            "max_latency_ms": max_latency.as_secs_f64() * 1e3,
            "rss_mb_curve": samples.iter().step_by((samples.len() / 20).max(1))
                .map(|(t, kb)| json!([ (t * 10.0).round() / 10.0, kb / 1024 ])).collect::<Vec<_>>(),
            "churn": churned.map(|c| json!({
                "cycles": c.cycles, "mismatches_vs_first_load": c.mismatches, "failed_cycles": c.failures.len(),
                "first_failure": c.failures.first(),
                "rss_mb_before_first_load": rss_before.map(|kb| kb / 1024),
                "rss_mb_after_unloads": c.rss_after_unload_kb.iter().step_by((c.rss_after_unload_kb.len() / 10).max(1))
                    .map(|kb| kb / 1024).collect::<Vec<_>>(),
                "rss_mb_after_last_unload": c.rss_after_unload_kb.last().map(|kb| kb / 1024),
            })),
        })
    );
    Ok(())
}
