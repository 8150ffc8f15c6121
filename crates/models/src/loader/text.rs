//! Text encoders (the BERT family, ModernBERT): what every family shares, from the sentence-transformers
//! files, window and tokenizer to the head its task needs, and each family's own weights and heads.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_nn::VarBuilder;

use super::card;
use super::checkpoint::{Checkpoint, MappedTensors};
use super::{
    backend_for, calibrate, file_bytes, var_builder, ArchConfig, Backend, Compute, DType, LoadOptions, LoadedModel,
    Model, ModelInfo, RerankTemplate, Task,
};
use crate::backend::cpu::Cpu;
use crate::backend::record::Recording;
use crate::backend::varlen::AttentionChoice;
use crate::backend::Ops;
use crate::batch::{Batch, Output};
use crate::encoder::{Encoder, OnBackend, TokenEncoder};
use crate::error::{read_json, weights, ModelError};
use crate::heads::{DenseLayer, Head, HostLinear, HostNorm, LexicalAndColbert, PostStep, Residual};
use crate::layers::decoder::{self, Decoder, DecoderSpec};
use crate::layers::Weights;
use crate::models::bert::{self, Bert, BertClass, BertConfig, BertConfigFile, Flavor};
use crate::models::deberta::{self, Deberta, DebertaConfig};
use crate::models::gemma3::Gemma3Config;
use crate::models::gte::{self, Gte, GteConfig};
use crate::models::jina_v3::{self, JinaV3, JinaV3Config};
use crate::models::llama::{self, LlamaConfig};
use crate::models::modernbert::{self, ModernBert, ModernBertConfig};
use crate::models::splade::{Splade, SpladeModel};
use crate::models::{qwen3, qwen3_vl};
use crate::pooling::{Pooling, PoolingChoice};
use crate::st_config::{DenseActivation, PostModule, SentenceTransformerConfig};
use crate::tokenizer::{PairTemplate, SpecialTokens, TextTokenizer};

/// What every text encoder's loading starts from.
struct Setup {
    st: SentenceTransformerConfig,
    task: Task,
    pooling: Pooling,
    tokenizer: TextTokenizer,
    device: candle_core::Device,
    vb: VarBuilder<'static>,
    /// The same files mapped, for tables read in place.
    mapped: Option<Arc<MappedTensors>>,
    backend: Backend,
    dtype: DType,
    /// How candle attends, resolved once for the device.
    attention: AttentionChoice,
    info: ModelInfo,
    /// BGE-M3's sparse and ColBERT heads, for an embedder that ships them.
    side: Option<LexicalAndColbert>,
}

impl Setup {
    /// `model_max`: the longest input the model's positions allow; `hidden`: its width.
    fn new(
        dir: &Path,
        arch: &ArchConfig,
        opts: &LoadOptions,
        model_max: usize,
        hidden: usize,
    ) -> Result<Self, ModelError> {
        let st = SentenceTransformerConfig::read(dir)?;
        let window = st.max_seq_length.unwrap_or(model_max).min(model_max);
        let task = arch.task();
        let pooling = match opts.pooling {
            PoolingChoice::Fixed(p) => p,
            // A plain transformers folder has no pooling module: sentence-transformers then uses mean.
            PoolingChoice::Auto | PoolingChoice::Splade => st.pooling.unwrap_or(Pooling::Mean),
        };
        let tokenizer = TextTokenizer::from_file(&dir.join("tokenizer.json"), window)?;
        let device = opts.device.candle()?;
        let checkpoint = Checkpoint::find(dir)?;
        let vb = checkpoint.var_builder(&device)?;
        let backend = backend_for(opts, &device);
        let attention = match backend {
            Backend::Candle => opts.attention.resolve(!device.is_cpu()).map_err(ModelError::InvalidOption)?,
            Backend::Auto => AttentionChoice::Padded,
        };
        let mapped = match backend {
            Backend::Auto => checkpoint.mapped()?,
            Backend::Candle => None,
        };
        let architecture = arch.architectures.first().cloned().unwrap_or_else(|| arch.model_type.clone());
        let info = ModelInfo {
            // The head sees every token's state: it can skip normalization or return the states themselves.
            token_outputs: true,
            prompts: st.prompts.clone(),
            ..ModelInfo::new(task.clone(), Compute::AlephCpu, architecture, hidden, window, pooling)
        };
        Ok(Setup {
            st,
            task,
            pooling,
            tokenizer,
            device,
            vb,
            mapped,
            backend,
            dtype: opts.dtype,
            attention,
            info,
            side: None,
        })
    }

    fn finish(
        self,
        dir: &Path,
        model: Arc<dyn Model>,
        backend: Compute,
        bytes: u64,
    ) -> Result<LoadedModel, ModelError> {
        let mut info = self.info;
        info.backend = backend;
        // Aleph's CPU path packs sequences end to end; candle's pads them to the longest inside attention,
        // unless it was asked to run every batch unpadded: then the budget counts real tokens.
        // (Asked for explicitly, unpadded attention loads or fails: it never falls back to padding.)
        info.pads = backend.pads() && self.attention != AttentionChoice::Unpadded;
        info.weight_bytes = if backend == Compute::Candle { file_bytes(dir)? } else { bytes };
        Ok(LoadedModel { model, tokenizer: self.tokenizer, images: None, audio: None, info })
    }

    /// The encoder with its task's head: pooling and the sentence-transformers modules after it, a
    /// ColBERT projection, or the family's classification head (`classifier`, given the label count).
    fn encoder_model(
        mut self,
        dir: &Path,
        encoder: Box<dyn Encoder>,
        backend: Compute,
        classifier: impl FnOnce(&VarBuilder<'static>, usize) -> Result<Head, ModelError>,
    ) -> Result<LoadedModel, ModelError> {
        let h = encoder.hidden_size();
        let (head, dim) = match &self.task {
            Task::Embed => {
                let (post, dim) = post_steps(&self.st.post, h, &self.device)?;
                self.info.normalize = post.iter().any(|s| matches!(s, PostStep::Normalize));
                let side = self.side.take().map(Box::new);
                self.info.sparse_output = side.is_some();
                self.info.colbert_dim = side.as_ref().map(|s| s.colbert.out_dim());
                (Head::Pool { pooling: self.pooling, post, side }, dim)
            }
            Task::MultiVector => {
                let proj = HostLinear::load_no_bias(self.vb.pp("linear"), h).map_err(weights)?;
                self.info.normalize = true;
                let dim = proj.out_dim();
                (Head::MultiVector { proj }, dim)
            }
            Task::Rerank | Task::Classify { .. } => {
                let labels = if let Task::Classify { labels, .. } = &self.task { labels.len() } else { 1 };
                (classifier(&self.vb, labels)?, labels)
            }
        };
        self.info.dim = dim;
        let bytes = encoder.weight_bytes();
        self.finish(dir, Arc::new(EncoderModel { encoder, head }), backend, bytes)
    }
}

/// BERT, RoBERTa, XLM-R, CamemBERT, MPNet, DistilBERT: embedders, cross-encoders, classifiers, ColBERT and
/// SPLADE.
pub(super) fn load_bert_family(
    dir: &Path,
    arch: &ArchConfig,
    flavor: Flavor,
    opts: &LoadOptions,
) -> Result<LoadedModel, ModelError> {
    let jina = arch.model_type == "bert" && arch.remote_code_from(super::JINA_BERT);
    let class = if jina { Some(BertClass::JinaBert) } else { BertClass::from_model_type(&arch.model_type) };
    let class = class.ok_or_else(|| {
        ModelError::Unsupported(format!("model_type `{}` is not a BERT-family encoder", arch.model_type))
    })?;
    let cfg: BertConfig = read_json::<BertConfigFile>(&dir.join("config.json"))?.resolve(class);
    let setup = Setup::new(dir, arch, opts, flavor.max_len(&cfg), cfg.hidden_size)?;
    // A SpladePooling module, or `--pooling-method splade` on a plain masked-LM folder; another fixed
    // pooling method asks for the encoder's dense states instead.
    let splade = match opts.pooling {
        PoolingChoice::Splade => Some(setup.st.splade.unwrap_or_default()),
        PoolingChoice::Fixed(_) => None,
        PoolingChoice::Auto => setup.st.splade,
    };
    let vb = setup.vb.clone();
    if let Some(pooling) = splade {
        if setup.task != Task::Embed {
            return Err(ModelError::Unsupported(format!(
                "SPLADE pooling on a {:?} checkpoint (it needs a masked LM)",
                setup.task
            )));
        }
        let (model, backend, bytes): (Arc<dyn Model>, Compute, u64) = match setup.backend {
            Backend::Auto => {
                let ops = if setup.dtype == DType::Int8 {
                    let load = |w: &Weights<'_, Recording<Cpu>>| {
                        Splade::load(w, &bert::encoder_weights(w), &cfg, flavor, pooling)
                    };
                    let run = |m: &Splade<_>, o: &Recording<Cpu>, b: &Batch| m.forward(o, b).map(drop);
                    Cpu::int8(calibrate(load, run, &setup.tokenizer, vb.clone(), setup.mapped.clone())?)
                } else {
                    super::cpu_kernels(opts.dtype)
                };
                let m = SpladeModel::load(ops, vb, setup.mapped.clone(), &cfg, flavor, pooling)?;
                let bytes = m.weight_bytes as u64;
                (Arc::new(m), Compute::AlephCpu, bytes)
            }
            Backend::Candle => (
                Arc::new(SpladeModel::load(
                    super::candle_with(&setup.device, setup.dtype, setup.attention)?,
                    vb,
                    None,
                    &cfg,
                    flavor,
                    pooling,
                )?),
                Compute::Candle,
                0,
            ),
        };
        let mut setup = setup;
        setup.info.dim = cfg.vocab_size;
        setup.info.sparse = true;
        setup.info.sparse_output = true;
        // The output is the pooled vocabulary weights, nothing per token, never normalized.
        setup.info.token_outputs = false;
        return setup.finish(dir, model, backend, bytes);
    }
    let (encoder, backend) = encoder_of(&BertFamily(&cfg, flavor), &setup, bert::root(vb))?;
    let h = cfg.hidden_size;
    let mut setup = setup;
    if setup.task == Task::Embed {
        setup.side = lexical_and_colbert(dir, &setup, h)?;
    }
    setup.encoder_model(dir, encoder, backend, |vb, labels| {
        let (dense, act, out) = match class {
            BertClass::Bert | BertClass::JinaBert => {
                (bert::root(vb.clone()).pp("pooler").pp("dense"), DenseActivation::Tanh, vb.pp("classifier"))
            }
            BertClass::DistilBert => (vb.pp("pre_classifier"), DenseActivation::Relu, vb.pp("classifier")),
            _ => (vb.pp("classifier").pp("dense"), DenseActivation::Tanh, vb.pp("classifier").pp("out_proj")),
        };
        Ok(Head::Classifier {
            pooling: Pooling::Cls,
            dense: HostLinear::load(dense, h, h).map_err(weights)?,
            act,
            norm: None,
            out: HostLinear::load(out, h, labels).map_err(weights)?,
        })
    })
}

/// BGE-M3's heads, where the folder ships both beside the encoder as FlagEmbedding saves them
/// (`sparse_linear.pt`, `colbert_linear.pt`: PyTorch pickles of `nn.Linear` state dicts).
fn lexical_and_colbert(dir: &Path, setup: &Setup, hidden: usize) -> Result<Option<LexicalAndColbert>, ModelError> {
    let (sparse, colbert) = (dir.join("sparse_linear.pt"), dir.join("colbert_linear.pt"));
    if !sparse.exists() || !colbert.exists() {
        return Ok(None);
    }
    let vb = |path: PathBuf| Checkpoint::Pickles(vec![path]).var_builder(&setup.device);
    let sparse = HostLinear::load(vb(sparse)?, hidden, 1).map_err(weights)?;
    let colbert = HostLinear::load_sized(vb(colbert)?, hidden).map_err(weights)?;
    if setup.tokenizer.vocab_size() >= 1 << 24 {
        return Err(ModelError::Unsupported(format!("a vocabulary of {} tokens", setup.tokenizer.vocab_size())));
    }
    // FlagEmbedding leaves out its tokenizer's cls, eos, pad and unk tokens.
    let named = SpecialTokens::read(dir)?;
    let skip = [named.cls_token, named.eos_token, named.pad_token, named.unk_token]
        .into_iter()
        .flatten()
        .filter_map(|t| setup.tokenizer.token_id(&t))
        .collect();
    Ok(Some(LexicalAndColbert { sparse, colbert, skip }))
}

/// ModernBERT: embedders and cross-encoders / classifiers (`classifier_pooling` cls or mean).
pub(super) fn load_modernbert(dir: &Path, arch: &ArchConfig, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    let cfg: ModernBertConfig = read_json(&dir.join("config.json"))?;
    cfg.check()?;
    let setup = Setup::new(dir, arch, opts, cfg.max_position_embeddings, cfg.hidden_size)?;
    let vb = setup.vb.clone();
    let (encoder, backend) = encoder_of(&cfg, &setup, modernbert::root(vb))?;
    let h = cfg.hidden_size;
    setup.encoder_model(dir, encoder, backend, |vb, labels| {
        let act = DenseActivation::from_hidden_act(&cfg.classifier_activation)?;
        Ok(Head::Classifier {
            pooling: if cfg.classifier_pooling == "mean" { Pooling::Mean } else { Pooling::Cls },
            dense: HostLinear::load_with(vb.pp("head").pp("dense"), h, h, cfg.classifier_bias).map_err(weights)?,
            act,
            norm: Some(HostNorm::load(vb.pp("head").pp("norm"), h, cfg.norm_bias, cfg.norm_eps).map_err(weights)?),
            out: HostLinear::load(vb.pp("classifier"), h, labels).map_err(weights)?,
        })
    })
}

/// GTE (`new`, Alibaba's remote code, and transformers' `gte` port): embedders and cross-encoders (the BERT
/// pooler on the first token, then the classifier).
pub(super) fn load_gte(dir: &Path, arch: &ArchConfig, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    let cfg = GteConfig::read(&dir.join("config.json"), &arch.model_type)?;
    let setup = Setup::new(dir, arch, opts, cfg.max_position_embeddings, cfg.hidden_size)?;
    let vb = setup.vb.clone();
    let (encoder, backend) = encoder_of(&cfg, &setup, gte::root(vb))?;
    let h = cfg.hidden_size;
    setup.encoder_model(dir, encoder, backend, |vb, labels| {
        Ok(Head::Classifier {
            pooling: Pooling::Cls,
            dense: HostLinear::load(gte::root(vb.clone()).pp("pooler").pp("dense"), h, h).map_err(weights)?,
            act: DenseActivation::Tanh,
            norm: None,
            out: HostLinear::load(vb.pp("classifier"), h, labels).map_err(weights)?,
        })
    })
}

/// jina-embeddings-v3 (XLM-R with rotary positions and a LoRA adapter per task): an embedder whose requests may
/// name a task ([`ModelInfo::adapters`]).
pub(super) fn load_jina_v3(dir: &Path, arch: &ArchConfig, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    let cfg = JinaV3Config::read(&dir.join("config.json"))?;
    let mut setup = Setup::new(dir, arch, opts, cfg.max_position_embeddings, cfg.hidden_size)?;
    // Its sentence-transformers module (custom_st.Transformer) strips every text, the prompt's trailing
    // space with it when the text is empty.
    setup.tokenizer = setup.tokenizer.stripping();
    let vb = setup.vb.clone();
    let (encoder, backend) = encoder_of(&cfg, &setup, jina_v3::root(vb))?;
    let mut loaded = setup.encoder_model(dir, encoder, backend, |_, _| {
        Err(ModelError::Unsupported(
            "jina-embeddings-v3's code (xlm-roberta-flash-implementation) as a reranker or classifier: only its \
             embedding model is implemented"
                .into(),
        ))
    })?;
    loaded.info.adapters = cfg.adapters;
    Ok(loaded)
}

/// DeBERTa-v2/v3: embedders, cross-encoders and classifiers (`ContextPooler`: the first token through a dense
/// layer and `pooler_hidden_act`, then the classifier).
pub(super) fn load_deberta(dir: &Path, arch: &ArchConfig, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    let cfg: DebertaConfig = read_json(&dir.join("config.json"))?;
    cfg.check()?;
    let mut setup = Setup::new(dir, arch, opts, Deberta::<Cpu>::max_len(&cfg), cfg.hidden_size)?;
    // Its disentangled terms are computed on padded batches only.
    setup.attention = AttentionChoice::Padded;
    let vb = setup.vb.clone();
    let (encoder, backend) = encoder_of(&cfg, &setup, deberta::root(vb))?;
    let h = cfg.hidden_size;
    setup.encoder_model(dir, encoder, backend, |vb, labels| {
        Ok(Head::Classifier {
            pooling: Pooling::Cls,
            dense: HostLinear::load(vb.pp("pooler").pp("dense"), h, h).map_err(weights)?,
            act: DenseActivation::from_hidden_act(&cfg.pooler_hidden_act)?,
            norm: None,
            out: HostLinear::load(vb.pp("classifier"), h, labels).map_err(weights)?,
        })
    })
}

/// Gemma 3's text decoder (EmbeddingGemma: bidirectional, mean-pooled, with sentence-transformers' Dense
/// layers after the pooling).
pub(super) fn load_gemma3(dir: &Path, arch: &ArchConfig, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    let cfg: Gemma3Config = read_json(&dir.join("config.json"))?;
    let family = DecoderFamily { spec: cfg.decoder()?, name: "Gemma3", reranker: None, appends: None, chat: None };
    load_decoder(dir, arch, opts, &family, cfg.max_position_embeddings)
}

/// Llama, Mistral, Qwen2 and Qwen3 embedders (SFR-Embedding, e5-mistral-7b-instruct, gte-Qwen2-instruct,
/// Qwen3-Embedding: `*ForCausalLM` or `*Model` checkpoints whose sentence-transformers files pool the last
/// token) and rerankers (Qwen3-Reranker, mxbai-rerank-v2: causal LMs; converted `*ForSequenceClassification`).
pub(super) fn load_llama(dir: &Path, arch: &ArchConfig, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    let kind = llama::Family::from_model_type(&arch.model_type).ok_or_else(|| {
        ModelError::Unsupported(format!("model_type `{}` is not a Llama-style decoder", arch.model_type))
    })?;
    let cfg = LlamaConfig::read(&dir.join("config.json"), kind)?;
    let reranker = match kind {
        llama::Family::Qwen3 => Some(LmReranker::QWEN3),
        llama::Family::Qwen2 if names_mxbai_rerank(dir) => Some(LmReranker::MXBAI),
        _ => None,
    };
    // gte-Qwen2-instruct's tokenizer code ends every sequence with its eos, which its tokenizer.json leaves out.
    let appends = (kind == llama::Family::Qwen2
        && opts.trust_remote_code
        && super::runs_gte_qwen2(arch)
        && tokenizer_code_is(dir, "tokenization_qwen."))
    .then(|| SpecialTokens::read(dir).map(|t| t.eos_token.unwrap_or_else(|| "<|endoftext|>".into())))
    .transpose()?;
    let family = DecoderFamily { spec: cfg.spec, name: kind.name(), reranker, appends, chat: None };
    load_decoder(dir, arch, opts, &family, cfg.max_position_embeddings)
}

/// Qwen3-VL-Embedding and Qwen3-VL-Reranker (`qwen3_vl` checkpoints, `Qwen3VLForConditionalGeneration`) on
/// text: the language model under `model.language_model`, each text in the chat frame their reference code
/// renders, the embedder pooled at the last token and normalized, the reranker scored by "yes" against "no".
/// The vision tower is not built yet: the model serves text, and images sent to it are refused as for any
/// text model.
pub(super) fn load_qwen3_vl(dir: &Path, arch: &ArchConfig, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    let path = dir.join("config.json");
    let config: serde_json::Value = read_json(&path)?;
    let cfg = LlamaConfig::from_value(&path, config.get("text_config"), llama::Family::Qwen3Vl)?;
    let chat = ChatEmbedding {
        prompts: qwen3_vl::embedding_prompts(),
        frame: qwen3_vl::embedding_prefix,
        suffix: qwen3_vl::EMBEDDING_SUFFIX,
        longest: qwen3_vl::EMBEDDING_MAX_LENGTH,
        rerank_longest: qwen3_vl::RERANK_MAX_LENGTH,
    };
    let family = DecoderFamily {
        spec: cfg.spec,
        name: "Qwen3-VL",
        reranker: Some(LmReranker::QWEN3_VL),
        appends: None,
        chat: Some(chat),
    };
    tracing::info!("Qwen3-VL serves text only here: its vision tower is not built yet, so images are refused");
    load_decoder(dir, arch, opts, &family, cfg.max_position_embeddings)
}

/// Whether `tokenizer_config.json` names tokenizer code of the repository's own module `module`.
fn tokenizer_code_is(dir: &Path, module: &str) -> bool {
    let Ok(config) = read_json::<serde_json::Value>(&dir.join("tokenizer_config.json")) else {
        return false;
    };
    let named = |v: &serde_json::Value| v.as_str().is_some_and(|c| crate::config::code_in_repo(c).starts_with(module));
    match config.get("auto_map").and_then(|m| m.get("AutoTokenizer")) {
        Some(serde_json::Value::Array(classes)) => classes.iter().any(named),
        Some(class) => named(class),
        None => false,
    }
}

/// Whether a checkpoint is mxbai-rerank-v2: its model card or its folder (a hub cache's
/// `models--mixedbread-ai--mxbai-rerank-base-v2`) names it.
fn names_mxbai_rerank(dir: &Path) -> bool {
    let named = |s: &str| s.to_lowercase().contains("mxbai-rerank");
    named(&dir.to_string_lossy()) || card::read(dir).is_some_and(|c| named(&c))
}

/// A decoder family and, where Aleph knows one, the prompt that makes its causal LM a reranker.
struct DecoderFamily {
    spec: DecoderSpec,
    name: &'static str,
    reranker: Option<LmReranker>,
    /// A token the tokenizer's own code ends every sequence with.
    appends: Option<String>,
    /// A chat model embedding each text inside its chat frame (Qwen3-VL-Embedding).
    chat: Option<ChatEmbedding>,
}

/// How a chat model embeds a text, as its reference code does: a named prompt (the frame up to the user's turn,
/// with the instruction) before it, the frame's end after it, the last token pooled and normalized where
/// the checkpoint ships no sentence-transformers files of its own.
struct ChatEmbedding {
    prompts: crate::st_config::Prompts,
    /// The frame up to the user's text around an instruction.
    frame: fn(&str) -> String,
    suffix: &'static str,
    /// The reference embedder's token cap.
    longest: usize,
    /// The reference reranker's (prompt frame aside).
    rerank_longest: usize,
}

/// How a causal LM reranks: its prompt around each pair, and the answer tokens whose logits it compares.
#[derive(Clone, Copy)]
struct LmReranker {
    template: fn(Option<String>) -> PairTemplate,
    yes: &'static str,
    no: &'static str,
}

impl LmReranker {
    const QWEN3: LmReranker = LmReranker { template: qwen3::reranker_template, yes: "yes", no: "no" };
    const MXBAI: LmReranker = LmReranker { template: llama::mxbai_reranker_template, yes: "1", no: "0" };
    const QWEN3_VL: LmReranker = LmReranker { template: qwen3_vl::reranker_template, yes: "yes", no: "no" };
}

/// A decoder as an embedder (its pooling from the sentence-transformers files) or as an LLM reranker: a causal
/// LM given `--model-task rerank`, or under `auto` one whose model card says `pipeline_tag: text-ranking` and
/// whose prompt Aleph knows; the prompt around each pair, the last token's "yes" logit minus its "no". A
/// `*ForSequenceClassification` checkpoint's `score` reads the last token.
fn load_decoder(
    dir: &Path,
    arch: &ArchConfig,
    opts: &LoadOptions,
    family: &DecoderFamily,
    max_positions: usize,
) -> Result<LoadedModel, ModelError> {
    let causal_lm = arch.has_lm_head();
    let reranker = match &opts.rerank_template {
        RerankTemplate::Auto => family.reranker,
        RerankTemplate::Qwen3 => Some(LmReranker::QWEN3),
        RerankTemplate::Mxbai => Some(LmReranker::MXBAI),
        RerankTemplate::None | RerankTemplate::File(_) => None,
    };
    let trained_to_rank =
        || card::read(dir).is_some_and(|c| card::front_matter(&c, "pipeline_tag") == Some("text-ranking"));
    let lm_reranks = causal_lm
        && match opts.task {
            super::ModelTask::Rerank => true,
            super::ModelTask::Auto => reranker.is_some() && trained_to_rank(),
            _ => false,
        };
    // A chat model's reference code caps its inputs (its embedder and its reranker each at their own length).
    let longest = match &family.chat {
        Some(chat) if lm_reranks => chat.rerank_longest.min(max_positions),
        Some(chat) => chat.longest.min(max_positions),
        None => max_positions,
    };
    let mut setup = Setup::new(dir, arch, opts, longest, family.spec.hidden)?;
    if let Some(token) = &family.appends {
        setup.tokenizer = setup.tokenizer.appending(token)?;
    }
    if lm_reranks || setup.task == Task::Rerank {
        let instruction = opts.rerank_instruction.clone();
        let template = match &opts.rerank_template {
            RerankTemplate::File(path) => {
                Some(PairTemplate::from_file(path, instruction.unwrap_or_else(|| qwen3::DEFAULT_INSTRUCTION.into()))?)
            }
            _ => reranker.map(|r| (r.template)(instruction)),
        };
        match template {
            Some(t) => {
                setup.tokenizer = setup.tokenizer.with_pair_template(t)?;
                setup.info.takes_instruction = true;
            }
            None if lm_reranks => {
                return Err(ModelError::Unsupported(format!(
                    "--model-task rerank on a {} causal LM needs a prompt: Aleph knows Qwen3-Reranker's and \
                     mxbai-rerank-v2's (--rerank-template auto, qwen3 or mxbai), or give one with \
                     --rerank-template FILE",
                    family.name
                )))
            }
            None => {}
        }
    }
    let yes_no = if lm_reranks {
        let token = |t: &str| {
            let id = setup.tokenizer.token_id(t);
            id.ok_or_else(|| ModelError::Unsupported(format!("a reranker without a `{t}` token")))
        };
        let (yes, no) = reranker.map_or(("yes", "no"), |r| (r.yes, r.no));
        let yes_no = (token(yes)?, token(no)?);
        (setup.task, setup.info.task) = (Task::Rerank, Task::Rerank);
        Some(yes_no)
    } else {
        None
    };
    if let (Some(chat), Task::Embed) = (&family.chat, &setup.task) {
        if setup.st.pooling.is_none() {
            (setup.pooling, setup.info.pooling) = (Pooling::LastToken, Pooling::LastToken);
            setup.st.post = vec![PostModule::Normalize];
        }
        // Prompts of the checkpoint's own sentence-transformers config are instructions: each goes into the frame.
        let own = std::mem::take(&mut setup.info.prompts);
        let mut prompts = chat.prompts.clone();
        prompts.prompts.extend(own.prompts.iter().map(|(name, instruction)| (name.clone(), (chat.frame)(instruction))));
        prompts.default_prompt_name = own.default_prompt_name.or(prompts.default_prompt_name);
        setup.info.prompts = prompts;
        setup.tokenizer = setup.tokenizer.with_template(String::new(), chat.suffix.to_string());
    }
    let vb = setup.vb.clone();
    let (encoder, backend) = encoder_of(family, &setup, decoder::root(vb))?;
    let h = family.spec.hidden;
    setup.encoder_model(dir, encoder, backend, |vb, labels| {
        let out = match yes_no {
            // The language-model head's "yes" row minus its "no" row (the input embeddings, where tied): two rows
            // read from the checkpoint, not the whole table.
            Some((yes, no)) => {
                let root = decoder::root_prefix(|name| vb.contains_tensor(name));
                let checkpoint = Checkpoint::find(dir)?;
                let rows = match checkpoint.rows("lm_head.weight", &[yes, no])? {
                    Some(rows) => rows,
                    None => checkpoint.rows(&format!("{root}embed_tokens.weight"), &[yes, no])?.ok_or_else(|| {
                        ModelError::Unsupported("a causal LM with neither lm_head nor embed_tokens".into())
                    })?,
                };
                if rows.iter().any(|r| r.len() != h) {
                    return Err(ModelError::Unsupported(format!("an LM head {} wide over {h} states", rows[0].len())));
                }
                let diff: Vec<f32> = rows[0].iter().zip(&rows[1]).map(|(y, n)| y - n).collect();
                HostLinear::from_rows(diff, h)
            }
            None => HostLinear::load_with(vb.pp("score"), h, labels, false).map_err(weights)?,
        };
        Ok(Head::Score { pooling: Pooling::LastToken, out })
    })
}

/// A text family's encoder definition, loadable on any backend.
trait TextFamily {
    type Model<O: Ops>: TokenEncoder<O> + 'static;
    fn load<O: Ops>(&self, w: &Weights<O>) -> Result<Self::Model<O>, ModelError>;
}

struct BertFamily<'a>(&'a BertConfig, Flavor);

impl TextFamily for BertFamily<'_> {
    type Model<O: Ops> = Bert<O>;
    fn load<O: Ops>(&self, w: &Weights<O>) -> Result<Bert<O>, ModelError> {
        Bert::load(w, self.0, self.1)
    }
}

impl TextFamily for ModernBertConfig {
    type Model<O: Ops> = ModernBert<O>;
    fn load<O: Ops>(&self, w: &Weights<O>) -> Result<ModernBert<O>, ModelError> {
        ModernBert::load(w, self)
    }
}

impl TextFamily for DebertaConfig {
    type Model<O: Ops> = Deberta<O>;
    fn load<O: Ops>(&self, w: &Weights<O>) -> Result<Deberta<O>, ModelError> {
        Deberta::load(w, self)
    }
}

impl TextFamily for DecoderFamily {
    type Model<O: Ops> = Decoder<O>;
    fn load<O: Ops>(&self, w: &Weights<O>) -> Result<Decoder<O>, ModelError> {
        Decoder::load(w, &self.spec, self.name)
    }
}

impl TextFamily for JinaV3Config {
    type Model<O: Ops> = JinaV3<O>;
    fn load<O: Ops>(&self, w: &Weights<O>) -> Result<JinaV3<O>, ModelError> {
        JinaV3::load(w, self)
    }
}

impl TextFamily for GteConfig {
    type Model<O: Ops> = Gte<O>;
    fn load<O: Ops>(&self, w: &Weights<O>) -> Result<Gte<O>, ModelError> {
        Gte::load(w, self)
    }
}

/// `family`'s encoder, rooted at `vb`, on the setup's backend: Aleph's kernels (int8 smoothed from the
/// family's own calibration run) or candle.
fn encoder_of(
    family: &impl TextFamily,
    setup: &Setup,
    vb: VarBuilder<'static>,
) -> Result<(Box<dyn Encoder>, Compute), ModelError> {
    Ok(match setup.backend {
        Backend::Auto if setup.dtype == DType::Int8 => {
            let run = |m: &_, o: &Recording<Cpu>, b: &Batch| TokenEncoder::forward(m, o, b).map(drop);
            let mapped = setup.mapped.clone();
            let smoothing = calibrate(|w| family.load(w), run, &setup.tokenizer, vb.clone(), mapped.clone())?;
            (Box::new(OnBackend::load(Cpu::int8(smoothing), vb, mapped, |w| family.load(w))?), Compute::AlephCpu)
        }
        Backend::Auto => {
            let ops = super::cpu_kernels(setup.dtype);
            (Box::new(OnBackend::load(ops, vb, setup.mapped.clone(), |w| family.load(w))?), Compute::AlephCpu)
        }
        Backend::Candle => {
            let ops = super::candle_with(&setup.device, setup.dtype, setup.attention)?;
            (Box::new(OnBackend::load(ops, vb, None, |w| family.load(w))?), Compute::Candle)
        }
    })
}

/// The `Dense` and `Normalize` modules after pooling, their weights read from each module's folder, and
/// the width that comes out.
fn post_steps(
    modules: &[PostModule],
    hidden: usize,
    device: &candle_core::Device,
) -> Result<(Vec<PostStep>, usize), ModelError> {
    let mut width = hidden;
    let mut steps = Vec::with_capacity(modules.len());
    for module in modules {
        match module {
            PostModule::Normalize => steps.push(PostStep::Normalize),
            PostModule::Dense(d) => {
                if d.in_features != width {
                    return Err(ModelError::BadFile {
                        path: d.dir.join("config.json"),
                        reason: format!("in_features {} does not match the {width} values before it", d.in_features),
                    });
                }
                let vb = var_builder(&d.dir, device)?;
                let linear =
                    HostLinear::load_with(vb.pp("linear"), d.in_features, d.out_features, d.bias).map_err(weights)?;
                let residual = match (d.residual, d.in_features == d.out_features) {
                    (false, _) => None,
                    (true, true) => Some(Residual::Identity),
                    (true, false) => Some(Residual::Projected(
                        HostLinear::load_with(vb.pp("residual"), d.in_features, d.out_features, false)
                            .map_err(weights)?,
                    )),
                };
                steps.push(PostStep::Dense(DenseLayer { linear, act: d.activation, residual }));
                width = d.out_features;
            }
        }
    }
    Ok((steps, width))
}

/// An encoder with the head its task needs.
struct EncoderModel {
    encoder: Box<dyn Encoder>,
    head: Head,
}

impl Model for EncoderModel {
    fn forward(&self, batch: &Batch) -> Result<Output, ModelError> {
        if batch.is_empty() {
            return Ok(Output::default());
        }
        // Pooled where the states are, when pooling is all the batch needs of them.
        if let Some(pooling) = self.head.pooling_alone(batch) {
            let pooled = self.encoder.encode_pooled(batch, pooling)?;
            return Ok(Output { vectors: self.head.apply_pooled(pooled, batch) });
        }
        let states = self.encoder.encode(batch)?;
        Ok(Output { vectors: self.head.apply(&states, batch) })
    }
}
