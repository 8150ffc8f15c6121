//! Loading a ColPali checkpoint: the model, its page prompt and query template from the processor's
//! files, and its image preprocessing.

use std::path::Path;

use serde::Deserialize;

use super::{
    file_bytes, page_retriever_info, var_builder, ArchConfig, DType, LoadOptions, LoadedModel, Model, ModelInfo,
};
use crate::architectures::colpali::{ColPali, ColPaliConfig};
use crate::batch::{Batch, Output};
use crate::error::{read_json, ModelError};
use crate::media::image::{ImageProcessor, Pixels};
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

    let device = opts.device.candle()?;
    let vb = var_builder(dir, &device)?;
    // No Aleph CPU kernels for this architecture yet: candle computes on every device.
    let model = ColPali::load(vb, &cfg, page_prompt)?;
    let images = ImageProcessor::from_dir(dir)?.with_limits(opts.image_limits);
    let side = model.image_size();
    if images.output_size() != (side, side) {
        return Err(ModelError::Unsupported(format!(
            "the image processor makes {:?} images; the vision tower takes {side}x{side}",
            images.output_size()
        )));
    }
    let info = ModelInfo {
        architecture: arch.architectures.first().cloned().unwrap_or_else(|| "ColPaliForRetrieval".into()),
        ..page_retriever_info(model.dim(), window, file_bytes(dir)?, model.tokens_per_image())
    };
    Ok(LoadedModel {
        model: std::sync::Arc::new(ColPaliModel(model)),
        tokenizer,
        images: Some(images),
        audio: None,
        info,
    })
}

struct ColPaliModel(ColPali);

impl Model for ColPaliModel {
    fn forward(&self, batch: &Batch) -> Result<Output, ModelError> {
        Ok(Output { vectors: self.0.forward_texts(batch)? })
    }

    fn forward_images(&self, images: &[Pixels]) -> Result<Output, ModelError> {
        if images.is_empty() {
            return Ok(Output::default());
        }
        Ok(Output { vectors: self.0.forward_images(images)? })
    }
}
