//! Where the vectors go, whatever the format (from the file's extension): NumPy's .npy or Parquet.

use std::path::Path;

use anyhow::bail;

use super::npy::NpyWriter;
use super::parquet_vectors::ParquetVectors;

/// The element type of the written vectors: f32, or 8-bit integers for quantized outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Element {
    F32,
    I8,
    U8,
}

impl Element {
    /// In words, for errors.
    pub fn describe(self) -> &'static str {
        match self {
            Element::F32 => "32-bit floats",
            Element::I8 => "signed 8-bit integers",
            Element::U8 => "unsigned 8-bit integers",
        }
    }
}

pub enum VectorFile {
    Npy(NpyWriter),
    Parquet(Box<ParquetVectors>),
}

impl VectorFile {
    /// Checks `path`'s extension names a format this writes, before anything is loaded.
    pub fn check_path(path: &Path) -> anyhow::Result<()> {
        match extension(path).as_deref() {
            Some("npy") | Some("parquet") | Some("pq") => Ok(()),
            _ => bail!("--output {}: expected a .npy or .parquet file", path.display()),
        }
    }

    /// A new file, or with `resume` the vectors `path` already holds kept (see each format's module).
    pub fn open(path: &Path, dim: usize, element: Element, resume: bool) -> anyhow::Result<VectorFile> {
        Self::check_path(path)?;
        Ok(match extension(path).as_deref() {
            Some("npy") => VectorFile::Npy(NpyWriter::open(path, dim, element, resume)?),
            _ => VectorFile::Parquet(Box::new(ParquetVectors::open(path, dim, element, resume)?)),
        })
    }

    /// Rows written, those an earlier run wrote included.
    pub fn rows(&self) -> usize {
        match self {
            VectorFile::Npy(w) => w.rows(),
            VectorFile::Parquet(w) => w.rows(),
        }
    }

    pub fn append(&mut self, vectors: &[Vec<f32>]) -> anyhow::Result<()> {
        match self {
            VectorFile::Npy(w) => w.append(vectors),
            VectorFile::Parquet(w) => w.append(vectors),
        }
    }

    /// Makes the file whole: a no-op for .npy (whole after every chunk), the footer for Parquet.
    pub fn finish(self) -> anyhow::Result<()> {
        match self {
            VectorFile::Npy(_) => Ok(()),
            VectorFile::Parquet(w) => w.finish(),
        }
    }
}

fn extension(path: &Path) -> Option<String> {
    path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase)
}
