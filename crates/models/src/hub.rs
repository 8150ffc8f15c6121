//! Turns a `--model-id` into a local folder: an existing path, a snapshot in the HuggingFace cache, or
//! a download from the hub.
//!
//! Environment honoured, as the HuggingFace libraries define it: `HF_HOME`, `HF_HUB_CACHE`,
//! `HF_ENDPOINT`, `HF_TOKEN`, `HF_HUB_OFFLINE`.

use std::path::{Path, PathBuf};

use hf_hub::api::sync::ApiBuilder;
use hf_hub::{Repo, RepoType};

use crate::error::ModelError;

const DEFAULT_REVISION: &str = "main";

/// Where hub snapshots live: `HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = env_nonempty("HF_HUB_CACHE") {
        return PathBuf::from(dir);
    }
    if let Some(home) = env_nonempty("HF_HOME") {
        return PathBuf::from(home).join("hub");
    }
    let home = env_nonempty("HOME").unwrap_or_else(|| ".".into());
    PathBuf::from(home).join(".cache").join("huggingface").join("hub")
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn offline() -> bool {
    env_nonempty("HF_HUB_OFFLINE")
        .map(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
        .unwrap_or(false)
}

/// The folder of `model_id` if its files are here already (a local folder, or a snapshot in the cache): what
/// [`resolve`] returns without downloading.
pub fn resolve_local(model_id: &str, revision: Option<&str>) -> Option<PathBuf> {
    let local = Path::new(model_id);
    if local.is_dir() {
        return Some(local.to_path_buf());
    }
    let revision = revision.filter(|r| !r.is_empty()).unwrap_or(DEFAULT_REVISION);
    cached_snapshot(&cache_dir(), model_id, revision)
}

/// Resolves `model_id` to a folder holding its files, downloading them if needed.
pub fn resolve(model_id: &str, revision: Option<&str>, progress: bool) -> Result<PathBuf, ModelError> {
    let local = Path::new(model_id);
    if local.is_dir() {
        return Ok(local.to_path_buf());
    }
    if model_id.is_empty() || local.is_absolute() || model_id.starts_with('.') || model_id.split('/').count() > 2 {
        return Err(ModelError::NotFound {
            model: model_id.into(),
            reason: "no such folder, and it is not a hub id of the form `org/name`".into(),
        });
    }
    let revision = revision.filter(|r| !r.is_empty()).unwrap_or(DEFAULT_REVISION);
    let cache = cache_dir();
    if let Some(dir) = cached_snapshot(&cache, model_id, revision) {
        return Ok(dir);
    }
    if offline() {
        return Err(ModelError::NotFound {
            model: model_id.into(),
            reason: format!(
                "not in the cache at {} (revision `{revision}`) and HF_HUB_OFFLINE is set",
                cache.display()
            ),
        });
    }
    download(model_id, revision, &cache, progress)
}

/// The snapshot folder for `revision` (a branch, tag or commit) if the cache has one with a config.
pub fn cached_snapshot(cache: &Path, model_id: &str, revision: &str) -> Option<PathBuf> {
    let repo_dir = cache.join(Repo::model(model_id.to_string()).folder_name());
    let commit = std::fs::read_to_string(repo_dir.join("refs").join(revision))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| revision.to_string());
    let snapshot = repo_dir.join("snapshots").join(commit);
    snapshot.join("config.json").is_file().then_some(snapshot)
}

/// The files of a repository worth fetching: [`wanted`] ones, plus PyTorch pickles (`pytorch_model*.bin`) in a
/// folder (the top level or a sentence-transformers module) that has no safetensors weights.
fn select(files: Vec<String>) -> Vec<String> {
    let folder = |f: &str| f.rsplit_once('/').map(|(d, _)| d.to_string()).unwrap_or_default();
    let with_safetensors: std::collections::BTreeSet<String> =
        files.iter().filter(|f| f.ends_with(".safetensors")).map(|f| folder(f)).collect();
    files
        .into_iter()
        .filter(|f| {
            let name = f.rsplit('/').next().unwrap_or(f);
            let pickle = name.starts_with("pytorch_model") && name.ends_with(".bin");
            let elsewhere = f.starts_with("onnx/") || f.starts_with("openvino/");
            wanted(f) || (pickle && !elsewhere && f.split('/').count() <= 2 && !with_safetensors.contains(&folder(f)))
        })
        .collect()
}

/// Files worth fetching: configs, tokenizers and safetensors weights, the model card (whose front matter says
/// what a causal LM was trained for); not pickles, ONNX or other docs.
fn wanted(file: &str) -> bool {
    let name = file.rsplit('/').next().unwrap_or(file);
    let top_level_or_module = !file.contains('/') || file.split('/').count() == 2;
    top_level_or_module
        && (name.ends_with(".json")
            || name.ends_with(".safetensors")
            || name == "vocab.txt"
            || name == "merges.txt"
            || name.ends_with(".model")
            || file == "README.md"
            // BGE-M3's sparse and ColBERT heads, beside its weights.
            || (!file.contains('/') && (name == "sparse_linear.pt" || name == "colbert_linear.pt")))
        && !file.starts_with("onnx/")
        && !file.starts_with("openvino/")
}

fn download(model_id: &str, revision: &str, cache: &Path, progress: bool) -> Result<PathBuf, ModelError> {
    let err = |reason: String| ModelError::Download { model: model_id.into(), reason };
    let mut builder = ApiBuilder::new()
        .with_cache_dir(cache.to_path_buf())
        .with_progress(progress)
        .with_token(env_nonempty("HF_TOKEN").or_else(|| env_nonempty("HUGGING_FACE_HUB_TOKEN")));
    if let Some(endpoint) = env_nonempty("HF_ENDPOINT") {
        builder = builder.with_endpoint(endpoint.trim_end_matches('/').to_string());
    }
    let api = builder.build().map_err(|e| err(e.to_string()))?;
    let repo = api.repo(Repo::with_revision(model_id.to_string(), RepoType::Model, revision.to_string()));
    let info = repo.info().map_err(|e| err(format!("listing the repository: {e}")))?;
    let files = select(info.siblings.into_iter().map(|s| s.rfilename).collect());
    if !files.iter().any(|f| f == "config.json") {
        return Err(err("the repository has no config.json".into()));
    }
    let mut snapshot = None;
    for file in &files {
        let path = repo.get(file).map_err(|e| err(format!("{file}: {e}")))?;
        if file == "config.json" {
            snapshot = path.parent().map(Path::to_path_buf);
        }
    }
    snapshot.ok_or_else(|| err("config.json was not stored".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_weights_and_configs_only() {
        assert!(wanted("config.json"));
        assert!(wanted("model.safetensors"));
        assert!(wanted("1_Pooling/config.json"));
        assert!(wanted("vocab.txt"));
        assert!(!wanted("pytorch_model.bin"));
        assert!(!wanted("onnx/model.onnx"));
        assert!(!wanted("onnx/config.json"));
        assert!(wanted("README.md"));
        assert!(!wanted("docs/README.md"));
        assert!(!wanted("1_Pooling/README.md"));
    }

    #[test]
    fn pickles_only_where_a_folder_has_no_safetensors() {
        let files = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let picked = select(files(&[
            "config.json",
            "model.safetensors",
            "pytorch_model.bin",
            "2_Dense/config.json",
            "2_Dense/pytorch_model.bin",
            "onnx/pytorch_model.bin",
            "README.md",
        ]));
        assert_eq!(
            picked,
            files(&[
                "config.json",
                "model.safetensors",
                "2_Dense/config.json",
                "2_Dense/pytorch_model.bin",
                "README.md"
            ])
        );
        let picked =
            select(files(&["config.json", "pytorch_model-00001-of-00002.bin", "pytorch_model.bin.index.json"]));
        assert_eq!(picked, files(&["config.json", "pytorch_model-00001-of-00002.bin", "pytorch_model.bin.index.json"]));
        // BGE-M3's heads come with its weights; other `.pt` files do not.
        let picked = select(files(&[
            "config.json",
            "model.safetensors",
            "colbert_linear.pt",
            "sparse_linear.pt",
            "optimizer.pt",
            "imgs/colbert_linear.pt",
        ]));
        assert_eq!(picked, files(&["config.json", "model.safetensors", "colbert_linear.pt", "sparse_linear.pt"]));
    }

    #[test]
    fn finds_snapshot_through_ref() {
        let cache = std::env::temp_dir().join(format!("aleph-hub-{}", std::process::id()));
        let repo = cache.join("models--org--m");
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::create_dir_all(repo.join("snapshots/abc123")).unwrap();
        std::fs::write(repo.join("refs/main"), "abc123").unwrap();
        std::fs::write(repo.join("snapshots/abc123/config.json"), "{}").unwrap();
        assert_eq!(cached_snapshot(&cache, "org/m", "main"), Some(repo.join("snapshots/abc123")));
        assert_eq!(cached_snapshot(&cache, "org/m", "abc123"), Some(repo.join("snapshots/abc123")));
        assert_eq!(cached_snapshot(&cache, "org/m", "v2"), None);
        assert_eq!(cached_snapshot(&cache, "org/other", "main"), None);
        std::fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn path_like_ids_are_not_sent_to_the_hub() {
        let e = resolve("/definitely/not/here", None, false).unwrap_err();
        assert!(e.to_string().contains("/definitely/not/here"), "{e}");
    }
}
