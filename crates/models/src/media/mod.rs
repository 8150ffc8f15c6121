//! Media preprocessing: what turns a client's image (or audio) bytes into the tensor a model takes.
//! Runs on the engine's preprocessing threads, never on the HTTP threads.

pub mod audio;
pub mod data_uri;
pub mod image;
pub mod mel;
pub mod resample;
pub mod resample_poly;

/// Why a client's media could not be used. Every variant is the client's problem (a 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MediaError {
    #[error("{0}")]
    Decode(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    TooSmall(String),
    #[error("{0}")]
    TooLarge(String),
}
