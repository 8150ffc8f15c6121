//! CLAP's two towers on Aleph's CPU kernels: the text tower of [`crate::models::clap_text`] and the HTSAT
//! audio encoder of [`super::htsat`].

use candle_nn::VarBuilder;

use super::htsat::FastClapAudio;
use crate::architectures::clap::ClapConfig;
use crate::backend::cpu::Cpu;
use crate::batch::Batch;
use crate::error::ModelError;
use crate::models::clap_text::ClapText;

pub struct FastClap {
    text: ClapText<Cpu>,
    pub audio: FastClapAudio,
}

impl FastClap {
    pub fn load(vb: VarBuilder, cfg: &ClapConfig) -> Result<Self, ModelError> {
        let act = &cfg.audio_config.projection_hidden_act;
        let text = ClapText::load(Cpu::f32(), vb.pp("text_model"), vb.pp("text_projection"), &cfg.text_config, act)?;
        let audio = FastClapAudio::load(vb.pp("audio_model"), vb.pp("audio_projection"), &cfg.audio_config)?;
        if audio.dim() != text.dim() {
            return Err(ModelError::Weights("text_projection and audio_projection differ in width".into()));
        }
        Ok(FastClap { text, audio })
    }

    pub fn dim(&self) -> usize {
        self.text.dim()
    }

    pub fn weight_bytes(&self) -> u64 {
        self.text.weight_bytes() + self.audio.weight_bytes()
    }

    /// Projected (not normalized) text embeddings.
    pub fn text(&self, batch: &Batch) -> Result<Vec<Vec<f32>>, ModelError> {
        self.text.forward(batch)
    }
}
