//! Loading a ColQwen2 checkpoint: the model, its page prompt and query template from the processor's
//! files, and its dynamic-resolution image preprocessing.

use std::path::Path;

use serde::Deserialize;

use super::towers::{Towers, TowersModel};
use super::{
    backend_for, file_bytes, page_retriever_info, var_builder, ArchConfig, Backend, Compute, DType, LoadOptions,
    LoadedModel, ModelInfo,
};
use crate::error::{read_json, ModelError};
use crate::media::image::ImageProcessor;
use crate::models::colqwen2::{ColQwen2, ColQwen2Config, PagePrompt};
use crate::tokenizer::{SpecialTokens, TextTokenizer};

const IMAGE_PAD: &str = "<|image_pad|>";

/// `processor_config.json` of `ColQwen2Processor` (transformers' defaults where absent).
#[derive(Debug, Deserialize)]
struct ProcessorConfig {
    visual_prompt_prefix: Option<String>,
    query_prefix: Option<String>,
}

/// How many padding tokens ColQwen2 appends to a query (its "query augmentation").
const QUERY_AUGMENTATION: usize = 10;

pub(super) fn load_colqwen2(dir: &Path, arch: &ArchConfig, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    if opts.dtype == DType::Int8 {
        return Err(ModelError::InvalidOption("--dtype int8 is available for BERT-family encoders only".into()));
    }
    let cfg: ColQwen2Config = read_json(&dir.join("config.json"))?;
    let (vision, text, _) =
        cfg.parts().map_err(|reason| ModelError::BadFile { path: dir.join("config.json"), reason })?;
    let merge_factor = vision.patch_size * vision.spatial_merge_size;
    let processor_path = dir.join("processor_config.json");
    let processor: ProcessorConfig = if processor_path.exists() {
        read_json(&processor_path)?
    } else {
        ProcessorConfig { visual_prompt_prefix: None, query_prefix: None }
    };
    let visual = processor.visual_prompt_prefix.unwrap_or_else(|| {
        format!("<|im_start|>user\n<|vision_start|>{IMAGE_PAD}<|vision_end|>Describe the image.<|im_end|><|endoftext|>")
    });
    let (before, after) = visual.split_once(IMAGE_PAD).ok_or_else(|| ModelError::BadFile {
        path: processor_path.clone(),
        reason: format!("visual_prompt_prefix has no {IMAGE_PAD}"),
    })?;
    let pad = SpecialTokens::read(dir)?.pad_token.unwrap_or_else(|| "<|endoftext|>".into());

    let window = text.max_position_embeddings;
    let base = TextTokenizer::from_file(&dir.join("tokenizer.json"), window)?;
    let page = PagePrompt { before: base.encode_raw(before)?.ids, after: base.encode_raw(after)?.ids };
    let query_prefix = processor.query_prefix.unwrap_or_else(|| "Query: ".into());
    let tokenizer = base.with_template(query_prefix, format!("{}\n", pad.repeat(QUERY_AUGMENTATION)));

    let prompt_len = page.before.len() + page.after.len();
    let device = opts.device.candle()?;
    let vb = var_builder(dir, &device)?;
    let model: Box<dyn Towers> = match backend_for(opts, &device) {
        Backend::Auto => Box::new(ColQwen2::load(super::cpu_kernels(opts.dtype), vb, super::mapped(dir)?, &cfg, page)?),
        Backend::Candle => {
            Box::new(ColQwen2::load(super::candle_ops(&device, opts.dtype, opts.attention)?, vb, None, &cfg, page)?)
        }
    };
    let backend = model.compute();
    let weight_bytes = if backend == Compute::Candle { file_bytes(dir)? } else { model.weight_bytes() };
    let images = ImageProcessor::from_dir(dir)?.with_limits(opts.image_limits);
    let (factor, _, _) = images.dynamic().ok_or_else(|| {
        ModelError::Unsupported("a ColQwen2 image processor without dynamic resolution (min/max pixels)".into())
    })?;
    if factor as usize != merge_factor {
        return Err(ModelError::Unsupported(format!(
            "the image processor rounds to multiples of {factor}; the vision tower merges {}-pixel blocks",
            merge_factor
        )));
    }
    // A page costs its prompt and one token per merged block of factor² pixels.
    let info = ModelInfo {
        architecture: arch.architectures.first().cloned().unwrap_or_else(|| "ColQwen2ForRetrieval".into()),
        image_pixels_per_token: factor as usize * factor as usize,
        ..page_retriever_info(backend, model.dim(), window, weight_bytes, prompt_len)
    };
    Ok(LoadedModel {
        model: std::sync::Arc::new(TowersModel { towers: model, normalize: false }),
        tokenizer,
        images: Some(images),
        audio: None,
        info,
    })
}
