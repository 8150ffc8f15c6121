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

#[derive(Debug, Clone, Deserialize, Default)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
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

/// What the sentence-transformers files say about pooling, normalization, the window and prompts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SentenceTransformerConfig {
    /// `None` when the folder has no pooling module.
    pub pooling: Option<Pooling>,
    pub normalize: bool,
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
        let modules_path = dir.join("modules.json");
        if !modules_path.exists() {
            return Ok(out);
        }
        let modules: Vec<Module> = read_json(&modules_path)?;
        for module in &modules {
            let kind = module.kind.rsplit('.').next().unwrap_or_default();
            match kind {
                "Pooling" => {
                    let path = module_config(dir, &module.path);
                    let cfg: PoolingConfig = read_json(&path)?;
                    out.pooling = Some(pooling_from(&cfg).ok_or_else(|| {
                        ModelError::Unsupported(format!(
                            "{}: the pooling is not one of cls, mean, lasttoken (max, mean_sqrt_len, weightedmean and \
                             concatenated modes are not implemented)",
                            path.display()
                        ))
                    })?);
                }
                "Normalize" => out.normalize = true,
                "Transformer" => {}
                // Dense, LayerNorm, WordEmbeddings, ... change the vectors: running without them would
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

fn pooling_from(cfg: &PoolingConfig) -> Option<Pooling> {
    if cfg.pooling_mode_max_tokens || cfg.pooling_mode_mean_sqrt_len_tokens || cfg.pooling_mode_weightedmean_tokens {
        return None;
    }
    // Several modes set: sentence-transformers concatenates them into one longer vector.
    let set = [cfg.pooling_mode_mean_tokens, cfg.pooling_mode_cls_token, cfg.pooling_mode_lasttoken];
    if set.iter().filter(|m| **m).count() > 1 {
        return None;
    }
    if cfg.pooling_mode_mean_tokens {
        Some(Pooling::Mean)
    } else if cfg.pooling_mode_cls_token {
        Some(Pooling::Cls)
    } else if cfg.pooling_mode_lasttoken {
        Some(Pooling::LastToken)
    } else {
        None
    }
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
        assert!(cfg.normalize);
        assert_eq!(cfg.max_seq_length, Some(256));
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
