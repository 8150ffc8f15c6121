//! What `aleph eval` prints: a table per task with one row per model, or the same as JSON.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Instant;

use serde::Serialize;

use crate::cli::ModelSpec;

#[derive(Debug, Default, Serialize)]
pub struct EvalReport {
    pub models: Vec<ModelRow>,
    pub results: Vec<TaskResult>,
}

#[derive(Debug, Serialize)]
pub struct ModelRow {
    pub name: String,
    pub model_id: String,
    pub dtype: String,
    pub architecture: String,
    pub load_seconds: f64,
}

/// One model on one dataset.
#[derive(Debug, Serialize)]
pub struct TaskResult {
    /// `sts`, `retrieval`, `retrieval+rerank` or `classification`.
    pub task: &'static str,
    pub dataset: String,
    pub model: String,
    pub dtype: String,
    /// The second stage's model, for `retrieval+rerank`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reranker: Option<String>,
    pub metrics: BTreeMap<String, f64>,
    /// Pairs, texts, or queries and documents the model ran on.
    pub items: usize,
    pub seconds: f64,
    /// Why the model did not do this task (then `metrics` is empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl TaskResult {
    pub fn new(task: &'static str, dataset: &str, spec: &ModelSpec) -> Self {
        TaskResult {
            task,
            dataset: dataset.to_string(),
            model: spec.served_name.clone(),
            dtype: spec.dtype.name().to_string(),
            reranker: None,
            metrics: BTreeMap::new(),
            items: 0,
            seconds: 0.0,
            note: None,
        }
    }

    pub fn timed(mut self, since: Instant) -> Self {
        self.seconds = since.elapsed().as_secs_f64();
        self
    }
}

/// The metric columns of each task, in the order shown.
fn columns(task: &str) -> (&'static [&'static str], &'static str) {
    match task {
        "sts" => (&["spearman", "pearson"], "pairs/s"),
        "classification" => (&["accuracy", "macro_f1"], "texts/s"),
        _ => (&["ndcg_at_10", "mrr_at_10", "recall_at_100"], "items/s"),
    }
}

impl EvalReport {
    /// One table per (task, dataset), rows in model order.
    pub fn tables(&self) -> String {
        let mut out = String::new();
        let mut seen: Vec<(&str, &str)> = Vec::new();
        for r in &self.results {
            if !seen.contains(&(r.task, r.dataset.as_str())) {
                seen.push((r.task, r.dataset.as_str()));
            }
        }
        for (task, dataset) in seen {
            let rows: Vec<&TaskResult> =
                self.results.iter().filter(|r| r.task == task && r.dataset == dataset).collect();
            let (metrics, rate) = columns(task);
            let mut header = vec!["model".to_string(), "dtype".to_string()];
            if task == "retrieval+rerank" {
                header.push("reranker".into());
            }
            header.extend(metrics.iter().map(|m| m.replace("_at_", "@")));
            header.extend(["seconds".to_string(), rate.to_string()]);
            let mut table = vec![header];
            let mut notes = Vec::new();
            for r in &rows {
                let mut cells = vec![r.model.clone(), r.dtype.clone()];
                if task == "retrieval+rerank" {
                    cells.push(r.reranker.clone().unwrap_or_default());
                }
                for m in metrics {
                    cells.push(r.metrics.get(*m).map_or("-".into(), |v| format!("{v:.4}")));
                }
                cells.push(format!("{:.2}", r.seconds));
                cells.push(if r.seconds > 0.0 { format!("{:.0}", r.items as f64 / r.seconds) } else { "-".into() });
                table.push(cells);
                if let Some(note) = &r.note {
                    notes.push(format!("{}: {note}", r.model));
                }
            }
            let label = match task {
                "sts" => "STS",
                "retrieval" => "Retrieval",
                "retrieval+rerank" => "Retrieval, reranked",
                _ => "Classification",
            };
            let _ = writeln!(out, "{label} · {dataset}");
            out.push_str(&render(&table));
            for note in notes {
                let _ = writeln!(out, "  {note}");
            }
            out.push('\n');
        }
        out
    }
}

/// A markdown table with aligned columns (text left, numbers right).
fn render(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let numeric = |c: usize| rows[1..].iter().all(|r| r[c] == "-" || r[c].parse::<f64>().is_ok());
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let cells: Vec<String> =
            row.iter()
                .enumerate()
                .map(|(c, cell)| {
                    if numeric(c) {
                        format!("{cell:>w$}", w = widths[c])
                    } else {
                        format!("{cell:<w$}", w = widths[c])
                    }
                })
                .collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
        if i == 0 {
            // Each cell is padded by a space either side; a numeric column's rule ends in `:` (right-aligned).
            let rule: Vec<String> = widths
                .iter()
                .enumerate()
                .map(|(c, w)| if numeric(c) { format!("{}:", "-".repeat(w + 1)) } else { "-".repeat(w + 2) })
                .collect();
            let _ = writeln!(out, "|{}|", rule.join("|"));
        }
    }
    out
}
