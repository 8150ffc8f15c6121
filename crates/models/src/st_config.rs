//! The sentence-transformers files beside a model: `modules.json`, `sentence_bert_config.json` and
//! the pooling module's `config.json`. Each is optional; a plain transformers folder has none.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{read_json, ModelError};
use crate::pooling::Pooling;

#[derive(Debug, Clone, Deserialize)]
struct Module {
    #[serde(default)]
    path: String,
    #[serde(rename = "type", default)]
    kind: String,
}

#[derive(Debug, Clone, Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

/// A `Pooling` module's `config.json`: sentence-transformers 6 writes `pooling_mode` (a name or a list),
/// earlier versions one boolean per mode. Neither set means mean, as sentence-transformers reads it.
#[derive(Debug, Clone, Deserialize, Default)]
struct PoolingConfig {
    pooling_mode: Option<OneOrMany>,
    #[serde(default = "yes")]
    include_prompt: bool,
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

fn yes() -> bool {
    true
}

/// A `Dense` module's `config.json` (its weights sit beside it).
#[derive(Debug, Clone, Deserialize)]
struct DenseConfig {
    in_features: usize,
    out_features: usize,
    #[serde(default = "yes")]
    bias: bool,
    /// A torch class path; sentence-transformers' default is Tanh.
    activation_function: Option<String>,
    module_input_name: Option<String>,
    #[serde(default)]
    use_residual: bool,
}

/// A `SpladePooling` module's `config.json`.
#[derive(Debug, Clone, Deserialize)]
struct SpladeConfig {
    #[serde(default = "max")]
    pooling_strategy: String,
    #[serde(default = "relu")]
    activation_function: String,
}

fn max() -> String {
    "max".into()
}

fn relu() -> String {
    "relu".into()
}

/// SPLADE's pooling of masked-LM logits: `log(1 + relu(logit))` (twice for `log1p_relu`), then the max or
/// the sum over a sequence's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Splade {
    pub sum: bool,
    pub log1p_twice: bool,
}

impl Default for Splade {
    /// SPLADE v2 and later: max pooling of `log(1 + relu)`.
    fn default() -> Self {
        Splade { sum: false, log1p_twice: false }
    }
}

/// The activation after a `Dense` module's linear layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenseActivation {
    Identity,
    Tanh,
    Relu,
    Gelu,
    Sigmoid,
    Silu,
}

impl DenseActivation {
    pub fn apply(self, x: f32) -> f32 {
        match self {
            DenseActivation::Identity => x,
            DenseActivation::Tanh => x.tanh(),
            DenseActivation::Relu => x.max(0.0),
            DenseActivation::Gelu => 0.5 * x * (1.0 + crate::cpu::ops::erf(x * std::f32::consts::FRAC_1_SQRT_2)),
            DenseActivation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            DenseActivation::Silu => x / (1.0 + (-x).exp()),
        }
    }

    /// A classification head's activation as transformers names it (`ACT2FN`).
    pub fn from_hidden_act(name: &str) -> Result<Self, ModelError> {
        match name {
            "gelu" => Ok(DenseActivation::Gelu),
            "tanh" => Ok(DenseActivation::Tanh),
            "relu" => Ok(DenseActivation::Relu),
            "silu" | "swish" => Ok(DenseActivation::Silu),
            "linear" => Ok(DenseActivation::Identity),
            other => Err(ModelError::Unsupported(format!(
                "classifier activation `{other}` (supported: gelu, tanh, relu, silu, linear)"
            ))),
        }
    }

    fn parse(path: Option<&str>) -> Option<Self> {
        let Some(path) = path else { return Some(DenseActivation::Tanh) };
        match path.rsplit('.').next().unwrap_or_default() {
            "Identity" => Some(DenseActivation::Identity),
            "Tanh" => Some(DenseActivation::Tanh),
            "ReLU" => Some(DenseActivation::Relu),
            "GELU" => Some(DenseActivation::Gelu),
            "Sigmoid" => Some(DenseActivation::Sigmoid),
            "SiLU" => Some(DenseActivation::Silu),
            _ => None,
        }
    }
}

/// A `Dense` module: where its weights are and what it computes.
#[derive(Debug, Clone, PartialEq)]
pub struct DenseModule {
    pub dir: PathBuf,
    pub in_features: usize,
    pub out_features: usize,
    pub bias: bool,
    pub activation: DenseActivation,
    /// Adds the input back (through `residual`, a bias-free projection, when the widths differ).
    pub residual: bool,
}

/// What follows pooling, in `modules.json` order.
#[derive(Debug, Clone, PartialEq)]
pub enum PostModule {
    Dense(DenseModule),
    Normalize,
}

/// The named prompts of `config_sentence_transformers.json`, prepended to texts as
/// sentence-transformers' `encode(prompt_name=...)` does.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Prompts {
    #[serde(default)]
    pub prompts: std::collections::BTreeMap<String, String>,
    /// The prompt sentence-transformers applies when the caller names none.
    #[serde(default)]
    pub default_prompt_name: Option<String>,
}

impl Prompts {
    /// The text to prepend for `name`, or an error listing the names there are.
    pub fn get(&self, name: &str) -> Result<&str, String> {
        self.prompts.get(name).map(String::as_str).ok_or_else(|| {
            if self.prompts.is_empty() {
                format!("prompt `{name}` is not defined: this model's config_sentence_transformers.json has no prompts")
            } else {
                let names: Vec<&str> = self.prompts.keys().map(String::as_str).collect();
                format!("prompt `{name}` is not defined; this model's prompts: {}", names.join(", "))
            }
        })
    }
}

/// What the sentence-transformers files say about pooling, the modules after it, the window and prompts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SentenceTransformerConfig {
    /// `None` when the folder has no pooling module.
    pub pooling: Option<Pooling>,
    /// `Dense` and `Normalize` modules after pooling, in order.
    pub post: Vec<PostModule>,
    /// A `SpladePooling` module: the model is a sparse encoder over its masked-LM logits.
    pub splade: Option<Splade>,
    /// `sentence_bert_config.json`'s `max_seq_length`, else the tokenizer's `model_max_length`
    /// (sentence-transformers 6 keeps the window there).
    pub max_seq_length: Option<usize>,
    pub prompts: Prompts,
}

impl SentenceTransformerConfig {
    pub fn read(dir: &Path) -> Result<Self, ModelError> {
        let mut out = SentenceTransformerConfig::default();
        let st = dir.join("config_sentence_transformers.json");
        if st.exists() {
            out.prompts = read_json(&st)?;
        }
        let sbert = dir.join("sentence_bert_config.json");
        if sbert.exists() {
            out.max_seq_length = read_json::<SentenceBertConfig>(&sbert)?.max_seq_length;
        }
        if out.max_seq_length.is_none() {
            out.max_seq_length = tokenizer_max_length(dir)?;
        }
        let modules_path = dir.join("modules.json");
        if !modules_path.exists() {
            return Ok(out);
        }
        let modules: Vec<Module> = read_json(&modules_path)?;
        for module in &modules {
            let kind = module.kind.rsplit('.').next().unwrap_or_default();
            let path = module_config(dir, &module.path);
            match kind {
                "Pooling" => out.pooling = Some(pooling_from(&read_json(&path)?, &path)?),
                "Normalize" => out.post.push(PostModule::Normalize),
                "Dense" => out.post.push(PostModule::Dense(dense_from(read_json(&path)?, &path)?)),
                "SpladePooling" => out.splade = Some(splade_from(&read_json(&path)?, &path)?),
                // MLMTransformer: sentence-transformers 5's name for a fill-mask Transformer; StaticEmbedding's
                // table is read by the static model's loader.
                "Transformer" | "MLMTransformer" | "StaticEmbedding" => {}
                // LayerNorm, WordEmbeddings, Router, ... change the vectors: running without them would
                // return silently wrong ones.
                other => {
                    return Err(ModelError::Unsupported(format!(
                        "sentence-transformers module `{other}` ({} in modules.json) is not implemented",
                        if module.path.is_empty() { "no path" } else { module.path.as_str() }
                    )))
                }
            }
        }
        Ok(out)
    }
}

fn module_config(dir: &Path, module_path: &str) -> PathBuf {
    dir.join(module_path).join("config.json")
}

/// `tokenizer_config.json`'s `model_max_length`, unless it is transformers' "no limit" sentinel.
fn tokenizer_max_length(dir: &Path) -> Result<Option<usize>, ModelError> {
    #[derive(Deserialize)]
    struct TokenizerConfig {
        model_max_length: Option<f64>,
    }
    let path = dir.join("tokenizer_config.json");
    if !path.exists() {
        return Ok(None);
    }
    let len = read_json::<TokenizerConfig>(&path)?.model_max_length;
    Ok(len.filter(|&n| (1.0..1e9).contains(&n)).map(|n| n as usize))
}

fn pooling_from(cfg: &PoolingConfig, path: &Path) -> Result<Pooling, ModelError> {
    let unsupported = |what: String| ModelError::Unsupported(format!("{}: {what}", path.display()));
    if !cfg.include_prompt {
        return Err(unsupported(
            "`include_prompt: false` (pooling without the prompt's tokens) is not implemented".into(),
        ));
    }
    let modes: Vec<String> = match &cfg.pooling_mode {
        Some(OneOrMany::One(m)) => vec![m.clone()],
        Some(OneOrMany::Many(ms)) => ms.clone(),
        None => [
            (cfg.pooling_mode_cls_token, "cls"),
            (cfg.pooling_mode_max_tokens, "max"),
            (cfg.pooling_mode_mean_tokens, "mean"),
            (cfg.pooling_mode_mean_sqrt_len_tokens, "mean_sqrt_len_tokens"),
            (cfg.pooling_mode_weightedmean_tokens, "weightedmean"),
            (cfg.pooling_mode_lasttoken, "lasttoken"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, m)| m.to_string())
        .collect(),
    };
    match modes.as_slice() {
        [] => Ok(Pooling::Mean),
        [one] => Pooling::from_st_mode(one).ok_or_else(|| unsupported(format!("pooling mode `{one}` is not known"))),
        // sentence-transformers concatenates several modes into one longer vector.
        many => Err(unsupported(format!("concatenated pooling modes {many:?} are not implemented"))),
    }
}

fn dense_from(cfg: DenseConfig, path: &Path) -> Result<DenseModule, ModelError> {
    let unsupported = |what: String| ModelError::Unsupported(format!("{}: {what}", path.display()));
    let activation = DenseActivation::parse(cfg.activation_function.as_deref()).ok_or_else(|| {
        unsupported(format!(
            "activation `{}` is not implemented (Identity, Tanh, ReLU, GELU, Sigmoid, SiLU are)",
            cfg.activation_function.as_deref().unwrap_or_default()
        ))
    })?;
    if let Some(input) = cfg.module_input_name.as_deref().filter(|n| *n != "sentence_embedding") {
        return Err(unsupported(format!(
            "a Dense module over `{input}` (not the pooled embedding) is not implemented"
        )));
    }
    Ok(DenseModule {
        dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
        in_features: cfg.in_features,
        out_features: cfg.out_features,
        bias: cfg.bias,
        activation,
        residual: cfg.use_residual,
    })
}

fn splade_from(cfg: &SpladeConfig, path: &Path) -> Result<Splade, ModelError> {
    let unsupported = |what: String| ModelError::Unsupported(format!("{}: {what}", path.display()));
    let sum = match cfg.pooling_strategy.as_str() {
        "max" => false,
        "sum" => true,
        other => return Err(unsupported(format!("SPLADE pooling strategy `{other}` (expected max or sum)"))),
    };
    let log1p_twice = match cfg.activation_function.as_str() {
        "relu" => false,
        "log1p_relu" => true,
        other => return Err(unsupported(format!("SPLADE activation `{other}` (expected relu or log1p_relu)"))),
    };
    Ok(Splade { sum, log1p_twice })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, rel: &str, text: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn reads_pooling_normalize_and_window() {
        let dir = std::env::temp_dir().join(format!("aleph-st-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write(&dir, "sentence_bert_config.json", r#"{"max_seq_length": 256}"#);
        write(
            &dir,
            "modules.json",
            r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
                {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
                {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]"#,
        );
        write(&dir, "1_Pooling/config.json", r#"{"pooling_mode_cls_token": true}"#);
        let cfg = SentenceTransformerConfig::read(&dir).unwrap();
        assert_eq!(cfg.pooling, Some(Pooling::Cls));
        assert_eq!(cfg.post, vec![PostModule::Normalize]);
        assert_eq!(cfg.max_seq_length, Some(256));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn modules(dir: &Path, kinds: &[(&str, &str)]) {
        let list: Vec<String> = kinds
            .iter()
            .enumerate()
            .map(|(i, (kind, path))| format!(r#"{{"idx":{i},"name":"{i}","path":"{path}","type":"{kind}"}}"#))
            .collect();
        write(dir, "modules.json", &format!("[{}]", list.join(",")));
    }

    #[test]
    fn reads_every_pooling_config_format() {
        let dir = std::env::temp_dir().join(format!("aleph-st-pool-{}", std::process::id()));
        let pooling = |text: &str| {
            let _ = std::fs::remove_dir_all(&dir);
            modules(&dir, &[("sentence_transformers.sentence_transformer.modules.pooling.Pooling", "1_Pooling")]);
            write(&dir, "1_Pooling/config.json", text);
            SentenceTransformerConfig::read(&dir).map(|c| c.pooling)
        };
        // sentence-transformers 6: a mode name, or a list of one.
        assert_eq!(pooling(r#"{"embedding_dimension": 8, "pooling_mode": "cls"}"#).unwrap(), Some(Pooling::Cls));
        assert_eq!(pooling(r#"{"pooling_mode": ["lasttoken"]}"#).unwrap(), Some(Pooling::LastToken));
        assert_eq!(pooling(r#"{"pooling_mode": "weightedmean"}"#).unwrap(), Some(Pooling::WeightedMean));
        // Earlier versions: one boolean per mode; none set is mean, as sentence-transformers reads it.
        assert_eq!(pooling(r#"{"pooling_mode_max_tokens": true}"#).unwrap(), Some(Pooling::Max));
        assert_eq!(pooling(r#"{"word_embedding_dimension": 8}"#).unwrap(), Some(Pooling::Mean));
        // Concatenated modes and pooling without the prompt are refused, naming the file.
        for refused in [
            r#"{"pooling_mode": ["cls", "mean"]}"#,
            r#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true}"#,
            r#"{"pooling_mode": "mean", "include_prompt": false}"#,
            r#"{"pooling_mode": "median"}"#,
        ] {
            let err = pooling(refused).unwrap_err().to_string();
            assert!(err.contains("1_Pooling"), "{refused}: {err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_dense_splade_and_the_tokenizer_window() {
        let dir = std::env::temp_dir().join(format!("aleph-st-dense-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        modules(
            &dir,
            &[
                ("sentence_transformers.models.Transformer", ""),
                ("sentence_transformers.models.Pooling", "1_Pooling"),
                ("sentence_transformers.models.Dense", "2_Dense"),
                ("sentence_transformers.models.Normalize", "3_Normalize"),
            ],
        );
        write(&dir, "1_Pooling/config.json", "{}");
        // An old save: no activation recorded means sentence-transformers' default, Tanh.
        write(&dir, "2_Dense/config.json", r#"{"in_features": 8, "out_features": 4, "bias": false}"#);
        write(&dir, "tokenizer_config.json", r#"{"model_max_length": 128}"#);
        let cfg = SentenceTransformerConfig::read(&dir).unwrap();
        assert_eq!(cfg.max_seq_length, Some(128));
        let PostModule::Dense(d) = &cfg.post[0] else { panic!("{:?}", cfg.post) };
        assert_eq!((d.in_features, d.out_features, d.bias, d.activation), (8, 4, false, DenseActivation::Tanh));
        assert_eq!(cfg.post[1], PostModule::Normalize);
        write(
            &dir,
            "2_Dense/config.json",
            r#"{"in_features": 8, "out_features": 4, "activation_function": "torch.nn.modules.linear.Identity"}"#,
        );
        let cfg = SentenceTransformerConfig::read(&dir).unwrap();
        assert!(matches!(&cfg.post[0], PostModule::Dense(d) if d.activation == DenseActivation::Identity && d.bias));
        write(
            &dir,
            "2_Dense/config.json",
            r#"{"in_features": 8, "out_features": 4, "activation_function": "my.Custom"}"#,
        );
        assert!(SentenceTransformerConfig::read(&dir).is_err());
        // transformers' "no limit" sentinel is no window.
        write(&dir, "tokenizer_config.json", r#"{"model_max_length": 1000000000000000019884624838656}"#);
        modules(
            &dir,
            &[
                ("sentence_transformers.sparse_encoder.models.MLMTransformer", ""),
                ("x.SpladePooling", "1_SpladePooling"),
            ],
        );
        write(
            &dir,
            "1_SpladePooling/config.json",
            r#"{"pooling_strategy": "sum", "activation_function": "log1p_relu"}"#,
        );
        let cfg = SentenceTransformerConfig::read(&dir).unwrap();
        assert_eq!(cfg.max_seq_length, None);
        assert_eq!(cfg.splade, Some(Splade { sum: true, log1p_twice: true }));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_json_names_the_file() {
        let dir = std::env::temp_dir().join(format!("aleph-st-bad-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write(&dir, "modules.json", "[{");
        let err = SentenceTransformerConfig::read(&dir).unwrap_err().to_string();
        assert!(err.contains("modules.json"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
