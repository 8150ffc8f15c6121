//! CLAP (`ClapModel`): the HTSAT audio encoder of [`super::htsat`] and a RoBERTa text encoder, each followed
//! by a two-layer projection into one shared space.

use candle_nn::VarBuilder;
use serde::Deserialize;

use super::bert::{Bert, BertClass, BertConfig, BertConfigFile, Flavor};
use super::htsat::{AudioConfig, ClapAudio};
use crate::backend::{Activation, Ops, Post};
use crate::batch::Batch;
use crate::error::ModelError;
use crate::layers::Weights;
use crate::loader::MappedTensors;
use crate::media::audio::AudioFeatures;

/// `ClapConfig`, with transformers' defaults where the file omits a field: the text tower's are
/// `ClapTextConfig`'s (a RoBERTa: `pad_token_id` 1, one token type, 514 positions), not BERT's.
#[derive(Debug, Clone, Deserialize)]
#[serde(from = "ClapConfigFile")]
pub struct ClapConfig {
    pub text_config: BertConfig,
    pub audio_config: AudioConfig,
}

#[derive(Deserialize)]
struct ClapConfigFile {
    #[serde(default)]
    text_config: Option<BertConfigFile>,
    #[serde(default)]
    audio_config: Option<AudioConfig>,
    /// transformers' `ClapConfig.__init__` writes this onto both towers' configs, over their own values.
    #[serde(default = "relu")]
    projection_hidden_act: String,
}

impl From<ClapConfigFile> for ClapConfig {
    fn from(f: ClapConfigFile) -> Self {
        let mut audio_config = f.audio_config.unwrap_or_else(AudioConfig::class_default);
        audio_config.projection_hidden_act = f.projection_hidden_act;
        ClapConfig { text_config: f.text_config.unwrap_or_default().resolve(BertClass::ClapText), audio_config }
    }
}

fn relu() -> String {
    "relu".into()
}

/// CLAP's text tower: a RoBERTa encoder, its pooler (`tanh(dense(<s>))`), then the projection.
pub struct ClapText<O: Ops> {
    encoder: Bert<O>,
    pooler: O::Linear,
    proj1: O::Linear,
    proj2: O::Linear,
    act: Activation,
    dim: usize,
}

impl<O: Ops> ClapText<O> {
    /// `w`: the checkpoint's `text_model`, `proj` its `text_projection`; `act`: `projection_hidden_act`.
    fn load(w: &Weights<O>, proj: &Weights<O>, cfg: &BertConfig, act: &str) -> Result<Self, ModelError> {
        let h = cfg.hidden_size;
        // A `ClapTextModel` nests the encoder under `roberta.` in some conversions.
        let bert_root =
            if w.contains("roberta.embeddings.word_embeddings.weight") { w.pp("roberta") } else { w.clone() };
        let out =
            proj.pp("linear1").vb().get_unchecked("bias").and_then(|b| b.dim(0)).map_err(crate::error::weights)?;
        Ok(ClapText {
            encoder: Bert::load(&bert_root, cfg, Flavor::Roberta)?,
            pooler: w.pp("pooler").pp("dense").linear(h, h, true)?,
            proj1: proj.pp("linear1").linear(h, out, true)?,
            proj2: proj.pp("linear2").linear(out, out, true)?,
            act: Activation::parse(act)?,
            dim: out,
        })
    }

    /// Projected (not normalized) text embeddings, one per sequence.
    fn forward(&self, o: &O, batch: &Batch) -> Result<Vec<Vec<f32>>, ModelError> {
        let states = self.encoder.forward(o, batch)?;
        if (0..batch.len()).any(|i| batch.seq_len(i) == 0) {
            return Err(ModelError::Forward("an empty sequence has no first token to pool".into()));
        }
        let first: Vec<(u32, u32)> = (0..batch.len()).map(|i| (0, batch.cu_seqlens[i] as u32)).collect();
        let mut x = o.empty()?;
        o.gather_rows(&mut x, &[&states], &first)?;
        let (mut pooled, mut mid) = (o.empty()?, o.empty()?);
        o.linear_fwd(&x, &self.pooler, Post::Act(Activation::Tanh), &mut pooled)?;
        o.linear_fwd(&pooled, &self.proj1, Post::Act(self.act), &mut mid)?;
        o.linear_fwd(&mid, &self.proj2, Post::None, &mut x)?;
        o.download_rows(x)
    }
}

/// Both towers of a `ClapModel` checkpoint, with the backend that computes them.
pub struct Clap<O: Ops> {
    ops: O,
    text: ClapText<O>,
    audio: ClapAudio<O>,
    weight_bytes: usize,
}

impl<O: Ops> Clap<O> {
    pub fn load(
        ops: O,
        vb: VarBuilder,
        mapped: Option<std::sync::Arc<MappedTensors>>,
        cfg: &ClapConfig,
    ) -> Result<Self, ModelError> {
        let w = Weights::new(vb, &ops).with_mapped(mapped);
        let act = &cfg.audio_config.projection_hidden_act;
        let text = ClapText::load(&w.pp("text_model"), &w.pp("text_projection"), &cfg.text_config, act)?;
        let audio = ClapAudio::load(&w.pp("audio_model"), &w.pp("audio_projection"), &cfg.audio_config)?;
        if audio.dim() != text.dim {
            return Err(ModelError::Weights("text_projection and audio_projection differ in width".into()));
        }
        let weight_bytes = w.bytes();
        drop(w);
        Ok(Clap { ops, text, audio, weight_bytes })
    }

    pub fn ops(&self) -> &O {
        &self.ops
    }

    /// Width of the shared space.
    pub fn dim(&self) -> usize {
        self.audio.dim()
    }

    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes as u64
    }

    /// The longest text the position table allows.
    pub fn text_window(cfg: &ClapConfig) -> usize {
        Flavor::Roberta.max_len(&cfg.text_config)
    }

    pub fn forward_text(&self, batch: &Batch) -> Result<Vec<Vec<f32>>, ModelError> {
        self.text.forward(&self.ops, batch)
    }

    pub fn forward_audio(&self, clips: &[AudioFeatures]) -> Result<Vec<Vec<f32>>, ModelError> {
        self.audio.forward(&self.ops, clips)
    }
}
