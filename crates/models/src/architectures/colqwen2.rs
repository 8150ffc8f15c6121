//! ColQwen2 on candle (`ColQwen2ForRetrieval`): Qwen2-VL whose final states are projected to a small width
//! and L2-normalized, one vector per token: per merged 2×2 patch block and prompt token for a page image
//! (at the image's own resolution), per token for a query.
//!
//! A page is `<|im_start|>user\n<|vision_start|>` + one `<|image_pad|>` per merged block +
//! `<|vision_end|>Describe the image.<|im_end|><|endoftext|>`; a query is `Query: ` + query + the padding
//! token ×10 + `\n`. Both come from `processor_config.json`; attention is causal, as in transformers.

use candle_core::{DType, Module, Tensor};
use candle_nn::{Linear, VarBuilder};
use serde::Deserialize;

use super::qwen2_vl::{Qwen2, Qwen2VlVision, TextConfig, VisionConfig};
use crate::batch::Batch;
use crate::error::{weights, ModelError};
use crate::media::image::Pixels;
use crate::pooling::l2_normalize;

#[derive(Debug, Clone, Deserialize)]
pub struct ColQwen2Config {
    /// Kept raw: older checkpoints keep the decoder's settings at this level, newer ones in `text_config`.
    pub vlm_config: serde_json::Value,
    #[serde(default = "d128")]
    pub embedding_dim: usize,
}

fn d128() -> usize {
    128
}

impl ColQwen2Config {
    pub fn parts(&self) -> Result<(VisionConfig, TextConfig, u32), String> {
        let vlm = &self.vlm_config;
        // An omitted (or null) vision config is the class default, every field at its default.
        let vision_value = vlm.get("vision_config").filter(|v| !v.is_null()).cloned();
        let vision = serde_json::from_value(vision_value.unwrap_or_else(|| serde_json::json!({})))
            .map_err(|e| format!("vision_config: {e}"))?;
        let text_value = vlm.get("text_config").filter(|v| !v.is_null()).cloned();
        let text = serde_json::from_value(text_value.unwrap_or_else(|| vlm.clone()))
            .map_err(|e| format!("text_config: {e}"))?;
        let image = vlm.get("image_token_id").and_then(|v| v.as_u64()).unwrap_or(151_655) as u32;
        Ok((vision, text, image))
    }
}

/// A page's prompt around its image tokens.
#[derive(Debug, Clone)]
pub struct PagePrompt {
    pub before: Vec<u32>,
    pub after: Vec<u32>,
}

pub struct ColQwen2 {
    vision: Qwen2VlVision,
    text: Qwen2,
    proj: Linear,
    page: PagePrompt,
    dim: usize,
}

impl ColQwen2 {
    pub fn load(vb: VarBuilder, cfg: &ColQwen2Config, page: PagePrompt) -> Result<Self, ModelError> {
        let (vc, tc, _) = cfg.parts().map_err(ModelError::Unsupported)?;
        let vlm = vb.pp("vlm");
        // Checkpoints saved from Qwen2VLForConditionalGeneration nest the parts under `model`.
        let (visual, language) = if vlm.contains_tensor("visual.merger.ln_q.weight") {
            (vlm.pp("visual"), vlm.pp("language_model"))
        } else {
            (vlm.pp("model").pp("visual"), vlm.pp("model").pp("language_model"))
        };
        let language = if language.contains_tensor("norm.weight") { language } else { vlm.pp("model") };
        let vision = Qwen2VlVision::load(visual, &vc)?;
        let text = Qwen2::load(language, &tc)?;
        let proj =
            candle_nn::linear(tc.hidden_size, cfg.embedding_dim, vb.pp("embedding_proj_layer")).map_err(weights)?;
        Ok(ColQwen2 { vision, text, proj, page, dim: cfg.embedding_dim })
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// What image sides must be multiples of.
    pub fn factor(&self) -> usize {
        self.vision.factor()
    }

    /// The page prompt's tokens besides the image's.
    pub fn prompt_len(&self) -> usize {
        self.page.before.len() + self.page.after.len()
    }

    /// Token vectors of each query, row-major `[tokens × dim]`.
    pub fn forward_texts(&self, batch: &Batch) -> Result<Vec<Vec<f32>>, ModelError> {
        let run = |i: usize| -> candle_core::Result<Vec<f32>> {
            let ids = &batch.input_ids[batch.cu_seqlens[i]..batch.cu_seqlens[i + 1]];
            self.head(&self.text.forward(&self.text.embed(ids)?)?)
        };
        Ok((0..batch.len()).map(run).collect::<candle_core::Result<_>>()?)
    }

    /// Image-token and prompt-token vectors of each page, row-major `[tokens × dim]`.
    pub fn forward_images(&self, images: &[Pixels]) -> Result<Vec<Vec<f32>>, ModelError> {
        let run = |img: &Pixels| -> candle_core::Result<Vec<f32>> {
            let features = self.vision.forward(img)?.to_dtype(self.text.dtype())?;
            let x = Tensor::cat(
                &[&self.text.embed(&self.page.before)?, &features, &self.text.embed(&self.page.after)?],
                0,
            )?;
            self.head(&self.text.forward(&x)?)
        };
        Ok(images.iter().map(run).collect::<candle_core::Result<_>>()?)
    }

    fn head(&self, states: &Tensor) -> candle_core::Result<Vec<f32>> {
        let mut out = self.proj.forward(states)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        out.chunks_exact_mut(self.dim).for_each(l2_normalize);
        Ok(out)
    }
}
