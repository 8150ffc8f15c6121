//! Start-up work on a freshly loaded model, before its threads serve: warm-up batches at the limits
//! (so memory problems show at boot) and the int8 / uint8 output calibration.

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
    let count = (config.max_batch_tokens / info.image_tokens(&largest).max(1)).clamp(1, config.batch_size);
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
    let count = (config.max_batch_tokens / info.audio_cost.max(1)).clamp(1, config.batch_size);
    let clip = audio.features(&[0.0; 16]);
    let started = Instant::now();
    model.forward_audio(&vec![clip; count])?;
    let secs = started.elapsed().as_secs_f64();
    tracing::info!(model = name, "warm-up: {count} clips in {:.0} ms ({:.1} clips/s)", secs * 1e3, count as f64 / secs);
    Ok(())
}

/// Runs the largest batch the limits allow, so memory problems show at boot, and logs the rate.
pub(crate) fn warmup(
    name: &str,
    model: &dyn aleph_models::Model,
    tokenizer: &TextTokenizer,
    info: &ModelInfo,
    config: &HandleConfig,
) -> Result<(), ModelError> {
    let text = "warm ".repeat(info.window);
    let seq = tokenizer.encode(&text)?;
    let count = (config.max_batch_tokens / seq.len().max(1)).clamp(1, config.batch_size);
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
