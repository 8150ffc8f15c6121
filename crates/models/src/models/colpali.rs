//! ColPali (`ColPaliForRetrieval`): PaliGemma (a SigLIP vision tower, a linear projector and a Gemma
//! decoder) whose final states are projected to a small width and L2-normalized, one vector per token: per
//! image patch and prompt token for a page image, per token for a query.
//!
//! A page is the sequence `[image features × patches] <bos> "Describe the image." "\n"`; a query is
//! `<bos> "Question: " query <pad>×10 "\n"` (the padding tokens are attended, as ColPali was trained: they
//! are its query augmentation). The prompt strings come from `processor_config.json`; the engine's
//! tokenizer applies the query template and the loader tokenizes the page prompt once. Pages and queries
//! run packed, several per forward pass.

use candle_nn::VarBuilder;
use serde::Deserialize;

use super::gemma::GemmaConfig;
use super::siglip::{SiglipVision, SiglipVisionConfig};
use crate::backend::{Ops, Post};
use crate::batch::Batch;
use crate::error::ModelError;
use crate::layers::decoder::{positions, Decoder};
use crate::layers::Weights;
use crate::loader::MappedTensors;
use crate::media::image::Pixels;
use crate::pooling::l2_normalize;

#[derive(Debug, Clone, Deserialize)]
pub struct ColPaliConfig {
    pub vlm_config: PaliGemmaConfig,
    #[serde(default = "crate::config::n::<128>")]
    pub embedding_dim: usize,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PaliGemmaConfig {
    pub vision_config: SiglipVisionConfig,
    pub text_config: GemmaConfig,
    #[serde(default = "crate::config::n32::<256_000>", alias = "image_token_id")]
    pub image_token_index: u32,
}

pub struct ColPali<O: Ops> {
    ops: O,
    vision: SiglipVision<O>,
    projector: O::Linear,
    text: Decoder<O>,
    proj: O::Linear,
    /// Token ids of a page's prompt after its image features.
    page_prompt: Vec<u32>,
    dim: usize,
    weight_bytes: usize,
}

/// PaliGemma positions count from 1.
const FIRST_POSITION: u32 = 1;

impl<O: Ops> ColPali<O> {
    pub fn load(
        ops: O,
        vb: VarBuilder,
        mapped: Option<std::sync::Arc<MappedTensors>>,
        cfg: &ColPaliConfig,
        page_prompt: Vec<u32>,
    ) -> Result<Self, ModelError> {
        let w = Weights::new(vb, &ops).with_mapped(mapped);
        let vlm = w.pp("vlm");
        // Checkpoints converted from PaliGemmaForConditionalGeneration nest one level deeper.
        let vision_root = if vlm.contains("vision_tower.vision_model.post_layernorm.weight") {
            vlm.pp("vision_tower").pp("vision_model")
        } else {
            vlm.pp("vision_tower")
        };
        let text_root = if vlm.contains("language_model.model.norm.weight") {
            vlm.pp("language_model").pp("model")
        } else {
            vlm.pp("language_model")
        };
        let tc = &cfg.vlm_config.text_config;
        let vision = SiglipVision::load(&vision_root, &cfg.vlm_config.vision_config)?;
        let text = Decoder::load(&text_root, &tc.decoder(false)?, "Gemma")?;
        let h = tc.hidden_size;
        let projector = vlm.pp("multi_modal_projector").pp("linear").linear(
            cfg.vlm_config.vision_config.tower.hidden_size,
            h,
            true,
        )?;
        let proj = w.pp("embedding_proj_layer").linear(h, cfg.embedding_dim, true)?;
        let weight_bytes = w.bytes();
        drop((w, vlm, vision_root, text_root));
        Ok(ColPali { ops, vision, projector, text, proj, page_prompt, dim: cfg.embedding_dim, weight_bytes })
    }

    pub fn ops(&self) -> &O {
        &self.ops
    }

    /// Width of each token vector.
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
        let positions = positions(&batch.cu_seqlens, FIRST_POSITION);
        self.text.forward(o, &mut x, &o.seqs(&batch.cu_seqlens)?, &positions)?;
        self.head(&x, &batch.cu_seqlens)
    }

    /// Patch and prompt vectors of each page image, row-major `[tokens × dim]`.
    pub fn forward_images(&self, images: &[Pixels]) -> Result<Vec<Vec<f32>>, ModelError> {
        let o = &self.ops;
        let states = self.vision.forward(o, images)?;
        let mut patches = o.empty()?;
        o.linear_fwd(&states, &self.projector, Post::None, &mut patches)?;
        drop(states);
        let prompt = self.text.embed(o, &self.page_prompt)?;
        let (n, m) = (self.vision.tokens_per_image(), self.page_prompt.len());
        // Each page: its patches' features, then the prompt.
        let order: Vec<(u32, u32)> = (0..images.len())
            .flat_map(|i| {
                let own = (0..n).map(move |k| (0, (i * n + k) as u32));
                own.chain((0..m).map(|k| (1, k as u32)))
            })
            .collect();
        let mut x = o.empty()?;
        o.gather_rows(&mut x, &[&patches, &prompt], &order)?;
        let cu: Vec<usize> = (0..=images.len()).map(|i| i * (n + m)).collect();
        self.text.forward(o, &mut x, &o.seqs(&cu)?, &positions(&cu, FIRST_POSITION))?;
        self.head(&x, &cu)
    }

    /// Projects final states and L2-normalizes each row; one row-major matrix per sequence.
    fn head(&self, states: &O::T, cu: &[usize]) -> Result<Vec<Vec<f32>>, ModelError> {
        token_vectors(&self.ops, states, &self.proj, self.dim, cu)
    }
}

/// `proj(states)`, each row L2-normalized, split per sequence (`[tokens × dim]` each).
pub(crate) fn token_vectors<O: Ops>(
    o: &O,
    states: &O::T,
    proj: &O::Linear,
    dim: usize,
    cu: &[usize],
) -> Result<Vec<Vec<f32>>, ModelError> {
    let mut y = o.empty()?;
    o.linear_fwd(states, proj, Post::None, &mut y)?;
    let mut rows = o.download(y)?;
    rows.chunks_exact_mut(dim.max(1)).for_each(l2_normalize);
    Ok(cu.windows(2).map(|w| rows[w[0] * dim..w[1] * dim].to_vec()).collect())
}
