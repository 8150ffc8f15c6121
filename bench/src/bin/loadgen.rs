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

use std::time::Duration;

use aleph_bench::load::{self, LoadPlan};
use bytes::Bytes;
use clap::Parser;

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

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let corpus = aleph_bench::load_sentences(&args.corpus)?;
    let total = args.warmup + args.requests;
    let bodies: Vec<Bytes> = (0..total)
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
        .collect();
    let plan = LoadPlan {
        warmup: args.warmup,
        expect_indices: Some(args.batch),
        api_key: args.api_key.clone(),
        pause: Duration::from_millis(args.interval_ms),
        ..LoadPlan::new(args.url.clone(), bodies, args.concurrency)
    };
    let report = load::run(plan).await;
    let (ok, wall) = (report.requests(), report.seconds);
    let sentences_per_s = (ok * args.batch) as f64 / wall.max(1e-9);
    let pct = |p| report.percentile_ms(p);
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "label": args.label, "batch": args.batch, "concurrency": args.concurrency, "requests": ok,
                "errors": report.errors.len(), "seconds": wall, "sentences_per_s": sentences_per_s,
                "requests_per_s": report.requests_per_s(),
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
            report.requests_per_s(),
            pct(0.5),
            pct(0.9),
            pct(0.99),
            pct(1.0),
            report.errors.len()
        );
    }
    if let Some(first) = report.errors.first() {
        eprintln!("first error: {first}");
        std::process::exit(1);
    }
    Ok(())
}
