use std::path::PathBuf;

/// Why a model could not be found, loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("model `{model}` not found: {reason}")]
    NotFound { model: String, reason: String },
    #[error("missing file {}", .0.display())]
    MissingFile(PathBuf),
    #[error("cannot parse {}: {reason}", path.display())]
    BadFile { path: PathBuf, reason: String },
    #[error("unsupported model: {0}")]
    Unsupported(String),
    #[error("download failed for `{model}`: {reason}")]
    Download { model: String, reason: String },
    #[error("weights: {0}")]
    Weights(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("forward pass failed: {0}")]
    Forward(String),
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// A client's input is longer than the model's window and the client asked not to truncate it.
    #[error("the input has {tokens} tokens; the model takes at most {window} (send truncate: true to cut it)")]
    InputTooLong { tokens: usize, window: usize },
    /// A client's token id is outside the model's vocabulary.
    #[error("token id {id} is outside the model's vocabulary of {vocab} tokens")]
    BadTokenId { id: u32, vocab: usize },
}

impl From<candle_core::Error> for ModelError {
    fn from(e: candle_core::Error) -> Self {
        ModelError::Forward(e.to_string())
    }
}

/// A weight that is missing or mis-shaped, as a load error.
pub(crate) fn weights(e: candle_core::Error) -> ModelError {
    ModelError::Weights(e.to_string())
}

/// Reads and parses a JSON file, naming the file in any error.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Result<T, ModelError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ModelError::MissingFile(path.to_path_buf())
        } else {
            ModelError::BadFile { path: path.to_path_buf(), reason: e.to_string() }
        }
    })?;
    serde_json::from_str(&text).map_err(|e| ModelError::BadFile { path: path.to_path_buf(), reason: e.to_string() })
}
