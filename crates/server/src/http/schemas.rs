//! Request and response bodies, field for field as Infinity (and so the OpenAI SDK) expects them.

use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use utoipa::ToSchema;

pub const DEFAULT_MODEL_NAME: &str = "default/not-specified";

pub(crate) fn default_model() -> String {
    DEFAULT_MODEL_NAME.to_string()
}

/// A field that may be `null`, which means its default (what Python clients send for an unset option).
pub fn null_default<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A field whose `null` differs from its absence: absent is `None`, null `Some(None)`.
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// `model`, where `null` means "not specified".
pub(crate) fn null_model<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_else(default_model))
}

/// One input of `/embeddings`: a text, or token ids of the model's vocabulary (OpenAI's spec).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputItem {
    Text(String),
    Ids(Vec<u32>),
}

/// `/embeddings`' `input`: a string, a list of strings, a list of token ids (one input), or a list of
/// such lists; strings and id lists may be mixed, as TEI allows.
#[derive(Debug, Clone, Default, PartialEq, Eq, ToSchema)]
#[schema(as = EmbeddingInput, value_type = Object)]
pub struct InputItems(pub Vec<InputItem>);

impl InputItems {
    /// The texts, or the index of the first token-id input (for routes that take texts only).
    pub fn texts(self) -> Result<Vec<String>, usize> {
        self.0
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                InputItem::Text(t) => Ok(t),
                InputItem::Ids(_) => Err(i),
            })
            .collect()
    }
}

/// One element of an `input` list; `ids_only` once the list turned out to be a flat list of token ids.
enum Element {
    Text(String),
    Id(u32),
    Ids(Vec<u32>),
}

struct ElementSeed {
    /// The list so far holds token ids (so it is one input): only more ids may follow.
    ids_only: bool,
    /// The list so far holds texts or id lists: a bare id may not follow.
    items_only: bool,
}

impl<'de> de::DeserializeSeed<'de> for ElementSeed {
    type Value = Element;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Element, D::Error> {
        struct V(ElementSeed);
        impl<'de> Visitor<'de> for V {
            type Value = Element;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                if self.0.ids_only {
                    f.write_str("a token id (a list of token ids holds only integers)")
                } else if self.0.items_only {
                    f.write_str("a string or a list of token ids")
                } else {
                    f.write_str("a string, a token id or a list of token ids")
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Element, E> {
                if self.0.ids_only {
                    return Err(E::invalid_type(de::Unexpected::Str(v), &self));
                }
                Ok(Element::Text(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Element, E> {
                if self.0.ids_only {
                    return Err(E::invalid_type(de::Unexpected::Str(&v), &self));
                }
                Ok(Element::Text(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Element, E> {
                if self.0.items_only {
                    return Err(E::invalid_type(de::Unexpected::Unsigned(v), &self));
                }
                u32::try_from(v).map(Element::Id).map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Element, A::Error> {
                if self.0.ids_only {
                    return Err(de::Error::invalid_type(de::Unexpected::Seq, &self));
                }
                Vec::<u32>::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(Element::Ids)
            }
        }
        d.deserialize_any(V(self))
    }
}

impl<'de> Deserialize<'de> for InputItems {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = InputItems;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, a list of strings, a list of token ids, or a list of token-id lists")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(InputItems(vec![InputItem::Text(v.to_string())]))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(InputItems(vec![InputItem::Text(v)]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                let mut flat_ids: Option<Vec<u32>> = None;
                loop {
                    let seed = ElementSeed { ids_only: flat_ids.is_some(), items_only: !items.is_empty() };
                    match seq.next_element_seed(seed)? {
                        None => break,
                        Some(Element::Id(id)) => flat_ids.get_or_insert_with(Vec::new).push(id),
                        Some(Element::Text(t)) => items.push(InputItem::Text(t)),
                        Some(Element::Ids(ids)) => items.push(InputItem::Ids(ids)),
                    }
                }
                Ok(InputItems(match flat_ids {
                    Some(ids) => vec![InputItem::Ids(ids)],
                    None => items,
                }))
            }
        }
        d.deserialize_any(V)
    }
}

/// One string or a list of strings.
#[derive(Debug, Clone, PartialEq, ToSchema)]
#[schema(as = Input)]
pub enum StringOrList {
    One(String),
    Many(Vec<String>),
}

impl StringOrList {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            StringOrList::One(s) => vec![s],
            StringOrList::Many(v) => v,
        }
    }
}

impl<'de> Deserialize<'de> for StringOrList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StringOrList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or a list of strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(StringOrList::One(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(StringOrList::One(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                while let Some(s) = seq.next_element::<String>()? {
                    out.push(s);
                }
                Ok(StringOrList::Many(out))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EncodingFormat {
    #[default]
    Float,
    Base64,
    /// A sparse encoder's (SPLADE) non-zero weights as `[{index, value}]`, `index` a vocabulary id
    /// (Aleph's extension; a sparse model's default answer is the dense vocabulary-wide vector). The same as
    /// `output: "sparse"`.
    Sparse,
    /// vLLM's: the vectors' raw bytes end to end (`embed_dtype`, `endianness`) as `application/octet-stream`,
    /// with a `metadata` header of JSON saying where each item starts and ends and its shape.
    Bytes,
    /// vLLM's: [`EncodingFormat::Bytes`] without the `metadata` header.
    #[serde(rename = "bytes_only")]
    BytesOnly,
}

impl EncodingFormat {
    /// Whether the answer is raw bytes rather than JSON.
    pub fn is_bytes(self) -> bool {
        matches!(self, EncodingFormat::Bytes | EncodingFormat::BytesOnly)
    }
}

/// Which of a model's outputs a request wants (Aleph's extension, for models with several: BGE-M3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddingOutput {
    /// The model's embedding (for SPLADE, its vocabulary-wide weights).
    #[default]
    Dense,
    /// The non-zero vocabulary weights as `[{index, value}]` (SPLADE; BGE-M3's lexical weights).
    Sparse,
    /// One vector per token after the first (BGE-M3's ColBERT vectors), as `[[...], ...]` or, with
    /// `encoding_format: "base64"`, the rows concatenated.
    Colbert,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Modality {
    #[default]
    Text,
    Image,
    Audio,
}

impl Modality {
    pub fn capability(self) -> &'static str {
        match self {
            Modality::Text => "embed",
            Modality::Image => "image_embed",
            Modality::Audio => "audio_embed",
        }
    }
}

/// `POST /embeddings`: OpenAI's embeddings request plus Infinity's `modality`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct EmbeddingRequest {
    /// Text to embed: one string or 1–2048 strings (the limit is `--max-client-batch-size`). With
    /// `modality` image or audio: one or 1–32 data URIs or http(s) URLs. Absent with `messages`.
    #[serde(default)]
    pub input: InputItems,
    /// Served model name. With a single model any name is accepted.
    #[serde(default = "default_model", deserialize_with = "null_model")]
    #[schema(default = "default/not-specified")]
    pub model: String,
    #[serde(default, deserialize_with = "null_default")]
    pub encoding_format: EncodingFormat,
    /// Keep only the first N values of each vector (Matryoshka), renormalized to unit length when the
    /// model normalizes; 0 or absent keeps all. `output_dimension` (LiteLLM's Infinity provider, Cohere)
    /// is read the same.
    #[serde(default, alias = "output_dimension")]
    pub dimensions: Option<i64>,
    /// Accepted and ignored, as OpenAI's.
    #[serde(default)]
    #[allow(dead_code)]
    pub user: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub modality: Modality,
    /// A prompt of the model's `config_sentence_transformers.json` to prepend to each text (as TEI's and
    /// sentence-transformers' `prompt_name`); default: `--default-prompt-name`, if set.
    #[serde(default)]
    pub prompt_name: Option<String>,
    /// jina-embeddings-v3's task (`retrieval.query`, `retrieval.passage`, `separation`, `classification`,
    /// `text-matching`), as Jina's API takes it: the task's LoRA adapter, and its prompt unless `prompt_name`
    /// names another. A model without adapters refuses it.
    #[serde(default)]
    pub task: Option<String>,
    /// `dense` (the default), `sparse` or `colbert`: which output of a model that has several.
    #[serde(default, deserialize_with = "null_default")]
    pub output: EmbeddingOutput,
    /// vLLM's: `true` L2-normalizes every vector (from the raw pooled one), `false` returns the raw pooled
    /// vector; absent, as the model does. vLLM 0.10-0.16 spelled it `normalize`.
    #[serde(default, alias = "normalize")]
    pub use_activation: Option<bool>,
    /// vLLM's: `null` cuts nothing (an input past the window is refused), -1 cuts at the window, k keeps k
    /// tokens (special tokens included); absent, cut at the window.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>)]
    pub truncate_prompt_tokens: Option<Option<i64>>,
    /// vLLM's: `right` (the default) keeps the first tokens, `left` the last.
    #[serde(default, deserialize_with = "null_default")]
    pub truncation_side: TruncationSide,
    /// vLLM's, for `base64`: the numbers' type, `float32` (the default), `float16` or `bfloat16`.
    #[serde(default, deserialize_with = "null_default")]
    pub embed_dtype: EmbedDtype,
    /// vLLM's, for `base64`: `native` (the default; little on x86 and ARM), `little` or `big`.
    #[serde(default, deserialize_with = "null_default")]
    pub endianness: Endianness,
    /// vLLM's chat form, instead of `input`: one conversation of OpenAI chat messages (`{role, content}`,
    /// content a string or `{"type": "text", "text": ...}` parts), rendered by the model's chat template into
    /// one prompt and embedded as one vector.
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    pub messages: Option<serde_json::Value>,
    /// vLLM's, with `messages`: end the prompt with the assistant's turn opened (false by default).
    #[serde(default)]
    pub add_generation_prompt: bool,
    /// vLLM's, with `messages`: leave the last message open.
    #[serde(default)]
    pub continue_final_message: bool,
    /// vLLM's, with `messages`: the tokenizer's special tokens around the rendered prompt (false by default).
    #[serde(default)]
    pub add_special_tokens: bool,
    /// vLLM's, with `messages`: a Jinja chat template in place of the model's.
    #[serde(default)]
    pub chat_template: Option<String>,
    /// vLLM's, with `messages`: more variables for the chat template.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Which end an over-long input keeps (vLLM's `truncation_side`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TruncationSide {
    #[default]
    Right,
    Left,
}

/// The number type of base64 embeddings (vLLM's `embed_dtype`; its fp8 types are refused).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EmbedDtype {
    #[default]
    Float32,
    Float16,
    Bfloat16,
    #[serde(rename = "fp8_e4m3")]
    Fp8E4m3,
    #[serde(rename = "fp8_e5m2")]
    Fp8E5m2,
}

impl EmbedDtype {
    pub fn name(self) -> &'static str {
        match self {
            EmbedDtype::Float32 => "float32",
            EmbedDtype::Float16 => "float16",
            EmbedDtype::Bfloat16 => "bfloat16",
            EmbedDtype::Fp8E4m3 => "fp8_e4m3",
            EmbedDtype::Fp8E5m2 => "fp8_e5m2",
        }
    }
}

/// The byte order of base64 embeddings (vLLM's `endianness`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Endianness {
    #[default]
    Native,
    Little,
    Big,
}

impl Endianness {
    pub fn name(self) -> &'static str {
        match self {
            Endianness::Native => "native",
            Endianness::Little => "little",
            Endianness::Big => "big",
        }
    }
}

/// `POST /embeddings_image` and `/embeddings_audio` (deprecated): media references only.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct MediaEmbeddingRequest {
    /// One or 1–32 data URIs (`data:image/png;base64,...`) or http(s) URLs.
    pub input: StringOrList,
    #[serde(default = "default_model", deserialize_with = "null_model")]
    #[schema(default = "default/not-specified")]
    pub model: String,
    #[serde(default, deserialize_with = "null_default")]
    pub encoding_format: EncodingFormat,
    /// Accepted and ignored, as OpenAI's.
    #[serde(default)]
    #[allow(dead_code)]
    pub user: Option<String>,
}

/// A vector as JSON numbers or as base64 of little-endian f32.
#[derive(Debug, Clone, PartialEq, ToSchema)]
#[schema(as = Embedding)]
pub enum EmbeddingValue {
    Float(Vec<f32>),
    /// One vector per token (ColBERT).
    MultiFloat(Vec<Vec<f32>>),
    Base64(String),
    /// The non-zero entries of a sparse vector.
    Sparse(Vec<SparseValue>),
}

/// One non-zero weight of a sparse embedding: TEI's `/embed_sparse` element.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, ToSchema)]
pub struct SparseValue {
    pub index: usize,
    pub value: f32,
}

impl SparseValue {
    /// The entries of a sparse output ([`aleph_models::sparse_pairs`]), by index.
    pub fn of(v: &[f32]) -> Vec<SparseValue> {
        aleph_models::read_sparse_pairs(v).map(|(id, value)| SparseValue { index: id as usize, value }).collect()
    }
}

impl Serialize for EmbeddingValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            // Widened to f64 so the digits match Infinity's (Python floats printed by orjson).
            EmbeddingValue::Float(v) => s.collect_seq(v.iter().map(|&x| x as f64)),
            EmbeddingValue::MultiFloat(rows) => {
                s.collect_seq(rows.iter().map(|row| row.iter().map(|&x| x as f64).collect::<Vec<f64>>()))
            }
            EmbeddingValue::Base64(b) => s.serialize_str(b),
            EmbeddingValue::Sparse(entries) => entries.serialize(s),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EmbeddingObject {
    #[schema(example = "embedding")]
    pub object: &'static str,
    pub embedding: EmbeddingValue,
    pub index: usize,
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

impl Usage {
    pub fn tokens(n: usize) -> Self {
        Usage { prompt_tokens: n, total_tokens: n }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EmbeddingResponse {
    #[schema(example = "list")]
    pub object: &'static str,
    pub data: Vec<EmbeddingObject>,
    pub model: String,
    pub usage: Usage,
    /// `infinity-<uuid4>`, as Infinity's.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
}

/// Serializes an f32 through f64, so the digits match Infinity's (Python floats printed by orjson).
pub(crate) fn f32_as_f64<S: Serializer>(v: &f32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(*v as f64)
}

/// `POST /rerank`: Cohere-style reranking, as Infinity takes it.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct RerankRequest {
    pub query: String,
    /// 1–2048 documents (the limit is `--max-client-batch-size`).
    pub documents: Vec<String>,
    /// Echo each document in its result.
    #[serde(default, deserialize_with = "null_default")]
    pub return_documents: bool,
    /// Return the model's logits instead of `sigmoid(logit)`.
    #[serde(default, deserialize_with = "null_default")]
    pub raw_scores: bool,
    #[serde(default = "default_model", deserialize_with = "null_model")]
    #[schema(default = "default/not-specified")]
    pub model: String,
    /// Return only the best N (must be > 0); more than the documents returns all.
    #[serde(default)]
    pub top_n: Option<i64>,
    /// An LLM reranker's instruction for this request (Qwen3-Reranker's `<Instruct>`), in place of the
    /// model's (`--rerank-instruction`, else its card's default). Other models refuse it.
    #[serde(default)]
    pub instruction: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RerankResult {
    #[serde(serialize_with = "f32_as_f64")]
    pub relevance_score: f32,
    pub index: usize,
    /// The document when `return_documents` is set, else null.
    pub document: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RerankResponse {
    #[schema(example = "rerank")]
    pub object: &'static str,
    /// Sorted by score, best first.
    pub results: Vec<RerankResult>,
    pub model: String,
    pub usage: Usage,
    pub id: String,
    pub created: u64,
}

/// `POST /classify`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ClassifyRequest {
    /// One text or 1–2048 texts.
    pub input: StringOrList,
    #[serde(default = "default_model", deserialize_with = "null_model")]
    #[schema(default = "default/not-specified")]
    pub model: String,
    /// Return the logits instead of probabilities (softmax, or sigmoid for multi-label models).
    #[serde(default, deserialize_with = "null_default")]
    pub raw_scores: bool,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClassifyLabel {
    #[serde(serialize_with = "f32_as_f64")]
    pub score: f32,
    pub label: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ClassifyResponse {
    #[schema(example = "classify")]
    pub object: &'static str,
    /// Per input, every label with its score, best first.
    pub data: Vec<Vec<ClassifyLabel>>,
    pub model: String,
    pub usage: Usage,
    pub id: String,
    pub created: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ModelStatsBody {
    pub queue_fraction: f64,
    pub queue_absolute: usize,
    pub results_pending: usize,
    pub batch_size: usize,
    pub running_batches: usize,
    pub last_batch_size: usize,
    /// Batches run since start, and how many of them failed.
    pub batches_total: usize,
    pub batches_failed: usize,
    /// Inference threads behind the model's queue (`--device-id`).
    pub replicas: usize,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ModelInfoBody {
    pub id: String,
    pub stats: ModelStatsBody,
    #[schema(example = "model")]
    pub object: &'static str,
    /// `infinity`, the one value Infinity's own client accepts.
    pub owned_by: &'static str,
    pub created: u64,
    pub backend: &'static str,
    pub capabilities: Vec<&'static str>,
    /// Memory held by the model's weights (Aleph's extension; Infinity does not report it).
    pub weight_bytes: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ModelList {
    #[schema(example = "list")]
    pub object: &'static str,
    pub data: Vec<ModelInfoBody>,
    /// Resident memory of the whole process (Aleph's extension).
    pub process_resident_bytes: u64,
    /// Weight bytes held by every model in the process, ready or being removed (Aleph's extension).
    pub weight_bytes_total: u64,
    /// `--memory-budget` per device (`cpu`, `cuda:0`, ...) in bytes, when set (Aleph's extension).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub memory_budget: std::collections::BTreeMap<String, u64>,
    /// Bytes held or reserved per device against the budget: models ready, being removed or loading (Aleph's
    /// extension).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub memory_held: std::collections::BTreeMap<String, u64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HealthBody {
    /// Server time, Unix seconds.
    pub unix: f64,
}

/// Infinity-style response id.
pub fn response_id() -> String {
    format!("infinity-{}", uuid::Uuid::new_v4())
}

pub fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_is_string_or_list() {
        let r: EmbeddingRequest = serde_json::from_str(r#"{"input":"hi"}"#).unwrap();
        assert_eq!(r.input, InputItems(vec![InputItem::Text("hi".into())]));
        assert_eq!(r.model, DEFAULT_MODEL_NAME);
        assert_eq!(r.encoding_format, EncodingFormat::Float);
        let r: EmbeddingRequest = serde_json::from_str(r#"{"input":["a","b"],"encoding_format":"base64"}"#).unwrap();
        assert_eq!(r.input.texts().unwrap(), vec!["a", "b"]);
        let e = serde_json::from_str::<EmbeddingRequest>(r#"{"input":{}}"#).unwrap_err().to_string();
        assert!(e.contains("a string, a list of strings"), "{e}");
    }

    #[test]
    fn input_takes_token_ids() {
        let parse = |j: &str| serde_json::from_str::<EmbeddingRequest>(j).map(|r| r.input.0);
        assert_eq!(parse(r#"{"input":[101, 7592, 102]}"#).unwrap(), vec![InputItem::Ids(vec![101, 7592, 102])]);
        assert_eq!(
            parse(r#"{"input":[[1, 2], "x", []]}"#).unwrap(),
            vec![InputItem::Ids(vec![1, 2]), InputItem::Text("x".into()), InputItem::Ids(vec![])]
        );
        assert!(parse(r#"{"input":[1, "x"]}"#).is_err());
        assert!(parse(r#"{"input":["x", 1]}"#).is_err());
        assert!(parse(r#"{"input":[-1]}"#).is_err());
        assert!(parse(r#"{"input":[1.5]}"#).is_err());
    }

    #[test]
    fn null_means_default() {
        let r: EmbeddingRequest = serde_json::from_str(
            r#"{"input":"hi","model":null,"encoding_format":null,"modality":null,"dimensions":null,"user":null}"#,
        )
        .unwrap();
        assert_eq!(
            (r.model.as_str(), r.encoding_format, r.modality),
            (DEFAULT_MODEL_NAME, EncodingFormat::Float, Modality::Text)
        );
        let r: EmbeddingRequest = serde_json::from_str(r#"{"input":"hi","output_dimension":8}"#).unwrap();
        assert_eq!(r.dimensions, Some(8));
        let r: RerankRequest = serde_json::from_str(
            r#"{"query":"q","documents":["d"],"top_n":null,"return_documents":null,"raw_scores":null}"#,
        )
        .unwrap();
        assert!(!r.return_documents && !r.raw_scores && r.top_n.is_none());
        let r: ClassifyRequest = serde_json::from_str(r#"{"input":["x"],"raw_scores":null,"model":null}"#).unwrap();
        assert!(!r.raw_scores);
    }

    #[test]
    fn floats_print_like_infinity() {
        let v = EmbeddingValue::Float(vec![-0.034477282_f32]);
        assert_eq!(serde_json::to_string(&v).unwrap(), "[-0.03447728231549263]");
    }
}
