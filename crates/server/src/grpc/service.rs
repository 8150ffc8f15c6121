//! The `tei.v1` services: each message mapped onto the TEI route that answers it over HTTP
//! (crate::http::tei), with proto3's defaults (`truncate`, `add_special_tokens` and `skip_special_tokens` false
//! unless sent; an absent `normalize` true) and TEI's status codes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use futures_util::{Stream, StreamExt};
use tonic::{Code, Request, Response, Status, Streaming};

use super::pb;
use crate::http::schemas::{InputItem, InputItems, StringOrList};
use crate::http::state::AppState;
use crate::http::tei::{self, Cost, Direction, PredictInput, TeiError};

/// How many messages of one stream are computed at once (TEI's `GRPC_MAX_PARALLEL_STREAM_REQUESTS`); they
/// reach the model's queue together, so they batch.
fn parallel_stream_requests() -> usize {
    std::env::var("GRPC_MAX_PARALLEL_STREAM_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(1024).max(1)
}

type Answers<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[derive(Clone)]
pub struct Tei {
    state: Arc<AppState>,
    /// The served model a call names in its `model` metadata (an Aleph extension: TEI serves one model);
    /// `None`: the first that can answer, as TEI's HTTP routes pick.
    model: Option<String>,
}

impl Tei {
    pub fn new(state: Arc<AppState>) -> Self {
        Tei { state, model: None }
    }

    /// This service for one call, with the model its metadata names.
    fn for_call<T>(&self, request: &Request<T>) -> Tei {
        let model = request.metadata().get("model").and_then(|v| v.to_str().ok()).map(str::to_string);
        Tei { state: self.state.clone(), model }
    }

    /// Each message of `input` answered by `answer`, several at once, the answers in message order.
    fn each<In, Out, F, Fut>(&self, input: Streaming<In>, answer: F) -> Answers<Out>
    where
        In: Send + 'static,
        Out: Send + 'static,
        F: Fn(Tei, In) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Out, Status>> + Send + 'static,
    {
        let this = self.clone();
        let answers = input
            .map(move |message| {
                let this = this.clone();
                let answer = match message {
                    Ok(m) => Ok(answer(this, m)),
                    Err(status) => Err(status),
                };
                async move {
                    match answer {
                        Ok(fut) => fut.await,
                        Err(status) => Err(status),
                    }
                }
            })
            .buffered(parallel_stream_requests());
        Box::pin(answers)
    }

    async fn embed_one(self, r: pb::EmbedRequest) -> Result<(pb::EmbedResponse, Headers), Status> {
        let started = Instant::now();
        let chars = r.inputs.chars().count();
        let req = tei::EmbedRequest {
            inputs: InputItems(vec![InputItem::Text(r.inputs)]),
            truncate: Some(r.truncate),
            truncation_direction: direction(r.truncation_direction),
            prompt_name: r.prompt_name,
            // proto3 `optional`: absent means true (TEI 1.9).
            normalize: r.normalize.unwrap_or(true),
            dimensions: r.dimensions.map(|d| d as usize),
            model: self.model.clone(),
        };
        let (vectors, cost) = tei::embed_vectors(&self.state, req).await.map_err(status)?;
        let metadata = metadata(chars, &cost, started);
        let embeddings = vectors.into_iter().next().unwrap_or_default();
        Ok((pb::EmbedResponse { embeddings, metadata: Some(metadata) }, Headers(metadata)))
    }

    async fn sparse_one(self, r: pb::EmbedSparseRequest) -> Result<(pb::EmbedSparseResponse, Headers), Status> {
        let started = Instant::now();
        let chars = r.inputs.chars().count();
        let req = embed_request(r.inputs, r.truncate, r.truncation_direction, r.prompt_name, self.model.clone());
        let (sparse, cost) = tei::sparse_vectors(&self.state, req).await.map_err(status)?;
        let metadata = metadata(chars, &cost, started);
        let sparse_embeddings = sparse
            .into_iter()
            .next()
            .unwrap_or_default()
            .into_iter()
            .map(|v| pb::SparseValue { index: v.index as u32, value: v.value })
            .collect();
        Ok((pb::EmbedSparseResponse { sparse_embeddings, metadata: Some(metadata) }, Headers(metadata)))
    }

    async fn all_one(self, r: pb::EmbedAllRequest) -> Result<(pb::EmbedAllResponse, Headers), Status> {
        let started = Instant::now();
        let chars = r.inputs.chars().count();
        let req = embed_request(r.inputs, r.truncate, r.truncation_direction, r.prompt_name, self.model.clone());
        let (tokens, cost) = tei::token_vectors(&self.state, req).await.map_err(status)?;
        let metadata = metadata(chars, &cost, started);
        let token_embeddings = tokens
            .into_iter()
            .next()
            .unwrap_or_default()
            .into_iter()
            .map(|embeddings| pb::TokenEmbedding { embeddings })
            .collect();
        Ok((pb::EmbedAllResponse { token_embeddings, metadata: Some(metadata) }, Headers(metadata)))
    }

    async fn predict_one(
        self,
        inputs: Vec<String>,
        truncate: bool,
        raw_scores: bool,
        truncation_direction: i32,
    ) -> Result<(pb::PredictResponse, Headers), Status> {
        let started = Instant::now();
        if inputs.is_empty() || inputs.len() > 2 {
            return Err(Status::invalid_argument(format!("`inputs` must have 1 or 2 elements, got {}", inputs.len())));
        }
        let chars = inputs.iter().map(|t| t.chars().count()).sum();
        let req = tei::PredictRequest {
            inputs: PredictInput::Single(inputs),
            truncate: Some(truncate),
            truncation_direction: direction(truncation_direction),
            raw_scores,
            model: self.model.clone(),
        };
        let (scored, cost) = tei::predictions(&self.state, req).await.map_err(status)?;
        let metadata = metadata(chars, &cost, started);
        let predictions = scored
            .into_iter()
            .next()
            .unwrap_or_default()
            .into_iter()
            .map(|p| pb::Prediction { score: p.score as f32, label: p.label })
            .collect();
        Ok((pb::PredictResponse { predictions, metadata: Some(metadata) }, Headers(metadata)))
    }

    async fn rerank_all(
        &self,
        query: String,
        texts: Vec<String>,
        truncate: bool,
        raw_scores: bool,
        return_text: bool,
        truncation_direction: i32,
    ) -> Result<(pb::RerankResponse, Headers), Status> {
        let started = Instant::now();
        // TEI counts the query once per text.
        let chars = query.chars().count() * texts.len() + texts.iter().map(|t| t.chars().count()).sum::<usize>();
        let req = tei::TeiRerankRequest {
            query,
            texts,
            truncate: Some(truncate),
            truncation_direction: direction(truncation_direction),
            raw_scores,
            return_text,
            model: self.model.clone(),
        };
        let (ranks, cost) = tei::ranks(&self.state, req).await.map_err(status)?;
        let metadata = metadata(chars, &cost, started);
        let ranks = ranks
            .into_iter()
            .map(|r| pb::Rank { index: r.index as u32, text: r.text, score: r.score as f32 })
            .collect();
        Ok((pb::RerankResponse { ranks, metadata: Some(metadata) }, Headers(metadata)))
    }

    async fn tokenize_one(self, r: pb::EncodeRequest) -> Result<pb::EncodeResponse, Status> {
        let req = tei::TokenizeRequest {
            inputs: StringOrList::One(r.inputs),
            add_special_tokens: r.add_special_tokens,
            prompt_name: r.prompt_name,
            model: self.model.clone(),
        };
        let tokens = tei::tokens(&self.state, req).await.map_err(status)?;
        let tokens = tokens
            .into_iter()
            .next()
            .unwrap_or_default()
            .into_iter()
            .map(|t| pb::SimpleToken {
                id: t.id,
                text: t.text,
                special: t.special,
                start: t.start.map(|s| s as u32),
                stop: t.stop.map(|s| s as u32),
            })
            .collect();
        Ok(pb::EncodeResponse { tokens })
    }

    async fn decode_one(self, r: pb::DecodeRequest) -> Result<pb::DecodeResponse, Status> {
        let req = tei::DecodeRequest {
            ids: InputItems(vec![InputItem::Ids(r.ids)]),
            skip_special_tokens: r.skip_special_tokens,
            model: self.model.clone(),
        };
        let texts = tei::texts(&self.state, req).await.map_err(status)?;
        Ok(pb::DecodeResponse { text: texts.into_iter().next().unwrap_or_default() })
    }
}

fn embed_request(
    inputs: String,
    truncate: bool,
    dir: i32,
    prompt_name: Option<String>,
    model: Option<String>,
) -> tei::EmbedRequest {
    tei::EmbedRequest {
        inputs: InputItems(vec![InputItem::Text(inputs)]),
        truncate: Some(truncate),
        truncation_direction: direction(dir),
        prompt_name,
        // Sparse weights and token states are not normalized.
        normalize: false,
        dimensions: None,
        model,
    }
}

fn direction(d: i32) -> Direction {
    if d == pb::TruncationDirection::Left as i32 {
        Direction::Left
    } else {
        Direction::Right
    }
}

/// TEI's error kinds as gRPC codes (an unknown model, which TEI cannot be asked for, is NOT_FOUND).
fn status(e: TeiError) -> Status {
    let code = match e.kind {
        // A `model` metadata naming no served model.
        _ if e.status == axum::http::StatusCode::NOT_FOUND => Code::NotFound,
        "Overloaded" => Code::ResourceExhausted,
        "Validation" | "Empty" => Code::InvalidArgument,
        "Unhealthy" => Code::Unavailable,
        _ => Code::FailedPrecondition,
    };
    Status::new(code, e.message)
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn metadata(chars: usize, cost: &Cost, started: Instant) -> pb::Metadata {
    pb::Metadata {
        compute_chars: chars as u32,
        compute_tokens: cost.prompt_tokens as u32,
        total_time_ns: nanos(started.elapsed()),
        tokenization_time_ns: nanos(cost.tokenization_time),
        queue_time_ns: nanos(cost.queue_time),
        inference_time_ns: nanos(cost.inference_time),
    }
}

/// TEI's response headers on unary replies (milliseconds), from a reply's `Metadata`.
#[derive(Clone, Copy)]
struct Headers(pb::Metadata);

impl Headers {
    fn on<T>(self, message: T) -> Response<T> {
        let mut response = Response::new(message);
        let m = self.0;
        let ms = |ns: u64| (ns / 1_000_000).to_string();
        let headers = response.metadata_mut();
        for (name, value) in [
            ("x-compute-type", "cpu".to_string()),
            ("x-compute-time", ms(m.total_time_ns)),
            ("x-compute-characters", m.compute_chars.to_string()),
            ("x-compute-tokens", m.compute_tokens.to_string()),
            ("x-total-time", ms(m.total_time_ns)),
            ("x-tokenization-time", ms(m.tokenization_time_ns)),
            ("x-queue-time", ms(m.queue_time_ns)),
            ("x-inference-time", ms(m.inference_time_ns)),
        ] {
            if let Ok(v) = value.parse() {
                headers.insert(name, v);
            }
        }
        response
    }
}

fn unary<T>(answer: Result<(T, Headers), Status>) -> Result<Response<T>, Status> {
    answer.map(|(message, headers)| headers.on(message))
}

fn message_only<T>(answer: Result<(T, Headers), Status>) -> Result<T, Status> {
    answer.map(|(message, _)| message)
}

#[tonic::async_trait]
impl pb::info_server::Info for Tei {
    async fn info(&self, request: Request<pb::InfoRequest>) -> Result<Response<pb::InfoResponse>, Status> {
        let this = self.for_call(&request);
        let info = tei::info_of(&self.state, this.model.as_deref()).map_err(status)?;
        let model_type = if info.model_type.get("classifier").is_some() {
            pb::ModelType::Classifier
        } else if info.model_type.get("reranker").is_some() {
            pb::ModelType::Reranker
        } else {
            pb::ModelType::Embedding
        };
        Ok(Response::new(pb::InfoResponse {
            version: info.version.to_string(),
            sha: info.sha,
            docker_label: info.docker_label,
            model_id: info.model_id,
            model_sha: info.model_sha,
            model_dtype: info.model_dtype.to_string(),
            model_type: model_type as i32,
            max_concurrent_requests: info.max_concurrent_requests as u32,
            max_input_length: info.max_input_length as u32,
            max_batch_tokens: info.max_batch_tokens as u32,
            max_batch_requests: info.max_batch_requests.map(|n| n as u32),
            max_client_batch_size: info.max_client_batch_size as u32,
            tokenization_workers: info.tokenization_workers as u32,
        }))
    }
}

#[tonic::async_trait]
impl pb::embed_server::Embed for Tei {
    async fn embed(&self, request: Request<pb::EmbedRequest>) -> Result<Response<pb::EmbedResponse>, Status> {
        unary(self.for_call(&request).embed_one(request.into_inner()).await)
    }

    type EmbedStreamStream = Answers<pb::EmbedResponse>;

    async fn embed_stream(
        &self,
        request: Request<Streaming<pb::EmbedRequest>>,
    ) -> Result<Response<Self::EmbedStreamStream>, Status> {
        let answers = self
            .for_call(&request)
            .each(request.into_inner(), |tei, m| async move { message_only(tei.embed_one(m).await) });
        Ok(Response::new(answers))
    }

    async fn embed_sparse(
        &self,
        request: Request<pb::EmbedSparseRequest>,
    ) -> Result<Response<pb::EmbedSparseResponse>, Status> {
        unary(self.for_call(&request).sparse_one(request.into_inner()).await)
    }

    type EmbedSparseStreamStream = Answers<pb::EmbedSparseResponse>;

    async fn embed_sparse_stream(
        &self,
        request: Request<Streaming<pb::EmbedSparseRequest>>,
    ) -> Result<Response<Self::EmbedSparseStreamStream>, Status> {
        let answers = self
            .for_call(&request)
            .each(request.into_inner(), |tei, m| async move { message_only(tei.sparse_one(m).await) });
        Ok(Response::new(answers))
    }

    async fn embed_all(&self, request: Request<pb::EmbedAllRequest>) -> Result<Response<pb::EmbedAllResponse>, Status> {
        unary(self.for_call(&request).all_one(request.into_inner()).await)
    }

    type EmbedAllStreamStream = Answers<pb::EmbedAllResponse>;

    async fn embed_all_stream(
        &self,
        request: Request<Streaming<pb::EmbedAllRequest>>,
    ) -> Result<Response<Self::EmbedAllStreamStream>, Status> {
        let answers = self
            .for_call(&request)
            .each(request.into_inner(), |tei, m| async move { message_only(tei.all_one(m).await) });
        Ok(Response::new(answers))
    }
}

#[tonic::async_trait]
impl pb::predict_server::Predict for Tei {
    async fn predict(&self, request: Request<pb::PredictRequest>) -> Result<Response<pb::PredictResponse>, Status> {
        let tei = self.for_call(&request);
        let r = request.into_inner();
        unary(tei.predict_one(vec![r.inputs], r.truncate, r.raw_scores, r.truncation_direction).await)
    }

    async fn predict_pair(
        &self,
        request: Request<pb::PredictPairRequest>,
    ) -> Result<Response<pb::PredictResponse>, Status> {
        let tei = self.for_call(&request);
        let r = request.into_inner();
        unary(tei.predict_one(r.inputs, r.truncate, r.raw_scores, r.truncation_direction).await)
    }

    type PredictStreamStream = Answers<pb::PredictResponse>;

    async fn predict_stream(
        &self,
        request: Request<Streaming<pb::PredictRequest>>,
    ) -> Result<Response<Self::PredictStreamStream>, Status> {
        let answers = self.for_call(&request).each(request.into_inner(), |tei, r| async move {
            message_only(tei.predict_one(vec![r.inputs], r.truncate, r.raw_scores, r.truncation_direction).await)
        });
        Ok(Response::new(answers))
    }

    type PredictPairStreamStream = Answers<pb::PredictResponse>;

    async fn predict_pair_stream(
        &self,
        request: Request<Streaming<pb::PredictPairRequest>>,
    ) -> Result<Response<Self::PredictPairStreamStream>, Status> {
        let answers = self.for_call(&request).each(request.into_inner(), |tei, r| async move {
            message_only(tei.predict_one(r.inputs, r.truncate, r.raw_scores, r.truncation_direction).await)
        });
        Ok(Response::new(answers))
    }
}

#[tonic::async_trait]
impl pb::rerank_server::Rerank for Tei {
    async fn rerank(&self, request: Request<pb::RerankRequest>) -> Result<Response<pb::RerankResponse>, Status> {
        let tei = self.for_call(&request);
        let r = request.into_inner();
        unary(tei.rerank_all(r.query, r.texts, r.truncate, r.raw_scores, r.return_text, r.truncation_direction).await)
    }

    /// One (query, text) pair per message, answered once the client half-closes: each text's rank by its
    /// arrival; the first message's `raw_scores` and `return_text` count, as in TEI.
    async fn rerank_stream(
        &self,
        request: Request<Streaming<pb::RerankStreamRequest>>,
    ) -> Result<Response<pb::RerankResponse>, Status> {
        let started = Instant::now();
        let tei = self.for_call(&request);
        let mut messages = request.into_inner();
        let mut pairs = Vec::new();
        while let Some(message) = messages.next().await {
            pairs.push(message?);
        }
        let Some(first) = pairs.first() else {
            return Err(Status::invalid_argument("`texts` cannot be empty"));
        };
        let (raw_scores, return_text) = (first.raw_scores, first.return_text);
        let answers = futures_util::future::join_all(
            pairs
                .into_iter()
                .map(|p| tei.rerank_all(p.query, vec![p.text], p.truncate, raw_scores, true, p.truncation_direction)),
        )
        .await;
        let mut ranks = Vec::with_capacity(answers.len());
        let mut total = pb::Metadata::default();
        for (index, answer) in answers.into_iter().enumerate() {
            let (reply, _) = answer?;
            let rank = reply.ranks.into_iter().next().ok_or_else(|| Status::internal("no rank"))?;
            ranks.push(pb::Rank { index: index as u32, text: rank.text.filter(|_| return_text), score: rank.score });
            if let Some(m) = reply.metadata {
                total.compute_chars += m.compute_chars;
                total.compute_tokens += m.compute_tokens;
                total.tokenization_time_ns += m.tokenization_time_ns;
                total.queue_time_ns += m.queue_time_ns;
                total.inference_time_ns += m.inference_time_ns;
            }
        }
        // TEI reports the stages' per-pair averages.
        let n = ranks.len() as u64;
        total.tokenization_time_ns /= n;
        total.queue_time_ns /= n;
        total.inference_time_ns /= n;
        total.total_time_ns = nanos(started.elapsed());
        ranks.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.index.cmp(&a.index)));
        Ok(Headers(total).on(pb::RerankResponse { ranks, metadata: Some(total) }))
    }
}

#[tonic::async_trait]
impl pb::tokenize_server::Tokenize for Tei {
    async fn tokenize(&self, request: Request<pb::EncodeRequest>) -> Result<Response<pb::EncodeResponse>, Status> {
        self.for_call(&request).tokenize_one(request.into_inner()).await.map(Response::new)
    }

    type TokenizeStreamStream = Answers<pb::EncodeResponse>;

    async fn tokenize_stream(
        &self,
        request: Request<Streaming<pb::EncodeRequest>>,
    ) -> Result<Response<Self::TokenizeStreamStream>, Status> {
        Ok(Response::new(self.for_call(&request).each(request.into_inner(), Tei::tokenize_one)))
    }

    async fn decode(&self, request: Request<pb::DecodeRequest>) -> Result<Response<pb::DecodeResponse>, Status> {
        self.for_call(&request).decode_one(request.into_inner()).await.map(Response::new)
    }

    type DecodeStreamStream = Answers<pb::DecodeResponse>;

    async fn decode_stream(
        &self,
        request: Request<Streaming<pb::DecodeRequest>>,
    ) -> Result<Response<Self::DecodeStreamStream>, Status> {
        Ok(Response::new(self.for_call(&request).each(request.into_inner(), Tei::decode_one)))
    }
}
