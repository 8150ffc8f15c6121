//! `aleph eval`: the quality of one or more models on a team's own data, measured in-process through the
//! same engine that serves them (so a model's score is the score of what `aleph v2` would serve).

mod report;
mod tasks;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use aleph_engine::{ModelHandle, TokenizerPool};
use aleph_eval::datasets::{self, Labelled, Retrieval, StsPairs};
use anyhow::{anyhow, Context};
use clap::Args;

use crate::cli::{ModelSpec, ServeArgs};
use crate::startup::Loader;

pub use report::{EvalReport, ModelRow, TaskResult};

/// The STS Benchmark test split (1,379 pairs), what `aleph eval` measures when given no dataset.
pub(crate) const STS_B_TEST: &str = include_str!("../../../../tests/fixtures/stsb/test.tsv");

#[derive(Debug, Clone, Args)]
pub struct EvalArgs {
    /// STS: sentence pairs with gold scores, TSV (the STS Benchmark's columns, or sentence1, sentence2, score)
    /// or JSONL (`sentence1`, `sentence2`, `score`); Spearman and Pearson of the models' cosine similarity (a
    /// cross-encoder's score). Repeat for several. With no dataset given: the STS Benchmark test split.
    #[arg(long, env = "ALEPH_EVAL_STS", value_delimiter = ';', help_heading = "Evaluation")]
    pub sts: Vec<PathBuf>,

    /// Which rows of an STS Benchmark-layout file (its `split` column) to use.
    #[arg(long, env = "ALEPH_EVAL_STS_SPLIT", default_value = "test", help_heading = "Evaluation")]
    pub sts_split: String,

    /// Retrieval: a BEIR / MTEB folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv); nDCG@10, MRR@10 and
    /// recall@100 of exact search by cosine similarity (dot product for sparse models). Repeat for several.
    #[arg(long, env = "ALEPH_EVAL_RETRIEVAL", value_delimiter = ';', help_heading = "Evaluation")]
    pub retrieval: Vec<PathBuf>,

    /// Which qrels file of a retrieval folder to judge by.
    #[arg(long, env = "ALEPH_EVAL_QRELS_SPLIT", default_value = "test", help_heading = "Evaluation")]
    pub qrels_split: String,

    /// A reranker (cross-encoder, LLM reranker or ColBERT) that rescores each model's first
    /// --rerank-top-k retrieved documents; both stages are reported. Loaded with the first model's options.
    #[arg(long, env = "ALEPH_EVAL_RERANK_MODEL", help_heading = "Evaluation")]
    pub rerank_model: Option<String>,

    /// How many first-stage documents per query the reranker rescores (the rest are dropped, as BEIR does).
    #[arg(long, env = "ALEPH_EVAL_RERANK_TOP_K", default_value_t = 100, help_heading = "Evaluation")]
    pub rerank_top_k: usize,

    /// Classification: texts with gold labels (a label name or its index), TSV (text, label) or JSONL (`text`,
    /// `label`); accuracy and macro-F1 of a served classifier's top label. Repeat for several.
    #[arg(long, env = "ALEPH_EVAL_CLASSIFICATION", value_delimiter = ';', help_heading = "Evaluation")]
    pub classification: Vec<PathBuf>,

    /// The prompt (from the model's config_sentence_transformers.json) for retrieval queries. Default: `query`
    /// when the model has one, else its default prompt.
    #[arg(long, env = "ALEPH_EVAL_QUERY_PROMPT_NAME", help_heading = "Evaluation")]
    pub query_prompt_name: Option<String>,

    /// The prompt for retrieval documents. Default: `document` or `passage` when the model has one, else its
    /// default prompt.
    #[arg(long, env = "ALEPH_EVAL_DOCUMENT_PROMPT_NAME", help_heading = "Evaluation")]
    pub document_prompt_name: Option<String>,

    /// Print the results as JSON (one object) instead of tables.
    #[arg(long, env = "ALEPH_EVAL_JSON", help_heading = "Evaluation")]
    pub json: bool,

    #[command(flatten)]
    pub models: ServeArgs,
}

/// One dataset, read before any model loads (a bad file fails in a second, not after a download).
pub enum Dataset {
    Sts { name: String, pairs: StsPairs },
    Retrieval { name: String, set: Retrieval },
    Classification { name: String, set: Labelled },
}

impl EvalArgs {
    fn datasets(&self) -> anyhow::Result<Vec<Dataset>> {
        let mut out = Vec::new();
        let name_of = |p: &PathBuf| {
            let name =
                p.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| p.display().to_string());
            name.trim_end_matches(".gz").to_string()
        };
        for path in &self.sts {
            out.push(Dataset::Sts { name: name_of(path), pairs: datasets::read_sts(path, &self.sts_split)? });
        }
        for path in &self.retrieval {
            out.push(Dataset::Retrieval { name: name_of(path), set: datasets::read_beir(path, &self.qrels_split)? });
        }
        for path in &self.classification {
            out.push(Dataset::Classification { name: name_of(path), set: datasets::read_labelled(path)? });
        }
        if out.is_empty() {
            let pairs = datasets::parse_sts("STS-B test", STS_B_TEST, "test")?;
            out.push(Dataset::Sts { name: "STS-B test".into(), pairs });
        }
        Ok(out)
    }

    fn reranker_spec(&self, first: &ModelSpec) -> Option<ModelSpec> {
        let id = self.rerank_model.as_ref()?;
        Some(ModelSpec {
            model_id: id.clone(),
            served_name: crate::cli::default_served_name(id),
            revision: None,
            task: aleph_models::ModelTask::Auto,
            pooling: aleph_models::PoolingChoice::Auto,
            default_prompt_name: None,
            truncate_dim: 0,
            rerank_instruction: None,
            rerank_template: aleph_models::RerankTemplate::Auto,
            ..first.clone()
        })
    }
}

pub async fn run(args: EvalArgs) -> anyhow::Result<()> {
    let specs = args.models.model_specs().map_err(|e| anyhow!(e))?;
    let data = args.datasets()?;
    if args.rerank_top_k == 0 {
        return Err(anyhow!("--rerank-top-k must be at least 1"));
    }
    let workers = args
        .models
        .tokenizer_workers
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    let loader = Arc::new(Loader::new(&args.models, Arc::new(TokenizerPool::new(workers))));
    let reranker = match args.reranker_spec(&specs[0]) {
        Some(spec) => Some(load(&loader, spec).await?),
        None => None,
    };
    let options = tasks::Options {
        query_prompt: args.query_prompt_name.clone(),
        document_prompt: args.document_prompt_name.clone(),
        rerank_top_k: args.rerank_top_k,
        progress: !args.json && std::io::IsTerminal::is_terminal(&std::io::stderr()),
    };
    let mut report = EvalReport::default();
    // One model at a time: a comparison of large models needs only the memory of the largest.
    for spec in specs {
        let t0 = Instant::now();
        let (handle, _) = load(&loader, spec.clone()).await?;
        report.models.push(ModelRow {
            name: spec.served_name.clone(),
            model_id: spec.model_id.clone(),
            dtype: spec.dtype.name().to_string(),
            architecture: handle.info().architecture.clone(),
            load_seconds: t0.elapsed().as_secs_f64(),
        });
        for dataset in &data {
            let result = tasks::evaluate(&handle, &spec, dataset, reranker.as_ref().map(|(h, _)| h.as_ref()), &options)
                .await
                .with_context(|| format!("evaluating `{}`", spec.served_name))?;
            report.results.extend(result);
        }
        tokio::task::spawn_blocking(move || handle.shutdown()).await?;
    }
    if let Some((handle, _)) = reranker {
        tokio::task::spawn_blocking(move || handle.shutdown()).await?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.tables());
    }
    Ok(())
}

async fn load(loader: &Arc<Loader>, spec: ModelSpec) -> anyhow::Result<(Arc<ModelHandle>, ModelSpec)> {
    let loader = loader.clone();
    let for_load = spec.clone();
    let handle = tokio::task::spawn_blocking(move || loader.load_alone(&for_load)).await??;
    Ok((Arc::new(handle), spec))
}
