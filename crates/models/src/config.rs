//! `config.json`: which architecture a folder holds and what task it serves.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::{read_json, ModelError};

/// The fields of `config.json` needed to pick an architecture; each architecture parses its own
/// full config.
#[derive(Debug, Clone, Deserialize)]
pub struct ArchConfig {
    #[serde(default)]
    pub model_type: String,
    #[serde(default)]
    pub architectures: Vec<String>,
    #[serde(default)]
    pub id2label: BTreeMap<String, String>,
    pub num_labels: Option<usize>,
    pub problem_type: Option<String>,
    /// Remote code: transformers class names mapped to modules the repository ships (`trust_remote_code`).
    #[serde(default)]
    pub auto_map: BTreeMap<String, serde_json::Value>,
    /// A decoder's `is_causal` (`false`: gte-Qwen2-instruct attends both ways).
    pub is_causal: Option<bool>,
    /// The precision the weights were saved in: `torch_dtype` (transformers 4), `dtype` (transformers 5).
    torch_dtype: Option<serde_json::Value>,
    dtype: Option<serde_json::Value>,
}

/// What a served model does, decided from its config as Infinity decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Task {
    Embed,
    /// A cross-encoder with one output: scores (query, document) pairs.
    Rerank,
    /// A sequence classifier; `labels` in logit order.
    Classify {
        labels: Vec<String>,
        multi_label: bool,
    },
    /// Late interaction (ColBERT): one vector per token; reranks by MaxSim.
    MultiVector,
}

impl Task {
    /// The capability names Infinity reports in `/models`.
    pub fn capabilities(&self) -> &'static [&'static str] {
        match self {
            Task::Embed => &["embed"],
            Task::Rerank => &["rerank"],
            Task::Classify { .. } => &["classify"],
            Task::MultiVector => &["embed", "rerank"],
        }
    }
}

/// The module a remote-code class names, without the repository it may live in (`org/repo--modeling_x.Cls` and
/// `modeling_x.Cls` are both `modeling_x.Cls`).
pub fn code_in_repo(class: &str) -> &str {
    class.rsplit("--").next().unwrap_or(class)
}

impl ArchConfig {
    pub fn read(dir: &Path) -> Result<Self, ModelError> {
        read_json(&dir.join("config.json"))
    }

    /// The precision config.json says the weights were saved in (`"bfloat16"`, `"float32"`, ...), if it says.
    pub fn stored_dtype(&self) -> Option<&str> {
        [&self.dtype, &self.torch_dtype].into_iter().flatten().find_map(|v| v.as_str())
    }

    /// The model class the repository's own code provides, if its `auto_map` names one (configs and
    /// tokenizers alone do not change the model).
    pub fn remote_model_code(&self) -> Option<String> {
        self.remote_models().next().map(|(k, class)| format!("{k} → {class}"))
    }

    /// Every `AutoModel*` class the repository's own code provides (empty without `auto_map`).
    pub fn remote_model_classes(&self) -> impl Iterator<Item = &str> {
        self.remote_models().map(|(_, class)| class)
    }

    /// `auto_map`'s `AutoModel*` entries with the class each names (a list's first: the slow class).
    fn remote_models(&self) -> impl Iterator<Item = (&str, &str)> {
        self.auto_map.iter().filter(|(k, _)| k.starts_with("AutoModel")).map(|(k, v)| {
            let class = match v {
                serde_json::Value::String(s) => s.as_str(),
                serde_json::Value::Array(a) => a.first().and_then(|x| x.as_str()).unwrap_or_default(),
                _ => "",
            };
            (k.as_str(), class)
        })
    }

    /// Whether the `AutoModel` code is `repo`'s (`jinaai/jina-bert-implementation`, ...).
    pub fn remote_code_from(&self, repo: &str) -> bool {
        self.remote_model_code().is_some_and(|code| code.contains(&format!("{repo}--")))
    }

    /// `*ForSequenceClassification` with one label reranks, with more it classifies; anything else embeds.
    pub fn task(&self) -> Task {
        // Infinity's rule: a ColBERT checkpoint names itself in its first architecture (HF_ColBERT, ...).
        if self.architectures.first().is_some_and(|a| a.to_ascii_lowercase().contains("colbert")) {
            return Task::MultiVector;
        }
        if !self.architectures.iter().any(|a| a.ends_with("ForSequenceClassification")) {
            return Task::Embed;
        }
        let labels = self.labels();
        if labels.len() < 2 {
            return Task::Rerank;
        }
        Task::Classify { labels, multi_label: self.problem_type.as_deref() == Some("multi_label_classification") }
    }

    /// A causal LM with its LM head (`*ForCausalLM`, or a vision-language `*ForConditionalGeneration` such as
    /// Qwen3-VL's): it may rerank through a prompt by its "yes" and "no" logits.
    pub fn has_lm_head(&self) -> bool {
        self.architectures.iter().any(|a| a.ends_with("ForCausalLM") || a.ends_with("ForConditionalGeneration"))
    }

    /// Label names by id; `LABEL_i` where the config names none.
    pub fn labels(&self) -> Vec<String> {
        let n = if self.id2label.is_empty() { self.num_labels.unwrap_or(2) } else { self.id2label.len() };
        (0..n).map(|i| self.id2label.get(&i.to_string()).cloned().unwrap_or_else(|| format!("LABEL_{i}"))).collect()
    }
}

/// `#[serde(default = "crate::config::n::<768>")]`: a config field's class default, for integer fields.
pub(crate) fn n<const N: usize>() -> usize {
    N
}

/// [`n`] for `u32` fields (token ids).
pub(crate) fn n32<const N: u32>() -> u32 {
    N
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(json: &str) -> ArchConfig {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn task_follows_architecture_and_labels() {
        assert_eq!(cfg(r#"{"architectures":["BertModel"]}"#).task(), Task::Embed);
        assert_eq!(
            cfg(r#"{"architectures":["BertForSequenceClassification"],"id2label":{"0":"LABEL_0"}}"#).task(),
            Task::Rerank
        );
        let t = cfg(r#"{"architectures":["XLMRobertaForSequenceClassification"],
                        "id2label":{"1":"pos","0":"neg"},"problem_type":"multi_label_classification"}"#)
        .task();
        assert_eq!(t, Task::Classify { labels: vec!["neg".into(), "pos".into()], multi_label: true });
        // No id2label: transformers' default of two labels.
        let t = cfg(r#"{"architectures":["BertForSequenceClassification"]}"#).task();
        assert_eq!(t, Task::Classify { labels: vec!["LABEL_0".into(), "LABEL_1".into()], multi_label: false });
    }
}
