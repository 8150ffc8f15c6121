//! What the benchmark binaries (and `aleph bench`) share: the HTTP load generator, reading the sentence corpus.

pub mod load;

use std::io::{BufRead, BufReader, Read};

use anyhow::{bail, Context};

/// Sentences from the STS Benchmark `.tsv(.gz)` (both sentence columns, in file order), or from a text file
/// with one per line.
pub fn load_sentences(path: &str) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for line in lines(path)? {
        let line = line?;
        if path.contains(".tsv") {
            // split, genre, dataset, year, sid, score, sentence1, sentence2
            let cols: Vec<&str> = line.split('\t').collect();
            if cols.len() >= 7 && cols[5].parse::<f64>().is_ok() {
                out.extend(cols[6..].iter().take(2).map(|s| s.to_string()));
            }
        } else if !line.trim().is_empty() {
            out.push(line);
        }
    }
    if out.is_empty() {
        bail!("no sentences in {path}");
    }
    Ok(out)
}

fn lines(path: &str) -> anyhow::Result<std::io::Lines<BufReader<Box<dyn Read>>>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {path}"))?;
    let reader: Box<dyn Read> =
        if path.ends_with(".gz") { Box::new(flate2::read::GzDecoder::new(file)) } else { Box::new(file) };
    Ok(BufReader::new(reader).lines())
}
