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

impl Checkpoint {
    /// Rows `ids` of the 2-D tensor `name`, as f32, or `None` where the checkpoint has no such tensor. From
    /// safetensors only those rows' bytes are read (an LLM's output head is 0.6-2.5 GB in f32; a reranker needs
    /// two of its rows); pickles are loaded whole.
    pub fn rows(&self, name: &str, ids: &[u32]) -> Result<Option<Vec<Vec<f32>>>, ModelError> {
        let files = match self {
            Checkpoint::Pickles(_) => {
                let vb = self.var_builder(&candle_core::Device::Cpu)?;
                if !vb.contains_tensor(name) {
                    return Ok(None);
                }
                let t = vb.get_unchecked(name).map_err(crate::error::weights)?;
                let rows = ids.iter().map(|&i| t.get(i as usize).and_then(|r| r.to_vec1::<f32>()));
                return rows.collect::<Result<_, _>>().map(Some).map_err(crate::error::weights);
            }
            Checkpoint::Safetensors(files) => files,
        };
        // SAFETY: read-only maps of model files, as in `var_builder`.
        let st = unsafe { candle_core::safetensors::MmapedSafetensors::multi(files) }
            .map_err(|e| ModelError::BadFile { path: files[0].clone(), reason: e.to_string() })?;
        let Ok(view) = st.get(name) else { return Ok(None) };
        let bad = |reason: String| ModelError::BadFile { path: files[0].clone(), reason: format!("{name}: {reason}") };
        let &[count, width] = view.shape() else { return Err(bad(format!("shape {:?}, not 2-D", view.shape()))) };
        let size = match view.dtype() {
            safetensors::Dtype::F32 => 4,
            safetensors::Dtype::BF16 | safetensors::Dtype::F16 => 2,
            other => return Err(bad(format!("dtype {other:?}"))),
        };
        let data = view.data();
        let row = |id: u32| -> Result<Vec<f32>, ModelError> {
            if id as usize >= count {
                return Err(bad(format!("row {id} of {count}")));
            }
            let bytes = &data[id as usize * width * size..][..width * size];
            Ok(match view.dtype() {
                safetensors::Dtype::F32 => {
                    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
                }
                safetensors::Dtype::BF16 => bytes
                    .chunks_exact(2)
                    .map(|b| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16))
                    .collect(),
                _ => bytes.chunks_exact(2).map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]]))).collect(),
            })
        };
        ids.iter().map(|&id| row(id)).collect::<Result<_, _>>().map(Some)
    }
}

/// IEEE half to f32 (subnormals, infinities and NaNs included).
fn f16_to_f32(h: u16) -> f32 {
    let (sign, exp, frac) = ((h >> 15) as u32, ((h >> 10) & 0x1f) as i32, (h & 0x3ff) as f32);
    let magnitude = match exp {
        0 => frac * (2f32).powi(-24),
        31 if frac == 0.0 => f32::INFINITY,
        31 => f32::NAN,
        e => (1.0 + frac / 1024.0) * (2f32).powi(e - 15),
    };
    if sign == 1 {
        -magnitude
    } else {
        magnitude
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
    fn half_floats_widen_exactly() {
        for (h, f) in [(0x3c00, 1.0), (0xc000, -2.0), (0x0001, 2f32.powi(-24)), (0x7bff, 65504.0), (0x0000, 0.0)] {
            assert_eq!(f16_to_f32(h), f, "{h:#x}");
        }
        assert!(f16_to_f32(0x7e00).is_nan() && f16_to_f32(0x7c00).is_infinite());
    }

    /// Rows read from the file equal the rows of the whole tensor, in every dtype a checkpoint stores.
    #[test]
    fn reads_single_rows_of_a_safetensors_tensor() {
        use candle_core::{DType, Device, Tensor};
        let dir = std::env::temp_dir().join(format!("aleph-rows-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let table =
            Tensor::arange(0f32, 24.0, &Device::Cpu).unwrap().affine(0.37, -3.0).unwrap().reshape((6, 4)).unwrap();
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let t = table.to_dtype(dtype).unwrap();
            let file = dir.join("model.safetensors");
            candle_core::safetensors::save(&HashMap::from([("lm_head.weight".to_string(), t.clone())]), &file).unwrap();
            let ckpt = Checkpoint::find(&dir).unwrap();
            let got = ckpt.rows("lm_head.weight", &[5, 0]).unwrap().unwrap();
            let want = t.to_dtype(DType::F32).unwrap().to_vec2::<f32>().unwrap();
            assert_eq!(got, vec![want[5].clone(), want[0].clone()], "{dtype:?}");
            assert!(ckpt.rows("missing.weight", &[0]).unwrap().is_none());
            assert!(ckpt.rows("lm_head.weight", &[6]).is_err(), "a row past the table");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
