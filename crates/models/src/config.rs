//! `config.json`: which architecture a folder holds and what task it serves.

use std::path::Path;

use serde::Deserialize;

use crate::error::{read_json, ModelError};

/// The fields of `config.json` needed to pick an architecture; each architecture parses its own
/// full config.
#[derive(Debug, Clone, Deserialize)]
pub struct ArchConfig {
    #[serde(default)]
    pub model_type: String,
    #[serde(default)]
    pub architectures: Vec<String>,
}

impl ArchConfig {
    pub fn read(dir: &Path) -> Result<Self, ModelError> {
        read_json(&dir.join("config.json"))
    }
}
