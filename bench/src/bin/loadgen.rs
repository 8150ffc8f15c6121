//! HTTP load generator for OpenAI-compatible `/embeddings` servers (Aleph, Infinity, TEI's OpenAI route),
//! and for Cohere-style `/rerank` (`--rerank`).
//!
//! Sends `--requests` requests of `--batch` real sentences each, `--concurrency` at a time, over
//! keep-alive connections, and prints sentences/s and latency percentiles. Every response is checked:
//! status 200 and one embedding per input. Runs on one thread so it takes one core, not the server's.
//!
//!   loadgen --url http://127.0.0.1:7997/embeddings --corpus ../shared/data/stsbenchmark.tsv.gz \
//!           --batch 8 --concurrency 16 --requests 2000
//!
//! `--interval-ms` paces each worker (a steady trickle beside a flood: `bench/flood_trickle.sh`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

#[derive(Parser, Debug)]
#[command(about = "Load an OpenAI-compatible /embeddings endpoint with real sentences")]
struct Args {
    /// Full URL of the embeddings route.
    #[arg(long, default_value = "http://127.0.0.1:7997/embeddings")]
    url: String,
    /// `model` field sent with each request.
    #[arg(long, default_value = "default/not-specified")]
    model: String,
    /// Sentences: the STS Benchmark .tsv.gz (both sentence columns), or a text file with one per line.
    #[arg(long)]
    corpus: String,
    /// Sentences per request.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Measured requests.
    #[arg(long, default_value_t = 1000)]
    requests: usize,
    /// Unmeasured requests sent first.
    #[arg(long, default_value_t = 0)]
    warmup: usize,
    /// Bearer token.
    #[arg(long)]
    api_key: Option<String>,
    /// Print one JSON line instead of the table.
    #[arg(long)]
    json: bool,
    /// A label for the JSON line.
    #[arg(long, default_value = "")]
    label: String,
    /// Send rerank requests instead (`--url` then names the /rerank route): one query and `--batch`
    /// documents each.
    #[arg(long)]
    rerank: bool,
    /// Each worker pauses this long after each answer: a steady trickle rather than a closed loop.
    #[arg(long, default_value_t = 0)]
    interval_ms: u64,
}

struct Outcome {
    latencies: Vec<Duration>,
    errors: Vec<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let corpus = aleph_bench::load_sentences(&args.corpus)?;
    let total = args.warmup + args.requests;
    let bodies: Arc<Vec<Bytes>> = Arc::new(
        (0..total)
            .map(|r| {
                let input: Vec<&str> =
                    (0..args.batch).map(|k| corpus[(r * args.batch + k) % corpus.len()].as_str()).collect();
                let body = if args.rerank {
                    let query = &corpus[(r * 7919) % corpus.len()];
                    serde_json::json!({"model": args.model, "query": query, "documents": input})
                } else {
                    serde_json::json!({"model": args.model, "input": input})
                };
                Bytes::from(body.to_string())
            })
            .collect(),
    );
    let client: Client<_, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).pool_max_idle_per_host(args.concurrency).build_http();
    let next = Arc::new(AtomicUsize::new(0));
    let measured_start = Arc::new(std::sync::Mutex::new(None::<Instant>));

    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (client, bodies, next, start) = (client.clone(), bodies.clone(), next.clone(), measured_start.clone());
        let (url, key, batch, warmup) = (args.url.clone(), args.api_key.clone(), args.batch, args.warmup);
        let pause = Duration::from_millis(args.interval_ms);
        tasks.push(tokio::spawn(async move {
            let mut out = Outcome { latencies: Vec::new(), errors: Vec::new() };
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= bodies.len() {
                    return out;
                }
                if i == warmup {
                    start.lock().unwrap().get_or_insert_with(Instant::now);
                }
                let mut req = Request::post(&url).header("content-type", "application/json");
                if let Some(k) = &key {
                    req = req.header("authorization", format!("Bearer {k}"));
                }
                let req = req.body(Full::new(bodies[i].clone())).expect("request");
                let t0 = Instant::now();
                let result = async {
                    let resp = client.request(req).await?;
                    let status = resp.status();
                    let body = resp.into_body().collect().await?.to_bytes();
                    anyhow::Ok((status, body))
                }
                .await;
                let elapsed = t0.elapsed();
                match result {
                    Ok((status, body)) if status == 200 => {
                        let count = body.windows(8).filter(|w| w == b"\"index\":").count();
                        if count != batch {
                            out.errors.push(format!("{count} embeddings for {batch} inputs"));
                        } else if i >= warmup {
                            out.latencies.push(elapsed);
                        }
                    }
                    Ok((status, body)) => {
                        out.errors.push(format!("{status}: {}", String::from_utf8_lossy(&body[..body.len().min(200)])))
                    }
                    Err(e) => out.errors.push(e.to_string()),
                }
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
            }
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = Vec::new();
    for t in tasks {
        let o = t.await?;
        latencies.extend(o.latencies);
        errors.extend(o.errors);
    }
    let wall = measured_start.lock().unwrap().map(|s| s.elapsed()).unwrap_or_default().as_secs_f64();
    latencies.sort();
    let pct = |p: f64| -> f64 {
        if latencies.is_empty() {
            return f64::NAN;
        }
        let idx = ((latencies.len() as f64 - 1.0) * p).round() as usize;
        latencies[idx].as_secs_f64() * 1e3
    };
    let ok = latencies.len();
    let sentences_per_s = (ok * args.batch) as f64 / wall.max(1e-9);
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "label": args.label, "batch": args.batch, "concurrency": args.concurrency, "requests": ok,
                "errors": errors.len(), "seconds": wall, "sentences_per_s": sentences_per_s,
                "requests_per_s": ok as f64 / wall.max(1e-9),
                "p50_ms": pct(0.5), "p90_ms": pct(0.9), "p99_ms": pct(0.99), "max_ms": pct(1.0),
            })
        );
    } else {
        println!(
            "{} requests × {} sentences at concurrency {} in {wall:.2} s: {sentences_per_s:.1} sentences/s, \
             {:.1} requests/s; latency p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {} errors",
            ok,
            args.batch,
            args.concurrency,
            ok as f64 / wall.max(1e-9),
            pct(0.5),
            pct(0.9),
            pct(0.99),
            pct(1.0),
            errors.len()
        );
    }
    if let Some(first) = errors.first() {
        eprintln!("first error: {first}");
        std::process::exit(1);
    }
    Ok(())
}
