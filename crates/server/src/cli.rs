//! The command line, compatible with `infinity_emb v2`: every flag also from `ALEPH_<FLAG>` (or, for
//! existing deployments, `INFINITY_<FLAG>`). Per-model flags repeat, or take `;`-separated lists from
//! the environment; one value applies to every model.

use aleph_models::quantize::EmbeddingDtype;
use aleph_models::{DType, Device, ModelTask, PoolingChoice, RerankTemplate};
use clap::{ArgAction, Args, Parser, Subcommand};

pub use aleph_engine::spec::{default_served_name, Engine, ModelSpec};

pub const DEFAULT_MODEL: &str = "sentence-transformers/all-MiniLM-L6-v2";

#[derive(Debug, Parser)]
#[command(
    name = "aleph",
    version,
    about = "Serve embedding, rerank and classification models over an Infinity- and OpenAI-compatible HTTP API.",
    args_conflicts_with_subcommands = true,
    after_help = "Running `aleph` with no subcommand is the same as `aleph v2`."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve one or more models (the default).
    V2(Box<ServeArgs>),
    /// Measure models on a dataset: STS (Spearman), retrieval (nDCG@10, MRR@10, recall@100, optionally
    /// reranked) or classification (accuracy, macro-F1); the STS Benchmark test split when given none.
    /// Takes the model flags of `aleph v2`; one row per `--model-id`.
    Eval(Box<crate::eval::EvalArgs>),
    /// Measure throughput and latency on this machine: in-process (batch sizes × input lengths) and over
    /// HTTP (concurrency levels), each model at float32, bfloat16 and int8 side by side; tables, --json, or
    /// a --plot. Takes the model flags of `aleph v2`.
    Bench(Box<crate::bench::BenchArgs>),
    /// Embed a corpus file (.txt, one text per line, or .jsonl) into a .npy file of vectors, a chunk at a
    /// time, resuming after what the output already holds. Takes the model flags of `aleph v2`.
    Embed(Box<crate::corpus::EmbedArgs>),
}

/// What the command line asks for.
pub enum Action {
    Serve(Box<ServeArgs>),
    Eval(Box<crate::eval::EvalArgs>),
    Bench(Box<crate::bench::BenchArgs>),
    Embed(Box<crate::corpus::EmbedArgs>),
}

/// Flags of `aleph v2` that mean nothing to a command that serves no HTTP: accepted (so a deployment's
/// environment works unchanged), hidden from its help.
const SERVING_ONLY_HEADINGS: [&str; 4] = ["Server", "Keys", "Media", "Infinity compatibility (no effect)"];
const SERVING_ONLY_FLAGS: [&str; 7] = [
    "payload_limit",
    "max_client_batch_size",
    "max_string_chars",
    "max_json_depth",
    "drain_timeout",
    "memory_budget",
    "max_request_tokens",
];

impl Cli {
    /// Parses the process's arguments (exiting with clap's message on an error).
    pub fn parse_action() -> Action {
        use clap::{CommandFactory, FromArgMatches};
        let command = Cli::command()
            .mut_subcommand("eval", hide_serving_flags)
            .mut_subcommand("bench", hide_serving_flags)
            .mut_subcommand("embed", hide_serving_flags);
        let matches = command.get_matches();
        match Cli::from_arg_matches(&matches) {
            Ok(cli) => cli.into_action(),
            Err(e) => e.exit(),
        }
    }

    pub fn into_action(self) -> Action {
        match self.command {
            Some(Command::Eval(args)) => Action::Eval(args),
            Some(Command::Bench(args)) => Action::Bench(args),
            Some(Command::Embed(args)) => Action::Embed(args),
            other => Action::Serve(Box::new(Cli { command: other, ..self }.into_serve_args())),
        }
    }

    pub fn into_serve_args(self) -> ServeArgs {
        match self.command {
            Some(Command::V2(args)) => *args,
            Some(Command::Eval(args)) => args.models,
            Some(Command::Bench(args)) => args.models,
            Some(Command::Embed(args)) => args.models,
            None => self.serve,
        }
    }
}

fn hide_serving_flags(cmd: clap::Command) -> clap::Command {
    let hidden: Vec<String> = cmd
        .get_arguments()
        .filter(|a| {
            a.get_help_heading().is_some_and(|h| SERVING_ONLY_HEADINGS.contains(&h))
                || SERVING_ONLY_FLAGS.contains(&a.get_id().as_str())
        })
        .filter(|a| a.get_id() != "log_level")
        .map(|a| a.get_id().to_string())
        .collect();
    hidden.into_iter().fold(cmd, |cmd, id| cmd.mut_arg(id, |a| a.hide(true)))
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Model to serve: a local folder, or a HuggingFace hub id (taken from the HF cache, else downloaded).
    /// Repeat to serve several models.
    #[arg(long, env = "ALEPH_MODEL_ID", value_delimiter = ';', default_value = DEFAULT_MODEL, help_heading = "Models")]
    pub model_id: Vec<String>,

    /// Name the model is served as (the request's `model` field). Default: the last two path parts of the model id.
    #[arg(long, env = "ALEPH_SERVED_MODEL_NAME", value_delimiter = ';', help_heading = "Models")]
    pub served_model_name: Vec<String>,

    /// Hub revision (branch, tag or commit) to load.
    #[arg(long, env = "ALEPH_REVISION", value_delimiter = ';', help_heading = "Models")]
    pub revision: Vec<String>,

    /// Compute backend: auto (Aleph's CPU kernels on CPU), candle (candle's tensor ops), or debugengine, a
    /// weight-free engine whose vectors are derived from the input (for benchmarks and tests). Infinity's
    /// torch, optimum and ctranslate2 select Python machinery: they are read as auto, with a log line.
    #[arg(long, env = "ALEPH_ENGINE", value_delimiter = ';', default_value = "auto", help_heading = "Models")]
    pub engine: Vec<String>,

    /// Most sequences in one forward pass [default: 32 on the CPU, 256 on a GPU].
    #[arg(long, env = "ALEPH_BATCH_SIZE", value_delimiter = ';', help_heading = "Models")]
    pub batch_size: Vec<usize>,

    /// Most tokens in one forward pass, padding included when the backend pads [default: 16384 on the CPU,
    /// 32768 on a GPU].
    #[arg(long, env = "ALEPH_MAX_BATCH_TOKENS", value_delimiter = ';', help_heading = "Models")]
    pub max_batch_tokens: Vec<usize>,

    /// Device: auto (a GPU when built with --features cuda and one is present, else the CPU), cpu, cuda, cuda:N
    /// (Infinity's tensorrt is read as cuda).
    #[arg(long, env = "ALEPH_DEVICE", value_delimiter = ';', default_value = "auto", help_heading = "Models")]
    pub device: Vec<String>,

    /// Replicas behind the model's one queue, as Infinity's data-parallel mode: a comma-separated list of
    /// GPU ordinals (`0,1`: one replica on each; `0,0`: two on GPU 0, each with its own stream, which keeps
    /// the GPU busy while the other's batch is on the host); on the CPU, one replica per entry.
    #[arg(long, env = "ALEPH_DEVICE_ID", value_delimiter = ';', help_heading = "Models")]
    pub device_id: Vec<String>,

    /// Compute precision: auto (float16 on a GPU, bfloat16 there for bf16 checkpoints and Gemma 3; float32 on
    /// the CPU), float32, int8 (Aleph's CPU kernels), bfloat16 (weights and activations in bf16; on Aleph's CPU
    /// kernels multiplied with AVX512-BF16 or AMX where the CPU has it, widened to f32 on the fly elsewhere),
    /// float16 (candle: a GPU, or --engine candle on the CPU). Norms and softmax accumulate in f32.
    #[arg(long, env = "ALEPH_DTYPE", value_delimiter = ';', default_value = "auto", help_heading = "Models")]
    pub dtype: Vec<String>,

    /// Allow models whose family ships its modeling code as remote code (`auto_map`): Aleph runs no Python,
    /// so such a model loads only if Aleph implements its family, else it is refused naming the code.
    /// With false, `auto_map` is ignored, as transformers does.
    #[arg(long, env = "ALEPH_TRUST_REMOTE_CODE", value_delimiter = ';', num_args = 0..=1,
          default_missing_value = "true", help_heading = "Models")]
    pub trust_remote_code: Vec<String>,

    #[arg(long, hide = true, action = ArgAction::Count)]
    pub no_trust_remote_code: u8,

    /// Keep results in a bounded on-disk cache keyed by model, input and options; a hit skips the model.
    #[arg(long, env = "ALEPH_VECTOR_DISK_CACHE", value_delimiter = ';', num_args = 0..=1,
          default_missing_value = "true", help_heading = "Models")]
    pub vector_disk_cache: Vec<String>,

    #[arg(long, hide = true, action = ArgAction::Count)]
    pub no_vector_disk_cache: u8,

    /// Folder of the vector disk cache (one subfolder per model). Default: `$ALEPH_HOME/vector-cache`, else
    /// `$INFINITY_HOME/.infinity_cache/vectors`, else `$HF_HOME/.infinity_cache/vectors`, else
    /// `~/.cache/aleph/vector-cache`.
    #[arg(long, env = "ALEPH_VECTOR_DISK_CACHE_DIR", help_heading = "Models")]
    pub vector_disk_cache_dir: Option<std::path::PathBuf>,

    /// Most bytes each model's vector disk cache keeps; the least recently used entries go first.
    #[arg(long, env = "ALEPH_VECTOR_DISK_CACHE_MAX_BYTES", default_value_t = 256 * 1024 * 1024, help_heading = "Models")]
    pub vector_disk_cache_max_bytes: u64,

    /// Count lengths with the tokenizer. Aleph always does (usage and batching are in tokens), so this is
    /// accepted for Infinity command lines and changes nothing.
    #[arg(long, env = "ALEPH_LENGTHS_VIA_TOKENIZE", value_delimiter = ';', num_args = 0..=1,
          default_missing_value = "true", help_heading = "Models")]
    pub lengths_via_tokenize: Vec<String>,

    #[arg(long, hide = true, action = ArgAction::Count)]
    pub no_lengths_via_tokenize: u8,

    /// Infinity's torch.compile switch: accepted, no effect (Aleph's kernels are compiled ahead of time).
    #[arg(long, env = "ALEPH_COMPILE", value_delimiter = ';', num_args = 0..=1, default_missing_value = "true",
          help_heading = "Infinity compatibility (no effect)")]
    pub compile: Vec<String>,

    #[arg(long, hide = true, action = ArgAction::Count)]
    pub no_compile: u8,

    /// Infinity's BetterTransformer switch: accepted, no effect (Aleph's attention is fused already).
    #[arg(long, env = "ALEPH_BETTERTRANSFORMER", value_delimiter = ';', num_args = 0..=1,
          default_missing_value = "true", help_heading = "Infinity compatibility (no effect)")]
    pub bettertransformer: Vec<String>,

    #[arg(long, hide = true, action = ArgAction::Count)]
    pub no_bettertransformer: u8,

    /// Infinity's ONNX graph-optimization switch (optimum engine): accepted, no effect.
    #[arg(long, env = "ALEPH_ONNX_DISABLE_OPTIMIZE", value_delimiter = ';', num_args = 0..=1,
          default_missing_value = "true", help_heading = "Infinity compatibility (no effect)")]
    pub onnx_disable_optimize: Vec<String>,

    #[arg(long, hide = true, action = ArgAction::Count)]
    pub no_onnx_disable_optimize: u8,

    /// Infinity's preference for quantized ONNX files (optimum engine): accepted, no effect.
    #[arg(long, env = "ALEPH_ONNX_DO_NOT_PREFER_QUANTIZED", value_delimiter = ';', num_args = 0..=1,
          default_missing_value = "true", help_heading = "Infinity compatibility (no effect)")]
    pub onnx_do_not_prefer_quantized: Vec<String>,

    #[arg(long, hide = true, action = ArgAction::Count)]
    pub no_onnx_do_not_prefer_quantized: u8,

    /// Pooling: auto (from the model's sentence-transformers files), mean, cls, last-token, max, or splade (a
    /// masked-LM checkpoint as a sparse encoder).
    #[arg(long, env = "ALEPH_POOLING_METHOD", value_delimiter = ';', default_value = "auto", help_heading = "Models")]
    pub pooling_method: Vec<String>,

    /// Embedding output: float32, or int8 / uint8 (per-dimension ranges from a calibration corpus shipped in
    /// the binary), or binary / ubinary (sign bits, 8 dimensions per value).
    #[arg(
        long,
        env = "ALEPH_EMBEDDING_DTYPE",
        value_delimiter = ';',
        default_value = "float32",
        help_heading = "Models"
    )]
    pub embedding_dtype: Vec<String>,

    /// Matryoshka: the embedding dimensions a request gets when it asks for none (sentence-transformers'
    /// `truncate_dim`; renormalized when the model normalizes, as a request's `dimensions`); 0 keeps all.
    #[arg(long, env = "ALEPH_TRUNCATE_DIM", value_delimiter = ';', help_heading = "Models")]
    pub truncate_dim: Vec<String>,

    /// The model's share of the cores when models compete for them, relative to the others' (default 1: equal
    /// shares); a model with no requests waiting takes none.
    #[arg(long, env = "ALEPH_COMPUTE_WEIGHT", value_delimiter = ';', help_heading = "Models")]
    pub compute_weight: Vec<String>,

    /// What to serve the model as: auto (as its checkpoint says), embed, rerank or classify. `rerank` on a
    /// causal LM (Qwen3-Reranker, a `Qwen3ForCausalLM`) scores pairs through its prompt, "yes" against "no";
    /// auto does so for a causal LM whose model card says `pipeline_tag: text-ranking` and whose prompt
    /// Aleph knows (Qwen3-Reranker, mxbai-rerank-v2).
    #[arg(long, env = "ALEPH_MODEL_TASK", value_delimiter = ';', default_value = "auto", help_heading = "Models")]
    pub model_task: Vec<String>,

    /// How a decoder reranker puts each pair into its prompt: auto (the family's own: Qwen3-Reranker's for
    /// qwen3, causal LMs and converted `Qwen3ForSequenceClassification` checkpoints alike; mxbai-rerank-v2's
    /// for a qwen2 checkpoint whose card or folder names mxbai-rerank), qwen3 or mxbai (that prompt and its
    /// answer tokens), none (the tokenizer's pair encoding), or a file whose text has `{instruction}`,
    /// `{query}` and `{document}`.
    #[arg(long, env = "ALEPH_RERANK_TEMPLATE", value_delimiter = ';', default_value = "auto", help_heading = "Models")]
    pub rerank_template: Vec<String>,

    /// An LLM reranker's instruction (its prompt's `<Instruct>`), in place of the model card's default.
    #[arg(long, env = "ALEPH_RERANK_INSTRUCTION", value_delimiter = ';', help_heading = "Models")]
    pub rerank_instruction: Vec<String>,

    /// The prompt of the model's `config_sentence_transformers.json` prepended to texts whose request names
    /// none (TEI's flag; a request's `prompt_name` overrides it).
    #[arg(long, env = "ALEPH_DEFAULT_PROMPT_NAME", value_delimiter = ';', help_heading = "Models")]
    pub default_prompt_name: Vec<String>,

    /// Run the largest batch once at start-up, so memory problems show at boot.
    #[arg(long, env = "ALEPH_MODEL_WARMUP", action = ArgAction::Set, num_args = 0..=1, default_value_t = true,
          default_missing_value = "true", help_heading = "Models")]
    pub model_warmup: bool,

    /// Skip the start-up warm-up.
    #[arg(long, overrides_with = "model_warmup", help_heading = "Models")]
    pub no_model_warmup: bool,

    /// Most items waiting per model; past it requests get 429.
    #[arg(long, env = "ALEPH_QUEUE_SIZE", default_value_t = 32000, help_heading = "Serving")]
    pub queue_size: usize,

    /// Most inputs in one request.
    #[arg(long, env = "ALEPH_MAX_CLIENT_BATCH_SIZE", default_value_t = 2048, help_heading = "Serving")]
    pub max_client_batch_size: usize,

    /// Most characters in one input string, after stripping (longer inputs get 422; shorter ones longer
    /// than the model's window are truncated).
    #[arg(long, env = "ALEPH_MAX_STRING_CHARS", default_value_t = 122_880, help_heading = "Serving")]
    pub max_string_chars: usize,

    /// Tokenizer threads, shared by all models. Default: the number of cores.
    #[arg(long, env = "ALEPH_TOKENIZER_WORKERS", help_heading = "Serving")]
    pub tokenizer_workers: Option<usize>,

    /// Largest request body in bytes.
    #[arg(long, env = "ALEPH_PAYLOAD_LIMIT", default_value_t = 32 * 1024 * 1024, help_heading = "Serving")]
    pub payload_limit: usize,

    /// Most tokens one request may feed a model, summed over its inputs after truncation to the model's
    /// window (0: no limit beyond items × window). Past it: 422.
    #[arg(long, env = "ALEPH_MAX_REQUEST_TOKENS", default_value_t = 0, help_heading = "Serving")]
    pub max_request_tokens: usize,

    /// Deepest nesting of JSON objects and arrays in a request body (422 past it).
    #[arg(long, env = "ALEPH_MAX_JSON_DEPTH", default_value_t = 32, help_heading = "Serving")]
    pub max_json_depth: usize,

    /// Most images or audio clips in one request.
    #[arg(long, env = "ALEPH_MAX_MEDIA_ITEMS", default_value_t = 32, help_heading = "Media")]
    pub max_media_items: usize,

    /// Largest image or audio item in bytes, downloaded or in a data URI.
    #[arg(long, env = "ALEPH_MEDIA_MAX_BYTES", default_value_t = 32 * 1024 * 1024, help_heading = "Media")]
    pub media_max_bytes: usize,

    /// Most pixels (width x height) an image may declare; larger ones are refused before decoding.
    #[arg(long, env = "ALEPH_MEDIA_MAX_PIXELS", default_value_t = 64 * 1024 * 1024, help_heading = "Media")]
    pub media_max_pixels: u64,

    /// Longest audio clip decoded, in seconds (the model sees its window: the centre of a longer clip).
    #[arg(long, env = "ALEPH_MEDIA_MAX_SECONDS", default_value_t = 600.0, help_heading = "Media")]
    pub media_max_seconds: f64,

    /// Seconds a media URL may take to download, redirects included.
    #[arg(long, env = "ALEPH_MEDIA_TIMEOUT", default_value_t = 20.0, help_heading = "Media")]
    pub media_timeout: f64,

    /// Let media URLs reach loopback, private, link-local and metadata addresses (off: such URLs get 400).
    #[arg(long, env = "ALEPH_MEDIA_ALLOW_PRIVATE", help_heading = "Media")]
    pub media_allow_private: bool,

    /// Internal networks media URLs may reach anyway, as CIDRs (e.g. 10.1.0.0/16,fd00::/8).
    #[arg(long, env = "ALEPH_MEDIA_ALLOWED_NETWORKS", value_delimiter = ',', help_heading = "Media")]
    pub media_allowed_networks: Vec<ipnet::IpNet>,

    /// Seconds to let in-flight requests finish after SIGTERM (while /health answers 503).
    #[arg(long, env = "ALEPH_DRAIN_TIMEOUT", default_value_t = 30.0, help_heading = "Serving")]
    pub drain_timeout: f64,

    /// Address to listen on.
    #[arg(long, env = "ALEPH_HOST", default_value = "0.0.0.0", help_heading = "Server")]
    pub host: String,

    /// Port to listen on.
    #[arg(long, env = "ALEPH_PORT", default_value_t = 7997, help_heading = "Server")]
    pub port: u16,

    /// Also serve TEI's gRPC API (`tei.v1`: Info, Embed, Predict, Rerank, Tokenize; with gRPC health and
    /// reflection) on this port, beside the HTTP API.
    #[arg(long, env = "ALEPH_GRPC_PORT", help_heading = "Server")]
    pub grpc_port: Option<u16>,

    /// Path prefix for the API routes, e.g. /api (no trailing slash).
    #[arg(long, env = "ALEPH_URL_PREFIX", default_value = "", value_parser = parse_url_prefix, help_heading = "Server")]
    pub url_prefix: String,

    /// Require `Authorization: Bearer <key>` on the API routes (/health stays open). Repeat the flag (or
    /// separate keys with commas) for several keys; each gets the default per-key limits.
    #[arg(long, env = "ALEPH_API_KEY", value_delimiter = ',', hide_env_values = true, help_heading = "Keys")]
    pub api_key: Vec<String>,

    /// A file of API keys, one per line: `KEY [name=NAME] [max_in_flight=N] [tokens_per_second=R]` (`#` starts a
    /// comment). A key's own limits replace the defaults; its name labels metrics and logs instead of the key.
    #[arg(long, env = "ALEPH_API_KEY_FILE", help_heading = "Keys")]
    pub api_key_file: Option<std::path::PathBuf>,

    /// Default limit on one key's requests in flight at once (0: none); past it, 429 with Retry-After.
    #[arg(long, env = "ALEPH_API_KEY_MAX_IN_FLIGHT", default_value_t = 0, help_heading = "Keys")]
    pub api_key_max_in_flight: usize,

    /// Default limit on the tokens one key feeds the models per second (0: none), with a second's worth of
    /// burst; past it, 429 with Retry-After until the key's bucket refills.
    #[arg(long, env = "ALEPH_API_KEY_TOKENS_PER_SECOND", default_value_t = 0.0, help_heading = "Keys")]
    pub api_key_tokens_per_second: f64,

    /// Enable the admin API (`/admin/models`: list, load and unload models while serving) behind
    /// `Authorization: Bearer <key>`; a key apart from --api-key. Off when empty.
    #[arg(long, env = "ALEPH_ADMIN_KEY", default_value = "", hide_env_values = true, help_heading = "Server")]
    pub admin_key: String,

    /// The most memory the models' weights may take, per device: bytes (`8Gi`, `512MiB`, `2G`) or a fraction of
    /// the device's memory (`0.8`, `80%`; the host's is its cgroup limit where lower, each GPU's its own). A load
    /// that would pass it is refused, naming what holds the memory. Empty: no budget.
    #[arg(long, env = "ALEPH_MEMORY_BUDGET", value_parser = parse_budget, default_value = "", help_heading = "Serving")]
    pub memory_budget: crate::memory::BudgetFlag,

    /// `fair`: the models' batches share the cores through one scheduler, each model in proportion to its
    /// --compute-weight, a short batch overtaking a long one; `off`: every model's batches run as they come
    /// (the cores go to whichever asks, as in a process per model).
    #[arg(long, env = "ALEPH_COMPUTE_SCHEDULER", default_value = "fair", value_parser = parse_scheduler, action = ArgAction::Set,
          help_heading = "Serving")]
    pub compute_scheduler: bool,

    /// Log level: critical, error, warning, info, debug or trace.
    #[arg(long, env = "ALEPH_LOG_LEVEL", default_value = "info", help_heading = "Server")]
    pub log_level: String,

    /// Allow cross-origin requests from anywhere.
    #[arg(long, env = "ALEPH_PERMISSIVE_CORS", help_heading = "Server")]
    pub permissive_cors: bool,

    #[arg(long, overrides_with = "permissive_cors", hide = true)]
    pub no_permissive_cors: bool,

    /// Load (and download) the models, then exit without serving.
    #[arg(long, env = "ALEPH_PRELOAD_ONLY", help_heading = "Server")]
    pub preload_only: bool,

    #[arg(long, overrides_with = "preload_only", hide = true)]
    pub no_preload_only: bool,

    /// The path a reverse proxy strips before requests reach Aleph (FastAPI's `root_path`): the OpenAPI
    /// document lists it as its server, so the docs page calls the proxied URLs.
    #[arg(long, env = "ALEPH_PROXY_ROOT_PATH", default_value = "", help_heading = "Server")]
    pub proxy_root_path: String,

    /// Where GET / redirects to; empty disables the redirect.
    #[arg(long, env = "ALEPH_REDIRECT_SLASH", default_value = "/docs", help_heading = "Server")]
    pub redirect_slash: String,
}

fn parse_scheduler(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "fair" => Ok(true),
        "off" | "none" => Ok(false),
        other => Err(format!("`{other}`: fair or off")),
    }
}

fn parse_budget(s: &str) -> Result<crate::memory::BudgetFlag, String> {
    if s.trim().is_empty() {
        return Ok(crate::memory::BudgetFlag(None));
    }
    s.parse().map(|size| crate::memory::BudgetFlag(Some(size)))
}

fn parse_url_prefix(s: &str) -> Result<String, String> {
    if s.is_empty() || s == "/" {
        return Ok(String::new());
    }
    if !s.starts_with('/') || s.ends_with('/') {
        return Err(format!("`{s}` must start with `/` and not end with `/`"));
    }
    Ok(s.to_string())
}

/// The per-model options of `aleph v2`, as `POST /admin/models` takes them (names as the flags', in snake
/// case). What is not given takes the flag's default, not the process's flags: a model loaded at run time is
/// described by its request alone.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelOptions {
    pub model_id: String,
    pub served_model_name: Option<String>,
    pub revision: Option<String>,
    pub engine: Option<String>,
    pub batch_size: Option<usize>,
    pub max_batch_tokens: Option<usize>,
    pub device: Option<String>,
    /// `--device-id`, as on the command line: `0,1`.
    pub device_id: Option<String>,
    pub dtype: Option<String>,
    pub pooling_method: Option<String>,
    pub embedding_dtype: Option<String>,
    pub trust_remote_code: Option<bool>,
    pub vector_disk_cache: Option<bool>,
    pub model_task: Option<String>,
    pub rerank_template: Option<String>,
    pub rerank_instruction: Option<String>,
    pub default_prompt_name: Option<String>,
    pub truncate_dim: Option<usize>,
    pub model_warmup: Option<bool>,
    pub compute_weight: Option<f64>,
}

impl ServeArgs {
    pub fn warmup(&self) -> bool {
        self.model_warmup && !self.no_model_warmup
    }

    /// The spec of one model loaded at run time: `options` for the per-model flags, this process's flags for
    /// the rest (media limits, request limits), validated as the command line is.
    pub fn spec_for(&self, options: &ModelOptions) -> Result<ModelSpec, String> {
        fn one<T: ToString>(v: &Option<T>) -> Vec<String> {
            v.iter().map(ToString::to_string).collect()
        }
        let o = options;
        let mut args = self.clone();
        args.model_id = vec![o.model_id.clone()];
        args.served_model_name = one(&o.served_model_name);
        args.revision = one(&o.revision);
        args.engine = one(&o.engine);
        args.batch_size = o.batch_size.into_iter().collect();
        args.max_batch_tokens = o.max_batch_tokens.into_iter().collect();
        args.device = one(&o.device);
        args.device_id = one(&o.device_id);
        args.dtype = one(&o.dtype);
        args.pooling_method = one(&o.pooling_method);
        args.embedding_dtype = one(&o.embedding_dtype);
        (args.trust_remote_code, args.no_trust_remote_code) = (one(&o.trust_remote_code), 0);
        (args.vector_disk_cache, args.no_vector_disk_cache) = (one(&o.vector_disk_cache), 0);
        args.model_task = one(&o.model_task);
        args.rerank_template = one(&o.rerank_template);
        args.rerank_instruction = one(&o.rerank_instruction);
        args.default_prompt_name = one(&o.default_prompt_name);
        args.truncate_dim = one(&o.truncate_dim);
        args.compute_weight = one(&o.compute_weight);
        (args.model_warmup, args.no_model_warmup) = (o.model_warmup.unwrap_or(true), false);
        let mut specs = args.model_specs()?;
        specs.pop().ok_or_else(|| "model_id: a model is required".to_string())
    }

    /// One spec per `--model-id`, broadcasting single values of the per-model flags.
    pub fn model_specs(&self) -> Result<Vec<ModelSpec>, String> {
        let ids: Vec<String> = self.model_id.iter().filter(|s| !s.is_empty()).cloned().collect();
        if ids.is_empty() {
            return Err("--model-id: at least one model is required".into());
        }
        let n = ids.len();
        let names = per_model("--served-model-name", &self.served_model_name, n)?;
        let revisions = per_model("--revision", &self.revision, n)?;
        let engines = parsed("--engine", &self.engine, n, "auto")?;
        let batch = per_model("--batch-size", &self.batch_size, n)?;
        let tokens = per_model("--max-batch-tokens", &self.max_batch_tokens, n)?;
        let device: Vec<Device> = parsed("--device", &self.device, n, "auto")?;
        let device_ids = per_model("--device-id", &self.device_id, n)?;
        let dtype: Vec<DType> = parsed("--dtype", &self.dtype, n, "auto")?;
        let pooling: Vec<PoolingChoice> = parsed("--pooling-method", &self.pooling_method, n, "auto")?;
        let embedding_dtype: Vec<EmbeddingDtype> = parsed("--embedding-dtype", &self.embedding_dtype, n, "float32")?;
        let trust = switch("--trust-remote-code", &self.trust_remote_code, self.no_trust_remote_code, n, true)?;
        let cache = switch("--vector-disk-cache", &self.vector_disk_cache, self.no_vector_disk_cache, n, false)?;
        let prompts = per_model("--default-prompt-name", &self.default_prompt_name, n)?;
        let tasks: Vec<ModelTask> = parsed("--model-task", &self.model_task, n, "auto")?;
        let instructions = per_model("--rerank-instruction", &self.rerank_instruction, n)?;
        let templates: Vec<RerankTemplate> = parsed("--rerank-template", &self.rerank_template, n, "auto")?;
        let truncate_dim: Vec<Dimensions> = parsed("--truncate-dim", &self.truncate_dim, n, "0")?;
        let weights: Vec<Weight> = parsed("--compute-weight", &self.compute_weight, n, "1")?;
        let mut specs = Vec::with_capacity(n);
        for (i, id) in ids.iter().enumerate() {
            let device_ids = match device_ids[i].as_deref() {
                None => Vec::new(),
                Some(list) => parse_device_ids(list).map_err(|e| format!("--device-id: {e}"))?,
            };
            let spec = ModelSpec {
                engine: engines[i],
                model_id: id.clone(),
                served_name: names[i].clone().filter(|s| !s.is_empty()).unwrap_or_else(|| default_served_name(id)),
                revision: revisions[i].clone().filter(|s| !s.is_empty()),
                batch_size: batch[i],
                max_batch_tokens: tokens[i],
                device: device[i],
                device_ids,
                dtype: dtype[i],
                pooling: pooling[i],
                embedding_dtype: embedding_dtype[i],
                trust_remote_code: trust[i],
                task: tasks[i],
                rerank_instruction: instructions[i].clone().filter(|s| !s.is_empty()),
                rerank_template: templates[i].clone(),
                vector_disk_cache: cache[i],
                default_prompt_name: prompts[i].clone().filter(|p| !p.is_empty()),
                truncate_dim: truncate_dim[i].0,
                warmup: self.warmup(),
                max_image_pixels: self.media_max_pixels,
                max_audio_seconds: self.media_max_seconds,
                max_request_tokens: self.max_request_tokens,
                compute_weight: weights[i].0,
            };
            if spec.batch_size == Some(0) {
                return Err("--batch-size must be at least 1".into());
            }
            specs.push(spec);
        }
        Ok(specs)
    }

    /// What Infinity's Python-only switches were set to, for the log line saying they change nothing.
    pub fn no_effect_flags(&self) -> Vec<String> {
        let mut out = Vec::new();
        let flags: [(&str, &Vec<String>, u8); 5] = [
            ("--compile", &self.compile, self.no_compile),
            ("--bettertransformer", &self.bettertransformer, self.no_bettertransformer),
            ("--onnx-disable-optimize", &self.onnx_disable_optimize, self.no_onnx_disable_optimize),
            (
                "--onnx-do-not-prefer-quantized",
                &self.onnx_do_not_prefer_quantized,
                self.no_onnx_do_not_prefer_quantized,
            ),
            ("--lengths-via-tokenize", &self.lengths_via_tokenize, self.no_lengths_via_tokenize),
        ];
        for (flag, values, negated) in flags {
            if !values.is_empty() || negated > 0 {
                out.push(flag.to_string());
            }
        }
        for engine in &self.engine {
            if let Some(python) = Engine::python_name(engine) {
                out.push(format!("--engine {python}"));
            }
        }
        out
    }

    /// Where the vector disk cache lives when `--vector-disk-cache-dir` is not given.
    pub fn vector_cache_root(&self) -> std::path::PathBuf {
        if let Some(dir) = &self.vector_disk_cache_dir {
            return dir.clone();
        }
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
        if let Some(home) = var("ALEPH_HOME") {
            return home.join("vector-cache");
        }
        if let Some(home) = var("INFINITY_HOME").or_else(|| var("HF_HOME")) {
            return home.join(".infinity_cache").join("vectors");
        }
        let cache = var("XDG_CACHE_HOME").or_else(|| var("HOME").map(|h| h.join(".cache")));
        cache.unwrap_or_else(|| std::path::PathBuf::from(".")).join("aleph").join("vector-cache")
    }
}

/// `0,1,3` → the ordinals, one replica each; an ordinal listed twice (`0,0`) is two replicas on that GPU, each
/// with its own stream. An empty list means one replica.
fn parse_device_ids(list: &str) -> Result<Vec<usize>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| format!("`{s}` is not a device ordinal (expected e.g. 0,1)")))
        .collect()
}

/// A per-model flag parsed into its type, broadcast like [`per_model`].
/// A `--truncate-dim` value.
struct Dimensions(usize);

impl std::str::FromStr for Dimensions {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        s.trim().parse().map(Dimensions).map_err(|_| format!("`{s}` is not a number of dimensions"))
    }
}

fn parsed<T: std::str::FromStr<Err = String>>(
    flag: &str,
    values: &[String],
    models: usize,
    default: &str,
) -> Result<Vec<T>, String> {
    per_model(flag, values, models)?
        .into_iter()
        .map(|v| v.as_deref().unwrap_or(default).parse::<T>().map_err(|e| format!("{flag}: {e}")))
        .collect()
}

/// A per-model `--flag [BOOL]` / `--no-flag` switch, as Infinity's typer options take it (`;` lists in the
/// environment). `--no-flag` alone means false for every model.
fn switch(flag: &str, values: &[String], negated: u8, models: usize, default: bool) -> Result<Vec<bool>, String> {
    let mut values: Vec<String> = values.iter().filter(|v| !v.is_empty()).cloned().collect();
    values.extend(std::iter::repeat_n("false".to_string(), negated as usize));
    per_model(flag, &values, models)?
        .into_iter()
        .map(|v| match v {
            None => Ok(default),
            Some(v) => parse_bool(&v).ok_or_else(|| format!("{flag}: `{v}` is not true or false")),
        })
        .collect()
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "t" | "1" | "yes" | "y" => Some(true),
        "false" | "f" | "0" | "no" | "n" => Some(false),
        _ => None,
    }
}

/// Broadcasts a per-model flag: no value, one value for all, or exactly one per model.
fn per_model<T: Clone>(flag: &str, values: &[T], models: usize) -> Result<Vec<Option<T>>, String> {
    match values.len() {
        0 => Ok(vec![None; models]),
        1 => Ok(vec![Some(values[0].clone()); models]),
        n if n == models => Ok(values.iter().cloned().map(Some).collect()),
        n => Err(format!("{flag}: got {n} values for {models} models (give one value, or one per --model-id)")),
    }
}

/// `--compute-weight`: a positive, finite number.
struct Weight(f64);

impl std::str::FromStr for Weight {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().parse::<f64>() {
            Ok(w) if w > 0.0 && w.is_finite() => Ok(Weight(w)),
            _ => Err(format!("`{s}` is not a positive number")),
        }
    }
}

/// Copies each `INFINITY_<FLAG>` to `ALEPH_<FLAG>` unless that is set, so an Infinity deployment's
/// environment works unchanged. Call before any thread starts.
pub fn adopt_infinity_env() {
    let pairs: Vec<(String, String)> = std::env::vars()
        .filter_map(|(k, v)| k.strip_prefix("INFINITY_").map(|rest| (format!("ALEPH_{rest}"), v)))
        .collect();
    for (key, value) in pairs {
        if std::env::var_os(&key).is_none() {
            std::env::set_var(key, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> ServeArgs {
        Cli::try_parse_from(args).unwrap().into_serve_args()
    }

    #[test]
    fn bare_and_v2_are_the_same() {
        let a = parse(&["aleph", "--model-id", "a/b", "--port", "1234"]);
        let b = parse(&["aleph", "v2", "--model-id", "a/b", "--port", "1234"]);
        assert_eq!(a.model_specs().unwrap(), b.model_specs().unwrap());
        assert_eq!(a.port, 1234);
        assert_eq!(b.port, 1234);
    }

    #[test]
    fn batching_defaults_to_the_device_unless_asked() {
        let specs = parse(&["aleph", "v2", "--model-id", "a"]).model_specs().unwrap();
        assert_eq!(specs[0].batching(false), (32, 16384));
        assert_eq!(specs[0].batching(true), (256, 32768));
        // What was asked is kept on either device.
        let specs = parse(&["aleph", "v2", "--model-id", "a", "--batch-size", "8"]).model_specs().unwrap();
        assert_eq!((specs[0].batching(false), specs[0].batching(true)), ((8, 16384), (8, 32768)));
        let specs = parse(&["aleph", "v2", "--model-id", "a", "--max-batch-tokens", "4096"]).model_specs().unwrap();
        assert_eq!(specs[0].batching(true), (256, 4096));
    }

    #[test]
    fn broadcasts_and_zips_per_model_flags() {
        let a = parse(&["aleph", "v2", "--model-id", "x/a", "--model-id", "/m/y/b", "--batch-size", "8"]);
        let specs = a.model_specs().unwrap();
        assert_eq!(specs[0].batch_size, Some(8));
        assert_eq!(specs[1].batch_size, Some(8));
        assert_eq!(specs[1].served_name, "y/b");
        let a = parse(&["aleph", "v2", "--model-id", "a", "--model-id", "b", "--batch-size", "8", "--batch-size", "4"]);
        let specs = a.model_specs().unwrap();
        assert_eq!((specs[0].batch_size, specs[1].batch_size), (Some(8), Some(4)));
    }

    #[test]
    fn wrong_list_length_names_the_flag() {
        let a = parse(&[
            "aleph",
            "v2",
            "--model-id",
            "a",
            "--model-id",
            "b",
            "--model-id",
            "c",
            "--batch-size",
            "8",
            "--batch-size",
            "4",
        ]);
        let err = a.model_specs().unwrap_err();
        assert!(err.contains("--batch-size"), "{err}");
    }

    #[test]
    fn semicolon_lists_split_and_warmup_toggles() {
        let a = parse(&["aleph", "--model-id", "a;b;", "--no-model-warmup"]);
        assert_eq!(a.model_specs().unwrap().len(), 2);
        assert!(!a.warmup());
        assert!(parse(&["aleph"]).warmup());
        assert!(!parse(&["aleph", "--model-warmup", "false"]).warmup());
    }

    #[test]
    fn infinity_switches_take_every_form() {
        let a =
            parse(&["aleph", "--model-id", "a", "--model-id", "b", "--no-trust-remote-code", "--vector-disk-cache"]);
        let specs = a.model_specs().unwrap();
        assert!(specs.iter().all(|s| !s.trust_remote_code && s.vector_disk_cache));
        let a = parse(&[
            "aleph",
            "--model-id",
            "a",
            "--model-id",
            "b",
            "--trust-remote-code",
            "false",
            "--trust-remote-code",
            "true",
        ]);
        let specs = a.model_specs().unwrap();
        assert_eq!((specs[0].trust_remote_code, specs[1].trust_remote_code), (false, true));
        let specs = parse(&["aleph", "--model-id", "a"]).model_specs().unwrap();
        assert!(specs[0].trust_remote_code && !specs[0].vector_disk_cache, "Infinity's defaults");
        let a =
            parse(&["aleph", "--model-id", "a", "--device-id", "0,2", "--dtype", "int8", "--engine", "ctranslate2"]);
        let spec = &a.model_specs().unwrap()[0];
        assert_eq!(spec.device_ids, vec![0, 2]);
        assert_eq!(spec.dtype, DType::Int8);
        assert_eq!(spec.engine, Engine::Auto);
        assert!(a.no_effect_flags().contains(&"--engine ctranslate2".to_string()));
        // An ordinal twice is two replicas on that GPU.
        let twice = parse(&["aleph", "--model-id", "a", "--device-id", "0,0,1"]);
        assert_eq!(twice.model_specs().unwrap()[0].device_ids, vec![0, 0, 1]);
        let a = parse(&["aleph", "--compile", "--no-bettertransformer", "--lengths-via-tokenize"]);
        assert_eq!(a.no_effect_flags(), vec!["--compile", "--bettertransformer", "--lengths-via-tokenize"]);
        assert!(parse(&["aleph"]).no_effect_flags().is_empty());
        let a = parse(&["aleph", "--model-id", "a", "--model-id", "b", "--model-task", "auto;rerank"]);
        let specs = a.model_specs().unwrap();
        assert_eq!((specs[0].task, specs[1].task), (ModelTask::Auto, ModelTask::Rerank));
        assert_eq!(specs[1].rerank_instruction, None);
    }

    #[test]
    fn bad_values_are_refused_before_loading() {
        for args in [
            &["aleph", "--dtype", "fp8"][..],
            &["aleph", "--embedding-dtype", "int4"],
            &["aleph", "--pooling-method", "sum"],
            &["aleph", "--device", "mps"],
            &["aleph", "--engine", "neuron"],
            &["aleph", "--device-id", "0,x"],
            &["aleph", "--vector-disk-cache", "perhaps"],
            &["aleph", "--model-task", "summarize"],
        ] {
            assert!(parse(args).model_specs().is_err(), "{args:?}");
        }
    }

    #[test]
    fn url_prefix_must_be_well_formed() {
        assert!(Cli::try_parse_from(["aleph", "--url-prefix", "v1"]).is_err());
        assert!(Cli::try_parse_from(["aleph", "--url-prefix", "/v1/"]).is_err());
        assert_eq!(parse(&["aleph", "--url-prefix", "/api"]).url_prefix, "/api");
    }

    #[test]
    fn served_name_defaults_to_last_two_parts() {
        assert_eq!(default_served_name("/tmp/a/b/model"), "b/model");
        assert_eq!(default_served_name("org/name"), "org/name");
        assert_eq!(default_served_name("model/"), "model");
    }
}
