//! ColQwen2 (`ColQwen2ForRetrieval`): Qwen2-VL (ColQwen2.5: Qwen2.5-VL) whose final states are projected to a small width and
//! L2-normalized, one vector per token: per merged 2×2 patch block and prompt token for a page image (at the
//! image's own resolution), per token for a query.
//!
//! A page is `<|im_start|>user\n<|vision_start|>` + one `<|image_pad|>` per merged block +
//! `<|vision_end|>Describe the image.<|im_end|><|endoftext|>`; a query is `Query: ` + query + the padding
//! token ×10 + `\n`. Both come from `processor_config.json`; attention is causal, as in transformers.

use candle_nn::VarBuilder;
use serde::Deserialize;

use super::colpali::token_vectors;
use super::qwen2_vl::{Qwen25VisionConfig, Qwen2VlVision, TextConfig, VisionConfig, VisionSpec};
use crate::backend::Ops;
use crate::batch::Batch;
use crate::error::ModelError;
use crate::layers::decoder::{positions, Decoder};
use crate::layers::Weights;
use crate::loader::MappedTensors;
use crate::media::image::Pixels;

#[derive(Debug, Clone, Deserialize)]
pub struct ColQwen2Config {
    /// Kept raw: older checkpoints keep the decoder's settings at this level, newer ones in `text_config`.
    pub vlm_config: serde_json::Value,
    #[serde(default = "crate::config::n::<128>")]
    pub embedding_dim: usize,
}

impl ColQwen2Config {
    /// The vision tower's shape (Qwen2-VL's, or Qwen2.5-VL's for `vlm_config.model_type: qwen2_5_vl`), the
    /// decoder's config and the image token.
    pub fn parts(&self) -> Result<(VisionSpec, TextConfig, u32), String> {
        let vlm = &self.vlm_config;
        // An omitted (or null) vision config is the class default, every field at its default.
        let vision_value = vlm.get("vision_config").filter(|v| !v.is_null()).cloned();
        let vision_value = vision_value.unwrap_or_else(|| serde_json::json!({}));
        let vision = match vlm.get("model_type").and_then(|t| t.as_str()).unwrap_or("qwen2_vl") {
            "qwen2_vl" => VisionSpec::from(
                &serde_json::from_value::<VisionConfig>(vision_value).map_err(|e| format!("vision_config: {e}"))?,
            ),
            "qwen2_5_vl" => serde_json::from_value::<Qwen25VisionConfig>(vision_value)
                .map_err(|e| format!("vision_config: {e}"))?
                .spec()
                .map_err(|e| e.to_string())?,
            other => return Err(format!("vlm_config model_type `{other}` (only qwen2_vl and qwen2_5_vl)")),
        };
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

pub struct ColQwen2<O: Ops> {
    ops: O,
    vision: Qwen2VlVision<O>,
    text: Decoder<O>,
    proj: O::Linear,
    page: PagePrompt,
    dim: usize,
    weight_bytes: usize,
}

impl<O: Ops> ColQwen2<O> {
    pub fn load(
        ops: O,
        vb: VarBuilder,
        mapped: Option<std::sync::Arc<MappedTensors>>,
        cfg: &ColQwen2Config,
        page: PagePrompt,
    ) -> Result<Self, ModelError> {
        let (vc, tc, _) = cfg.parts().map_err(ModelError::Unsupported)?;
        let (vision, text, proj, weight_bytes) = {
            let w = Weights::new(vb, &ops).with_mapped(mapped);
            let vlm = w.pp("vlm");
            // Checkpoints saved from Qwen2VLForConditionalGeneration nest the parts under `model`.
            let nested = !vlm.contains("visual.merger.ln_q.weight");
            let visual = if nested { vlm.pp("model").pp("visual") } else { vlm.pp("visual") };
            let language = match (nested, vlm.contains("language_model.norm.weight")) {
                (false, true) => vlm.pp("language_model"),
                (true, _) if vlm.contains("model.language_model.norm.weight") => vlm.pp("model").pp("language_model"),
                _ => vlm.pp("model"),
            };
            let vision = Qwen2VlVision::load(&visual, &vc)?;
            let text = Decoder::load(&language, &tc.decoder()?, "Qwen2")?;
            let proj = w.pp("embedding_proj_layer").linear(tc.hidden_size, cfg.embedding_dim, true)?;
            (vision, text, proj, w.bytes())
        };
        Ok(ColQwen2 { ops, vision, text, proj, page, dim: cfg.embedding_dim, weight_bytes })
    }

    pub fn ops(&self) -> &O {
        &self.ops
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes as u64
    }

    /// Token vectors of each query, row-major `[tokens × dim]`.
    pub fn forward_text(&self, batch: &Batch) -> Result<Vec<Vec<f32>>, ModelError> {
        let o = &self.ops;
        let mut x = self.text.embed(o, &batch.input_ids)?;
        self.text.forward(o, &mut x, &o.seqs(&batch.cu_seqlens)?, &positions(&batch.cu_seqlens, 0))?;
        token_vectors(o, &x, &self.proj, self.dim, &batch.cu_seqlens)
    }

    /// Image-token and prompt-token vectors of each page, row-major `[tokens × dim]`.
    pub fn forward_images(&self, images: &[Pixels]) -> Result<Vec<Vec<f32>>, ModelError> {
        let o = &self.ops;
        let features = self.vision.forward(o, images)?;
        let (before, after) = (self.text.embed(o, &self.page.before)?, self.text.embed(o, &self.page.after)?);
        let mut order = Vec::new();
        let mut cu = vec![0usize];
        let mut first = 0u32;
        for img in images {
            let k = self.vision.tokens(img) as u32;
            order.extend((0..self.page.before.len() as u32).map(|r| (0, r)));
            order.extend((first..first + k).map(|r| (1, r)));
            order.extend((0..self.page.after.len() as u32).map(|r| (2, r)));
            first += k;
            cu.push(order.len());
        }
        let mut x = o.empty()?;
        o.gather_rows(&mut x, &[&before, &features, &after], &order)?;
        drop(features);
        self.text.forward(o, &mut x, &o.seqs(&cu)?, &positions(&cu, 0))?;
        token_vectors(o, &x, &self.proj, self.dim, &cu)
    }
}
