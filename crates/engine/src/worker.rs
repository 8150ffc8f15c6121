//! The two threads behind each model: the batcher, which cuts batches from the queue and keeps one
//! ready, and the inference thread, which owns the model and runs them.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aleph_models::{AudioFeatures, Batch, Model, Pixels};
use crossbeam_channel::{Receiver, SendTimeoutError, Sender};

use crate::batcher::BatchPolicy;
use crate::error::EngineError;
use crate::prepared::Prepared;
use crate::queue::{Item, ItemOutput, Queue};
use crate::scheduler::ComputeSlot;

/// Counters the inference thread keeps for `/models` and `/metrics`.
#[derive(Default)]
pub(crate) struct WorkerStats {
    pub running: AtomicUsize,
    pub last_batch_size: AtomicUsize,
    pub batches: AtomicUsize,
    pub failed_batches: AtomicUsize,
}

/// How often a prepared batch is re-cut while the model is still busy.
const RECUT_EVERY: Duration = Duration::from_millis(1);

pub(crate) fn spawn_batcher(
    model: String,
    queue: Arc<Queue>,
    policy: BatchPolicy,
    to_worker: Sender<Vec<Item>>,
) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(format!("aleph-batch-{model}"))
        .spawn(move || {
            while let Some((mut batch, mut generation)) = queue.next_batch(&policy) {
                // Hold exactly one batch ready; while the model is busy, fold new arrivals into it.
                loop {
                    match to_worker.send_timeout(batch, RECUT_EVERY) {
                        Ok(()) => break,
                        Err(SendTimeoutError::Timeout(b)) => (batch, generation) = queue.recut(b, generation, &policy),
                        Err(SendTimeoutError::Disconnected(b)) => {
                            fail(b, &EngineError::ShuttingDown(model.clone()));
                            return;
                        }
                    }
                }
            }
        })
        .expect("spawning a batcher thread")
}

/// One replica's thread; replicas of a model share the batcher's channel, so whichever is free runs
/// the next batch.
pub(crate) fn spawn_inference(
    model_name: String,
    replica: usize,
    model: Arc<dyn Model>,
    from_batcher: Receiver<Vec<Item>>,
    stats: Arc<WorkerStats>,
    slot: ComputeSlot,
) -> JoinHandle<()> {
    let thread =
        if replica == 0 { format!("aleph-infer-{model_name}") } else { format!("aleph-infer{replica}-{model_name}") };
    std::thread::Builder::new()
        .name(thread)
        .spawn(move || {
            while let Ok(items) = from_batcher.recv() {
                run_batch(&model_name, model.as_ref(), items, &stats, &slot);
            }
        })
        .expect("spawning an inference thread")
}

fn run_batch(model_name: &str, model: &dyn Model, items: Vec<Item>, stats: &WorkerStats, slot: &ComputeSlot) {
    // Last chance to skip work nobody waits for.
    let items: Vec<Item> = items.into_iter().filter(|i| !i.abandoned()).collect();
    if items.is_empty() {
        return;
    }
    // Texts form one packed batch, images and clips their own; outputs go back in item order.
    let mut batch = Batch::new();
    let mut images = Vec::new();
    let mut clips = Vec::new();
    for item in &items {
        match &item.input {
            Prepared::Tokens(e, output, adapter) => batch.push_with(&e.ids, &e.type_ids, *output, *adapter),
            Prepared::Image { pixels, .. } => images.push(pixels.clone()),
            Prepared::Audio { features, .. } => clips.push(features.clone()),
        }
    }
    let labels = [("model", model_name.to_string())];
    metrics::histogram!("aleph_batch_size", &labels).record(items.len() as f64);
    metrics::histogram!("aleph_batch_tokens", &labels).record(batch.total_tokens() as f64);

    stats.running.fetch_add(1, Ordering::Relaxed);
    // Timed from the turn: a wait for another model's batch counts as queueing.
    let (started, result) = slot.run(|| {
        let started = Instant::now();
        (started, catch_unwind(AssertUnwindSafe(|| forward(model, &batch, &images, &clips, &items))))
    });
    let inference_time = started.elapsed();
    stats.running.fetch_sub(1, Ordering::Relaxed);
    stats.last_batch_size.store(items.len(), Ordering::Relaxed);
    stats.batches.fetch_add(1, Ordering::Relaxed);
    metrics::histogram!("aleph_inference_duration_seconds", &labels).record(inference_time.as_secs_f64());

    let outcome = match result {
        Ok(Ok(vectors)) => Ok(vectors),
        Ok(Err(e)) => Err(e),
        Err(panic) => Err(format!("the model panicked: {}", panic_message(&panic))),
    };
    match outcome {
        Ok(vectors) => {
            for (item, vector) in items.into_iter().zip(vectors) {
                let queue_time = started.saturating_duration_since(item.enqueued);
                let _ = item.reply.send(Ok(ItemOutput { vector, queue_time, inference_time }));
            }
        }
        Err(message) => {
            stats.failed_batches.fetch_add(1, Ordering::Relaxed);
            tracing::error!(model = model_name, size = items.len(), "batch failed: {message}");
            fail(items, &EngineError::Inference(message));
        }
    }
}

/// Runs the texts, images and clips of a batch; one vector per item, in item order.
fn forward(
    model: &dyn Model,
    batch: &Batch,
    images: &[Pixels],
    clips: &[AudioFeatures],
    items: &[Item],
) -> Result<Vec<Vec<f32>>, String> {
    let run = |out: Result<aleph_models::Output, aleph_models::ModelError>, want: usize| {
        let out = out.map_err(|e| e.to_string())?;
        if out.vectors.len() != want {
            return Err(format!("model returned {} outputs for {want} inputs", out.vectors.len()));
        }
        Ok(out.vectors.into_iter())
    };
    let mut texts = if batch.is_empty() { Vec::new().into_iter() } else { run(model.forward(batch), batch.len())? };
    let mut pictures =
        if images.is_empty() { Vec::new().into_iter() } else { run(model.forward_images(images), images.len())? };
    let mut sounds =
        if clips.is_empty() { Vec::new().into_iter() } else { run(model.forward_audio(clips), clips.len())? };
    items
        .iter()
        .map(|item| match item.input {
            Prepared::Tokens(..) => texts.next(),
            Prepared::Image { .. } => pictures.next(),
            Prepared::Audio { .. } => sounds.next(),
        })
        .map(|v| v.ok_or_else(|| "model returned too few outputs".to_string()))
        .collect()
}

fn fail(items: Vec<Item>, error: &EngineError) {
    for item in items {
        let _ = item.reply.send(Err(error.clone()));
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}
