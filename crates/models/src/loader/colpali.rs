//! Loading a ColPali checkpoint: the model, its page prompt and query template from the processor's
//! files, and its image preprocessing.

use std::path::Path;

use serde::Deserialize;

use super::towers::{Towers, TowersModel};
use super::{
    backend_for, file_bytes, page_retriever_info, var_builder, ArchConfig, Backend, Compute, DType, LoadOptions,
    LoadedModel, ModelInfo,
};
use crate::error::{read_json, ModelError};
use crate::media::image::ImageProcessor;
use crate::models::colpali::{ColPali, ColPaliConfig};
use crate::tokenizer::{SpecialTokens, TextTokenizer};

/// `processor_config.json` of `ColPaliProcessor` (transformers' defaults where absent).
#[derive(Debug, Deserialize)]
struct ProcessorConfig {
    #[serde(default = "question")]
    query_prefix: String,
    #[serde(default = "describe")]
    visual_prompt_prefix: String,
}

fn question() -> String {
    "Question: ".into()
}
fn describe() -> String {
    "Describe the image.".into()
}

/// How many padding tokens ColPali appends to a query (its "query augmentation").
const QUERY_AUGMENTATION: usize = 10;

pub(super) fn load_colpali(dir: &Path, arch: &ArchConfig, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    if opts.dtype == DType::Int8 {
        return Err(ModelError::InvalidOption("--dtype int8 is available for BERT-family encoders only".into()));
    }
    let cfg: ColPaliConfig = read_json(&dir.join("config.json"))?;
    let processor_path = dir.join("processor_config.json");
    let processor: ProcessorConfig = if processor_path.exists() {
        read_json(&processor_path)?
    } else {
        ProcessorConfig { query_prefix: question(), visual_prompt_prefix: describe() }
    };
    let special = SpecialTokens::read(dir)?;
    let bos = special.bos_token.unwrap_or_else(|| "<bos>".into());
    let pad = special.pad_token.unwrap_or_else(|| "<pad>".into());

    let window = cfg.vlm_config.text_config.max_position_embeddings;
    let base = TextTokenizer::from_file(&dir.join("tokenizer.json"), window)?;
    let page_prompt = base.encode_raw(&format!("{bos}{}\n", processor.visual_prompt_prefix))?.ids;
    let tokenizer =
        base.with_template(format!("{bos}{}", processor.query_prefix), format!("{}\n", pad.repeat(QUERY_AUGMENTATION)));

    let vision = &cfg.vlm_config.vision_config;
    let side = vision.image_size;
    let page_tokens = (side / vision.patch_size.max(1)).pow(2) + page_prompt.len();
    let device = opts.device.candle()?;
    let vb = var_builder(dir, &device)?;
    let model: Box<dyn Towers> = match backend_for(opts, &device) {
        Backend::Auto => {
            Box::new(ColPali::load(super::cpu_kernels(opts.dtype), vb, super::mapped(dir)?, &cfg, page_prompt)?)
        }
        Backend::Candle => Box::new(ColPali::load(
            super::candle_ops(&device, opts.dtype, opts.attention)?,
            vb,
            None,
            &cfg,
            page_prompt,
        )?),
    };
    let backend = model.compute();
    let weight_bytes = if backend == Compute::Candle { file_bytes(dir)? } else { model.weight_bytes() };
    let images = ImageProcessor::from_dir(dir)?.with_limits(opts.image_limits);
    if images.output_size() != (side, side) {
        return Err(ModelError::Unsupported(format!(
            "the image processor makes {:?} images; the vision tower takes {side}x{side}",
            images.output_size()
        )));
    }
    let info = ModelInfo {
        architecture: arch.architectures.first().cloned().unwrap_or_else(|| "ColPaliForRetrieval".into()),
        ..page_retriever_info(backend, model.dim(), window, weight_bytes, page_tokens)
    };
    Ok(LoadedModel {
        model: std::sync::Arc::new(TowersModel { towers: model, normalize: false }),
        tokenizer,
        images: Some(images),
        audio: None,
        info,
    })
}
