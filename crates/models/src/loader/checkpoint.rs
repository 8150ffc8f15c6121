//! A folder's weights as they ship: `model.safetensors`, safetensors shards named by
//! `model.safetensors.index.json`, or PyTorch pickles (`pytorch_model.bin`, or shards named by
//! `pytorch_model.bin.index.json`), preferred in that order as transformers prefers them. Pickles are read
//! by candle's pickle parser, which only rebuilds tensors and never runs pickled code.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// The least bytes the stored tensors take once loaded at `width` bytes per number, from the safetensors
    /// headers alone (no tensor data is read): a number stored narrower may be kept as stored (a table read in
    /// place). Only the numbered blocks count: embedding tables, poolers and output heads, which loads may read
    /// in place, in part or not at all, are left out. Pickles, whose headers are not read, count as nothing.
    pub fn min_loaded_bytes(&self, width: u64) -> Result<u64, ModelError> {
        match self {
            Checkpoint::Safetensors(files) => files.iter().map(|f| header_min_bytes(f, width)).sum(),
            Checkpoint::Pickles(_) => Ok(0),
        }
    }

    /// The safetensors files kept memory-mapped, their tensors readable in place; `None` for pickles.
    pub fn mapped(&self) -> Result<Option<Arc<MappedTensors>>, ModelError> {
        match self {
            Checkpoint::Pickles(_) => Ok(None),
            Checkpoint::Safetensors(files) => MappedTensors::open(files).map(|m| Some(Arc::new(m))),
        }
    }

    /// Rows `ids` of the 2-D tensor `name`, as f32, or `None` where the checkpoint has no such tensor. From
    /// safetensors only those rows' bytes are read (an LLM's output head is 0.6-2.5 GB in f32; a reranker needs
    /// two of its rows); pickles are loaded whole.
    pub fn rows(&self, name: &str, ids: &[u32]) -> Result<Option<Vec<Vec<f32>>>, ModelError> {
        let Some(mapped) = self.mapped()? else {
            let vb = self.var_builder(&candle_core::Device::Cpu)?;
            if !vb.contains_tensor(name) {
                return Ok(None);
            }
            let t = vb.get_unchecked(name).map_err(crate::error::weights)?;
            let rows = ids.iter().map(|&i| t.get(i as usize).and_then(|r| r.to_vec1::<f32>()));
            return rows.collect::<Result<_, _>>().map(Some).map_err(crate::error::weights);
        };
        let Some(matrix) = mapped.matrix(name)? else { return Ok(None) };
        let row = |id: u32| -> Result<Vec<f32>, ModelError> {
            let mut row = vec![0.0; matrix.cols()];
            matrix.row_into(id as usize, &mut row, false)?;
            Ok(row)
        };
        ids.iter().map(|&id| row(id)).collect::<Result<_, _>>().map(Some)
    }
}

/// A checkpoint's safetensors files, memory-mapped for as long as anything reads from them.
pub struct MappedTensors {
    files: Vec<(PathBuf, Arc<memmap2::Mmap>)>,
    /// Tensor name → (file index, its header entry, where its data starts in the file).
    tensors: HashMap<String, (usize, safetensors::tensor::TensorInfo, usize)>,
}

impl MappedTensors {
    fn open(paths: &[PathBuf]) -> Result<Self, ModelError> {
        let mut files = Vec::with_capacity(paths.len());
        let mut tensors = HashMap::new();
        for (i, path) in paths.iter().enumerate() {
            let bad = |reason: String| ModelError::BadFile { path: path.clone(), reason };
            let file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
            // SAFETY: read-only maps of model files, as candle maps them in `var_builder`: Aleph never writes
            // to model files, and a concurrent writer is outside what any HF loader guards against.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| bad(e.to_string()))?;
            // Rows are read one token at a time, scattered: no read-ahead around each.
            #[cfg(unix)]
            let _ = map.advise(memmap2::Advice::Random);
            let (header, meta) = safetensors::SafeTensors::read_metadata(&map).map_err(|e| bad(e.to_string()))?;
            let data_start = 8 + header;
            for (name, info) in meta.tensors() {
                tensors.insert(name, (i, info.clone(), data_start));
            }
            files.push((path.clone(), Arc::new(map)));
        }
        Ok(MappedTensors { files, tensors })
    }

    /// The `[rows, cols]` tensor `name` read in place, or `None` where the checkpoint has none; an error,
    /// naming the file, where it has another shape.
    pub fn table(&self, name: &str, rows: usize, cols: usize) -> Result<Option<MappedMatrix>, ModelError> {
        let Some(m) = self.matrix(name)? else { return Ok(None) };
        if (m.rows, m.cols) != (rows, cols) {
            let path = self.files[self.tensors[name].0].0.clone();
            let reason = format!("{name} is {}x{}, the config makes it {rows}x{cols}", m.rows, m.cols);
            return Err(ModelError::BadFile { path, reason });
        }
        Ok(Some(m))
    }

    /// The 2-D tensor `name` read in place, or `None` where the checkpoint has none; an error where it is
    /// not a matrix of f32, bf16 or f16.
    pub fn matrix(&self, name: &str) -> Result<Option<MappedMatrix>, ModelError> {
        let Some((file, info, data_start)) = self.tensors.get(name) else { return Ok(None) };
        let bad = |reason: String| ModelError::BadFile {
            path: self.files[*file].0.clone(),
            reason: format!("{name}: {reason}"),
        };
        let &[rows, cols] = info.shape.as_slice() else {
            return Err(bad(format!("shape {:?}, not 2-D", info.shape)));
        };
        let format = match info.dtype {
            safetensors::Dtype::F32 => Stored::F32,
            safetensors::Dtype::BF16 => Stored::Bf16,
            safetensors::Dtype::F16 => Stored::F16,
            other => return Err(bad(format!("dtype {other:?}"))),
        };
        Ok(Some(MappedMatrix {
            map: Arc::clone(&self.files[*file].1),
            start: data_start + info.data_offsets.0,
            rows,
            cols,
            format,
            scale: 1.0,
        }))
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Stored {
    F32,
    Bf16,
    F16,
}

/// A `[rows, cols]` tensor of a mapped checkpoint, read a row at a time as f32 (times `scale`): an embedding
/// table that costs no memory beyond the pages of the rows a workload touches.
#[derive(Clone)]
pub struct MappedMatrix {
    map: Arc<memmap2::Mmap>,
    start: usize,
    rows: usize,
    cols: usize,
    format: Stored,
    scale: f32,
}

impl MappedMatrix {
    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The same matrix with every value multiplied by `scale` as it is read (Gemma's √hidden).
    pub fn scaled(mut self, scale: f32) -> Self {
        self.scale *= scale;
        self
    }

    /// Writes row `r` into `dst` (`cols` values), or adds it with `add`.
    pub fn row_into(&self, r: usize, dst: &mut [f32], add: bool) -> Result<(), ModelError> {
        if r >= self.rows || dst.len() != self.cols {
            return Err(ModelError::Forward(format!("row {r} of a {}x{} table", self.rows, self.cols)));
        }
        let size = if self.format == Stored::F32 { 4 } else { 2 };
        let bytes = &self.map[self.start + r * self.cols * size..][..self.cols * size];
        let scale = self.scale;
        let put = |d: &mut f32, v: f32| *d = if add { *d + v * scale } else { v * scale };
        match self.format {
            Stored::F32 => {
                for (d, b) in dst.iter_mut().zip(bytes.chunks_exact(4)) {
                    put(d, f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                }
            }
            Stored::Bf16 => {
                for (d, b) in dst.iter_mut().zip(bytes.chunks_exact(2)) {
                    put(d, f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16));
                }
            }
            Stored::F16 => {
                for (d, b) in dst.iter_mut().zip(bytes.chunks_exact(2)) {
                    put(d, f16_to_f32(u16::from_le_bytes([b[0], b[1]])));
                }
            }
        }
        Ok(())
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
/// What [`Checkpoint::min_loaded_bytes`] counts for one safetensors file.
fn header_min_bytes(path: &Path, width: u64) -> Result<u64, ModelError> {
    use std::io::Read;
    #[derive(serde::Deserialize)]
    struct Entry {
        dtype: String,
        shape: Vec<u64>,
    }
    let bad = |reason: String| ModelError::BadFile { path: path.to_path_buf(), reason };
    let mut file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len).map_err(|e| bad(format!("reading the header length: {e}")))?;
    let len = u64::from_le_bytes(len);
    // safetensors caps headers at 100 MB.
    if len > 100_000_000 {
        return Err(bad(format!("a header of {len} bytes")));
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header).map_err(|e| bad(format!("reading the header: {e}")))?;
    let mut entries: HashMap<String, serde_json::Value> =
        serde_json::from_slice(&header).map_err(|e| bad(format!("the header: {e}")))?;
    entries.remove("__metadata__");
    let mut total = 0u64;
    for (name, entry) in entries {
        // Only the numbered blocks (`encoder.layer.3.`, `layers.11.`), which every load reads whole, are counted:
        // embedding tables (read in place from the mapped file by the CPU kernels), poolers an embedder never
        // reads, and output heads a load may read only rows of (an LLM reranker's yes/no logits) are not, so the
        // figure stays a lower bound.
        if !name.split('.').any(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit())) {
            continue;
        }
        let entry: Entry = serde_json::from_value(entry).map_err(|e| bad(format!("tensor `{name}`: {e}")))?;
        let stored = match entry.dtype.as_str() {
            "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" => 1,
            "U16" | "I16" | "F16" | "BF16" => 2,
            "U32" | "I32" | "F32" => 4,
            _ => 8,
        };
        total = total.saturating_add(entry.shape.iter().product::<u64>().saturating_mul(width.min(stored)));
    }
    Ok(total)
}

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

    /// The headers' element counts, at the loaded width or the stored one if narrower, the numbered blocks only.
    #[test]
    fn counts_the_least_a_load_holds_from_the_headers() {
        use candle_core::{DType, Device, Tensor};
        let dir = std::env::temp_dir().join(format!("aleph-min-bytes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let zeros = |shape: (usize, usize), dtype| Tensor::zeros(shape, dtype, &Device::Cpu).unwrap();
        let tensors = HashMap::from([
            ("encoder.layer.0.dense.weight".to_string(), zeros((3, 4), DType::F32)),
            ("encoder.layer.1.norm.weight".to_string(), zeros((2, 5), DType::BF16)),
            ("embeddings.word_embeddings.weight".to_string(), zeros((100, 4), DType::F32)),
            ("pooler.dense.weight".to_string(), zeros((4, 4), DType::F32)),
            ("lm_head.weight".to_string(), zeros((100, 4), DType::F32)),
        ]);
        candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
        let ckpt = Checkpoint::find(&dir).unwrap();
        assert_eq!(ckpt.min_loaded_bytes(4).unwrap(), 12 * 4 + 10 * 2);
        assert_eq!(ckpt.min_loaded_bytes(2).unwrap(), 12 * 2 + 10 * 2);
        assert_eq!(ckpt.min_loaded_bytes(1).unwrap(), 12 + 10);
        std::fs::write(dir.join("model.safetensors"), [200, 0, 0, 0, 0, 0, 0, 0, b'{']).unwrap();
        assert!(ckpt.min_loaded_bytes(4).is_err(), "a truncated header");
        std::fs::remove_dir_all(&dir).unwrap();
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
            // In place, scaled and added, as embedding tables are read.
            let m = ckpt.mapped().unwrap().unwrap().matrix("lm_head.weight").unwrap().unwrap().scaled(2.0);
            let mut row = vec![1.0; 4];
            m.row_into(3, &mut row, true).unwrap();
            assert_eq!(row, want[3].iter().map(|v| 1.0 + 2.0 * v).collect::<Vec<_>>(), "{dtype:?}");
            assert!(m.row_into(0, &mut [0.0; 3], false).is_err(), "a row of the wrong width");
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
