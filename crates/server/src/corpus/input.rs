//! The corpus, whatever its format (from the file's extension): lines of text, JSON Lines, or a Parquet column.

use std::path::Path;

use anyhow::bail;

use super::lines::{Format, LineCorpus};
use super::parquet_texts::ParquetTexts;

pub enum Corpus {
    Lines(LineCorpus),
    Parquet(Box<ParquetTexts>),
}

enum Kind {
    Lines(Format),
    Parquet,
}

fn kind(path: &Path, text_field: &str) -> anyhow::Result<Kind> {
    Ok(match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("txt") | Some("text") => Kind::Lines(Format::Text),
        Some("jsonl") | Some("ndjson") => Kind::Lines(Format::JsonLines { field: text_field.to_string() }),
        Some("parquet") | Some("pq") => Kind::Parquet,
        _ => bail!("--input {}: expected a .txt (one text per line), .jsonl or .parquet file", path.display()),
    })
}

impl Corpus {
    /// Opens `path`; JSON Lines and Parquet take their text from `text_field`.
    pub fn open(path: &Path, text_field: &str) -> anyhow::Result<Corpus> {
        Ok(match kind(path, text_field)? {
            Kind::Lines(format) => Corpus::Lines(LineCorpus::open(path, format)?),
            Kind::Parquet => Corpus::Parquet(Box::new(ParquetTexts::open(path, text_field)?)),
        })
    }

    /// How many texts `path` holds, for the progress bar.
    pub fn count(path: &Path) -> anyhow::Result<usize> {
        match kind(path, "")? {
            Kind::Lines(_) => LineCorpus::count(path),
            Kind::Parquet => ParquetTexts::count(path),
        }
    }

    /// Up to `n` more texts; empty at the end.
    pub fn next_chunk(&mut self, n: usize) -> anyhow::Result<Vec<String>> {
        match self {
            Corpus::Lines(c) => c.next_chunk(n),
            Corpus::Parquet(c) => c.next_chunk(n),
        }
    }

    /// Skips `n` texts (those a resumed run already wrote).
    pub fn skip(&mut self, n: usize) -> anyhow::Result<()> {
        match self {
            Corpus::Lines(c) => c.skip(n),
            Corpus::Parquet(c) => c.skip(n),
        }
    }
}
