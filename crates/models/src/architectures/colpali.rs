//! ColPali on candle (`ColPaliForRetrieval`): PaliGemma (a SigLIP vision tower, a linear projector and
//! a Gemma decoder) whose final states are projected to a small width and L2-normalized, one vector per
//! token: per image patch and prompt token for a page image, per token for a query.
//!
//! A page is the sequence `[image features × patches] <bos> "Describe the image." "\n"`; a query is
//! `<bos> "Question: " query <pad>×10 "\n"` (the padding tokens are attended, as ColPali was trained: they
//! are its query augmentation). The prompt strings come from `processor_config.json`; the engine's
//! tokenizer applies the query template and the loader tokenizes the page prompt once.

use candle_core::{DType, Module, Tensor};
use candle_nn::{Linear, VarBuilder};
use serde::Deserialize;

use super::gemma::{Gemma, GemmaConfig};
use super::siglip::{SiglipVision, SiglipVisionConfig};
use crate::batch::Batch;
use crate::error::{weights, ModelError};
use crate::media::image::Pixels;
use crate::pooling::l2_normalize;

#[derive(Debug, Clone, Deserialize)]
pub struct ColPaliConfig {
    pub vlm_config: PaliGemmaConfig,
    #[serde(default = "d128")]
    pub embedding_dim: usize,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PaliGemmaConfig {
    pub vision_config: SiglipVisionConfig,
    pub text_config: GemmaConfig,
    #[serde(default = "d256000", alias = "image_token_id")]
    pub image_token_index: u32,
}

fn d128() -> usize {
    128
}
fn d256000() -> u32 {
    256_000
}

pub struct ColPali {
    vision: SiglipVision,
    projector: Linear,
    text: Gemma,
    proj: Linear,
    /// Token ids of a page's prompt after its image features.
    page_prompt: Vec<u32>,
    dim: usize,
}

/// PaliGemma positions count from 1.
const FIRST_POSITION: usize = 1;

impl ColPali {
    pub fn load(vb: VarBuilder, cfg: &ColPaliConfig, page_prompt: Vec<u32>) -> Result<Self, ModelError> {
        let vlm = vb.pp("vlm");
        // Checkpoints converted from PaliGemmaForConditionalGeneration nest one level deeper.
        let vision_root = if vlm.contains_tensor("vision_tower.vision_model.post_layernorm.weight") {
            vlm.pp("vision_tower").pp("vision_model")
        } else {
            vlm.pp("vision_tower")
        };
        let text_root = if vlm.contains_tensor("language_model.model.norm.weight") {
            vlm.pp("language_model").pp("model")
        } else {
            vlm.pp("language_model")
        };
        let tc = &cfg.vlm_config.text_config;
        let vision = SiglipVision::load(vision_root, &cfg.vlm_config.vision_config)?;
        let text = Gemma::load(text_root, tc)?;
        let h = tc.hidden_size;
        let projector = candle_nn::linear(
            cfg.vlm_config.vision_config.tower.hidden_size,
            h,
            vlm.pp("multi_modal_projector").pp("linear"),
        )
        .map_err(weights)?;
        let proj = candle_nn::linear(h, cfg.embedding_dim, vb.pp("embedding_proj_layer")).map_err(weights)?;
        Ok(ColPali { vision, projector, text, proj, page_prompt, dim: cfg.embedding_dim })
    }

    /// Width of each token vector.
    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn image_size(&self) -> usize {
        self.vision.image_size()
    }

    /// The decoder's sequence length for a page: what one image costs in a batch.
    pub fn tokens_per_image(&self) -> usize {
        self.vision.tokens_per_image() + self.page_prompt.len()
    }

    /// Token vectors of each query, row-major `[tokens × dim]`.
    pub fn forward_texts(&self, batch: &Batch) -> Result<Vec<Vec<f32>>, ModelError> {
        let run = |i: usize| -> candle_core::Result<Vec<f32>> {
            let ids = &batch.input_ids[batch.cu_seqlens[i]..batch.cu_seqlens[i + 1]];
            let states = self.text.forward(&self.text.embed(ids)?, FIRST_POSITION)?;
            self.head(&states)
        };
        Ok((0..batch.len()).map(run).collect::<candle_core::Result<_>>()?)
    }

    /// Patch and prompt vectors of each page image, row-major `[tokens × dim]`.
    pub fn forward_images(&self, images: &[Pixels]) -> Result<Vec<Vec<f32>>, ModelError> {
        let run = || -> candle_core::Result<Vec<Vec<f32>>> {
            let patches = self.projector.forward(&self.vision.forward(images)?)?.to_dtype(self.text.dtype())?;
            let prompt = self.text.embed(&self.page_prompt)?;
            (0..images.len())
                .map(|i| {
                    let x = Tensor::cat(&[&patches.get(i)?, &prompt], 0)?;
                    self.head(&self.text.forward(&x, FIRST_POSITION)?)
                })
                .collect()
        };
        Ok(run()?)
    }

    /// Projects final states `[n, hidden]` and L2-normalizes each row.
    fn head(&self, states: &Tensor) -> candle_core::Result<Vec<f32>> {
        let mut out = self.proj.forward(states)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        out.chunks_exact_mut(self.dim).for_each(l2_normalize);
        Ok(out)
    }
}
