//! All served models, found by the request's `model` field.

use std::sync::Arc;

use crate::error::EngineError;
use crate::handle::ModelHandle;

pub struct ModelRegistry {
    models: Vec<Arc<ModelHandle>>,
}

impl ModelRegistry {
    /// Fails if two models share a name.
    pub fn new(models: Vec<Arc<ModelHandle>>) -> Result<Self, String> {
        for (i, m) in models.iter().enumerate() {
            if models[..i].iter().any(|o| o.name() == m.name()) {
                return Err(format!(
                    "served model names must be unique: `{}` is used twice (set --served-model-name)",
                    m.name()
                ));
            }
        }
        Ok(ModelRegistry { models })
    }

    /// The model named `requested`. With a single model any name resolves to it, as in Infinity.
    pub fn get(&self, requested: &str) -> Result<&Arc<ModelHandle>, EngineError> {
        if let [only] = self.models.as_slice() {
            return Ok(only);
        }
        self.models
            .iter()
            .find(|m| m.name() == requested)
            .ok_or_else(|| EngineError::UnknownModel { requested: requested.to_string(), available: self.names() })
    }

    pub fn names(&self) -> Vec<String> {
        self.models.iter().map(|m| m.name().to_string()).collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<ModelHandle>> {
        self.models.iter()
    }

    pub fn shutdown(&self) {
        for m in &self.models {
            m.shutdown();
        }
    }
}
