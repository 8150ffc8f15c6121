//! All served models, found by the request's `model` field. Models can join and leave while the process
//! serves: a model being loaded or drained is listed with its state but never routed to.

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::EngineError;
use crate::handle::ModelHandle;

/// Where one model is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelState {
    Loading,
    Ready,
    /// Removed from routing; its in-flight requests finish before its memory is freed.
    Draining,
    /// The load failed, with the reason; the name can be loaded again.
    Failed(String),
}

impl ModelState {
    /// The state's name, as the admin API lists it and messages say it.
    pub fn name(&self) -> &'static str {
        match self {
            ModelState::Loading => "loading",
            ModelState::Ready => "ready",
            ModelState::Draining => "draining",
            ModelState::Failed(_) => "failed",
        }
    }
}

/// One listed model: what was asked for and where it stands.
#[derive(Clone)]
pub struct ModelEntry {
    pub name: String,
    pub model_id: String,
    pub state: ModelState,
    /// The handle while ready or draining.
    pub handle: Option<Arc<ModelHandle>>,
}

pub struct ModelRegistry {
    entries: RwLock<Vec<ModelEntry>>,
    /// Names must match: no single-model fallback (models come and go, so a request for one that left must not
    /// be answered by another).
    exact_names: bool,
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
        let entries = models
            .into_iter()
            .map(|m| ModelEntry {
                name: m.name().to_string(),
                model_id: m.config().model_id.clone(),
                state: ModelState::Ready,
                handle: Some(m),
            })
            .collect();
        Ok(ModelRegistry { entries: RwLock::new(entries), exact_names: false })
    }

    /// Requests must name their model exactly (the admin API is on).
    pub fn with_exact_names(mut self) -> Self {
        self.exact_names = true;
        self
    }

    fn read(&self) -> RwLockReadGuard<'_, Vec<ModelEntry>> {
        self.entries.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Vec<ModelEntry>> {
        self.entries.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The model named `requested`. With a single ready model any name resolves to it, as in Infinity, unless
    /// names must be exact or the name is that of a model still loading or being removed.
    pub fn get(&self, requested: &str) -> Result<Arc<ModelHandle>, EngineError> {
        let entries = self.read();
        let named = entries.iter().find(|e| e.name == requested);
        match named {
            Some(ModelEntry { state: ModelState::Ready, handle: Some(h), .. }) => return Ok(h.clone()),
            Some(ModelEntry { state: state @ (ModelState::Loading | ModelState::Draining), .. }) => {
                return Err(EngineError::NotReady { model: requested.to_string(), state: state.name() })
            }
            _ => {}
        }
        let mut ready = entries.iter().filter_map(ready_handle);
        match (ready.next(), ready.next(), named) {
            (Some(only), None, None) if !self.exact_names => Ok(only.clone()),
            _ => Err(EngineError::UnknownModel {
                requested: requested.to_string(),
                available: entries.iter().filter_map(ready_handle).map(|h| h.name().to_string()).collect(),
            }),
        }
    }

    /// The names of the ready models, in the order they were added.
    pub fn names(&self) -> Vec<String> {
        self.ready().iter().map(|m| m.name().to_string()).collect()
    }

    /// The ready models, in the order they were added.
    pub fn ready(&self) -> Vec<Arc<ModelHandle>> {
        self.read().iter().filter_map(ready_handle).cloned().collect()
    }

    /// Every listed model, whatever its state.
    pub fn entries(&self) -> Vec<ModelEntry> {
        self.read().clone()
    }

    /// Lists `name` as loading. Refused while the name is loading, ready or draining; a failed entry is replaced.
    pub fn begin_load(&self, name: &str, model_id: &str) -> Result<(), ModelState> {
        let mut entries = self.write();
        if let Some(e) = entries.iter().find(|e| e.name == name && !matches!(e.state, ModelState::Failed(_))) {
            return Err(e.state.clone());
        }
        entries.retain(|e| e.name != name);
        entries.push(ModelEntry {
            name: name.to_string(),
            model_id: model_id.to_string(),
            state: ModelState::Loading,
            handle: None,
        });
        Ok(())
    }

    /// Ends a load begun with [`Self::begin_load`]: the model serves, or is listed as failed with the reason.
    pub fn finish_load(&self, name: &str, loaded: Result<Arc<ModelHandle>, String>) {
        let mut entries = self.write();
        if let Some(e) = entries.iter_mut().find(|e| e.name == name && e.state == ModelState::Loading) {
            match loaded {
                Ok(h) => {
                    e.state = ModelState::Ready;
                    e.handle = Some(h);
                }
                Err(why) => e.state = ModelState::Failed(why),
            }
        }
    }

    /// Takes a ready model out of routing and returns its entry, whose handle is to be drained; a failed entry
    /// is simply forgotten (returned without a handle). Refused (with the state) while the model is loading or
    /// already draining.
    pub fn begin_drain(&self, name: &str) -> Result<ModelEntry, Option<ModelState>> {
        let mut entries = self.write();
        let Some(i) = entries.iter().position(|e| e.name == name) else {
            return Err(None);
        };
        match entries[i].state.clone() {
            ModelState::Ready => {
                entries[i].state = ModelState::Draining;
                Ok(entries[i].clone())
            }
            ModelState::Failed(_) => Ok(entries.remove(i)),
            state => Err(Some(state)),
        }
    }

    /// Forgets a drained model.
    pub fn remove(&self, name: &str) {
        self.write().retain(|e| !(e.name == name && e.state == ModelState::Draining));
    }

    /// Stops every model's workers (process shutdown).
    pub fn shutdown(&self) {
        let handles: Vec<_> = self.read().iter().filter_map(|e| e.handle.clone()).collect();
        for m in handles {
            m.shutdown();
        }
    }
}

fn ready_handle(e: &ModelEntry) -> Option<&Arc<ModelHandle>> {
    match e {
        ModelEntry { state: ModelState::Ready, handle: Some(h), .. } => Some(h),
        _ => None,
    }
}
