//! `tokenizer.json` through the `tokenizers` crate, with the file's own padding and truncation replaced
//! by the model's window: padding is the backend's business, and the window comes from the model.

use std::path::Path;

use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use crate::error::ModelError;

/// One tokenized input.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Encoded {
    pub ids: Vec<u32>,
    pub type_ids: Vec<u32>,
}

impl Encoded {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// Special tokens `tokenizer_config.json` names (as strings or `AddedToken` objects).
#[derive(Debug, Default)]
pub struct SpecialTokens {
    pub bos_token: Option<String>,
    pub pad_token: Option<String>,
}

impl SpecialTokens {
    /// Reads `dir/tokenizer_config.json`; none named when the file is absent.
    pub fn read(dir: &Path) -> Result<Self, ModelError> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Name {
            Plain(String),
            Added { content: String },
        }
        #[derive(serde::Deserialize)]
        struct File {
            bos_token: Option<Name>,
            pad_token: Option<Name>,
        }
        let path = dir.join("tokenizer_config.json");
        if !path.exists() {
            return Ok(SpecialTokens::default());
        }
        let file: File = crate::error::read_json(&path)?;
        let text = |n: Name| match n {
            Name::Plain(s) | Name::Added { content: s } => s,
        };
        Ok(SpecialTokens { bos_token: file.bos_token.map(text), pad_token: file.pad_token.map(text) })
    }
}

/// A tokenizer that truncates to the model's window. Cheap to share: all methods take `&self`.
#[derive(Clone)]
pub struct TextTokenizer {
    kind: Kind,
    window: usize,
    /// Text around every input, tokenized with it instead of the tokenizer's special-token template.
    template: Option<(String, String)>,
}

#[derive(Clone)]
enum Kind {
    HuggingFace(Box<Tokenizer>),
    /// One token per UTF-8 byte between `[CLS]`-like 1 and `[SEP]`-like 2: for the weight-free debug engine.
    Bytes,
}

impl TextTokenizer {
    /// Loads `tokenizer.json` and truncates to `window` tokens, special tokens included.
    pub fn from_file(path: &Path, window: usize) -> Result<Self, ModelError> {
        if !path.exists() {
            return Err(ModelError::MissingFile(path.to_path_buf()));
        }
        let inner = Tokenizer::from_file(path)
            .map_err(|e| ModelError::BadFile { path: path.to_path_buf(), reason: e.to_string() })?;
        Self::new(inner, window)
    }

    pub fn new(mut inner: Tokenizer, window: usize) -> Result<Self, ModelError> {
        inner.with_padding(None);
        inner
            .with_truncation(Some(TruncationParams {
                max_length: window,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
                direction: TruncationDirection::Right,
            }))
            .map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        Ok(TextTokenizer { kind: Kind::HuggingFace(Box::new(inner)), window, template: None })
    }

    /// A byte tokenizer needing no files (ids 3..=258 are bytes, 1 and 2 frame the sequence).
    pub fn bytes(window: usize) -> Self {
        TextTokenizer { kind: Kind::Bytes, window: window.max(2), template: None }
    }

    pub fn window(&self) -> usize {
        self.window
    }

    /// Wraps every text as `prefix + text + suffix` (special tokens written out, e.g. `<bos>`) and adds no
    /// special tokens of its own: a model's prompt format (ColPali's queries).
    pub fn with_template(mut self, prefix: String, suffix: String) -> Self {
        self.template = Some((prefix, suffix));
        self
    }

    /// The id of a token in the vocabulary (special tokens included).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        match &self.kind {
            Kind::HuggingFace(tok) => tok.token_to_id(token),
            Kind::Bytes => None,
        }
    }

    /// Tokenizes `text` as written, without special tokens or template (special tokens written out in the
    /// text, such as `<bos>`, still become their ids).
    pub fn encode_raw(&self, text: &str) -> Result<Encoded, ModelError> {
        match &self.kind {
            Kind::HuggingFace(tok) => {
                let enc = tok.encode_fast(text, false).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
                Ok(Encoded { ids: enc.get_ids().to_vec(), type_ids: enc.get_type_ids().to_vec() })
            }
            Kind::Bytes => self.encode(text),
        }
    }

    /// Tokenizes a (query, document) pair with the tokenizer's pair template; when the two pass the
    /// window, the longer side is truncated first.
    pub fn encode_pair(&self, first: &str, second: &str) -> Result<Encoded, ModelError> {
        match &self.kind {
            Kind::HuggingFace(tok) => {
                let enc = tok.encode_fast((first, second), true).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
                Ok(Encoded { ids: enc.get_ids().to_vec(), type_ids: enc.get_type_ids().to_vec() })
            }
            Kind::Bytes => {
                let joined = format!("{first}\u{1f}{second}");
                self.encode(&joined)
            }
        }
    }

    /// Tokenizes one text with the model's special tokens, truncated to the window.
    pub fn encode(&self, text: &str) -> Result<Encoded, ModelError> {
        if let Some((prefix, suffix)) = &self.template {
            return self.encode_raw(&format!("{prefix}{text}{suffix}"));
        }
        match &self.kind {
            Kind::HuggingFace(tok) => {
                let enc = tok.encode_fast(text, true).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
                Ok(Encoded { ids: enc.get_ids().to_vec(), type_ids: enc.get_type_ids().to_vec() })
            }
            Kind::Bytes => {
                let body = text.bytes().take(self.window - 2).map(|b| b as u32 + 3);
                let ids: Vec<u32> = std::iter::once(1).chain(body).chain(std::iter::once(2)).collect();
                Ok(Encoded { type_ids: vec![0; ids.len()], ids })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_tokenizer_frames_and_truncates() {
        let t = TextTokenizer::bytes(5);
        assert_eq!(t.encode("ab").unwrap().ids, vec![1, 100, 101, 2]);
        assert_eq!(t.encode("abcdef").unwrap().len(), 5);
        assert_eq!(t.encode("").unwrap().ids, vec![1, 2]);
    }
}

#[cfg(test)]
mod pair_tests {
    use super::*;

    #[test]
    fn pairs_get_segment_ids_from_the_template() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/tiny/bert-rerank/tokenizer.json");
        let t = TextTokenizer::from_file(&path, 64).unwrap();
        let e = t.encode_pair("what is the capital of france", "Berlin").unwrap();
        assert_eq!(e.type_ids, vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1]);
        let e = t.encode_pair("what is the capital of france", "").unwrap();
        assert_eq!(e.type_ids.iter().sum::<u32>(), 1);
    }
}
