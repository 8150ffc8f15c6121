//! HuggingFace text-embeddings-inference's API (1.9): `/embed`, `/embed_all`, `/embed_sparse`,
//! `/predict`, `/rerank` with `texts`, `/similarity`, `/tokenize`, `/decode`, `/info` and `POST /`, with
//! TEI's field names, defaults and error shape `{"error", "error_type"}`.
//!
//! TEI serves one model; Aleph may serve several. A TEI body may name one in `model` (an Aleph
//! extension); otherwise the route takes the first served model that can answer it.

use std::collections::BTreeMap;
use std::sync::Arc;

use aleph_engine::{EmbedSpec, Embedding, Input, ModelHandle, Normalization, RunOptions};
use aleph_models::tokenizer::Truncation;
use aleph_models::{OutputKind, Pooling, Task};
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::{self, DeserializeOwned, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

use super::error::ApiError;
use super::extract::{parse, read_body};
use super::rerank::relevance;
use super::schemas::{null_default, InputItem, InputItems, SparseValue};
use super::state::AppState;
use super::timing::timing_headers;

/// TEI's error: `{"error": message, "error_type": kind}` with TEI's status for each kind.
#[derive(Debug, Clone, PartialEq)]
pub struct TeiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
}

#[derive(Serialize, ToSchema)]
pub struct TeiErrorBody {
    pub error: String,
    /// `Validation`, `Empty`, `Backend`, `Overloaded`, `Tokenizer` or `Unhealthy`.
    pub error_type: &'static str,
}

impl TeiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        TeiError { status, message: message.into(), kind }
    }

    /// 400: an empty input.
    pub fn empty(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "Empty", message)
    }

    /// 422: the request is not valid for this model.
    pub fn validation(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "Validation", message)
    }

    /// 424: the model cannot do what the route asks.
    pub fn backend(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FAILED_DEPENDENCY, "Backend", message)
    }
}

impl From<ApiError> for TeiError {
    fn from(e: ApiError) -> Self {
        let (status, kind) = match e.status {
            StatusCode::TOO_MANY_REQUESTS => (e.status, "Overloaded"),
            StatusCode::SERVICE_UNAVAILABLE => (e.status, "Unhealthy"),
            StatusCode::PAYLOAD_TOO_LARGE | StatusCode::UNSUPPORTED_MEDIA_TYPE | StatusCode::NOT_FOUND => {
                (e.status, "Validation")
            }
            s if s.is_server_error() => (StatusCode::FAILED_DEPENDENCY, "Backend"),
            // TEI answers every other refusal of the input as a 422.
            _ => (StatusCode::UNPROCESSABLE_ENTITY, "Validation"),
        };
        TeiError { status, message: e.message, kind }
    }
}

impl From<aleph_engine::EngineError> for TeiError {
    fn from(e: aleph_engine::EngineError) -> Self {
        match e {
            aleph_engine::EngineError::Unsupported(m) => TeiError::backend(m),
            e => ApiError::from(e).into(),
        }
    }
}

impl IntoResponse for TeiError {
    fn into_response(self) -> Response {
        (self.status, Json(TeiErrorBody { error: self.message, error_type: self.kind })).into_response()
    }
}

type TeiResult = Result<Response, TeiError>;

/// What a computed answer cost, for TEI's timing headers (HTTP) and `Metadata` (gRPC).
#[derive(Debug, Clone, Copy, Default)]
pub struct Cost {
    pub prompt_tokens: usize,
    pub tokenization_time: std::time::Duration,
    pub queue_time: std::time::Duration,
    pub inference_time: std::time::Duration,
}

impl Cost {
    fn of(out: &aleph_engine::RunResult) -> Self {
        Cost {
            prompt_tokens: out.prompt_tokens,
            tokenization_time: out.tokenization_time,
            queue_time: out.queue_time,
            inference_time: out.inference_time,
        }
    }

    fn headers(&self) -> axum::http::HeaderMap {
        timing_headers(self.tokenization_time, self.queue_time, self.inference_time)
    }
}

/// `truncation_direction`: `Right` (the default) or `Left`, in TEI's spellings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
pub enum Direction {
    #[default]
    #[serde(alias = "right")]
    Right,
    #[serde(alias = "left")]
    Left,
}

fn options(truncate: Option<bool>, direction: Direction, output: OutputKind) -> RunOptions {
    // TEI's --auto-truncate is on by default, and Aleph always truncates unless asked not to.
    let truncation = Truncation::new(truncate.unwrap_or(true), direction == Direction::Left);
    RunOptions { truncation, output, adapter: None }
}

fn yes() -> bool {
    true
}

/// `/embed`, `/embed_all`, `/embed_sparse`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct EmbedRequest {
    /// A string, a list of strings, token ids, or a list of token-id lists.
    pub inputs: InputItems,
    /// Cut inputs past the model's window (default: true); false makes them a 422.
    #[serde(default)]
    pub truncate: Option<bool>,
    #[serde(default, deserialize_with = "null_default")]
    pub truncation_direction: Direction,
    /// A prompt of the model's `config_sentence_transformers.json`, prepended to each text.
    #[serde(default)]
    pub prompt_name: Option<String>,
    /// L2-normalize the vectors (default: true).
    #[serde(default = "yes")]
    pub normalize: bool,
    /// Keep the first N values (Matryoshka), before normalization.
    #[serde(default)]
    pub dimensions: Option<usize>,
    /// Which served model (an Aleph extension; default: the first that embeds).
    #[serde(default)]
    pub model: Option<String>,
}

/// `/predict` inputs: one text, a pair, or a batch of texts and pairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PredictInput {
    Single(Vec<String>),
    Batch(Vec<Vec<String>>),
}

impl<'de> Deserialize<'de> for PredictInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const EXPECTED: &str =
            "a string, a pair of strings [string, string] or a batch of mixed strings and pairs [[string], [string, string], ...]";
        fn check<E: de::Error>(item: Vec<String>) -> Result<Vec<String>, E> {
            if item.is_empty() || item.len() > 2 {
                return Err(E::invalid_length(item.len(), &EXPECTED));
            }
            Ok(item)
        }
        impl<'de> Visitor<'de> for V {
            type Value = PredictInput;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PredictInput, E> {
                Ok(PredictInput::Single(vec![v.to_string()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PredictInput, A::Error> {
                #[derive(Deserialize)]
                #[serde(untagged)]
                enum Item {
                    Text(String),
                    Pair(Vec<String>),
                }
                let mut texts = Vec::new();
                let mut batch = Vec::new();
                while let Some(item) = seq.next_element::<Item>()? {
                    match item {
                        Item::Text(t) if batch.is_empty() => texts.push(t),
                        Item::Pair(p) if texts.is_empty() => batch.push(check(p)?),
                        _ => return Err(de::Error::custom(EXPECTED)),
                    }
                }
                if !batch.is_empty() {
                    return Ok(PredictInput::Batch(batch));
                }
                check(texts).map(PredictInput::Single)
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct PredictRequest {
    /// A text, a pair `[a, b]`, or a batch `[[a], [a, b], ...]`.
    #[schema(value_type = Object)]
    pub inputs: PredictInput,
    #[serde(default)]
    pub truncate: Option<bool>,
    #[serde(default, deserialize_with = "null_default")]
    pub truncation_direction: Direction,
    /// Return the logits instead of softmax (sigmoid for one label).
    #[serde(default, deserialize_with = "null_default")]
    pub raw_scores: bool,
    #[serde(default)]
    pub model: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Prediction {
    pub score: f64,
    pub label: String,
}

/// TEI's `/rerank` body (told from Infinity's by `texts`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct TeiRerankRequest {
    pub query: String,
    pub texts: Vec<String>,
    #[serde(default)]
    pub truncate: Option<bool>,
    #[serde(default, deserialize_with = "null_default")]
    pub truncation_direction: Direction,
    #[serde(default, deserialize_with = "null_default")]
    pub raw_scores: bool,
    /// Echo each text in its result.
    #[serde(default, deserialize_with = "null_default")]
    pub return_text: bool,
    #[serde(default)]
    pub model: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Rank {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    pub score: f64,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct SimilarityInputs {
    pub source_sentence: String,
    pub sentences: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct SimilarityParameters {
    #[serde(default)]
    pub truncate: Option<bool>,
    #[serde(default, deserialize_with = "null_default")]
    pub truncation_direction: Direction,
    #[serde(default)]
    pub prompt_name: Option<String>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct SimilarityRequest {
    pub inputs: SimilarityInputs,
    #[serde(default, deserialize_with = "null_default")]
    pub parameters: SimilarityParameters,
    #[serde(default)]
    pub model: Option<String>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct TokenizeRequest {
    #[schema(value_type = Object)]
    pub inputs: super::schemas::StringOrList,
    #[serde(default = "yes")]
    pub add_special_tokens: bool,
    #[serde(default)]
    pub prompt_name: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SimpleToken {
    pub id: u32,
    pub text: String,
    pub special: bool,
    /// Byte offsets into the input; null for special tokens.
    pub start: Option<usize>,
    pub stop: Option<usize>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct DecodeRequest {
    /// Token ids, or a list of token-id lists.
    #[schema(value_type = Object)]
    pub ids: InputItems,
    #[serde(default = "yes")]
    pub skip_special_tokens: bool,
    #[serde(default)]
    pub model: Option<String>,
}

/// The first model that can serve `capability`, or the one the body names.
fn pick(state: &AppState, requested: Option<&str>, capability: &str) -> Result<Arc<ModelHandle>, TeiError> {
    let registry = state.registry()?;
    if let Some(name) = requested {
        return Ok(registry.get(name)?);
    }
    let models = registry.ready();
    let first = models.first().ok_or_else(|| TeiError::backend("no model is served"))?;
    Ok(models.iter().find(|m| m.info().capabilities().contains(&capability)).unwrap_or(first).clone())
}

fn json_of<T: DeserializeOwned>(body: &Bytes) -> Result<T, TeiError> {
    parse(body).map_err(TeiError::from)
}

async fn body_of<T: DeserializeOwned>(state: &Arc<AppState>, request: Request) -> Result<T, TeiError> {
    json_of(&read_body(request, state).await?)
}

/// The texts of a request with `prompt` prepended, none of them empty.
fn with_prompt(prompt: Option<String>, inputs: InputItems) -> Result<Vec<Input>, TeiError> {
    inputs
        .0
        .into_iter()
        .map(|item| match item {
            InputItem::Text(t) if t.is_empty() => {
                Err(TeiError::empty("Input validation error: `inputs` cannot be empty"))
            }
            InputItem::Text(t) => Ok(Input::Text(match &prompt {
                Some(p) => format!("{p}{t}"),
                None => t,
            })),
            InputItem::Ids(ids) if ids.is_empty() => {
                Err(TeiError::empty("Input validation error: `inputs` cannot be empty"))
            }
            InputItem::Ids(ids) => Ok(Input::Ids(ids)),
        })
        .collect()
}

fn check_batch(state: &AppState, n: usize) -> Result<(), TeiError> {
    if n == 0 {
        return Err(TeiError::empty("Input validation error: `inputs` cannot be empty"));
    }
    let max = state.limits.max_client_batch_size;
    if n > max {
        return Err(TeiError::validation(format!("batch size {n} > maximum allowed batch size {max}")));
    }
    Ok(())
}

fn check_chars(state: &AppState, texts: &[&str]) -> Result<(), TeiError> {
    let max = state.limits.max_string_chars;
    match texts.iter().map(|t| t.chars().count()).find(|&n| n > max) {
        Some(n) => Err(TeiError::validation(format!(
            "Input validation error: `inputs` must have less than {max} characters. Given: {n}"
        ))),
        None => Ok(()),
    }
}

fn require_embedder(model: &ModelHandle) -> Result<(), TeiError> {
    if model.info().capabilities().contains(&"embed") {
        Ok(())
    } else {
        Err(TeiError::backend("Backend error: Model is not an embedding model"))
    }
}

/// `POST /embed`: one vector per input.
#[utoipa::path(post, path = "/embed", tag = "tei", request_body = EmbedRequest,
    responses((status = 200, description = "One vector per input", body = Vec<Vec<f32>>),
              (status = 422, body = TeiErrorBody), (status = 424, body = TeiErrorBody)))]
pub async fn embed(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let body = match read_body(request, &state).await {
        Ok(body) => body,
        Err(e) => return TeiError::from(e).into_response(),
    };
    // Under /v1 this path is also Cohere v1's embed, told apart by its `texts`.
    if super::cohere::is_cohere_embed(&body) {
        return super::cohere::embed_v1(&state, &body).await.unwrap_or_else(IntoResponse::into_response);
    }
    let result = match json_of::<EmbedRequest>(&body) {
        Ok(req) => embed_json(&state, req).await,
        Err(e) => Err(e),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn embed_json(state: &AppState, req: EmbedRequest) -> TeiResult {
    let (vectors, cost) = embed_vectors(state, req).await?;
    Ok((cost.headers(), Json(Floats2(vectors))).into_response())
}

/// `/embed`'s vectors: pooled, cut to `dimensions`, normalized unless asked not to.
pub async fn embed_vectors(state: &AppState, req: EmbedRequest) -> Result<(Vec<Vec<f32>>, Cost), TeiError> {
    let model = &pick(state, req.model.as_deref(), "embed")?;
    check_batch(state, req.inputs.0.len())?;
    if req.dimensions == Some(0) {
        return Err(TeiError::validation("Input validation error: `dimensions` should be positive"));
    }
    require_embedder(model)?;
    if model.info().task == Task::MultiVector {
        return Err(TeiError::backend(
            "Backend error: this model returns one vector per token: use /embed_all or /embeddings",
        ));
    }
    let texts: Vec<&str> =
        req.inputs.0.iter().filter_map(|i| if let InputItem::Text(t) = i { Some(t.as_str()) } else { None }).collect();
    check_chars(state, &texts)?;
    let inputs = with_prompt(None, req.inputs)?;
    let raw = model.info().token_outputs;
    let dim = model.info().dim;
    let dims = match req.dimensions.or(model.default_dimensions()) {
        Some(d) if d > dim => {
            return Err(TeiError::validation(
                "Input validation error: `dimensions` should be smaller than the maximum embedding dimension.",
            ))
        }
        Some(d) => d,
        None => dim,
    };
    if !req.normalize && !raw && model.info().normalize {
        return Err(TeiError::backend(format!(
            "Backend error: model `{}` returns normalized vectors only; send normalize: true",
            model.name()
        )));
    }
    // The engine puts the prompt first, cuts, and normalizes after the cut (from the raw pooled vector when the
    // model gives one) or leaves the raw vector.
    let spec = EmbedSpec {
        prompt_name: req.prompt_name,
        dimensions: Some(dims),
        output: OutputKind::Default,
        truncation: options(req.truncate, req.truncation_direction, OutputKind::Default).truncation,
        normalize: if req.normalize { Normalization::Always } else { Normalization::Never },
        float32: true,
        ..Default::default()
    };
    let embedded = model.embed(inputs, &spec).await?;
    let vectors = embedded
        .embeddings
        .into_iter()
        .map(|e| match e {
            Embedding::Dense(v) => v,
            Embedding::Sparse(_) | Embedding::Multi(_) => Vec::new(),
        })
        .collect();
    Ok((vectors, Cost::of(&embedded.run)))
}

fn texts_checked(
    state: &AppState,
    model: &ModelHandle,
    prompt_name: Option<&str>,
    inputs: InputItems,
) -> Result<Vec<Input>, TeiError> {
    let texts: Vec<&str> =
        inputs.0.iter().filter_map(|i| if let InputItem::Text(t) = i { Some(t.as_str()) } else { None }).collect();
    check_chars(state, &texts)?;
    let prompt = model.prompt(prompt_name).map_err(TeiError::validation)?.map(str::to_string);
    with_prompt(prompt, inputs)
}

/// Vectors serialized through f64, so the digits match the rest of the API.
struct Floats2(Vec<Vec<f32>>);

impl Serialize for Floats2 {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|v| v.iter().map(|&x| x as f64).collect::<Vec<f64>>()))
    }
}

/// `POST /embed_all`: every token's last hidden state, per input.
#[utoipa::path(post, path = "/embed_all", tag = "tei", request_body = EmbedRequest,
    responses((status = 200, description = "Per input, one vector per token", body = Vec<Vec<Vec<f32>>>),
              (status = 424, body = TeiErrorBody)))]
pub async fn embed_all(State(state): State<Arc<AppState>>, request: Request) -> TeiResult {
    let req: EmbedRequest = body_of(&state, request).await?;
    let (tokens, cost) = token_vectors(&state, req).await?;
    let tokens: Vec<Floats2> = tokens.into_iter().map(Floats2).collect();
    Ok((cost.headers(), Json(tokens)).into_response())
}

/// `/embed_all`'s states: per input, one vector per token.
pub async fn token_vectors(state: &AppState, req: EmbedRequest) -> Result<(Vec<Vec<Vec<f32>>>, Cost), TeiError> {
    let model = &pick(state, req.model.as_deref(), "embed")?;
    check_batch(state, req.inputs.0.len())?;
    require_embedder(model)?;
    let multi = model.info().task == Task::MultiVector;
    if !multi && !model.info().token_outputs {
        return Err(TeiError::backend(format!(
            "Backend error: model `{}` ({}) does not return per-token states",
            model.name(),
            model.info().architecture
        )));
    }
    let inputs = texts_checked(state, model, req.prompt_name.as_deref(), req.inputs)?;
    // A ColBERT model's output already is one vector per token; an encoder gives its hidden states.
    let output = if multi { OutputKind::Default } else { OutputKind::Tokens };
    let out = model.run_with(inputs, options(req.truncate, req.truncation_direction, output)).await?;
    // An embedder's vectors are its hidden size wide, and so is each token's state.
    let width = model.info().dim;
    let tokens: Vec<Vec<Vec<f32>>> =
        out.vectors.iter().map(|v| v.chunks_exact(width.max(1)).map(<[f32]>::to_vec).collect()).collect();
    Ok((tokens, Cost::of(&out)))
}

/// `POST /embed_sparse`: SPLADE weights per vocabulary entry.
#[utoipa::path(post, path = "/embed_sparse", tag = "tei", request_body = EmbedRequest,
    responses((status = 200, description = "The non-zero weights of each input", body = Vec<Vec<SparseValue>>),
              (status = 424, description = "The model has no sparse output", body = TeiErrorBody)))]
pub async fn embed_sparse(State(state): State<Arc<AppState>>, request: Request) -> TeiResult {
    sparse_json(&state, body_of(&state, request).await?).await
}

async fn sparse_json(state: &AppState, req: EmbedRequest) -> TeiResult {
    let (sparse, cost) = sparse_vectors(state, req).await?;
    Ok((cost.headers(), Json(sparse)).into_response())
}

/// `/embed_sparse`'s non-zero weights per input.
pub async fn sparse_vectors(state: &AppState, req: EmbedRequest) -> Result<(Vec<Vec<SparseValue>>, Cost), TeiError> {
    let model = &pick(state, req.model.as_deref(), "sparse")?;
    if !model.info().sparse_output {
        return Err(TeiError::backend(format!(
            "Backend error: Model is not an embedding model with SPLADE pooling or BGE-M3's sparse head (`{}` is {})",
            model.name(),
            model.info().architecture
        )));
    }
    let inputs = texts_checked(state, model, req.prompt_name.as_deref(), req.inputs)?;
    let out = model.run_with(inputs, options(req.truncate, req.truncation_direction, OutputKind::Sparse)).await?;
    let sparse: Vec<Vec<SparseValue>> = out.vectors.iter().map(|v| SparseValue::of(v)).collect();
    Ok((sparse, Cost::of(&out)))
}

/// `POST /predict`: every label's score, best first, per input (a text or a pair).
#[utoipa::path(post, path = "/predict", tag = "tei", request_body = PredictRequest,
    responses((status = 200, description = "Labels with scores, best first", body = Vec<Prediction>),
              (status = 424, body = TeiErrorBody)))]
pub async fn predict(State(state): State<Arc<AppState>>, request: Request) -> TeiResult {
    predict_json(&state, body_of(&state, request).await?).await
}

async fn predict_json(state: &AppState, req: PredictRequest) -> TeiResult {
    let single = matches!(req.inputs, PredictInput::Single(_));
    let (scored, cost) = predictions(state, req).await?;
    if single {
        let first = scored.into_iter().next().unwrap_or_default();
        return Ok((cost.headers(), Json(first)).into_response());
    }
    Ok((cost.headers(), Json(scored)).into_response())
}

/// `/predict`'s labels with scores, best first, per input.
pub async fn predictions(state: &AppState, req: PredictRequest) -> Result<(Vec<Vec<Prediction>>, Cost), TeiError> {
    let registry = state.registry()?;
    let model = match req.model.as_deref() {
        Some(name) => registry.get(name)?,
        // A classifier first, else a reranker (TEI predicts with either).
        None => {
            let models = registry.ready();
            models
                .iter()
                .find(|m| matches!(m.info().task, Task::Classify { .. }))
                .or_else(|| models.iter().find(|m| m.info().task == Task::Rerank))
                .or_else(|| models.first())
                .cloned()
                .ok_or_else(|| TeiError::backend("no model is served"))?
        }
    };
    let labels: Vec<String> = match &model.info().task {
        Task::Classify { labels, .. } => labels.clone(),
        // transformers names the one label of a one-logit head LABEL_0.
        Task::Rerank => vec!["LABEL_0".into()],
        _ => return Err(TeiError::backend("Backend error: Model is not a classifier model")),
    };
    let items = match req.inputs {
        PredictInput::Single(item) => vec![item],
        PredictInput::Batch(items) => items,
    };
    check_batch(state, items.len())?;
    let texts: Vec<&str> = items.iter().flatten().map(String::as_str).collect();
    check_chars(state, &texts)?;
    let inputs = items
        .into_iter()
        .map(|mut item| match item.len() {
            2 => {
                let b = item.pop().unwrap_or_default();
                let a = item.pop().unwrap_or_default();
                if a.is_empty() && b.is_empty() {
                    return Err(TeiError::empty("Input validation error: `inputs` cannot be empty"));
                }
                Ok(Input::Pair(a, b))
            }
            _ => match item.pop() {
                Some(t) if !t.is_empty() => Ok(Input::Text(t)),
                _ => Err(TeiError::empty("Input validation error: `inputs` cannot be empty")),
            },
        })
        .collect::<Result<Vec<_>, _>>()?;
    let out = model.run_with(inputs, options(req.truncate, req.truncation_direction, OutputKind::Default)).await?;
    // TEI: softmax over several labels, sigmoid for one; ties put the higher label index first.
    let sigmoid = labels.len() == 1;
    let scored: Vec<Vec<Prediction>> = out
        .vectors
        .iter()
        .map(|logits| {
            let mut scores: Vec<(usize, f32)> =
                aleph_engine::outputs::scores(logits, sigmoid, req.raw_scores).into_iter().enumerate().collect();
            scores.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
            scores.into_iter().map(|(i, score)| Prediction { score: score as f64, label: labels[i].clone() }).collect()
        })
        .collect();
    Ok((scored, Cost::of(&out)))
}

/// Whether a `/rerank` body is TEI's (`texts`) rather than Infinity's (`documents`).
pub fn is_tei_rerank(body: &Bytes) -> bool {
    #[derive(Deserialize)]
    struct Probe {
        texts: Option<de::IgnoredAny>,
        documents: Option<de::IgnoredAny>,
    }
    serde_json::from_slice::<Probe>(body).is_ok_and(|p| p.texts.is_some() && p.documents.is_none())
}

/// TEI's `/rerank`, from a body already read.
pub async fn rerank_body(state: &AppState, body: &Bytes) -> Response {
    let result = match json_of::<TeiRerankRequest>(body) {
        Ok(req) => rerank_json(state, req).await,
        Err(e) => Err(e),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn rerank_json(state: &AppState, req: TeiRerankRequest) -> TeiResult {
    let (ranks, cost) = ranks(state, req).await?;
    Ok((cost.headers(), Json(ranks)).into_response())
}

/// TEI's rerank: each text's score against the query, best first.
pub async fn ranks(state: &AppState, req: TeiRerankRequest) -> Result<(Vec<Rank>, Cost), TeiError> {
    if req.texts.is_empty() {
        return Err(TeiError::empty("`texts` cannot be empty"));
    }
    let model = &pick(state, req.model.as_deref(), "rerank")?;
    if !model.info().capabilities().contains(&"rerank") {
        return Err(TeiError::backend("Backend error: model is not a re-ranker model"));
    }
    check_batch(state, req.texts.len())?;
    let texts: Vec<&str> = std::iter::once(req.query.as_str()).chain(req.texts.iter().map(String::as_str)).collect();
    check_chars(state, &texts)?;
    let opts = options(req.truncate, req.truncation_direction, OutputKind::Default);
    let (scores, out) = relevance(model, &req.query, &req.texts, req.raw_scores, opts).await?;
    if scores.iter().any(|s| s.is_nan()) {
        return Err(TeiError::backend("score is NaN"));
    }
    let mut ranks: Vec<Rank> = scores
        .into_iter()
        .zip(req.texts)
        .enumerate()
        .map(|(index, (score, text))| Rank { index, text: req.return_text.then_some(text), score: score as f64 })
        .collect();
    ranks.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.index.cmp(&a.index)));
    Ok((ranks, Cost::of(&out)))
}

/// `POST /similarity`: cosine similarity of each sentence to the source sentence.
#[utoipa::path(post, path = "/similarity", tag = "tei", request_body = SimilarityRequest,
    responses((status = 200, description = "One similarity per sentence", body = Vec<f32>)))]
pub async fn similarity(State(state): State<Arc<AppState>>, request: Request) -> TeiResult {
    let req: SimilarityRequest = body_of(&state, request).await?;
    similarity_request(&state, req).await
}

async fn similarity_request(state: &AppState, req: SimilarityRequest) -> TeiResult {
    if req.inputs.sentences.is_empty() {
        return Err(TeiError::empty("`inputs.sentences` cannot be empty"));
    }
    let model = &pick(state, req.model.as_deref(), "embed")?;
    require_embedder(model)?;
    check_batch(state, req.inputs.sentences.len() + 1)?;
    let items = InputItems(
        std::iter::once(req.inputs.source_sentence).chain(req.inputs.sentences).map(InputItem::Text).collect(),
    );
    let p = req.parameters;
    let inputs = texts_checked(state, model, p.prompt_name.as_deref(), items)?;
    let out = model.run_with(inputs, options(p.truncate, p.truncation_direction, OutputKind::Default)).await?;
    let (source, rest) = out.vectors.split_first().ok_or_else(|| TeiError::backend("no output"))?;
    let sims: Vec<f32> = rest.iter().map(|v| aleph_engine::outputs::cosine(source, v)).collect();
    Ok((timing_headers(out.tokenization_time, out.queue_time, out.inference_time), Json(sims)).into_response())
}

/// `POST /tokenize`: each input's tokens with their byte offsets.
#[utoipa::path(post, path = "/tokenize", tag = "tei", request_body = TokenizeRequest,
    responses((status = 200, description = "Per input, its tokens", body = Vec<Vec<SimpleToken>>)))]
pub async fn tokenize(State(state): State<Arc<AppState>>, request: Request) -> TeiResult {
    let req: TokenizeRequest = body_of(&state, request).await?;
    Ok(Json(tokens(&state, req).await?).into_response())
}

/// `/tokenize`'s tokens per input, with byte offsets (none for special tokens).
pub async fn tokens(state: &AppState, req: TokenizeRequest) -> Result<Vec<Vec<SimpleToken>>, TeiError> {
    let model = pick(state, req.model.as_deref(), "embed")?;
    let texts = req.inputs.into_vec();
    if texts.is_empty() {
        return Err(TeiError::empty("`inputs` cannot be empty"));
    }
    check_batch(state, texts.len())?;
    check_chars(state, &texts.iter().map(String::as_str).collect::<Vec<_>>())?;
    let prompt =
        model.prompt(req.prompt_name.as_deref()).map_err(TeiError::validation)?.unwrap_or_default().to_string();
    if texts.iter().any(String::is_empty) && prompt.is_empty() {
        return Err(TeiError::empty("Input validation error: `inputs` cannot be empty"));
    }
    let add = req.add_special_tokens;
    let job = model.clone();
    let tokens = state
        .pool()
        .run(move || {
            texts
                .iter()
                .map(|t| {
                    job.tokenizer().tokenize(&format!("{prompt}{t}"), add).map(|spans| {
                        spans
                            .into_iter()
                            .map(|s| SimpleToken {
                                id: s.id,
                                text: s.text,
                                special: s.special,
                                start: s.span.map(|(a, _)| a),
                                stop: s.span.map(|(_, b)| b),
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .ok_or_else(|| TeiError::backend("tokenization panicked"))?
        .map_err(|e| TeiError::new(StatusCode::UNPROCESSABLE_ENTITY, "Tokenizer", e.to_string()))?;
    Ok(tokens)
}

/// `POST /decode`: token ids back to text.
#[utoipa::path(post, path = "/decode", tag = "tei", request_body = DecodeRequest,
    responses((status = 200, description = "One text per id list", body = Vec<String>)))]
pub async fn decode(State(state): State<Arc<AppState>>, request: Request) -> TeiResult {
    let req: DecodeRequest = body_of(&state, request).await?;
    Ok(Json(texts(&state, req).await?).into_response())
}

/// `/decode`'s texts, one per id list.
pub async fn texts(state: &AppState, req: DecodeRequest) -> Result<Vec<String>, TeiError> {
    let model = pick(state, req.model.as_deref(), "embed")?;
    let lists: Vec<Vec<u32>> = req
        .ids
        .0
        .into_iter()
        .map(|i| match i {
            InputItem::Ids(ids) => Ok(ids),
            InputItem::Text(_) => Err(TeiError::validation("`ids` holds token ids, not strings")),
        })
        .collect::<Result<_, _>>()?;
    if lists.is_empty() || lists.iter().any(Vec::is_empty) {
        return Err(TeiError::empty("Input validation error: `input_ids` cannot be empty"));
    }
    check_batch(state, lists.len())?;
    let skip = req.skip_special_tokens;
    let job = model.clone();
    let texts = state
        .pool()
        .run(move || lists.iter().map(|ids| job.tokenizer().decode(ids, skip)).collect::<Result<Vec<_>, _>>())
        .await
        .ok_or_else(|| TeiError::backend("decoding panicked"))?
        .map_err(|e| TeiError::new(StatusCode::UNPROCESSABLE_ENTITY, "Tokenizer", e.to_string()))?;
    Ok(texts)
}

/// `GET /info`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Info {
    pub model_id: String,
    pub model_sha: Option<String>,
    pub model_dtype: &'static str,
    pub served_model_name: String,
    #[schema(value_type = Object)]
    pub model_type: serde_json::Value,
    pub max_concurrent_requests: usize,
    pub max_input_length: usize,
    pub max_batch_tokens: usize,
    pub max_batch_requests: Option<usize>,
    pub max_client_batch_size: usize,
    pub auto_truncate: bool,
    pub tokenization_workers: usize,
    pub version: &'static str,
    pub sha: Option<String>,
    pub docker_label: Option<String>,
}

/// What the server runs (TEI's `/info`), for the first served model or `?model=`.
#[utoipa::path(get, path = "/info", tag = "tei",
    params(("model" = Option<String>, Query, description = "Which served model (default: the first)")),
    responses((status = 200, body = Info)))]
pub async fn info(
    State(state): State<Arc<AppState>>,
    axum::extract::Query(query): axum::extract::Query<BTreeMap<String, String>>,
) -> TeiResult {
    Ok(Json(info_of(&state, query.get("model").map(String::as_str))?).into_response())
}

/// `/info` for the named model, else the first served.
pub fn info_of(state: &AppState, model: Option<&str>) -> Result<Info, TeiError> {
    let registry = state.registry()?;
    let model = match model {
        Some(name) => registry.get(name)?,
        None => registry.ready().into_iter().next().ok_or_else(|| TeiError::backend("no model is served"))?,
    };
    let i = model.info();
    let labels_json = |labels: &[String]| {
        let id2label: BTreeMap<String, String> =
            labels.iter().enumerate().map(|(k, l)| (k.to_string(), l.clone())).collect();
        let label2id: BTreeMap<String, usize> = labels.iter().enumerate().map(|(k, l)| (l.clone(), k)).collect();
        serde_json::json!({"id2label": id2label, "label2id": label2id})
    };
    let model_type = match &i.task {
        Task::Classify { labels, .. } => serde_json::json!({"classifier": labels_json(labels)}),
        Task::Rerank => serde_json::json!({"reranker": labels_json(&["LABEL_0".to_string()])}),
        Task::Embed | Task::MultiVector => {
            let pooling = match i.pooling {
                Pooling::Cls => "cls",
                Pooling::Mean => "mean",
                Pooling::LastToken => "last_token",
                Pooling::Max => "max",
                Pooling::MeanSqrtLen => "mean_sqrt_len",
                Pooling::WeightedMean => "weighted_mean",
            };
            let pooling = if i.sparse { "splade" } else { pooling };
            serde_json::json!({"embedding": {"pooling": pooling}})
        }
    };
    let config = model.config();
    let body = Info {
        model_id: config.model_id.clone(),
        model_sha: config.revision.clone(),
        model_dtype: config.dtype,
        served_model_name: model.name().to_string(),
        model_type,
        max_concurrent_requests: config.queue_size,
        max_input_length: i.window,
        max_batch_tokens: config.max_batch_tokens,
        max_batch_requests: Some(config.batch_size),
        max_client_batch_size: state.limits.max_client_batch_size,
        auto_truncate: true,
        tokenization_workers: state.pool().workers(),
        version: env!("CARGO_PKG_VERSION"),
        sha: None,
        docker_label: None,
    };
    Ok(body)
}

/// `POST /` (and SageMaker's `/invocations`): the route TEI binds to the model's kind: `predict` for a
/// classifier, `rerank` for a reranker, `embed_sparse` for a SPLADE model, `similarity` when
/// `TASK=sentence-similarity`, else `embed`.
#[utoipa::path(post, path = "/", tag = "tei",
    responses((status = 200, description = "As /embed, /predict or /rerank, by the model's kind")))]
pub async fn root(State(state): State<Arc<AppState>>, request: Request) -> TeiResult {
    let body = read_body(request, &state).await?;
    #[derive(Deserialize)]
    struct Named {
        model: Option<String>,
    }
    let named = serde_json::from_slice::<Named>(&body).ok().and_then(|n| n.model);
    // huggingface_hub's `sentence_similarity` posts `{"inputs": {"source_sentence", "sentences"}}` to the URL
    // it is given: a body of that shape says the task, whatever the first model's kind.
    if let Ok(req) = serde_json::from_slice::<SimilarityRequest>(&body) {
        return similarity_request(&state, req).await;
    }
    let registry = state.registry()?;
    let model = match named.as_deref() {
        Some(name) => registry.get(name)?,
        None => registry.ready().into_iter().next().ok_or_else(|| TeiError::backend("no model is served"))?,
    };
    match model.info().task {
        Task::Classify { .. } => predict_json(&state, json_of(&body)?).await,
        Task::Rerank => rerank_json(&state, json_of(&body)?).await,
        Task::Embed if model.info().sparse => sparse_json(&state, json_of(&body)?).await,
        Task::Embed | Task::MultiVector => {
            if std::env::var("TASK").is_ok_and(|t| t == "sentence-similarity") {
                similarity_request(&state, json_of(&body)?).await
            } else {
                embed_json(&state, json_of(&body)?).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predict_inputs_take_tei_shapes() {
        let p = |j: &str| serde_json::from_str::<PredictInput>(j);
        assert_eq!(p(r#""a""#).unwrap(), PredictInput::Single(vec!["a".into()]));
        assert_eq!(p(r#"["a"]"#).unwrap(), PredictInput::Single(vec!["a".into()]));
        assert_eq!(p(r#"["a","b"]"#).unwrap(), PredictInput::Single(vec!["a".into(), "b".into()]));
        assert_eq!(
            p(r#"[["a"],["b","c"]]"#).unwrap(),
            PredictInput::Batch(vec![vec!["a".into()], vec!["b".into(), "c".into()]])
        );
        for bad in [r#"[]"#, r#"["a","b","c"]"#, r#"[["a","b","c"]]"#, r#"["a",["b"]]"#, r#"[[]]"#] {
            assert!(p(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn directions_and_rerank_shapes() {
        for (j, d) in [(r#""left""#, Direction::Left), (r#""Left""#, Direction::Left), (r#""right""#, Direction::Right)]
        {
            assert_eq!(serde_json::from_str::<Direction>(j).unwrap(), d);
        }
        assert!(serde_json::from_str::<Direction>(r#""LEFT""#).is_err());
        assert!(is_tei_rerank(&Bytes::from_static(br#"{"query":"q","texts":["a"]}"#)));
        assert!(!is_tei_rerank(&Bytes::from_static(br#"{"query":"q","documents":["a"]}"#)));
        let e = TeiError::from(ApiError::unprocessable("bad"));
        assert_eq!((e.status.as_u16(), e.kind), (422, "Validation"));
        let e = TeiError::from(ApiError::new(StatusCode::TOO_MANY_REQUESTS, "full"));
        assert_eq!((e.status.as_u16(), e.kind), (429, "Overloaded"));
    }
}
