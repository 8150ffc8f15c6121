//! `aleph bench`: throughput and latency of one or more models on this machine, at each dtype side by
//! side: in-process through the engine (batch sizes × input lengths), then over HTTP against the real
//! router on a local port (concurrency levels), with `aleph_bench`'s load generator.

mod inputs;
mod measure;
mod plot;
mod report;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aleph_engine::{ModelHandle, TokenizerPool};
use aleph_models::DType;
use anyhow::{anyhow, bail, Context};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::{ModelSpec, ServeArgs};
use crate::startup::Loader;

pub use report::{BenchReport, HttpRow, InProcessRow, TokenizeRow, VariantRow};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Calls into the engine (tokenization, batching, the forward pass), no HTTP.
    InProcess,
    /// Requests over HTTP to the real router on a local port.
    Http,
    /// The tokenizer pool alone (`--tokenizer-workers` threads): the sentences per second it can feed a model.
    Tokenize,
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Benchmark each model at each of these dtypes, side by side (`float32`, `bfloat16`, `int8`; `model`:
    /// the model's own --dtype). A dtype a model cannot run gets a row saying why.
    #[arg(
        long,
        env = "ALEPH_BENCH_DTYPES",
        value_delimiter = ',',
        default_value = "float32,bfloat16,int8",
        help_heading = "Benchmark"
    )]
    pub dtypes: Vec<String>,

    /// What to measure: in-process (batch sizes × lengths), http (concurrency levels), tokenize (the tokenizer
    /// pool alone, once per model), or several.
    #[arg(
        long,
        env = "ALEPH_BENCH_MODE",
        value_enum,
        value_delimiter = ',',
        default_value = "in-process,http",
        help_heading = "Benchmark"
    )]
    pub mode: Vec<Mode>,

    /// In-process: inputs per call.
    #[arg(
        long,
        env = "ALEPH_BENCH_BATCH_SIZES",
        value_delimiter = ',',
        default_value = "1,8,32",
        help_heading = "Benchmark"
    )]
    pub batch_sizes: Vec<usize>,

    /// In-process: tokens per input (special tokens included), cut from the corpus; lengths past a model's
    /// window are measured at the window.
    #[arg(
        long,
        env = "ALEPH_BENCH_LENGTHS",
        value_delimiter = ',',
        default_value = "16,128,512",
        help_heading = "Benchmark"
    )]
    pub lengths: Vec<usize>,

    /// HTTP: requests in flight at once.
    #[arg(
        long,
        env = "ALEPH_BENCH_CONCURRENCY",
        value_delimiter = ',',
        default_value = "1,4,16,64",
        help_heading = "Benchmark"
    )]
    pub concurrency: Vec<usize>,

    /// HTTP: corpus sentences per request (documents per rerank request).
    #[arg(long, env = "ALEPH_BENCH_REQUEST_SIZE", default_value_t = 8, help_heading = "Benchmark")]
    pub request_size: usize,

    /// Seconds each measurement runs (each batch size × length, each concurrency level), after a warm-up.
    #[arg(long, env = "ALEPH_BENCH_SECONDS", default_value_t = 2.0, help_heading = "Benchmark")]
    pub seconds: f64,

    /// The texts: a file with one per line, or an STS Benchmark .tsv(.gz). Default: the STS-B test split.
    #[arg(long, env = "ALEPH_BENCH_CORPUS", help_heading = "Benchmark")]
    pub corpus: Option<PathBuf>,

    /// Also draw the HTTP results (throughput and latency percentiles against concurrency): `.svg` or `.png`.
    #[arg(long, env = "ALEPH_BENCH_PLOT", help_heading = "Benchmark")]
    pub plot: Option<PathBuf>,

    /// Print the results as JSON (one object) instead of tables.
    #[arg(long, env = "ALEPH_BENCH_JSON", help_heading = "Benchmark")]
    pub json: bool,

    #[command(flatten)]
    pub models: ServeArgs,
}

/// What one measurement run is asked to do, checked before any model loads.
struct Plan {
    variants: Vec<ModelSpec>,
    corpus: Vec<String>,
    batch_sizes: Vec<usize>,
    lengths: Vec<usize>,
    concurrency: Vec<usize>,
    request_size: usize,
    seconds: Duration,
    in_process: bool,
    http: bool,
    tokenize: bool,
}

impl BenchArgs {
    fn plan(&self) -> anyhow::Result<Plan> {
        let specs = self.models.model_specs().map_err(|e| anyhow!(e))?;
        let mut dtypes = Vec::new();
        for name in &self.dtypes {
            let dtype = match name.trim() {
                "model" => None,
                other => Some(other.parse::<DType>().map_err(|e| anyhow!("--dtypes: {e}"))?),
            };
            if !dtypes.contains(&dtype) {
                dtypes.push(dtype);
            }
        }
        if dtypes.is_empty() {
            bail!("--dtypes: give at least one dtype");
        }
        let variants = specs
            .iter()
            .flat_map(|spec| dtypes.iter().map(move |d| ModelSpec { dtype: d.unwrap_or(spec.dtype), ..spec.clone() }))
            .collect();
        let positive = |flag: &str, values: &[usize]| -> anyhow::Result<Vec<usize>> {
            if values.is_empty() || values.contains(&0) {
                bail!("{flag}: give one or more numbers, each at least 1");
            }
            let mut v = values.to_vec();
            v.sort_unstable();
            v.dedup();
            Ok(v)
        };
        let in_process = self.mode.contains(&Mode::InProcess);
        let http = self.mode.contains(&Mode::Http);
        let tokenize = self.mode.contains(&Mode::Tokenize);
        if self.plot.is_some() && !http {
            bail!("--plot draws the HTTP measurements: keep `http` in --mode");
        }
        if let Some(path) = &self.plot {
            plot::Format::of(path)?;
        }
        if !(self.seconds > 0.0 && self.seconds.is_finite()) {
            bail!("--seconds must be a positive number");
        }
        if self.request_size == 0 {
            bail!("--request-size must be at least 1");
        }
        let corpus: Vec<String> = match &self.corpus {
            Some(path) => aleph_bench::load_sentences(&path.to_string_lossy())?,
            // Both sentences of each STS-B test pair, in file order.
            None => {
                let pairs = aleph_eval::datasets::parse_sts("STS-B test", crate::eval::STS_B_TEST, "test")?;
                pairs.first.into_iter().zip(pairs.second).flat_map(|(a, b)| [a, b]).collect()
            }
        };
        if corpus.is_empty() {
            bail!("--corpus: no sentences in it");
        }
        Ok(Plan {
            variants,
            corpus,
            batch_sizes: positive("--batch-sizes", &self.batch_sizes)?,
            lengths: positive("--lengths", &self.lengths)?,
            concurrency: positive("--concurrency", &self.concurrency)?,
            request_size: self.request_size,
            seconds: Duration::from_secs_f64(self.seconds),
            in_process,
            http,
            tokenize,
        })
    }
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let plan = Arc::new(args.plan()?);
    let workers = args
        .models
        .tokenizer_workers
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    let pool = Arc::new(TokenizerPool::new(workers));
    let loader = Arc::new(Loader::new(&args.models, pool.clone()));
    let cells = plan.in_process as usize * plan.batch_sizes.len() * plan.lengths.len()
        + plan.http as usize * plan.concurrency.len()
        + plan.tokenize as usize;
    let bar = progress(!args.json, (plan.variants.len() * cells) as u64);
    let mut report = BenchReport { machine: report::machine(), ..Default::default() };
    // One variant loaded at a time: comparing large models needs only the memory of the largest.
    for spec in &plan.variants {
        let t0 = Instant::now();
        let mut row = VariantRow::new(spec);
        let loaded = {
            let (loader, spec) = (loader.clone(), spec.clone());
            tokio::task::spawn_blocking(move || loader.load_alone(&spec)).await?
        };
        let handle = match loaded {
            Ok(handle) => Arc::new(handle),
            Err(e) => {
                // A dtype this model (or this build) cannot run: say why and go on with the others.
                row.note = Some(format!("{e:#}"));
                report.variants.push(row);
                bar.inc(cells as u64);
                continue;
            }
        };
        row.loaded(&handle, t0.elapsed());
        report.variants.push(row);
        let dtype = spec.dtype.name();
        if plan.in_process {
            let rows = measure::in_process(&handle, &plan, dtype, &bar)
                .await
                .with_context(|| format!("benchmarking `{}` in-process", spec.served_name))?;
            report.in_process.extend(rows);
        }
        // The tokenizer is the model's whatever its dtype: measured at its first one.
        if plan.tokenize && !report.tokenize.iter().any(|r| r.model == spec.served_name) {
            let row = measure::tokenize(&handle, &pool, &plan, &bar)
                .await
                .with_context(|| format!("benchmarking `{}`'s tokenizer", spec.served_name))?;
            report.tokenize.push(row);
        }
        if plan.http {
            let rows = measure::over_http(&handle, &args.models, pool.clone(), &plan, dtype, &bar)
                .await
                .with_context(|| format!("benchmarking `{}` over HTTP", spec.served_name))?;
            report.http.extend(rows);
        }
        shutdown(handle).await?;
    }
    bar.finish_and_clear();
    if let Some(path) = &args.plot {
        plot::draw(&report, path).with_context(|| format!("drawing {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.tables());
        if let Some(path) = &args.plot {
            println!("Plot: {}", path.display());
        }
    }
    Ok(())
}

async fn shutdown(handle: Arc<ModelHandle>) -> anyhow::Result<()> {
    tokio::task::spawn_blocking(move || handle.shutdown()).await?;
    Ok(())
}

fn progress(wanted: bool, cells: u64) -> ProgressBar {
    if !wanted || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(cells);
    if let Ok(style) = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed})") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix("bench");
    bar
}
