//! CLAP's two towers on Aleph's CPU kernels: the RoBERTa text encoder on [`FastBert`] with CLAP's
//! pooler and projection, and the HTSAT audio encoder of [`super::htsat`].

use candle_nn::VarBuilder;

use super::bert::FastBert;
use super::htsat::FastClapAudio;
use crate::architectures::bert::{self, Flavor};
use crate::architectures::clap::ClapConfig;
use crate::batch::Batch;
use crate::encoder::Encoder;
use crate::error::{weights, ModelError};
use crate::heads::HostLinear;

pub struct FastClap {
    text: FastBert,
    pooler: HostLinear,
    proj1: HostLinear,
    proj2: HostLinear,
    pub audio: FastClapAudio,
}

impl FastClap {
    pub fn load(vb: VarBuilder, cfg: &ClapConfig) -> Result<Self, ModelError> {
        let t = &cfg.text_config;
        let h = t.hidden_size;
        let text = FastBert::load(bert::root(vb.pp("text_model")), t, Flavor::Roberta, false)?;
        let pooler = HostLinear::load(vb.pp("text_model").pp("pooler").pp("dense"), h, h).map_err(weights)?;
        let tp = vb.pp("text_projection");
        let out = tp.pp("linear1").get_unchecked("bias").and_then(|b| b.dim(0)).map_err(weights)?;
        let proj1 = HostLinear::load(tp.pp("linear1"), h, out).map_err(weights)?;
        let proj2 = HostLinear::load(tp.pp("linear2"), out, out).map_err(weights)?;
        let audio = FastClapAudio::load(vb.pp("audio_model"), vb.pp("audio_projection"), &cfg.audio_config)?;
        if audio.dim() != out {
            return Err(ModelError::Weights("text_projection and audio_projection differ in width".into()));
        }
        Ok(FastClap { text, pooler, proj1, proj2, audio })
    }

    pub fn dim(&self) -> usize {
        self.proj2.out_dim()
    }

    pub fn weight_bytes(&self) -> u64 {
        self.text.weight_bytes() + self.audio.weight_bytes()
    }

    /// Projected (not normalized) text embeddings: `tanh(pooler(<s>))`, then the projection.
    pub fn text(&self, batch: &Batch) -> Result<Vec<Vec<f32>>, ModelError> {
        let states = self.text.encode(batch)?;
        let h = states.hidden;
        Ok((0..batch.len())
            .map(|i| {
                let first = &states.sequence(batch, i)[..h];
                let pooled: Vec<f32> = self.pooler.apply(first).into_iter().map(f32::tanh).collect();
                let mid: Vec<f32> = self.proj1.apply(&pooled).into_iter().map(|v| v.max(0.0)).collect();
                self.proj2.apply(&mid)
            })
            .collect())
    }
}
