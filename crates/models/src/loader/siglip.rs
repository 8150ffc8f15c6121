//! Loading a SigLIP checkpoint (`SiglipModel`): both towers, the padding token texts are filled with,
//! and the image preprocessing.

use std::path::Path;

use super::{
    file_bytes, normalized, var_builder, ArchConfig, Backend, Compute, DType, LoadOptions, LoadedModel, Model,
    ModelInfo, Task,
};
use crate::architectures::siglip::{Siglip, SiglipConfig};
use crate::batch::{Batch, Output};
use crate::cpu::siglip::FastSiglip;
use crate::error::{read_json, ModelError};
use crate::media::image::{ImageProcessor, Pixels};
use crate::pooling::Pooling;
use crate::tokenizer::{SpecialTokens, TextTokenizer};

pub(super) fn load_siglip(dir: &Path, arch: &ArchConfig, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    if opts.dtype == DType::Int8 {
        return Err(ModelError::InvalidOption("--dtype int8 is available for BERT-family encoders only".into()));
    }
    let cfg: SiglipConfig = read_json(&dir.join("config.json"))?;
    let window = cfg.text_config.max_position_embeddings;
    let tokenizer_file = dir.join("tokenizer.json");
    if !tokenizer_file.exists() {
        // The first SigLIP checkpoints ship only a SentencePiece model (spiece.model).
        return Err(ModelError::Unsupported(
            "a SigLIP checkpoint without tokenizer.json (only SentencePiece's spiece.model)".into(),
        ));
    }
    let tokenizer = TextTokenizer::from_file(&tokenizer_file, window)?;
    // Texts are padded with the tokenizer's padding token, as `padding="max_length"` does.
    let pad = SpecialTokens::read(dir)?
        .pad_token
        .and_then(|t| tokenizer.token_id(&t))
        .unwrap_or(cfg.text_config.pad_token_id);
    let device = opts.device.candle()?;
    let vb = var_builder(dir, &device)?;
    // Aleph's own kernels on the CPU; candle elsewhere, or when asked.
    let towers = match if device.is_cpu() { opts.backend } else { Backend::Candle } {
        Backend::Auto => Towers::Cpu(Box::new(FastSiglip::load(vb, &cfg, pad)?)),
        Backend::Candle => Towers::Candle(Box::new(Siglip::load(vb, &cfg, pad)?)),
    };
    let images = ImageProcessor::from_dir(dir)?.with_limits(opts.image_limits);
    let (side, image_cost, dim) = match &towers {
        Towers::Cpu(m) => (m.vision.image_size(), m.vision.tokens_per_image(), m.dim()),
        Towers::Candle(m) => (m.vision.image_size(), m.vision.tokens_per_image(), m.dim),
    };
    if images.output_size() != (side, side) {
        return Err(ModelError::Unsupported(format!(
            "the image processor makes {:?} images; the vision tower takes {side}x{side}",
            images.output_size()
        )));
    }
    let info = ModelInfo {
        task: Task::Embed,
        backend: towers.name(),
        architecture: arch.architectures.first().cloned().unwrap_or_else(|| "SiglipModel".into()),
        dim,
        window,
        // Every text runs padded to the whole window.
        pads: true,
        // The text tower reads its last position; images are pooled by the attention probe.
        pooling: Pooling::LastToken,
        normalize: true,
        weight_bytes: match &towers {
            Towers::Cpu(m) => m.weight_bytes(),
            Towers::Candle(_) => file_bytes(dir)?,
        },
        image_input: true,
        image_cost,
        image_pixels_per_token: 0,
        audio_input: false,
        audio_cost: 0,
        token_outputs: false,
        prompts: Default::default(),
    };
    Ok(LoadedModel { model: std::sync::Arc::new(towers), tokenizer, images: Some(images), audio: None, info })
}

enum Towers {
    Cpu(Box<FastSiglip>),
    Candle(Box<Siglip>),
}

impl Towers {
    fn name(&self) -> Compute {
        match self {
            Towers::Cpu(_) => Compute::AlephCpu,
            Towers::Candle(_) => Compute::Candle,
        }
    }
}

impl Model for Towers {
    fn forward(&self, batch: &Batch) -> Result<Output, ModelError> {
        if batch.is_empty() {
            return Ok(Output::default());
        }
        let vectors = match self {
            Towers::Cpu(m) => m.text.forward(batch)?,
            Towers::Candle(m) => m.text.forward(batch)?,
        };
        Ok(Output { vectors: normalized(vectors) })
    }

    fn forward_images(&self, images: &[Pixels]) -> Result<Output, ModelError> {
        if images.is_empty() {
            return Ok(Output::default());
        }
        let vectors = match self {
            Towers::Cpu(m) => m.vision.forward(images)?,
            Towers::Candle(m) => m.forward_images(images)?,
        };
        Ok(Output { vectors: normalized(vectors) })
    }
}
