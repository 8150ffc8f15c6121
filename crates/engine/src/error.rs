/// Why the engine could not serve a request. Each variant maps to one HTTP status upstream.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum EngineError {
    #[error("model `{requested}` is not served here; served models: {}", available.join(", "))]
    UnknownModel { requested: String, available: Vec<String> },
    #[error("model `{model}` is {state}; retry once it is ready")]
    NotReady { model: String, state: &'static str },
    #[error("model `{model}` is overloaded: its queue holds {queued} items (limit {limit}); retry later")]
    Overloaded { model: String, queued: usize, limit: usize },
    #[error("inference failed for this batch: {0}")]
    Inference(String),
    #[error("tokenization failed: {0}")]
    Tokenization(String),
    /// The client's image (or audio) could not be used: undecodable, unsupported, too small or large.
    #[error("{0}")]
    BadMedia(String),
    #[error("the request needs {tokens} tokens; at most {limit} are allowed per request (--max-request-tokens)")]
    TooManyTokens { tokens: usize, limit: usize },
    /// The client's input cannot be used as given (too long without truncation, a token id outside the
    /// vocabulary).
    #[error("{0}")]
    InvalidInput(String),
    /// The model cannot produce what the request asks for.
    #[error("{0}")]
    Unsupported(String),
    #[error("model `{0}` is shutting down")]
    ShuttingDown(String),
}
