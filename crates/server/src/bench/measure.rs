//! The two measurements of one loaded model: calls into its engine handle, and HTTP requests to the real
//! router serving it on a local port.

use std::sync::Arc;
use std::time::Instant;

use aleph_bench::load::{self, LoadPlan, LoadReport};
use aleph_engine::{Input, ModelHandle, ModelRegistry, RunOptions, TokenizerPool};
use aleph_models::Task;
use anyhow::{anyhow, Context};
use bytes::Bytes;
use indicatif::ProgressBar;

use super::inputs::texts_of_length;
use super::report::{HttpRow, InProcessRow, TokenizeRow};
use super::Plan;
use crate::cli::ServeArgs;
use crate::http;
use crate::startup;

/// Calls per measurement at least, however long they take; and at most (a tiny model on a fast machine).
const MIN_CALLS: usize = 3;
const MAX_CALLS: usize = 100_000;
/// Distinct request bodies the HTTP load cycles through.
const BODIES: usize = 512;

/// Each batch size × length: calls of `batch` inputs one after another for `plan.seconds`.
pub async fn in_process(
    handle: &ModelHandle,
    plan: &Plan,
    dtype: &str,
    bar: &ProgressBar,
) -> anyhow::Result<Vec<InProcessRow>> {
    let label = format!("{} {dtype}", handle.name());
    let window = handle.info().window;
    let largest = plan.batch_sizes.iter().copied().max().unwrap_or(1);
    let mut rows = Vec::new();
    for &asked in &plan.lengths {
        let length = asked.min(window);
        // A fresh set per call for a while, so no two consecutive calls repeat an input.
        let texts = texts_of_length(handle.tokenizer(), &plan.corpus, length, (largest * 4).max(64))
            .map_err(|e| anyhow!("preparing inputs: {e}"))?;
        let query = plan.corpus.first().cloned().unwrap_or_default();
        for &batch in &plan.batch_sizes {
            bar.set_message(format!("{label}: {batch} × {length} tokens"));
            let call = |k: usize| {
                let docs: Vec<String> = (0..batch).map(|j| texts[(k * batch + j) % texts.len()].clone()).collect();
                one_call(handle, &query, docs)
            };
            call(0).await?;
            let mut latencies = Vec::new();
            let mut tokens = 0;
            let t0 = Instant::now();
            while (t0.elapsed() < plan.seconds || latencies.len() < MIN_CALLS) && latencies.len() < MAX_CALLS {
                let t = Instant::now();
                tokens += call(latencies.len() + 1).await?;
                latencies.push(t.elapsed());
            }
            latencies.sort();
            let timed = LoadReport { latencies, errors: Vec::new(), seconds: t0.elapsed().as_secs_f64() };
            let inputs = timed.requests() * batch;
            rows.push(InProcessRow {
                model: handle.name().to_string(),
                dtype: dtype.to_string(),
                batch,
                length: asked,
                tokens_per_input: tokens as f64 / inputs as f64,
                calls: timed.requests(),
                items_per_s: inputs as f64 / timed.seconds,
                tokens_per_s: tokens as f64 / timed.seconds,
                p50_ms: timed.percentile_ms(0.5),
                p90_ms: timed.percentile_ms(0.9),
            });
            bar.inc(1);
        }
    }
    Ok(rows)
}

/// Sentences per tokenizer job in [`tokenize`].
const TOKENIZE_CHUNK: usize = 32;

/// The tokenizer pool alone: chunks of corpus sentences tokenized by `pool`'s threads, two chunks per thread in
/// flight, for `plan.seconds`; what the pool can feed the model's batches.
pub async fn tokenize(
    handle: &ModelHandle,
    pool: &Arc<TokenizerPool>,
    plan: &Plan,
    bar: &ProgressBar,
) -> anyhow::Result<TokenizeRow> {
    bar.set_message(format!("{}: tokenizer pool", handle.name()));
    let tokenizer = Arc::new(handle.tokenizer().clone());
    let corpus = Arc::new(plan.corpus.clone());
    let job = |k: usize| {
        let (tokenizer, corpus, pool) = (tokenizer.clone(), corpus.clone(), pool.clone());
        async move {
            pool.run(move || {
                let mut tokens = 0;
                for j in 0..TOKENIZE_CHUNK {
                    tokens += tokenizer.encode(&corpus[(k * TOKENIZE_CHUNK + j) % corpus.len()])?.ids.len();
                }
                Ok::<usize, aleph_models::ModelError>(tokens)
            })
            .await
        }
    };
    let mut jobs = tokio::task::JoinSet::new();
    let t0 = Instant::now();
    for k in 0..2 * pool.workers() {
        jobs.spawn(job(k));
    }
    let (mut next, mut sentences, mut tokens) = (2 * pool.workers(), 0, 0);
    while let Some(done) = jobs.join_next().await {
        tokens += done?.ok_or_else(|| anyhow!("a tokenizer job panicked"))??;
        sentences += TOKENIZE_CHUNK;
        if t0.elapsed() < plan.seconds {
            jobs.spawn(job(next));
            next += 1;
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    bar.inc(1);
    Ok(TokenizeRow {
        model: handle.name().to_string(),
        workers: pool.workers(),
        sentences,
        seconds,
        sentences_per_s: sentences as f64 / seconds,
        tokens_per_s: tokens as f64 / seconds,
    })
}

/// One call as its route would make it (a reranker scores the documents against a query); the tokens fed.
async fn one_call(handle: &ModelHandle, query: &str, docs: Vec<String>) -> anyhow::Result<usize> {
    let out = match handle.info().task {
        Task::Rerank => {
            let (_, out) = http::rerank::relevance(handle, query, &docs, false, RunOptions::default())
                .await
                .map_err(|e| anyhow!("{}", e.message))?;
            out
        }
        _ => handle.run(docs.into_iter().map(Input::Text).collect()).await?,
    };
    Ok(out.prompt_tokens)
}

/// Each concurrency level: the load generator, on its own thread, against the router on 127.0.0.1.
pub async fn over_http(
    handle: &Arc<ModelHandle>,
    args: &ServeArgs,
    pool: Arc<TokenizerPool>,
    plan: &Plan,
    dtype: &str,
    bar: &ProgressBar,
) -> anyhow::Result<Vec<HttpRow>> {
    let label = format!("{} {dtype}", handle.name());
    let state = Arc::new(startup::app_state(args, None, None, pool)?);
    let registry = ModelRegistry::new(vec![handle.clone()]).map_err(|e| anyhow!(e))?;
    state.set_ready(Arc::new(registry));
    let app = http::router(state, &startup::http_config(args));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("binding a local port")?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });
    let (route, bodies, expect) = requests(handle, plan);
    let url = format!("http://{addr}{}/{route}", args.url_prefix);
    let mut rows = Vec::new();
    for &concurrency in &plan.concurrency {
        bar.set_message(format!("{label}: HTTP at concurrency {concurrency}"));
        let base = LoadPlan {
            expect_indices: expect,
            api_key: args.api_key.first().cloned(),
            ..LoadPlan::new(url.clone(), bodies.clone(), concurrency)
        };
        // Warm-up first, to completion: a request per connection, so the pool's connections are open and the
        // server idle when the timing starts (warm-up work queued inside the window would go uncounted).
        let warm = generate(LoadPlan { requests: concurrency, ..base.clone() }).await?;
        if let Some(e) = warm.errors.first() {
            return Err(anyhow!("warm-up request at concurrency {concurrency} failed: {e}"));
        }
        let load_plan = LoadPlan { requests: usize::MAX, deadline: Some(plan.seconds), ..base };
        let report = generate(load_plan).await?;
        rows.push(HttpRow::new(handle.name(), dtype, concurrency, plan.request_size, &report));
        bar.inc(1);
    }
    let _ = stop.send(());
    server.await?.context("serving")?;
    Ok(rows)
}

/// The route the model's task is served on, request bodies for it, and how many results each answer holds.
fn requests(handle: &ModelHandle, plan: &Plan) -> (&'static str, Vec<Bytes>, Option<usize>) {
    let name = handle.name();
    let n = plan.request_size;
    let corpus = &plan.corpus;
    let pick = |r: usize| -> Vec<&str> { (0..n).map(|k| corpus[(r * n + k) % corpus.len()].as_str()).collect() };
    let (route, expect) = match handle.info().task {
        Task::Rerank => ("rerank", Some(n)),
        Task::Classify { .. } => ("classify", None),
        Task::Embed | Task::MultiVector => ("embeddings", Some(n)),
    };
    let bodies = (0..BODIES)
        .map(|r| {
            let body = match route {
                "rerank" => {
                    let query = &corpus[(r * 7919) % corpus.len()];
                    serde_json::json!({"model": name, "query": query, "documents": pick(r)})
                }
                _ => serde_json::json!({"model": name, "input": pick(r)}),
            };
            Bytes::from(body.to_string())
        })
        .collect();
    (route, bodies, expect)
}

/// Runs the load generator on a thread of its own with a one-thread runtime: it takes one core, not the
/// server's workers.
async fn generate(plan: LoadPlan) -> anyhow::Result<LoadReport> {
    tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        anyhow::Ok(rt.block_on(load::run(plan)))
    })
    .await?
}
