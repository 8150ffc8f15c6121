//! `POST /embeddings`.

use std::sync::Arc;

use aleph_engine::{EmbedSpec, Embedding, Input, ModelHandle, Normalization};
use aleph_models::tokenizer::Truncation;
use aleph_models::{OutputKind, Task};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;

use super::error::ApiError;
use super::extract::ApiJson;
use super::schemas::{
    response_id, unix_now, EmbedDtype, EmbeddingObject, EmbeddingOutput, EmbeddingRequest, EmbeddingResponse,
    EmbeddingValue, EncodingFormat, Endianness, InputItem, InputItems, MediaEmbeddingRequest, Modality, SparseValue,
    TruncationSide, Usage,
};
use super::state::AppState;
use super::timing::{observe, timing_headers};
use super::validate::{require_capability, validate_inputs, validate_media};
use crate::fetch::FetchError;

/// Create embeddings for text (or, on models that support it, images and audio).
#[utoipa::path(
    post,
    path = "/embeddings",
    tag = "embeddings",
    request_body = EmbeddingRequest,
    responses(
        (status = 200, description = "One vector per input, in input order", body = EmbeddingResponse),
        (status = 400, description = "The model cannot serve this request", body = super::error::ErrorBody),
        (status = 404, description = "Unknown model (when several are served)", body = super::error::ErrorBody),
        (status = 422, description = "The body does not match the schema", body = super::error::ErrorBody),
        (status = 429, description = "The model's queue is full", body = super::error::ErrorBody),
    )
)]
pub async fn embeddings(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<EmbeddingRequest>,
) -> Result<Response, ApiError> {
    let model = state.registry()?.get(&req.model)?;
    let result = embed(&state, &model, req).await;
    observe(model.name(), "/embeddings", &result);
    result
}

/// Create embeddings for images (deprecated: use `/embeddings` with `"modality": "image"`).
#[utoipa::path(
    post,
    path = "/embeddings_image",
    tag = "embeddings",
    request_body = MediaEmbeddingRequest,
    responses(
        (status = 200, description = "One vector per image, in input order", body = EmbeddingResponse),
        (status = 400, description = "The model takes no images, or an image could not be used", body = super::error::ErrorBody),
        (status = 422, description = "The body does not match the schema", body = super::error::ErrorBody),
    )
)]
#[deprecated = "use /embeddings with modality image"]
pub async fn embeddings_image(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<MediaEmbeddingRequest>,
) -> Result<Response, ApiError> {
    media_route(state, req, Modality::Image, "/embeddings_image").await
}

/// Create embeddings for audio (deprecated: use `/embeddings` with `"modality": "audio"`).
#[utoipa::path(
    post,
    path = "/embeddings_audio",
    tag = "embeddings",
    request_body = MediaEmbeddingRequest,
    responses(
        (status = 200, description = "One vector per clip, in input order", body = EmbeddingResponse),
        (status = 400, description = "The model takes no audio, or a clip could not be used", body = super::error::ErrorBody),
        (status = 422, description = "The body does not match the schema", body = super::error::ErrorBody),
    )
)]
#[deprecated = "use /embeddings with modality audio"]
pub async fn embeddings_audio(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<MediaEmbeddingRequest>,
) -> Result<Response, ApiError> {
    media_route(state, req, Modality::Audio, "/embeddings_audio").await
}

async fn media_route(
    state: Arc<AppState>,
    req: MediaEmbeddingRequest,
    modality: Modality,
    route: &'static str,
) -> Result<Response, ApiError> {
    let model = state.registry()?.get(&req.model)?;
    let req = EmbeddingRequest {
        input: InputItems(req.input.into_vec().into_iter().map(InputItem::Text).collect()),
        model: req.model,
        encoding_format: req.encoding_format,
        dimensions: None,
        user: None,
        modality,
        prompt_name: None,
        task: None,
        output: EmbeddingOutput::Dense,
        use_activation: None,
        truncate_prompt_tokens: None,
        truncation_side: TruncationSide::Right,
        embed_dtype: EmbedDtype::Float32,
        endianness: Endianness::Native,
        messages: None,
        add_generation_prompt: false,
        continue_final_message: false,
        add_special_tokens: false,
        chat_template: None,
        chat_template_kwargs: None,
    };
    let result = embed(&state, &model, req).await;
    observe(model.name(), route, &result);
    result
}

async fn embed(state: &AppState, model: &Arc<ModelHandle>, req: EmbeddingRequest) -> Result<Response, ApiError> {
    let inputs = match req.modality {
        Modality::Text if req.messages.is_some() => {
            require_capability(model, &req.model, req.modality.capability(), "modality")?;
            super::chat_input::chat_input(state, model, &req).await?
        }
        Modality::Text => {
            let inputs = validate_inputs("input", req.input, &state.limits)?;
            require_capability(model, &req.model, req.modality.capability(), "modality")?;
            // Checked here for the 422 naming the field; the engine puts the prompt before each text.
            model
                .prompt(req.prompt_name.as_deref())
                .map_err(|e| ApiError::unprocessable(e).with_param("prompt_name"))?;
            inputs
        }
        Modality::Image | Modality::Audio => {
            let sources = req.input.texts().map_err(|i| {
                ApiError::unprocessable(format!("`input[{i}]` must be a data URI or URL, not token ids"))
                    .with_param(format!("input[{i}]"))
            })?;
            let sources = validate_media("input", sources, &state.limits)?;
            require_capability(model, &req.model, req.modality.capability(), "modality")?;
            let kind = if req.modality == Modality::Image { "image" } else { "audio" };
            let bytes = state.fetcher.fetch_all(&sources, kind).await.map_err(|(i, e)| match e {
                FetchError::Invalid(m) => ApiError::unprocessable(m).with_param(format!("input[{i}]")),
                FetchError::Failed(m) => ApiError::bad_request(m).with_param(format!("input[{i}]")),
            })?;
            let wrap = if req.modality == Modality::Image { Input::Image } else { Input::Audio };
            bytes.into_iter().map(wrap).collect()
        }
    };
    let dims = validate_dimensions(model, req.dimensions)?;
    let truncation = truncation(model, req.truncate_prompt_tokens, req.truncation_side)?;
    if matches!(req.embed_dtype, EmbedDtype::Fp8E4m3 | EmbedDtype::Fp8E5m2) {
        return Err(ApiError::bad_request(
            "embed_dtype fp8_e4m3 and fp8_e5m2 are not supported: use float32, float16 or bfloat16",
        )
        .with_param("embed_dtype"));
    }
    let normalize = match req.use_activation {
        None => Normalization::AsModel,
        Some(true) => Normalization::Always,
        Some(false) => Normalization::Never,
    };

    let dtype = model.config().embedding_dtype;
    if dtype.packed() && (req.encoding_format == EncodingFormat::Base64 || req.encoding_format.is_bytes()) {
        return Err(ApiError::bad_request(format!(
            "model `{}` returns {} embeddings (packed bits); request encoding_format `float`",
            model.name(),
            dtype.name()
        ))
        .with_param("encoding_format"));
    }
    let output = match (req.output, req.encoding_format) {
        (EmbeddingOutput::Dense, EncodingFormat::Sparse) => EmbeddingOutput::Sparse,
        (o, _) => o,
    };
    let kind = match output {
        EmbeddingOutput::Dense => OutputKind::Default,
        EmbeddingOutput::Sparse if !model.info().sparse_output => {
            return Err(ApiError::bad_request(format!(
                "model `{}` has no sparse output (SPLADE or BGE-M3); request the dense embedding",
                model.name()
            ))
            .with_param(if req.output == EmbeddingOutput::Sparse { "output" } else { "encoding_format" }));
        }
        EmbeddingOutput::Sparse if req.encoding_format == EncodingFormat::Base64 || req.encoding_format.is_bytes() => {
            return Err(ApiError::bad_request("sparse weights come as `[{index, value}]`, not base64 or bytes")
                .with_param("encoding_format"));
        }
        EmbeddingOutput::Sparse => OutputKind::Sparse,
        EmbeddingOutput::Colbert if model.info().task == Task::MultiVector => OutputKind::MultiVector,
        EmbeddingOutput::Colbert if model.info().colbert_dim.is_none() => {
            return Err(ApiError::bad_request(format!(
                "model `{}` has no ColBERT output (BGE-M3); request the dense embedding",
                model.name()
            ))
            .with_param("output"));
        }
        EmbeddingOutput::Colbert if req.encoding_format == EncodingFormat::Sparse => {
            return Err(ApiError::bad_request("ColBERT vectors come as `float` or `base64`, not sparse")
                .with_param("encoding_format"));
        }
        EmbeddingOutput::Colbert => OutputKind::MultiVector,
    };
    // The engine applies the prompt, cuts, re-normalizes and quantizes.
    let spec = EmbedSpec {
        prompt_name: req.prompt_name.clone(),
        task: req.task.clone(),
        dimensions: Some(dims),
        output: kind,
        truncation,
        normalize,
        ..Default::default()
    };
    let base64 = |v: &[f32]| encode_base64(v, req.embed_dtype, req.endianness);
    let result = model.embed(inputs, &spec).await?;
    if req.encoding_format.is_bytes() {
        let run = &result.run;
        let mut headers = timing_headers(run.tokenization_time, run.queue_time, run.inference_time);
        let (body, items) = raw_items(&result.embeddings, req.embed_dtype, req.endianness);
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
        if req.encoding_format == EncodingFormat::Bytes {
            let tokens = run.prompt_tokens;
            let metadata = serde_json::json!({
                "id": response_id(),
                "created": unix_now() as u64,
                "model": model.name(),
                "data": items,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            });
            // Non-ASCII (a served name) goes as obs-text, which header values allow.
            let value = HeaderValue::from_bytes(metadata.to_string().as_bytes())
                .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("the metadata header: {e}")))?;
            headers.insert("metadata", value);
        }
        return Ok((headers, body).into_response());
    }
    let data = result
        .embeddings
        .into_iter()
        .enumerate()
        .map(|(index, e)| {
            let embedding = match (e, req.encoding_format) {
                (Embedding::Sparse(pairs), _) => EmbeddingValue::Sparse(
                    pairs.into_iter().map(|(id, value)| SparseValue { index: id as usize, value }).collect(),
                ),
                (Embedding::Multi(rows), EncodingFormat::Base64) => EmbeddingValue::Base64(base64(&rows.concat())),
                (Embedding::Multi(rows), _) => EmbeddingValue::MultiFloat(rows),
                (Embedding::Dense(v), EncodingFormat::Base64) => EmbeddingValue::Base64(base64(&v)),
                // A sparse format asked for the sparse output, answered above.
                (Embedding::Dense(v), _) => EmbeddingValue::Float(v),
            };
            EmbeddingObject { object: "embedding", embedding, index }
        })
        .collect();
    let result = result.run;
    let body = EmbeddingResponse {
        object: "list",
        data,
        model: model.name().to_string(),
        usage: Usage::tokens(result.prompt_tokens),
        id: response_id(),
        created: unix_now() as u64,
    };
    let headers: HeaderMap = timing_headers(result.tokenization_time, result.queue_time, result.inference_time);
    Ok((headers, Json(body)).into_response())
}

/// `dimensions`: absent or 0 keeps the model's default (`--truncate-dim`, else the whole vector), 1..=dim keeps a
/// prefix, anything else is a 400.
pub fn validate_dimensions(model: &ModelHandle, dimensions: Option<i64>) -> Result<usize, ApiError> {
    model.embedding_dimensions(dimensions).map_err(|e| ApiError::bad_request(e).with_param("dimensions"))
}

/// vLLM's `truncate_prompt_tokens` and `truncation_side`: absent or -1 cuts at the window, `null` not at all,
/// k (at most the window) keeps k tokens.
pub(super) fn truncation(
    model: &ModelHandle,
    tokens: Option<Option<i64>>,
    side: TruncationSide,
) -> Result<Truncation, ApiError> {
    let left = side == TruncationSide::Left;
    let window = model.info().window;
    match tokens {
        None | Some(Some(-1)) => Ok(Truncation::new(true, left)),
        Some(None) => Ok(Truncation::new(false, left)),
        Some(Some(k)) if k >= 1 && k as u64 <= window as u64 => {
            Ok(Truncation { limit: Some(k as usize), ..Truncation::new(true, left) })
        }
        Some(Some(k)) if k >= 1 => Err(ApiError::bad_request(format!(
            "truncate_prompt_tokens value ({k}) is greater than the model's window ({window}); select a smaller one"
        ))
        .with_param("truncate_prompt_tokens")),
        Some(Some(k)) => {
            Err(ApiError::bad_request(format!("truncate_prompt_tokens must be -1 or at least 1, got {k}"))
                .with_param("truncate_prompt_tokens"))
        }
    }
}

/// The vector's numbers as `dtype` in `order`, base64 (vLLM's `embed_dtype` and `endianness`; the defaults
/// are OpenAI's little-endian f32).
fn encode_base64(v: &[f32], dtype: EmbedDtype, order: Endianness) -> String {
    base64::engine::general_purpose::STANDARD.encode(raw_bytes(v, dtype, order))
}

/// `v` cast to `dtype`, in `order`'s byte order.
fn raw_bytes(v: &[f32], dtype: EmbedDtype, order: Endianness) -> Vec<u8> {
    let big = order == Endianness::Big || (order == Endianness::Native && cfg!(target_endian = "big"));
    match dtype {
        EmbedDtype::Float16 => v.iter().flat_map(|&x| ordered(half::f16::from_f32(x).to_bits(), big)).collect(),
        EmbedDtype::Bfloat16 => v.iter().flat_map(|&x| ordered(half::bf16::from_f32(x).to_bits(), big)).collect(),
        _ if big => v.iter().flat_map(|x| x.to_be_bytes()).collect(),
        _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

/// vLLM's `bytes` body (every item's raw bytes end to end) and its metadata items: where each item starts
/// and ends in the body, and its shape (`[dim]`, or `[tokens, dim]` for token vectors).
fn raw_items(embeddings: &[Embedding], dtype: EmbedDtype, order: Endianness) -> (Vec<u8>, Vec<serde_json::Value>) {
    let mut body = Vec::new();
    let mut items = Vec::with_capacity(embeddings.len());
    for (index, e) in embeddings.iter().enumerate() {
        let start = body.len();
        let shape = match e {
            Embedding::Dense(v) => {
                body.extend(raw_bytes(v, dtype, order));
                vec![v.len()]
            }
            Embedding::Multi(rows) => {
                rows.iter().for_each(|r| body.extend(raw_bytes(r, dtype, order)));
                vec![rows.len(), rows.first().map_or(0, Vec::len)]
            }
            // Refused before the model ran.
            Embedding::Sparse(_) => vec![0],
        };
        items.push(serde_json::json!({
            "index": index,
            "embed_dtype": dtype.name(),
            "endianness": order.name(),
            "start": start,
            "end": body.len(),
            "shape": shape,
        }));
    }
    (body, items)
}

fn ordered(bits: u16, big: bool) -> [u8; 2] {
    if big {
        bits.to_be_bytes()
    } else {
        bits.to_le_bytes()
    }
}

/// Little-endian f32 bytes, base64: what the OpenAI SDK decodes.
pub fn f32_base64(v: &[f32]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_little_endian_f32() {
        assert_eq!(f32_base64(&[-20.0, -11.0]), "AACgwQAAMME=");
        assert_eq!(encode_base64(&[-20.0, -11.0], EmbedDtype::Float32, Endianness::Native), "AACgwQAAMME=");
    }

    #[test]
    fn vllm_embed_dtypes_and_byte_orders() {
        let decode = |s: String| base64::engine::general_purpose::STANDARD.decode(s).unwrap();
        // 1.5 is 0x3e00 in f16 and 0x3fc0 in bf16; -20 is 0xc1a00000 in f32.
        assert_eq!(decode(encode_base64(&[1.5], EmbedDtype::Float16, Endianness::Little)), [0x00, 0x3e]);
        assert_eq!(decode(encode_base64(&[1.5], EmbedDtype::Float16, Endianness::Big)), [0x3e, 0x00]);
        assert_eq!(decode(encode_base64(&[1.5], EmbedDtype::Bfloat16, Endianness::Little)), [0xc0, 0x3f]);
        assert_eq!(decode(encode_base64(&[-20.0], EmbedDtype::Float32, Endianness::Big)), [0xc1, 0xa0, 0x00, 0x00]);
        assert_eq!(decode(encode_base64(&[-20.0], EmbedDtype::Float32, Endianness::Little)), [0x00, 0x00, 0xa0, 0xc1]);
    }
}
