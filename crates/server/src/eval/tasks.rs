//! Each task against one model: its inputs through the model's engine handle, its outputs scored by
//! `aleph_eval`'s metrics.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use aleph_engine::{Input, ModelHandle, RunOptions};
use aleph_eval::datasets::{Labelled, Retrieval, StsPairs};
use aleph_eval::metrics::{accuracy, macro_f1, pearson, spearman};
use aleph_eval::retrieval::{evaluate as score_runs, top_k, Run};
use aleph_models::quantize::EmbeddingDtype;
use aleph_models::Task;
use anyhow::anyhow;
use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};

use super::report::TaskResult;
use super::Dataset;
use crate::cli::ModelSpec;
use aleph_engine::outputs::{maxsim, sigmoid};

use crate::http::rerank::relevance;

/// Inputs per call into the engine, and calls in flight: enough to keep its batcher's batches full.
const CHUNK: usize = 256;
const IN_FLIGHT: usize = 4;
/// The deepest cut the retrieval metrics look at (recall@100).
const RETRIEVE: usize = 100;

pub struct Options {
    pub query_prompt: Option<String>,
    pub document_prompt: Option<String>,
    pub rerank_top_k: usize,
    pub progress: bool,
}

pub async fn evaluate(
    model: &ModelHandle,
    spec: &ModelSpec,
    dataset: &Dataset,
    reranker: Option<&ModelHandle>,
    opts: &Options,
) -> anyhow::Result<Vec<TaskResult>> {
    let row = |task: &'static str, name: &str| TaskResult::new(task, name, spec);
    let t0 = Instant::now();
    let results = match dataset {
        Dataset::Sts { name, pairs } => {
            let mut r = row("sts", name);
            match sts(model, pairs, opts).await? {
                Ok(metrics) => r.metrics = metrics,
                Err(why) => r.note = Some(why),
            }
            r.items = pairs.len();
            vec![r.timed(t0)]
        }
        Dataset::Retrieval { name, set } => {
            let mut first = row("retrieval", name);
            first.items = set.queries.len() + set.docs.len();
            match retrieve(model, set, opts).await? {
                Err(why) => {
                    first.note = Some(why);
                    vec![first.timed(t0)]
                }
                Ok(runs) => {
                    first.metrics = retrieval_metrics(set, &runs);
                    let first = first.timed(t0);
                    let mut out = vec![first];
                    if let Some(reranker) = reranker {
                        let t1 = Instant::now();
                        let mut second = row("retrieval+rerank", name);
                        second.reranker = Some(reranker.name().to_string());
                        second.items = set.queries.len() * opts.rerank_top_k.min(set.docs.len());
                        match rerank(reranker, set, &runs, opts).await? {
                            Ok(reranked) => second.metrics = retrieval_metrics(set, &reranked),
                            Err(why) => second.note = Some(why),
                        }
                        out.push(second.timed(t1));
                    }
                    out
                }
            }
        }
        Dataset::Classification { name, set } => {
            let mut r = row("classification", name);
            r.items = set.texts.len();
            match classify(model, set, opts).await? {
                Ok(metrics) => r.metrics = metrics,
                Err(why) => r.note = Some(why),
            }
            vec![r.timed(t0)]
        }
    };
    Ok(results)
}

/// Spearman and Pearson of the pairs' similarity against the gold scores; the inner error says why this
/// model does not do the task.
async fn sts(model: &ModelHandle, pairs: &StsPairs, opts: &Options) -> anyhow::Result<Result<Metrics, String>> {
    let predicted: Vec<f64> = match &model.info().task {
        Task::Embed => {
            let prompt = model.prompt(None).map_err(|e| anyhow!(e))?;
            let texts: Vec<String> = pairs.first.iter().chain(&pairs.second).cloned().collect();
            let vectors = embed(model, &texts, prompt, "sentences", opts).await?;
            let (a, b) = vectors.split_at(pairs.len());
            let sparse = model.info().sparse;
            a.iter().zip(b).map(|(x, y)| similarity(x, y, sparse)).collect()
        }
        Task::Rerank => {
            // A cross-encoder scores each pair itself (sentence-transformers' CECorrelationEvaluator).
            let inputs: Vec<Input> =
                pairs.first.iter().zip(&pairs.second).map(|(a, b)| Input::Pair(clean(a), clean(b))).collect();
            let logits = run_all(model, inputs, "pairs", opts).await?;
            logits.iter().map(|l| sigmoid(l.first().copied().unwrap_or(f32::NAN)) as f64).collect()
        }
        other => return Ok(Err(format!("{} models do not score sentence pairs", task_name(other)))),
    };
    Ok(Ok(Metrics::from([
        ("spearman".to_string(), spearman(&predicted, &pairs.gold)),
        ("pearson".to_string(), pearson(&predicted, &pairs.gold)),
    ])))
}

type Metrics = BTreeMap<String, f64>;

/// Each judged query's first [`RETRIEVE`] documents (or the reranker's depth, if deeper) by exact search.
async fn retrieve(
    model: &ModelHandle,
    set: &Retrieval,
    opts: &Options,
) -> anyhow::Result<Result<HashMap<String, Run>, String>> {
    let late = match &model.info().task {
        Task::Embed => false,
        Task::MultiVector => true,
        other => {
            return Ok(Err(format!(
                "{} models do not embed queries and documents apart (give a reranker as --rerank-model)",
                task_name(other)
            )))
        }
    };
    let query_prompt = choose_prompt(model, opts.query_prompt.as_deref(), &["query"])?;
    let doc_prompt = choose_prompt(model, opts.document_prompt.as_deref(), &["document", "passage", "corpus"])?;
    let (dim, sparse) = (model.info().dim, model.info().sparse);
    // Unit length once, so each query-document score is a dot product (cosine without its norms).
    let unit = |mut v: Vec<f32>| {
        let norm = v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt() as f32;
        if !late && !sparse && norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
        v
    };
    let docs: Vec<Vec<f32>> =
        embed(model, &set.docs, doc_prompt, "documents", opts).await?.into_iter().map(unit).collect();
    let queries: Vec<Vec<f32>> =
        embed(model, &set.queries, query_prompt, "queries", opts).await?.into_iter().map(unit).collect();
    let depth = RETRIEVE.max(opts.rerank_top_k);
    let mut runs = HashMap::new();
    for (qid, q) in set.query_ids.iter().zip(&queries) {
        let scores: Vec<f32> = docs.iter().map(|d| if late { maxsim(q, d, dim) } else { dot(q, d) }).collect();
        let run: Run = top_k(&scores, depth).into_iter().map(|(i, s)| (set.doc_ids[i].clone(), s as f64)).collect();
        runs.insert(qid.clone(), run);
    }
    Ok(Ok(runs))
}

/// The first stage's best `rerank_top_k` per query, rescored by the reranker (the rest dropped, as BEIR's
/// `Rerank` does).
async fn rerank(
    reranker: &ModelHandle,
    set: &Retrieval,
    runs: &HashMap<String, Run>,
    opts: &Options,
) -> anyhow::Result<Result<HashMap<String, Run>, String>> {
    if !reranker.info().task.capabilities().contains(&"rerank") {
        return Ok(Err(format!("`{}` is not a reranker", reranker.name())));
    }
    let text: HashMap<&str, &str> =
        set.doc_ids.iter().map(String::as_str).zip(set.docs.iter().map(String::as_str)).collect();
    let bar = progress(opts, set.queries.len(), "reranking queries");
    let jobs = set.query_ids.iter().zip(&set.queries).map(|(qid, query)| {
        let mut run = runs.get(qid).cloned().unwrap_or_default();
        aleph_eval::retrieval::rank(&mut run);
        run.truncate(opts.rerank_top_k);
        let docs: Vec<String> = run.iter().map(|(id, _)| clean(text.get(id.as_str()).copied().unwrap_or(""))).collect();
        let query = clean(query);
        async move {
            let (scores, _) = relevance(reranker, &query, &docs, false, RunOptions::default())
                .await
                .map_err(|e| anyhow!("reranking: {}", e.message))?;
            let rescored: Run = run.into_iter().zip(scores).map(|((id, _), s)| (id, s as f64)).collect();
            anyhow::Ok((qid.clone(), rescored))
        }
    });
    let mut stream = futures_util::stream::iter(jobs).buffered(IN_FLIGHT);
    let mut out = HashMap::new();
    while let Some(result) = stream.next().await {
        let (qid, run) = result?;
        out.insert(qid, run);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(Ok(out))
}

fn retrieval_metrics(set: &Retrieval, runs: &HashMap<String, Run>) -> Metrics {
    let s = score_runs(&set.qrels, runs);
    Metrics::from([
        ("ndcg_at_10".to_string(), s.ndcg_at_10),
        ("mrr_at_10".to_string(), s.mrr_at_10),
        ("recall_at_100".to_string(), s.recall_at_100),
    ])
}

/// Accuracy and macro-F1 of the classifier's top label against the gold ones.
async fn classify(model: &ModelHandle, set: &Labelled, opts: &Options) -> anyhow::Result<Result<Metrics, String>> {
    let (labels, multi_label) = match &model.info().task {
        Task::Classify { labels, multi_label } => (labels, *multi_label),
        other => return Ok(Err(format!("{} models are not classifiers", task_name(other)))),
    };
    if multi_label {
        return Ok(Err("a multi-label classifier has no single predicted label to score".into()));
    }
    let gold: Vec<String> = set
        .labels
        .iter()
        .zip(&set.lines)
        .map(|(label, line)| gold_label(label, labels).map_err(|why| anyhow!("{}:{line}: {why}", set.path)))
        .collect::<anyhow::Result<_>>()?;
    let inputs = set.texts.iter().map(|t| Input::Text(clean(t))).collect();
    let logits = run_all(model, inputs, "texts", opts).await?;
    let predicted: Vec<String> = logits
        .iter()
        .map(|l| {
            let best = l.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(i, _)| i);
            labels.get(best).cloned().unwrap_or_default()
        })
        .collect();
    Ok(Ok(Metrics::from([
        ("accuracy".to_string(), accuracy(&gold, &predicted)),
        ("macro_f1".to_string(), macro_f1(&gold, &predicted)),
    ])))
}

/// A gold label as one of the model's: its name, or its index in the model's labels.
fn gold_label(label: &str, labels: &[String]) -> Result<String, String> {
    if labels.iter().any(|l| l == label) {
        return Ok(label.to_string());
    }
    if let Some(l) = label.parse::<usize>().ok().and_then(|i| labels.get(i)) {
        return Ok(l.clone());
    }
    Err(format!("label `{label}` is not one of the model's labels ({}) nor an index of one", labels.join(", ")))
}

fn task_name(task: &Task) -> &'static str {
    match task {
        Task::Embed => "embedding",
        Task::Rerank => "reranker",
        Task::Classify { .. } => "classifier",
        Task::MultiVector => "multi-vector (ColBERT)",
    }
}

/// The prompt asked for; else the first of `usual` the model defines; else the model's default prompt.
fn choose_prompt<'a>(model: &'a ModelHandle, asked: Option<&str>, usual: &[&str]) -> anyhow::Result<Option<&'a str>> {
    if let Some(name) = asked {
        return model.prompt(Some(name)).map_err(|e| anyhow!("{e}"));
    }
    match usual.iter().find(|name| model.info().prompts.prompts.contains_key(**name)) {
        Some(name) => model.prompt(Some(name)).map_err(|e| anyhow!("{e}")),
        None => model.prompt(None).map_err(|e| anyhow!("{e}")),
    }
}

/// Inputs are stripped as the HTTP API strips them, so a score is that of what is served.
fn clean(text: &str) -> String {
    text.trim().to_string()
}

/// The model's embeddings of `texts`, as `/embeddings` would return them (prompt, `--truncate-dim`,
/// `--embedding-dtype`; binary ones unpacked to ±1 per bit, so cosine ranks as Hamming distance does).
async fn embed(
    model: &ModelHandle,
    texts: &[String],
    prompt: Option<&str>,
    what: &str,
    opts: &Options,
) -> anyhow::Result<Vec<Vec<f32>>> {
    let inputs = texts
        .iter()
        .map(|t| {
            let t = clean(t);
            Input::Text(match prompt {
                Some(p) => format!("{p}{t}"),
                None => t,
            })
        })
        .collect();
    let vectors = run_all(model, inputs, what, opts).await?;
    let dtype = model.config().embedding_dtype;
    let dims = model.default_dimensions();
    let multi = model.info().task == Task::MultiVector;
    Ok(vectors
        .into_iter()
        .map(|mut v| {
            if let (Some(d), false) = (dims, multi) {
                v.truncate(d);
            }
            match dtype {
                EmbeddingDtype::Float32 => v,
                EmbeddingDtype::Binary | EmbeddingDtype::Ubinary => unpack_bits(&model.quantize(&v)),
                _ => model.quantize(&v),
            }
        })
        .collect())
}

/// Packed sign bits (one byte per value, signed or not) as ±1 per bit.
fn unpack_bits(packed: &[f32]) -> Vec<f32> {
    packed
        .iter()
        .flat_map(|&byte| {
            let b = byte as i32 as u8;
            (0..8).rev().map(move |bit| if b >> bit & 1 == 1 { 1.0 } else { -1.0 })
        })
        .collect()
}

/// Every input through the model, a few calls in flight so its batches stay full; outputs in input order.
async fn run_all(model: &ModelHandle, inputs: Vec<Input>, what: &str, opts: &Options) -> anyhow::Result<Vec<Vec<f32>>> {
    let bar = progress(opts, inputs.len(), what);
    let mut chunks = Vec::new();
    let mut rest = inputs;
    while !rest.is_empty() {
        let tail = rest.split_off(rest.len().min(CHUNK));
        chunks.push(std::mem::replace(&mut rest, tail));
    }
    let mut stream = futures_util::stream::iter(chunks.into_iter().map(|c| model.run(c))).buffered(IN_FLIGHT);
    let mut out = Vec::new();
    while let Some(result) = stream.next().await {
        let result = result.map_err(|e| anyhow!("{e}"))?;
        bar.inc(result.vectors.len() as u64);
        out.extend(result.vectors);
    }
    bar.finish_and_clear();
    Ok(out)
}

fn progress(opts: &Options, len: usize, what: &str) -> ProgressBar {
    if !opts.progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len as u64);
    let style = ProgressStyle::with_template("{msg:>20} [{bar:30}] {pos}/{len} ({per_sec}, {eta} left)")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(what.to_string());
    bar
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Cosine similarity (the dot product for a sparse model, as sentence-transformers scores SPLADE).
fn similarity(a: &[f32], b: &[f32], dot_only: bool) -> f64 {
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        dot += (*x as f64) * (*y as f64);
        na += (*x as f64) * (*x as f64);
        nb += (*y as f64) * (*y as f64);
    }
    if dot_only {
        dot
    } else if na > 0.0 && nb > 0.0 {
        dot / (na.sqrt() * nb.sqrt())
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_bits_unpack_most_significant_first() {
        assert_eq!(unpack_bits(&[-128.0]), vec![1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0]);
        assert_eq!(unpack_bits(&[3.0]), vec![-1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 1.0, 1.0]);
    }

    #[test]
    fn gold_labels_by_name_or_index() {
        let labels = vec!["neg".to_string(), "pos".to_string()];
        assert_eq!(gold_label("pos", &labels).unwrap(), "pos");
        assert_eq!(gold_label("0", &labels).unwrap(), "neg");
        assert!(gold_label("2", &labels).unwrap_err().contains("neg, pos"));
    }
}
