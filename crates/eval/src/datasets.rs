//! The files models are measured on, read with errors that name the file and line:
//! STS pairs (TSV or JSONL), labelled texts (TSV or JSONL) and BEIR retrieval folders. A `.gz` name is
//! read through gzip.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::retrieval::Qrels;

/// What went wrong reading a dataset, with where.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{path}: {why}")]
    File { path: String, why: String },
    #[error("{path}:{line}: {why}")]
    Line { path: String, line: usize, why: String },
}

fn file_error(path: &str, why: impl ToString) -> DataError {
    DataError::File { path: path.to_string(), why: why.to_string() }
}

/// Sentence pairs with gold similarity scores.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StsPairs {
    pub first: Vec<String>,
    pub second: Vec<String>,
    pub gold: Vec<f64>,
}

impl StsPairs {
    pub fn len(&self) -> usize {
        self.gold.len()
    }

    pub fn is_empty(&self) -> bool {
        self.gold.is_empty()
    }
}

/// Texts with gold labels (a label's name, or its index in the classifier's labels).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Labelled {
    pub texts: Vec<String>,
    pub labels: Vec<String>,
    /// The file line of each text, for errors about its label.
    pub lines: Vec<usize>,
    /// The file the texts came from.
    pub path: String,
}

/// A BEIR / MTEB retrieval set: the corpus (title and text joined as MTEB embeds them), the judged queries,
/// and their relevance judgements.
#[derive(Debug, Clone, Default)]
pub struct Retrieval {
    pub doc_ids: Vec<String>,
    pub docs: Vec<String>,
    pub query_ids: Vec<String>,
    pub queries: Vec<String>,
    pub qrels: Qrels,
}

/// Reads numbered, non-blank lines of a file (gzip when its name ends in `.gz`).
fn read_lines(path: &Path) -> Result<Vec<(usize, String)>, DataError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| file_error(&shown, e))?;
    let reader: Box<dyn Read> =
        if shown.ends_with(".gz") { Box::new(flate2::read::GzDecoder::new(file)) } else { Box::new(file) };
    lines_of(BufReader::new(reader), &shown)
}

fn lines_of(reader: impl BufRead, path: &str) -> Result<Vec<(usize, String)>, DataError> {
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| DataError::Line { path: path.to_string(), line: i + 1, why: e.to_string() })?;
        let line = line.strip_suffix('\r').unwrap_or(&line).to_string();
        if !line.trim().is_empty() {
            out.push((i + 1, line));
        }
    }
    Ok(out)
}

fn is_jsonl(path: &Path) -> bool {
    let name = path.to_string_lossy();
    let name = name.strip_suffix(".gz").unwrap_or(&name);
    name.ends_with(".jsonl") || name.ends_with(".json")
}

/// A tab-separated table: the columns a header names, or else `positional` in order.
struct Table<'a> {
    path: &'a str,
    columns: Vec<usize>,
    rows: &'a [(usize, String)],
}

impl<'a> Table<'a> {
    /// `wanted` are the header names to find; when the first line names them all it is the header,
    /// otherwise the columns are taken in order.
    fn new(path: &'a str, lines: &'a [(usize, String)], wanted: &[&str]) -> Self {
        if let Some((_, first)) = lines.first() {
            let header: Vec<String> = first.split('\t').map(|c| c.trim().to_ascii_lowercase()).collect();
            let found: Option<Vec<usize>> = wanted.iter().map(|w| header.iter().position(|h| h == w)).collect();
            if let Some(columns) = found {
                return Table { path, columns, rows: &lines[1..] };
            }
        }
        Table { path, columns: (0..wanted.len()).collect(), rows: lines }
    }

    fn column(&self, header: &[&str], name: &str) -> Option<usize> {
        header.iter().position(|h| *h == name).and_then(|i| self.columns.get(i).copied())
    }

    /// Each row's wanted cells, in the order asked for.
    fn cells(&self) -> impl Iterator<Item = Result<(usize, Vec<&'a str>), DataError>> + '_ {
        let need = self.columns.iter().max().map_or(0, |m| m + 1);
        self.rows.iter().map(move |(line, text)| {
            let cells: Vec<&str> = text.split('\t').collect();
            if cells.len() < need {
                return Err(DataError::Line {
                    path: self.path.to_string(),
                    line: *line,
                    why: format!("{} tab-separated columns, expected at least {need}", cells.len()),
                });
            }
            Ok((*line, self.columns.iter().map(|&c| cells[c]).collect()))
        })
    }
}

fn line_error(path: &str, line: usize, why: impl ToString) -> DataError {
    DataError::Line { path: path.to_string(), line, why: why.to_string() }
}

/// STS pairs from a file: TSV with a header naming `sentence1`, `sentence2` and `score` (the STS Benchmark's
/// layout: rows whose `split` column is not `split` are skipped when there is one) or three columns
/// (sentence 1, sentence 2, score); or JSONL objects with `sentence1`, `sentence2` and `score`.
pub fn read_sts(path: &Path, split: &str) -> Result<StsPairs, DataError> {
    let lines = read_lines(path)?;
    sts_from_lines(&path.display().to_string(), &lines, split, is_jsonl(path))
}

/// [`read_sts`] over text already in memory (the STS Benchmark test split shipped in the binary).
pub fn parse_sts(name: &str, text: &str, split: &str) -> Result<StsPairs, DataError> {
    let lines = lines_of(text.as_bytes(), name)?;
    sts_from_lines(name, &lines, split, false)
}

fn sts_from_lines(path: &str, lines: &[(usize, String)], split: &str, jsonl: bool) -> Result<StsPairs, DataError> {
    let mut out = StsPairs::default();
    if jsonl {
        for (line, text) in lines {
            let obj = json_object(path, *line, text)?;
            out.first.push(string_field(path, *line, &obj, "sentence1")?);
            out.second.push(string_field(path, *line, &obj, "sentence2")?);
            out.gold.push(number_field(path, *line, &obj, "score")?);
        }
    } else {
        const HEADER: [&str; 4] = ["sentence1", "sentence2", "score", "split"];
        let with_split = Table::new(path, lines, &HEADER);
        let table =
            if with_split.rows.len() < lines.len() { with_split } else { Table::new(path, lines, &HEADER[..3]) };
        let split_col = table.column(&HEADER, "split");
        for row in table.cells() {
            let (line, cells) = row?;
            if split_col.is_some() && cells.get(3).is_some_and(|s| !s.eq_ignore_ascii_case(split)) {
                continue;
            }
            let score = cells[2]
                .trim()
                .parse::<f64>()
                .map_err(|_| line_error(path, line, format!("score `{}` is not a number", cells[2])))?;
            out.first.push(cells[0].to_string());
            out.second.push(cells[1].to_string());
            out.gold.push(score);
        }
    }
    if out.is_empty() {
        let which = if jsonl { String::new() } else { format!(" (split `{split}`)") };
        return Err(file_error(path, format!("no sentence pairs{which}")));
    }
    Ok(out)
}

/// Labelled texts: TSV of text and label (a header naming `text` and `label` may give their columns), or
/// JSONL objects with `text` and `label` (a string, or an integer index).
pub fn read_labelled(path: &Path) -> Result<Labelled, DataError> {
    let shown = path.display().to_string();
    let lines = read_lines(path)?;
    let mut out = Labelled { path: shown.clone(), ..Labelled::default() };
    if is_jsonl(path) {
        for (line, text) in &lines {
            let obj = json_object(&shown, *line, text)?;
            out.texts.push(string_field(&shown, *line, &obj, "text")?);
            let label = match obj.get("label") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) if n.is_u64() => n.to_string(),
                Some(other) => {
                    return Err(line_error(&shown, *line, format!("`label` must be a string or an index, not {other}")))
                }
                None => return Err(line_error(&shown, *line, "no `label` field")),
            };
            out.labels.push(label);
            out.lines.push(*line);
        }
    } else {
        let table = Table::new(&shown, &lines, &["text", "label"]);
        for row in table.cells() {
            let (line, cells) = row?;
            if cells[1].trim().is_empty() {
                return Err(line_error(&shown, line, "empty label"));
            }
            out.texts.push(cells[0].to_string());
            out.labels.push(cells[1].trim().to_string());
            out.lines.push(line);
        }
    }
    if out.texts.is_empty() {
        return Err(file_error(&shown, "no labelled texts"));
    }
    Ok(out)
}

/// A BEIR folder: `corpus.jsonl` (`_id`, optional `title`, `text`), `queries.jsonl` (`_id`, `text`) and
/// `qrels/<split>.tsv` (`query-id`, `corpus-id`, `score`, after a header line). Only judged queries are kept.
pub fn read_beir(dir: &Path, split: &str) -> Result<Retrieval, DataError> {
    let find = |stem: &str| -> Result<PathBuf, DataError> {
        [format!("{stem}.jsonl"), format!("{stem}.jsonl.gz")]
            .iter()
            .map(|name| dir.join(name))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                file_error(
                    &dir.display().to_string(),
                    format!("no {stem}.jsonl (a BEIR folder has corpus.jsonl, queries.jsonl and qrels/{split}.tsv)"),
                )
            })
    };
    let mut out = Retrieval::default();
    let corpus_path = find("corpus")?;
    let mut seen = HashMap::new();
    for (line, id, obj) in json_lines_with_ids(&corpus_path)? {
        let shown = corpus_path.display().to_string();
        if seen.insert(id.clone(), line).is_some() {
            return Err(line_error(&shown, line, format!("document `{id}` appears twice")));
        }
        let text = string_field(&shown, line, &obj, "text")?;
        // MTEB embeds a document as its title and text, joined by a space.
        let doc = match obj.get("title").and_then(Value::as_str) {
            Some(title) => format!("{title} {text}").trim().to_string(),
            None => text.trim().to_string(),
        };
        out.doc_ids.push(id);
        out.docs.push(doc);
    }
    let queries_path = find("queries")?;
    let mut queries = HashMap::new();
    for (line, id, obj) in json_lines_with_ids(&queries_path)? {
        let shown = queries_path.display().to_string();
        let text = string_field(&shown, line, &obj, "text")?;
        if queries.insert(id.clone(), text).is_some() {
            return Err(line_error(&shown, line, format!("query `{id}` appears twice")));
        }
    }
    let qrels_path = [dir.join("qrels").join(format!("{split}.tsv")), dir.join(format!("qrels.{split}.tsv"))]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| file_error(&dir.display().to_string(), format!("no qrels/{split}.tsv")))?;
    let shown = qrels_path.display().to_string();
    let lines = read_lines(&qrels_path)?;
    let table = Table::new(&shown, &lines, &["query-id", "corpus-id", "score"]);
    for row in table.cells() {
        let (line, cells) = row?;
        let (qid, did) = (cells[0].trim(), cells[1].trim());
        let grade = cells[2]
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|g| g.fract() == 0.0)
            .ok_or_else(|| line_error(&shown, line, format!("score `{}` is not an integer grade", cells[2])))?;
        if !queries.contains_key(qid) {
            return Err(line_error(&shown, line, format!("query `{qid}` is not in {}", queries_path.display())));
        }
        out.qrels.entry(qid.to_string()).or_default().insert(did.to_string(), grade as i32);
    }
    if out.qrels.is_empty() {
        return Err(file_error(&shown, "no relevance judgements"));
    }
    if out.docs.is_empty() {
        return Err(file_error(&corpus_path.display().to_string(), "no documents"));
    }
    let mut judged: Vec<&String> = out.qrels.keys().collect();
    judged.sort();
    for qid in judged {
        out.query_ids.push(qid.clone());
        out.queries.push(queries[qid].clone());
    }
    Ok(out)
}

type JsonObject = serde_json::Map<String, Value>;

/// Each line of a JSONL file as an object with its `_id` (a string or a number).
fn json_lines_with_ids(path: &Path) -> Result<Vec<(usize, String, JsonObject)>, DataError> {
    let shown = path.display().to_string();
    read_lines(path)?
        .into_iter()
        .map(|(line, text)| {
            let obj = json_object(&shown, line, &text)?;
            let id = match obj.get("_id") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => return Err(line_error(&shown, line, "no `_id` (a string)")),
            };
            Ok((line, id, obj))
        })
        .collect()
}

fn json_object(path: &str, line: usize, text: &str) -> Result<serde_json::Map<String, Value>, DataError> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(obj)) => Ok(obj),
        Ok(_) => Err(line_error(path, line, "expected a JSON object")),
        Err(e) => Err(line_error(path, line, format!("invalid JSON: {e}"))),
    }
}

fn string_field(
    path: &str,
    line: usize,
    obj: &serde_json::Map<String, Value>,
    name: &str,
) -> Result<String, DataError> {
    match obj.get(name) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(line_error(path, line, format!("`{name}` must be a string"))),
        None => Err(line_error(path, line, format!("no `{name}` field"))),
    }
}

fn number_field(path: &str, line: usize, obj: &serde_json::Map<String, Value>, name: &str) -> Result<f64, DataError> {
    match obj.get(name) {
        Some(Value::Number(n)) => n.as_f64().ok_or_else(|| line_error(path, line, format!("`{name}` is out of range"))),
        Some(Value::String(s)) => {
            s.trim().parse().map_err(|_| line_error(path, line, format!("`{name}` `{s}` is not a number")))
        }
        Some(_) => Err(line_error(path, line, format!("`{name}` must be a number"))),
        None => Err(line_error(path, line, format!("no `{name}` field"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sts_benchmark_layout_keeps_the_asked_split() {
        let text = "split\tgenre\tdataset\tyear\tsid\tscore\tsentence1\tsentence2\n\
                    train\tg\td\ty\t1\t5.0\ta\tb\n\
                    test\tg\td\ty\t2\t1.5\tc\td\n";
        let pairs = parse_sts("sts.tsv", text, "test").unwrap();
        assert_eq!(pairs, StsPairs { first: vec!["c".into()], second: vec!["d".into()], gold: vec![1.5] });
    }

    #[test]
    fn three_columns_without_a_header() {
        let pairs = parse_sts("p.tsv", "a\tb\t1\nc\td\t2.5\n", "test").unwrap();
        assert_eq!(pairs.gold, vec![1.0, 2.5]);
        assert_eq!(pairs.second, vec!["b", "d"]);
    }

    #[test]
    fn a_bad_score_names_its_line() {
        let err = parse_sts("p.tsv", "a\tb\t1\n\nc\td\thigh\n", "test").unwrap_err().to_string();
        assert_eq!(err, "p.tsv:3: score `high` is not a number");
        let err = parse_sts("p.tsv", "a\tb\n", "test").unwrap_err().to_string();
        assert_eq!(err, "p.tsv:1: 2 tab-separated columns, expected at least 3");
    }
}
