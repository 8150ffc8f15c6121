//! All served models, found by the request's `model` field. Models can join and leave while the process
//! serves: a model being loaded or drained is listed with its state but never routed to. Each listed model
//! counts against the memory budget: while loading with the least its weights can take, once loaded with what
//! they do take.

use std::collections::BTreeMap;
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

/// Bytes of weights per device (`cpu`, `cuda:0`, ...).
pub type Memory = BTreeMap<String, u64>;

/// The most bytes of weights each device may hold; a device not listed has no limit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryBudget(pub BTreeMap<String, u64>);

/// Why a load was not begun, or not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadRefused {
    /// A model of that name is loading, ready or draining.
    Busy(ModelState),
    /// The weights would pass the memory budget: the message names the device, the limit and what holds it.
    OverBudget(String),
}

impl std::fmt::Display for LoadRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadRefused::Busy(state) => write!(f, "a model of that name is already {}", state.name()),
            LoadRefused::OverBudget(why) => f.write_str(why),
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
    /// What it holds (ready, draining) or is expected to hold at least (loading); nothing once failed.
    pub memory: Memory,
}

pub struct ModelRegistry {
    entries: RwLock<Vec<ModelEntry>>,
    /// Names must match: no single-model fallback (models come and go, so a request for one that left must not
    /// be answered by another).
    exact_names: bool,
    budget: MemoryBudget,
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
                memory: Memory::new(),
            })
            .collect();
        Ok(ModelRegistry { entries: RwLock::new(entries), exact_names: false, budget: MemoryBudget::default() })
    }

    /// Requests must name their model exactly (the admin API is on).
    pub fn with_exact_names(mut self) -> Self {
        self.exact_names = true;
        self
    }

    /// Loads are held to `budget`.
    pub fn with_budget(mut self, budget: MemoryBudget) -> Self {
        self.budget = budget;
        self
    }

    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// Bytes of weights held (or reserved by loads) per device, over every listed model.
    pub fn held(&self) -> Memory {
        total(self.read().iter(), None)
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

    /// Lists `name` as loading, reserving `expected` (the least its weights can take) against the budget.
    /// Refused while the name is loading, ready or draining, or when `expected` would pass the budget; a failed
    /// entry is replaced.
    pub fn begin_load(&self, name: &str, model_id: &str, expected: Memory) -> Result<(), LoadRefused> {
        let mut entries = self.write();
        if let Some(e) = entries.iter().find(|e| e.name == name && !matches!(e.state, ModelState::Failed(_))) {
            return Err(LoadRefused::Busy(e.state.clone()));
        }
        self.check(&entries, name, &expected, "would need at least")?;
        entries.retain(|e| e.name != name);
        entries.push(ModelEntry {
            name: name.to_string(),
            model_id: model_id.to_string(),
            state: ModelState::Loading,
            handle: None,
            memory: expected,
        });
        Ok(())
    }

    /// Raises the reservation of a loading model to `expected`, known once its files are here (a download).
    pub fn reserve(&self, name: &str, expected: Memory) -> Result<(), LoadRefused> {
        let mut entries = self.write();
        self.check(&entries, name, &expected, "would need at least")?;
        if let Some(e) = entries.iter_mut().find(|e| e.name == name && e.state == ModelState::Loading) {
            e.memory = expected;
        }
        Ok(())
    }

    /// Ends a load begun with [`Self::begin_load`]: the model serves, holding `memory` as measured, or is listed as
    /// failed with the reason. A model whose measured weights pass the budget is listed as failed too, and its
    /// handle is given back to be stopped.
    pub fn finish_load(
        &self,
        name: &str,
        loaded: Result<(Arc<ModelHandle>, Memory), String>,
    ) -> Result<(), (Option<Arc<ModelHandle>>, String)> {
        let mut entries = self.write();
        let outcome = match loaded {
            Ok((handle, memory)) => match self.check(&entries, name, &memory, "holds") {
                Ok(()) => Ok((handle, memory)),
                Err(refused) => Err((Some(handle), refused.to_string())),
            },
            Err(why) => Err((None, why)),
        };
        let Some(e) = entries.iter_mut().find(|e| e.name == name && e.state == ModelState::Loading) else {
            return outcome.map(|_| ());
        };
        match outcome {
            Ok((handle, memory)) => {
                e.state = ModelState::Ready;
                e.handle = Some(handle);
                e.memory = memory;
                Ok(())
            }
            Err((handle, why)) => {
                e.state = ModelState::Failed(why.clone());
                e.memory = Memory::new();
                Err((handle, why))
            }
        }
    }

    /// Whether `name` holding `memory` keeps every device within the budget, besides what the other entries hold.
    fn check(&self, entries: &[ModelEntry], name: &str, memory: &Memory, verb: &str) -> Result<(), LoadRefused> {
        let others = total(entries.iter(), Some(name));
        for (device, &bytes) in memory {
            let Some(&limit) = self.budget.0.get(device) else { continue };
            let held = others.get(device).copied().unwrap_or(0);
            if held.saturating_add(bytes) > limit {
                let holders: Vec<String> = entries
                    .iter()
                    .filter(|e| e.name != name)
                    .filter_map(|e| e.memory.get(device).filter(|b| **b > 0).map(|b| (e, *b)))
                    .map(|(e, b)| format!("`{}` {} ({})", e.name, human_bytes(b), e.state.name()))
                    .collect();
                let holders = if holders.is_empty() { "nothing".to_string() } else { holders.join(", ") };
                return Err(LoadRefused::OverBudget(format!(
                    "model `{name}` {verb} {} of weights on {device}, and the memory budget there is {} of which {} \
                     is held: {holders}",
                    human_bytes(bytes),
                    human_bytes(limit),
                    human_bytes(held)
                )));
            }
        }
        Ok(())
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

/// The memory of `entries` per device, leaving out `except`.
fn total<'a>(entries: impl Iterator<Item = &'a ModelEntry>, except: Option<&str>) -> Memory {
    let mut sum = Memory::new();
    for e in entries.filter(|e| Some(e.name.as_str()) != except) {
        for (device, bytes) in &e.memory {
            *sum.entry(device.clone()).or_default() += bytes;
        }
    }
    sum
}

/// Bytes as people read them: `512 B`, `90.3 MiB`, `7.50 GiB`, `256 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else if value < 10.0 {
        format!("{value:.2} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn ready_handle(e: &ModelEntry) -> Option<&Arc<ModelHandle>> {
    match e {
        ModelEntry { state: ModelState::Ready, handle: Some(h), .. } => Some(h),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_cpu(bytes: u64) -> Memory {
        Memory::from([("cpu".to_string(), bytes)])
    }

    fn budget(cpu: u64) -> ModelRegistry {
        let budget = MemoryBudget(BTreeMap::from([("cpu".to_string(), cpu)]));
        ModelRegistry::new(Vec::new()).expect("an empty registry").with_budget(budget)
    }

    #[test]
    fn loads_reserve_against_the_budget_and_name_what_is_held() {
        let registry = budget(100);
        registry.begin_load("a", "org/a", on_cpu(60)).expect("fits");
        let refused = registry.begin_load("b", "org/b", on_cpu(50)).expect_err("60 + 50 > 100");
        let LoadRefused::OverBudget(why) = refused else { panic!("refused for the budget, not {refused:?}") };
        assert!(why.contains("`a` 60 B (loading)") && why.contains("budget there is 100 B"), "{why}");
        registry.begin_load("b", "org/b", on_cpu(40)).expect("60 + 40 fits");
        assert_eq!(registry.held(), on_cpu(100));
    }

    #[test]
    fn a_failed_load_frees_its_reservation() {
        let registry = budget(100);
        registry.begin_load("a", "org/a", on_cpu(90)).expect("fits");
        let failed = registry.finish_load("a", Err("no such file".into()));
        assert_eq!(failed.map_err(|(h, why)| (h.is_none(), why)), Err((true, "no such file".to_string())));
        assert_eq!(registry.held(), Memory::new());
        registry.begin_load("b", "org/b", on_cpu(90)).expect("a's reservation is gone");
        // A failed name may be loaded again; a loading one may not.
        registry.begin_load("a", "org/a", on_cpu(10)).expect("fits");
        assert_eq!(registry.begin_load("a", "org/a", on_cpu(1)), Err(LoadRefused::Busy(ModelState::Loading)));
    }

    #[test]
    fn devices_are_budgeted_apart_and_unlisted_ones_are_unlimited() {
        let registry = budget(100);
        let on_gpu = Memory::from([("cuda:0".to_string(), 1 << 40)]);
        registry.begin_load("big", "org/big", on_gpu).expect("no limit on cuda:0");
        registry.begin_load("small", "org/small", on_cpu(100)).expect("cpu alone counts for cpu");
    }

    #[test]
    fn bytes_read_as_people_write_them() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(90 * 1024 * 1024 + 300 * 1024), "90.3 MiB");
        assert_eq!(human_bytes(7 * (1 << 30) + (1 << 29)), "7.50 GiB");
        assert_eq!(human_bytes(256 << 20), "256 MiB");
    }
}
