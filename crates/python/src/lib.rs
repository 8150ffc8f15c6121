//! `aleph._native`: Aleph's engine in a Python process. One [`Engine`] is one served model with its own queue,
//! batcher and inference threads, as in the server; every call releases the GIL while the engine works, and
//! the Python package (`python/aleph`) builds Infinity's API on top.
//!
//! Answers are the engine's typed outputs ([`aleph_engine::outputs`]) flattened into bytes the Python side
//! views as numpy arrays without copying value by value.

mod runtime;
mod spec;

use std::sync::{Arc, Mutex};

use aleph_engine::{EmbedSpec, Embedding, EngineError, Input, ModelHandle, RunOptions};
use aleph_models::{ModelInfo, OutputKind, Task};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use runtime::{wait, Shared};

/// One loaded model, started.
#[pyclass(module = "aleph._native", frozen)]
struct Engine {
    /// `None` once stopped.
    handle: Mutex<Option<Arc<ModelHandle>>>,
    /// The process that started the engine's threads: a forked child has none of them.
    pid: u32,
    info: ModelInfo,
    name: String,
    embedding_dtype: &'static str,
}

/// An embedding call's answer: `(kind, payload, usage)` where kind is `dense` (payload: f32 bytes of every
/// vector, and the width), `sparse` (per input: token ids as u32 bytes, weights as f32 bytes) or `multi` (per
/// input: f32 bytes and the width).
type EmbedAnswer<'py> = (&'static str, Bound<'py, PyAny>, usize);

/// One text's `(label, score)` pairs, best first.
type LabelScores = Vec<(String, f32)>;

#[pymethods]
impl Engine {
    /// Loads, warms up and starts a model; the options are `EngineArgs`' (see `spec::model_spec`).
    #[staticmethod]
    #[pyo3(signature = (**options))]
    fn load(py: Python<'_>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Engine> {
        let options = spec::Options::from_dict(options)?;
        let (spec, cache, queue_size, workers) = options.model_spec().map_err(PyValueError::new_err)?;
        let shared = Shared::get(workers)?;
        let loaded = py.detach(|| {
            let dir = aleph_engine::load::resolve(&spec, false)?;
            let cache = cache.map(|root| (root, spec::VECTOR_CACHE_MAX_BYTES));
            aleph_engine::load::load_model(&spec, dir, queue_size, cache, shared.pool.clone(), None)
        });
        let handle = loaded.map_err(|e| PyRuntimeError::new_err(format!("{e:#}")))?;
        Ok(Engine {
            info: handle.info().clone(),
            name: handle.name().to_string(),
            embedding_dtype: handle.config().embedding_dtype.name(),
            handle: Mutex::new(Some(Arc::new(handle))),
            pid: std::process::id(),
        })
    }

    /// The name the engine serves under (`served_model_name`).
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// What the model can do, in Infinity's words (`embed`, `rerank`, `classify`, `image_embed`,
    /// `audio_embed`) and Aleph's (`sparse`, `colbert`).
    #[getter]
    fn capabilities(&self) -> Vec<&'static str> {
        let mut caps = self.info.capabilities();
        // A ColBERT checkpoint embeds (token vectors) and ranks by MaxSim.
        if self.info.task == Task::MultiVector && !caps.contains(&"rerank") {
            caps.push("rerank");
        }
        caps
    }

    /// The model's facts: dimensions, window, architecture, pooling, whether it normalizes, its prompts.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("name", &self.name)?;
        d.set_item("dim", self.info.dim)?;
        d.set_item("window", self.info.window)?;
        d.set_item("architecture", &self.info.architecture)?;
        d.set_item("pooling", format!("{:?}", self.info.pooling).to_lowercase())?;
        d.set_item("normalize", self.info.normalize)?;
        d.set_item("backend", self.info.backend.name())?;
        d.set_item("dtype", self.info.dtype.name())?;
        d.set_item("embedding_dtype", self.embedding_dtype)?;
        d.set_item("colbert_dim", self.info.colbert_dim)?;
        d.set_item("prompts", self.info.prompts.prompts.clone())?;
        if let Task::Classify { labels, .. } = &self.info.task {
            d.set_item("labels", labels.clone())?;
        }
        Ok(d)
    }

    #[getter]
    fn running(&self) -> bool {
        self.lock().is_some()
    }

    /// Embeds texts (or, with `modality`, encoded images or audio clips as bytes).
    #[pyo3(signature = (inputs, *, modality="text", dimensions=None, prompt_name=None, output="dense", task=None))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments, one parameter each
    fn embed<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<Bound<'py, PyAny>>,
        modality: &str,
        dimensions: Option<usize>,
        prompt_name: Option<String>,
        output: &str,
        task: Option<String>,
    ) -> PyResult<EmbedAnswer<'py>> {
        let handle = self.handle()?;
        let inputs = match modality {
            "text" => inputs
                .iter()
                .map(|i| i.extract::<String>().map(Input::Text))
                .collect::<PyResult<Vec<_>>>()
                .map_err(|_| PyTypeError::new_err("texts must be str"))?,
            "image" | "audio" => {
                let wrap = if modality == "image" { Input::Image } else { Input::Audio };
                inputs
                    .iter()
                    .map(|i| i.extract::<Vec<u8>>().map(wrap))
                    .collect::<PyResult<Vec<_>>>()
                    .map_err(|_| PyTypeError::new_err(format!("{modality} inputs must be bytes")))?
            }
            other => return Err(PyValueError::new_err(format!("modality `{other}`: text, image or audio"))),
        };
        let output = match output {
            "dense" => OutputKind::Default,
            "sparse" => OutputKind::Sparse,
            "colbert" => OutputKind::MultiVector,
            other => return Err(PyValueError::new_err(format!("output `{other}`: dense, sparse or colbert"))),
        };
        if dimensions == Some(0) {
            return Err(PyValueError::new_err("dimensions must be at least 1"));
        }
        let spec = EmbedSpec { prompt_name, dimensions, output, task, ..Default::default() };
        let embedded = wait(py, self.pid, handle.embed(inputs, &spec))?.map_err(engine_error)?;
        let usage = embedded.run.prompt_tokens;
        let e = &embedded.embeddings;
        let answer = match e.first() {
            Some(Embedding::Sparse(_)) => {
                let items = e.iter().map(|x| match x {
                    Embedding::Sparse(pairs) => {
                        let ids: Vec<u8> = pairs.iter().flat_map(|(i, _)| i.to_le_bytes()).collect();
                        let values: Vec<u8> = pairs.iter().flat_map(|(_, v)| v.to_le_bytes()).collect();
                        (PyBytes::new(py, &ids), PyBytes::new(py, &values))
                    }
                    _ => (PyBytes::new(py, &[]), PyBytes::new(py, &[])),
                });
                ("sparse", items.collect::<Vec<_>>().into_pyobject(py)?.into_any())
            }
            Some(Embedding::Multi(_)) => {
                let items = e.iter().map(|x| match x {
                    Embedding::Multi(rows) => {
                        let width = rows.first().map_or(0, Vec::len);
                        (f32_bytes(py, rows.iter().flatten()), width)
                    }
                    _ => (PyBytes::new(py, &[]), 0),
                });
                ("multi", items.collect::<Vec<_>>().into_pyobject(py)?.into_any())
            }
            _ => {
                let width = match e.first() {
                    Some(Embedding::Dense(v)) => v.len(),
                    _ => 0,
                };
                let flat = e.iter().flat_map(|x| match x {
                    Embedding::Dense(v) => v.as_slice(),
                    _ => &[],
                });
                ("dense", (f32_bytes(py, flat), width).into_pyobject(py)?.into_any())
            }
        };
        Ok((answer.0, answer.1, usage))
    }

    /// Scores `documents` against `query` in document order: sigmoid of the logit (or the logit), or MaxSim.
    #[pyo3(signature = (query, documents, *, raw_scores=false, instruction=None))]
    fn rerank(
        &self,
        py: Python<'_>,
        query: String,
        documents: Vec<String>,
        raw_scores: bool,
        instruction: Option<String>,
    ) -> PyResult<(Vec<f32>, usize)> {
        let handle = self.handle()?;
        let caps = self.capabilities();
        if !caps.contains(&"rerank") {
            return Err(not_deployed(&self.name, "rerank", &caps));
        }
        let run = handle.relevance(&query, &documents, instruction.as_deref(), raw_scores, RunOptions::default());
        let (scores, out) = wait(py, self.pid, run)?.map_err(engine_error)?;
        Ok((scores, out.prompt_tokens))
    }

    /// Each text's labels with their scores, best first.
    #[pyo3(signature = (texts, *, raw_scores=false))]
    fn classify(&self, py: Python<'_>, texts: Vec<String>, raw_scores: bool) -> PyResult<(Vec<LabelScores>, usize)> {
        let handle = self.handle()?;
        let (labels, out) = wait(py, self.pid, handle.classify(texts, raw_scores))?.map_err(engine_error)?;
        let labels = labels.into_iter().map(|l| l.into_iter().map(|s| (s.label, s.score)).collect()).collect();
        Ok((labels, out.prompt_tokens))
    }

    /// Stops accepting work, lets queued work finish and joins the threads; later calls raise.
    fn stop(&self, py: Python<'_>) {
        let handle = self.lock().take();
        if let Some(h) = handle {
            if self.pid == std::process::id() {
                py.detach(|| h.shutdown());
            }
        }
    }

    fn __reduce__(&self) -> PyResult<()> {
        Err(PyTypeError::new_err(format!(
            "a running aleph engine (`{}`) cannot be pickled: pickle its EngineArgs and build the engine where it \
             is used",
            self.name
        )))
    }
}

impl Engine {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<ModelHandle>>> {
        self.handle.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The running engine, or why it cannot be used here.
    fn handle(&self) -> PyResult<Arc<ModelHandle>> {
        runtime::check_pid(self.pid)?;
        self.lock().clone().ok_or_else(|| {
            PyRuntimeError::new_err(format!("engine `{}` is stopped; start it again (astart) first", self.name))
        })
    }
}

fn f32_bytes<'py, 'a>(py: Python<'py>, values: impl Iterator<Item = &'a f32>) -> Bound<'py, PyBytes> {
    let bytes: Vec<u8> = values.flat_map(|v| v.to_le_bytes()).collect();
    PyBytes::new(py, &bytes)
}

/// Infinity's message for a call the model cannot serve.
fn not_deployed(name: &str, what: &str, caps: &[&str]) -> PyErr {
    ModelNotDeployedError::new_err(format!("the loaded model `{name}` cannot fulfill `{what}`. Options are {caps:?}."))
}

pyo3::create_exception!(_native, ModelNotDeployedError, PyValueError, "The model cannot serve this call.");
pyo3::create_exception!(_native, OverloadedError, PyRuntimeError, "The model's queue is full; retry later.");

/// Bad input becomes `ValueError`, an unsupported call `ModelNotDeployedError`, a full queue `OverloadedError`,
/// the rest `RuntimeError`; each with the engine's message.
fn engine_error(e: EngineError) -> PyErr {
    let msg = e.to_string();
    match e {
        EngineError::InvalidInput(_) | EngineError::BadMedia(_) | EngineError::TooManyTokens { .. } => {
            PyValueError::new_err(msg)
        }
        EngineError::Unsupported(_) => ModelNotDeployedError::new_err(msg),
        EngineError::Overloaded { .. } => OverloadedError::new_err(msg),
        _ => PyRuntimeError::new_err(msg),
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Log lines go to stderr under ALEPH_LOG / RUST_LOG (warnings by default), as the server's do.
    let filter =
        std::env::var("ALEPH_LOG").or_else(|_| std::env::var("RUST_LOG")).unwrap_or_else(|_| "warn".to_string());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .try_init();
    m.add_class::<Engine>()?;
    m.add("ModelNotDeployedError", m.py().get_type::<ModelNotDeployedError>())?;
    m.add("OverloadedError", m.py().get_type::<OverloadedError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
