//! Start-up work on a freshly loaded model, before its threads serve: a warm-up batch and the int8 / uint8
//! output calibration.
//!
//! On a GPU (candle) the warm-up batch is the largest the limits allow, so memory problems show at boot. On
//! Aleph's CPU kernels it is one short batch: the weights are packed in memory by the load already, so what the
//! first request needs warm is the compute pool, the kernels' scratch buffers and the tokenizer, which a short
//! batch touches in milliseconds. The largest batch there only measured the host's speed (2 s of a 2-core
//! start for MiniLM, 32 × 256 tokens) and found no memory problem a first request would not.

use aleph_models::Compute;

use std::time::Instant;

use aleph_models::quantize::{Calibration, CALIBRATION_TEXT};
use aleph_models::{AudioProcessor, Batch, ImageProcessor, ModelError, ModelInfo, Pixels, TextTokenizer};

use crate::handle::HandleConfig;

/// Embeds the shipped calibration corpus and keeps each dimension's range.
pub(crate) fn calibrate(
    model: &dyn aleph_models::Model,
    tokenizer: &TextTokenizer,
    batch_size: usize,
) -> Result<Calibration, ModelError> {
    let started = Instant::now();
    let lines: Vec<&str> = CALIBRATION_TEXT.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut vectors = Vec::with_capacity(lines.len());
    for chunk in lines.chunks(batch_size.max(1)) {
        let mut batch = Batch::new();
        for line in chunk {
            let e = tokenizer.encode(line.trim())?;
            batch.push(&e.ids, &e.type_ids);
        }
        vectors.extend(model.forward(&batch)?.vectors);
    }
    tracing::info!(
        "calibrated int8/uint8 output on {} sentences in {:.0} ms",
        lines.len(),
        started.elapsed().as_secs_f64() * 1e3
    );
    Calibration::from_vectors(&vectors).ok_or_else(|| ModelError::Forward("calibration produced no vectors".into()))
}

/// Runs the largest image batch the limits allow through the vision tower.
pub(crate) fn warmup_images(
    name: &str,
    model: &dyn aleph_models::Model,
    images: &ImageProcessor,
    info: &ModelInfo,
    config: &HandleConfig,
) -> Result<(), ModelError> {
    let (w, h) = images.largest_output();
    let largest = Pixels { height: h, width: w, data: vec![0.0; 3 * w * h] };
    let count = if at_the_limits(info) {
        (config.max_batch_tokens / info.image_tokens(&largest).max(1)).clamp(1, config.batch_size)
    } else {
        1
    };
    let batch = vec![largest; count];
    let started = Instant::now();
    model.forward_images(&batch)?;
    let secs = started.elapsed().as_secs_f64();
    tracing::info!(
        model = name,
        "warm-up: {count} images in {:.0} ms ({:.1} images/s)",
        secs * 1e3,
        count as f64 / secs
    );
    Ok(())
}

/// Runs the largest clip batch the limits allow through the audio tower (silence, full window).
pub(crate) fn warmup_audio(
    name: &str,
    model: &dyn aleph_models::Model,
    audio: &AudioProcessor,
    info: &ModelInfo,
    config: &HandleConfig,
) -> Result<(), ModelError> {
    let count = if at_the_limits(info) {
        (config.max_batch_tokens / info.audio_cost.max(1)).clamp(1, config.batch_size)
    } else {
        1
    };
    let clip = audio.features(&[0.0; 16]);
    let started = Instant::now();
    model.forward_audio(&vec![clip; count])?;
    let secs = started.elapsed().as_secs_f64();
    tracing::info!(model = name, "warm-up: {count} clips in {:.0} ms ({:.1} clips/s)", secs * 1e3, count as f64 / secs);
    Ok(())
}

/// Whether the warm-up runs the largest batch the limits allow (a GPU's memory is checked at boot) rather than a
/// short one (Aleph's CPU kernels; see the module's notes).
fn at_the_limits(info: &ModelInfo) -> bool {
    info.backend != Compute::AlephCpu
}

/// Tokens of each sequence of the short warm-up batch: a short request's shape, with more than one tile of rows.
const SHORT_WARMUP_TOKENS: usize = 32;

/// Runs the warm-up batch ([`at_the_limits`] or short) and logs the rate.
pub(crate) fn warmup(
    name: &str,
    model: &dyn aleph_models::Model,
    tokenizer: &TextTokenizer,
    info: &ModelInfo,
    config: &HandleConfig,
) -> Result<(), ModelError> {
    let full = at_the_limits(info);
    let text = "warm ".repeat(if full { info.window } else { SHORT_WARMUP_TOKENS.min(info.window) });
    let seq = tokenizer.encode(&text)?;
    let count = if full { (config.max_batch_tokens / seq.len().max(1)).clamp(1, config.batch_size) } else { 2 };
    let count = count.min(config.batch_size.max(1));
    let mut batch = Batch::new();
    for _ in 0..count {
        batch.push(&seq.ids, &seq.type_ids);
    }
    let started = Instant::now();
    model.forward(&batch)?;
    let secs = started.elapsed().as_secs_f64();
    tracing::info!(
        model = name,
        "warm-up: {count} x {} tokens in {:.0} ms ({:.0} tokens/s)",
        seq.len(),
        secs * 1e3,
        batch.total_tokens() as f64 / secs.max(1e-9)
    );
    Ok(())
}
