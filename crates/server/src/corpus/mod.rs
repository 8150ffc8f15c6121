//! `aleph embed`: a corpus file to a file of vectors, through the same engine that serves the model. It reads
//! and writes a chunk at a time (memory stays flat for any corpus), keeps two chunks in the engine so its
//! batcher never waits on the disk, resumes after the rows an earlier run wrote, and says its throughput.
//! Ctrl-C or SIGTERM stops it after the chunks in the engine are written, with the output whole.

mod input;
mod lines;
mod npy;
mod output;
mod parquet_texts;
mod parquet_vectors;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use aleph_engine::{EmbedSpec, Embedding, Input, TokenizerPool};
use aleph_models::quantize::EmbeddingDtype;
use anyhow::{anyhow, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::ServeArgs;
use crate::startup::Loader;
use input::Corpus;
use output::{Element, VectorFile};

#[derive(Debug, Clone, Args)]
pub struct EmbedArgs {
    /// The corpus: a .txt file (one text per line), JSON Lines (.jsonl) or Parquet (.parquet), the text of
    /// the last two in --text-field.
    #[arg(long, env = "ALEPH_EMBED_INPUT", help_heading = "Corpus")]
    pub input: PathBuf,

    /// Where the vectors go, in corpus order: a NumPy .npy file of [texts, dimensions], or a Parquet file
    /// with an `embedding` list column.
    #[arg(long, env = "ALEPH_EMBED_OUTPUT", help_heading = "Corpus")]
    pub output: PathBuf,

    /// The field of each JSON line, or the Parquet column, that holds the text.
    #[arg(long, env = "ALEPH_EMBED_TEXT_FIELD", default_value = "text", help_heading = "Corpus")]
    pub text_field: String,

    /// Texts read, embedded and written at a time.
    #[arg(long, env = "ALEPH_EMBED_CHUNK_SIZE", default_value_t = 1024, help_heading = "Corpus")]
    pub chunk_size: usize,

    /// Start over instead of resuming after the vectors --output already holds.
    #[arg(long, env = "ALEPH_EMBED_NO_RESUME", help_heading = "Corpus")]
    pub no_resume: bool,

    /// A prompt of the model's (its sentence-transformers config) put before every text.
    #[arg(long, env = "ALEPH_EMBED_PROMPT_NAME", help_heading = "Corpus")]
    pub prompt_name: Option<String>,

    /// Keep the first dimensions of each vector (re-normalized where the model normalizes).
    #[arg(long, env = "ALEPH_EMBED_DIMENSIONS", help_heading = "Corpus")]
    pub dimensions: Option<usize>,

    #[command(flatten)]
    pub models: ServeArgs,
}

/// Chunks in the engine at once: one embedding while the last is written.
const IN_FLIGHT: usize = 2;

pub async fn run(args: EmbedArgs) -> anyhow::Result<()> {
    let mut specs = args.models.model_specs().map_err(|e| anyhow!(e))?;
    if specs.len() != 1 {
        bail!("aleph embed takes one --model-id, not {}", specs.len());
    }
    let spec = specs.remove(0);
    if args.chunk_size == 0 {
        bail!("--chunk-size must be at least 1");
    }
    VectorFile::check_path(&args.output)?;
    // The input is checked before the model loads: a bad path fails in a second, not after a download.
    let total = Corpus::count(&args.input)?;
    let mut corpus = Corpus::open(&args.input, &args.text_field)?;
    let element = match spec.embedding_dtype {
        EmbeddingDtype::Float32 => Element::F32,
        EmbeddingDtype::Int8 | EmbeddingDtype::Binary => Element::I8,
        EmbeddingDtype::Uint8 | EmbeddingDtype::Ubinary => Element::U8,
    };

    let workers =
        args.models.tokenizer_workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let loader = Loader::new(&args.models, Arc::new(TokenizerPool::new(workers)));
    let handle = Arc::new(tokio::task::spawn_blocking(move || loader.load_alone(&spec)).await??);
    let embed = EmbedSpec { prompt_name: args.prompt_name.clone(), dimensions: args.dimensions, ..Default::default() };
    // The vectors' width, and a bad option found, before the corpus is read: one text through the engine.
    let probe = handle.embed(vec![Input::Text("width".into())], &embed).await?;
    let width = match probe.embeddings.first() {
        Some(Embedding::Dense(v)) => v.len(),
        _ => bail!("model `{}` has no dense output to write", handle.name()),
    };
    let mut out = VectorFile::open(&args.output, width, element, !args.no_resume)?;
    let done = out.rows();
    corpus.skip(done)?;
    if done > 0 {
        tracing::warn!("resuming after the {done} vectors {} holds", args.output.display());
    }

    let bar = progress(total as u64, done as u64);
    let started = Instant::now();
    let mut tally = Tally::default();
    // The output is made whole however the loop ends: at the end, on an error, or on a signal.
    let result = embed_all(&handle, &embed, &mut corpus, &mut out, args.chunk_size, &bar, &mut tally).await;
    bar.finish_and_clear();
    let rows = out.rows();
    out.finish()?;
    let stopped = result?;
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "aleph embed: {} texts ({} tokens) in {seconds:.2} s: {:.1} texts/s, {:.0} tokens/s; {} holds {rows} \
         vectors of {width}",
        tally.texts,
        tally.tokens,
        tally.texts as f64 / seconds.max(1e-9),
        tally.tokens as f64 / seconds.max(1e-9),
        args.output.display(),
    );
    if stopped {
        eprintln!("aleph embed: stopped by a signal; run the same command again to go on from row {rows}");
    }
    let handle = Arc::try_unwrap(handle).map_err(|_| anyhow!("the engine is still in use"))?;
    tokio::task::spawn_blocking(move || handle.shutdown()).await?;
    Ok(())
}

#[derive(Default)]
struct Tally {
    texts: usize,
    tokens: usize,
}

/// Embeds the rest of the corpus into `out`, keeping [`IN_FLIGHT`] chunks in the engine. Answers whether a
/// signal stopped it (after the chunks already in the engine were written).
async fn embed_all(
    handle: &Arc<aleph_engine::ModelHandle>,
    embed: &EmbedSpec,
    corpus: &mut Corpus,
    out: &mut VectorFile,
    chunk_size: usize,
    bar: &ProgressBar,
    tally: &mut Tally,
) -> anyhow::Result<bool> {
    let mut stop = std::pin::pin!(crate::startup::shutdown_signal());
    let mut stopped = false;
    let mut in_flight = VecDeque::new();
    loop {
        while !stopped && in_flight.len() < IN_FLIGHT {
            let chunk = corpus.next_chunk(chunk_size)?;
            if chunk.is_empty() {
                break;
            }
            let (handle, embed) = (handle.clone(), embed.clone());
            in_flight.push_back(tokio::spawn(async move {
                handle.embed(chunk.into_iter().map(Input::Text).collect(), &embed).await
            }));
        }
        let Some(next) = in_flight.front_mut() else { break };
        let embedded = tokio::select! {
            done = next => done??,
            () = &mut stop, if !stopped => {
                stopped = true;
                continue;
            }
        };
        in_flight.pop_front();
        let vectors: Vec<Vec<f32>> = embedded
            .embeddings
            .into_iter()
            .map(|e| match e {
                Embedding::Dense(v) => Ok(v),
                _ => Err(anyhow!("a non-dense output")),
            })
            .collect::<anyhow::Result<_>>()?;
        out.append(&vectors)?;
        tally.texts += vectors.len();
        tally.tokens += embedded.run.prompt_tokens;
        bar.inc(vectors.len() as u64);
    }
    Ok(stopped)
}

/// A bar with rate and time left on a terminal; nothing otherwise (the summary line says the rate).
fn progress(total: u64, done: u64) -> ProgressBar {
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template("embedding [{bar:30}] {pos}/{len} ({per_sec}, {eta} left)")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_position(done);
    bar.reset_eta();
    bar
}
