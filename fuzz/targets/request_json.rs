//! Request bodies, as every inference route decodes and validates them before any work is queued:
//! Infinity's and OpenAI's, TEI's and Cohere's.

use aleph_server::http::cohere::{CohereEmbedRequest, CohereRerankRequest};
use aleph_server::http::extract::{check_depth, parse};
use aleph_server::http::schemas::{ClassifyRequest, EmbeddingRequest, MediaEmbeddingRequest, RerankRequest};
use aleph_server::http::state::Limits;
use aleph_server::http::tei::{DecodeRequest, EmbedRequest, PredictRequest, SimilarityRequest, TeiRerankRequest};
use aleph_server::http::validate::{validate_inputs, validate_media, validate_text, validate_texts};

pub fn run(data: &[u8]) {
    let limits =
        Limits { max_client_batch_size: 2048, max_string_chars: 122_880, max_media_items: 32, max_json_depth: 32 };
    if check_depth(data, limits.max_json_depth).is_err() {
        return;
    }
    if let Ok(r) = parse::<EmbeddingRequest>(data) {
        if let Ok(texts) = r.input.clone().texts() {
            let _ = validate_media("input", texts, &limits);
        }
        let _ = validate_inputs("input", r.input, &limits);
    }
    if let Ok(r) = parse::<RerankRequest>(data) {
        let _ = validate_text("query", r.query, &limits);
        let _ = validate_texts("documents", r.documents, &limits);
    }
    if let Ok(r) = parse::<ClassifyRequest>(data) {
        let _ = validate_texts("input", r.input.into_vec(), &limits);
    }
    if let Ok(r) = parse::<MediaEmbeddingRequest>(data) {
        let _ = validate_media("input", r.input.into_vec(), &limits);
    }
    if let Ok(r) = parse::<EmbedRequest>(data) {
        let _ = validate_inputs("inputs", r.inputs, &limits);
    }
    let _ = parse::<PredictRequest>(data);
    let _ = parse::<TeiRerankRequest>(data);
    let _ = parse::<SimilarityRequest>(data);
    let _ = parse::<DecodeRequest>(data);
    if let Ok(r) = parse::<CohereEmbedRequest>(data) {
        let _ = validate_texts("texts", r.texts.unwrap_or_default(), &limits);
    }
    let _ = parse::<CohereRerankRequest>(data);
}
