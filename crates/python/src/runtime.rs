//! The process-wide parts every engine shares (the tokenizer pool, the runtime that drives the engine's
//! futures), and waiting on an engine with the GIL released while staying interruptible by Ctrl-C.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aleph_engine::TokenizerPool;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

pub struct Shared {
    pub pool: Arc<TokenizerPool>,
    runtime: tokio::runtime::Runtime,
}

/// The shared parts and the process that built them.
static SHARED: Mutex<Option<(u32, Arc<Shared>)>> = Mutex::new(None);

impl Shared {
    /// The process's shared parts, built on first use with `workers` tokenizer threads (else one per core, or
    /// `ALEPH_COMPUTE_THREADS`).
    pub fn get(workers: Option<usize>) -> PyResult<Arc<Shared>> {
        let mut shared = SHARED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((pid, s)) = shared.as_ref() {
            check_pid(*pid)?;
            return Ok(s.clone());
        }
        let workers = workers
            .or_else(|| std::env::var("ALEPH_COMPUTE_THREADS").ok().and_then(|v| v.parse().ok()))
            .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("aleph-py-runtime")
            .enable_time()
            .build()
            .map_err(|e| PyRuntimeError::new_err(format!("starting aleph's runtime: {e}")))?;
        let s = Arc::new(Shared { pool: Arc::new(TokenizerPool::new(workers)), runtime });
        *shared = Some((std::process::id(), s.clone()));
        Ok(s)
    }
}

/// Refuses work in a process forked from the one that started the engine's threads: a child inherits none of
/// them, so its calls would wait forever.
pub fn check_pid(pid: u32) -> PyResult<()> {
    if pid == std::process::id() {
        return Ok(());
    }
    Err(PyRuntimeError::new_err(
        "this aleph engine was started in the parent process; its threads do not survive fork(). Build engines \
         in the process that uses them (multiprocessing's 'spawn' start method, or create the engine after the \
         fork)",
    ))
}

/// How often a wait looks for Ctrl-C.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// Drives `work` to its end with the GIL released, checking for signals (Ctrl-C raises `KeyboardInterrupt`)
/// every [`SIGNAL_CHECK`]; an interrupted wait drops `work`, which abandons its queued items.
pub fn wait<T: Send>(py: Python<'_>, pid: u32, work: impl Future<Output = T> + Send) -> PyResult<T> {
    check_pid(pid)?;
    let shared = Shared::get(None)?;
    py.detach(|| {
        shared.runtime.block_on(async {
            tokio::pin!(work);
            loop {
                tokio::select! {
                    out = &mut work => return Ok(out),
                    _ = tokio::time::sleep(SIGNAL_CHECK) => {
                        Python::attach(|py| py.check_signals())?;
                    }
                }
            }
        })
    })
}
