//! Loading a SigLIP checkpoint (`SiglipModel`): both towers, the padding token texts are filled with,
//! and the image preprocessing.

use std::path::Path;

use super::towers::{Towers, TowersModel};
use super::{
    backend_for, file_bytes, var_builder, ArchConfig, Backend, Compute, DType, LoadOptions, LoadedModel, ModelInfo,
    Task,
};
use crate::error::{read_json, ModelError};
use crate::media::image::ImageProcessor;
use crate::models::siglip::{Siglip, SiglipConfig};
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
    let model: Box<dyn Towers> = match backend_for(opts, &device) {
        Backend::Auto => Box::new(Siglip::load(super::cpu_kernels(opts.dtype), vb, super::mapped(dir)?, &cfg, pad)?),
        Backend::Candle => {
            Box::new(Siglip::load(super::candle_ops(&device, opts.dtype, opts.attention)?, vb, None, &cfg, pad)?)
        }
    };
    let images = ImageProcessor::from_dir(dir)?.with_limits(opts.image_limits);
    let side = cfg.vision_config.image_size;
    let image_cost = (side / cfg.vision_config.patch_size.max(1)).pow(2);
    let backend = model.compute();
    if images.output_size() != (side, side) {
        return Err(ModelError::Unsupported(format!(
            "the image processor makes {:?} images; the vision tower takes {side}x{side}",
            images.output_size()
        )));
    }
    let architecture = arch.architectures.first().cloned().unwrap_or_else(|| "SiglipModel".into());
    let info = ModelInfo {
        // Every text runs padded to the whole window.
        pads: true,
        normalize: true,
        weight_bytes: if backend == Compute::Candle { file_bytes(dir)? } else { model.weight_bytes() },
        image_input: true,
        image_cost,
        // The text tower reads its last position; images are pooled by the attention probe.
        ..ModelInfo::new(Task::Embed, backend, architecture, model.dim(), window, Pooling::LastToken)
    };
    let model = std::sync::Arc::new(TowersModel { towers: model, normalize: true });
    Ok(LoadedModel { model, tokenizer, images: Some(images), audio: None, info })
}
