//! A folder's weights as they ship: `model.safetensors`, safetensors shards named by
//! `model.safetensors.index.json`, or PyTorch pickles (`pytorch_model.bin`, or shards named by
//! `pytorch_model.bin.index.json`), preferred in that order as transformers prefers them. Pickles are read
//! by candle's pickle parser, which only rebuilds tensors and never runs pickled code.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_nn::VarBuilder;

use crate::error::{read_json, ModelError};

/// Weight files and their format.
#[derive(Debug, Clone, PartialEq)]
pub enum Checkpoint {
    Safetensors(Vec<PathBuf>),
    Pickles(Vec<PathBuf>),
}

impl Checkpoint {
    /// The checkpoint in `dir`, under transformers' file names.
    pub fn find(dir: &Path) -> Result<Self, ModelError> {
        let candidates = [
            (dir.join("model.safetensors"), dir.join("model.safetensors.index.json"), true),
            (dir.join("pytorch_model.bin"), dir.join("pytorch_model.bin.index.json"), false),
        ];
        for (single, index, safetensors) in candidates {
            let files = if single.exists() {
                vec![single]
            } else if index.exists() {
                shards(dir, &index)?
            } else {
                continue;
            };
            if let Some(missing) = files.iter().find(|f| !f.exists()) {
                return Err(ModelError::MissingFile(missing.clone()));
            }
            return Ok(if safetensors { Checkpoint::Safetensors(files) } else { Checkpoint::Pickles(files) });
        }
        Err(ModelError::MissingFile(dir.join("model.safetensors")))
    }

    pub fn files(&self) -> &[PathBuf] {
        match self {
            Checkpoint::Safetensors(f) | Checkpoint::Pickles(f) => f,
        }
    }

    /// Bytes on disk (what candle holds of memory-mapped safetensors).
    pub fn bytes(&self) -> u64 {
        self.files().iter().filter_map(|f| std::fs::metadata(f).ok()).map(|m| m.len()).sum()
    }

    /// The tensors as f32 on `device`: safetensors memory-mapped, pickles read into memory.
    pub fn var_builder(&self, device: &candle_core::Device) -> Result<VarBuilder<'static>, ModelError> {
        let dtype = candle_core::DType::F32;
        match self {
            // SAFETY: the files are memory-mapped read-only; Aleph never writes to model files, and a
            // concurrent writer is outside what any HF loader guards against.
            Checkpoint::Safetensors(files) => unsafe { VarBuilder::from_mmaped_safetensors(files, dtype, device) }
                .map_err(|e| ModelError::BadFile { path: files[0].clone(), reason: e.to_string() }),
            Checkpoint::Pickles(files) => {
                let mut tensors = HashMap::new();
                for f in files {
                    let read = candle_core::pickle::read_all(f).map_err(|e| ModelError::BadFile {
                        path: f.clone(),
                        reason: format!("not a PyTorch zip checkpoint Aleph can read: {e}"),
                    })?;
                    tensors.extend(read);
                }
                Ok(VarBuilder::from_tensors(tensors, dtype, device))
            }
        }
    }
}

/// The distinct files an index's `weight_map` names, in name order.
fn shards(dir: &Path, index: &Path) -> Result<Vec<PathBuf>, ModelError> {
    #[derive(serde::Deserialize)]
    struct Index {
        weight_map: std::collections::BTreeMap<String, String>,
    }
    let idx: Index = read_json(index)?;
    let mut names: Vec<String> = idx.weight_map.into_values().collect();
    names.sort();
    names.dedup();
    // A shard name is a file beside the index, never a path elsewhere.
    if let Some(bad) = names.iter().find(|n| n.contains('/') || n.contains('\\') || n.starts_with('.')) {
        return Err(ModelError::BadFile { path: index.to_path_buf(), reason: format!("shard name `{bad}`") });
    }
    Ok(names.into_iter().map(|s| dir.join(s)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefers_safetensors_and_reads_indexes() {
        let dir = std::env::temp_dir().join(format!("aleph-ckpt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert!(matches!(Checkpoint::find(&dir), Err(ModelError::MissingFile(_))));
        std::fs::write(
            dir.join("pytorch_model.bin.index.json"),
            r#"{"weight_map": {"a": "p-2.bin", "b": "p-1.bin", "c": "p-2.bin"}}"#,
        )
        .unwrap();
        // A shard the index names is missing.
        assert!(matches!(Checkpoint::find(&dir), Err(ModelError::MissingFile(_))));
        std::fs::write(dir.join("p-1.bin"), b"").unwrap();
        std::fs::write(dir.join("p-2.bin"), b"").unwrap();
        assert_eq!(
            Checkpoint::find(&dir).unwrap(),
            Checkpoint::Pickles(vec![dir.join("p-1.bin"), dir.join("p-2.bin")])
        );
        std::fs::write(dir.join("model.safetensors"), b"").unwrap();
        assert_eq!(Checkpoint::find(&dir).unwrap(), Checkpoint::Safetensors(vec![dir.join("model.safetensors")]));
        std::fs::write(dir.join("model.safetensors.index.json"), r#"{"weight_map": {"a": "../x"}}"#).unwrap();
        std::fs::remove_file(dir.join("model.safetensors")).unwrap();
        assert!(matches!(Checkpoint::find(&dir), Err(ModelError::BadFile { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
