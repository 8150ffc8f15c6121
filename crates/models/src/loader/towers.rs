//! What the multi-tower families (CLIP, SigLIP, CLAP, ColPali, ColQwen2) give the loader and the engine, on
//! whichever backend computes them: one trait, one `Model` over it.

use super::{normalized, Compute, Model};
use crate::backend::Ops;
use crate::batch::{Batch, Output};
use crate::error::ModelError;
use crate::media::audio::AudioFeatures;
use crate::media::image::Pixels;
use crate::models::{clap::Clap, clip::Clip, colpali::ColPali, colqwen2::ColQwen2, siglip::Siglip};

pub(crate) trait Towers: Send + Sync {
    fn compute(&self) -> Compute;
    fn weight_bytes(&self) -> u64;
    /// Width of each output vector (of each token's, for multi-vector models).
    fn dim(&self) -> usize;
    fn text(&self, batch: &Batch) -> Result<Vec<Vec<f32>>, ModelError>;
    fn images(&self, images: &[Pixels]) -> Result<Vec<Vec<f32>>, ModelError> {
        let _ = images;
        Err(ModelError::Unsupported("this model has no image input".into()))
    }
    fn audio(&self, clips: &[AudioFeatures]) -> Result<Vec<Vec<f32>>, ModelError> {
        let _ = clips;
        Err(ModelError::Unsupported("this model has no audio input".into()))
    }
}

/// Serves [`Towers`]. With `normalize`, every output is L2-normalized (pooled embeddings, as Infinity returns
/// them); multi-vector models normalize each token vector themselves.
pub(crate) struct TowersModel {
    pub towers: Box<dyn Towers>,
    pub normalize: bool,
}

impl TowersModel {
    fn finish(&self, vectors: Vec<Vec<f32>>) -> Output {
        Output { vectors: if self.normalize { normalized(vectors) } else { vectors } }
    }
}

impl Model for TowersModel {
    fn forward(&self, batch: &Batch) -> Result<Output, ModelError> {
        if batch.is_empty() {
            return Ok(Output::default());
        }
        Ok(self.finish(self.towers.text(batch)?))
    }

    fn forward_images(&self, images: &[Pixels]) -> Result<Output, ModelError> {
        if images.is_empty() {
            return Ok(Output::default());
        }
        Ok(self.finish(self.towers.images(images)?))
    }

    fn forward_audio(&self, clips: &[AudioFeatures]) -> Result<Output, ModelError> {
        if clips.is_empty() {
            return Ok(Output::default());
        }
        Ok(self.finish(self.towers.audio(clips)?))
    }
}

/// `Towers` for a family: `$media` names the method that takes its other input.
macro_rules! towers {
    ($family:ident, $dim:expr, $media:ident($input:ty) => $forward:ident) => {
        impl<O: Ops> Towers for $family<O> {
            fn compute(&self) -> Compute {
                self.ops().compute()
            }
            fn weight_bytes(&self) -> u64 {
                $family::weight_bytes(self)
            }
            fn dim(&self) -> usize {
                let dim: fn(&Self) -> usize = $dim;
                dim(self)
            }
            fn text(&self, batch: &Batch) -> Result<Vec<Vec<f32>>, ModelError> {
                self.forward_text(batch)
            }
            fn $media(&self, input: &[$input]) -> Result<Vec<Vec<f32>>, ModelError> {
                self.$forward(input)
            }
        }
    };
}

towers!(Clip, |m| m.dim(), images(Pixels) => forward_images);
towers!(Siglip, |m| m.dim, images(Pixels) => forward_images);
towers!(Clap, |m| m.dim(), audio(AudioFeatures) => forward_audio);
towers!(ColPali, |m| m.dim(), images(Pixels) => forward_images);
towers!(ColQwen2, |m| m.dim(), images(Pixels) => forward_images);
