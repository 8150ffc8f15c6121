//! A corpus of lines read a chunk at a time: a text file (one text per line) or JSON Lines (a string field of
//! each object), so memory holds one chunk whatever the corpus's size.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{anyhow, bail, Context};

pub enum Format {
    Text,
    JsonLines { field: String },
}

pub struct LineCorpus {
    lines: std::io::Lines<BufReader<File>>,
    format: Format,
    /// The line last read (1-based), for errors.
    line: usize,
    name: String,
}

impl LineCorpus {
    pub fn open(path: &Path, format: Format) -> anyhow::Result<LineCorpus> {
        let file = File::open(path).with_context(|| format!("--input {}", path.display()))?;
        Ok(LineCorpus { lines: BufReader::new(file).lines(), format, line: 0, name: path.display().to_string() })
    }

    /// How many texts `path` holds (a pass over its lines, far cheaper than embedding them).
    pub fn count(path: &Path) -> anyhow::Result<usize> {
        let file = File::open(path).with_context(|| format!("--input {}", path.display()))?;
        let mut n = 0;
        for line in BufReader::new(file).lines() {
            if !line?.trim().is_empty() {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Up to `n` more texts; empty at the end. Blank lines are skipped (they hold no record).
    pub fn next_chunk(&mut self, n: usize) -> anyhow::Result<Vec<String>> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let Some(line) = self.lines.next() else { break };
            self.line += 1;
            let line = line.with_context(|| format!("{}: line {}", self.name, self.line))?;
            if line.trim().is_empty() {
                continue;
            }
            out.push(self.text(&line)?);
        }
        Ok(out)
    }

    /// Skips `n` texts (those a resumed run already wrote).
    pub fn skip(&mut self, n: usize) -> anyhow::Result<()> {
        let mut left = n;
        while left > 0 {
            let chunk = self.next_chunk(left.min(65_536))?;
            if chunk.is_empty() {
                bail!("{}: the output already holds {n} vectors, more than the corpus's texts", self.name);
            }
            left -= chunk.len();
        }
        Ok(())
    }

    fn text(&self, line: &str) -> anyhow::Result<String> {
        match &self.format {
            Format::Text => Ok(line.to_string()),
            Format::JsonLines { field } => {
                let value: serde_json::Value = serde_json::from_str(line)
                    .map_err(|e| anyhow!("{}: line {}: not JSON: {e}", self.name, self.line))?;
                match value.get(field) {
                    Some(serde_json::Value::String(s)) => Ok(s.clone()),
                    Some(_) => bail!("{}: line {}: `{field}` is not a string", self.name, self.line),
                    None => bail!("{}: line {}: no `{field}` field (--text-field)", self.name, self.line),
                }
            }
        }
    }
}
