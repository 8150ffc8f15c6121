//! What `aleph bench` measured: JSON for machines, markdown tables with the dtypes side by side for people.

use std::fmt::Write;
use std::time::Duration;

use aleph_bench::load::LoadReport;
use aleph_engine::{human_bytes, ModelHandle};
use serde::Serialize;

use crate::cli::ModelSpec;

#[derive(Debug, Default, Serialize)]
pub struct BenchReport {
    pub machine: Machine,
    pub variants: Vec<VariantRow>,
    pub in_process: Vec<InProcessRow>,
    pub http: Vec<HttpRow>,
    pub tokenize: Vec<TokenizeRow>,
}

#[derive(Debug, Default, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub threads: usize,
    /// The float kernels' instruction set, the bf16 kernel's and the int8 kernel's.
    pub kernels: String,
    pub bf16_kernel: String,
    pub int8_kernel: String,
}

pub fn machine() -> Machine {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().into())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    Machine {
        cpu,
        threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        kernels: aleph_models::cpu::Isa::get().name().to_string(),
        bf16_kernel: aleph_models::cpu::bgemm::kernel_name().to_string(),
        int8_kernel: aleph_models::cpu::qgemm::kernel_name().to_string(),
    }
}

/// One model at one dtype: loaded, or why not.
#[derive(Debug, Serialize)]
pub struct VariantRow {
    pub model: String,
    pub model_id: String,
    pub dtype: String,
    pub architecture: Option<String>,
    pub backend: Option<String>,
    pub weight_bytes: Option<u64>,
    pub load_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl VariantRow {
    pub fn new(spec: &ModelSpec) -> Self {
        VariantRow {
            model: spec.served_name.clone(),
            model_id: spec.model_id.clone(),
            dtype: spec.dtype.name().to_string(),
            architecture: None,
            backend: None,
            weight_bytes: None,
            load_seconds: None,
            note: None,
        }
    }

    pub fn loaded(&mut self, handle: &ModelHandle, took: Duration) {
        let info = handle.info();
        self.architecture = Some(info.architecture.clone());
        self.backend = Some(info.backend.name().to_string());
        self.weight_bytes = Some(info.weight_bytes);
        self.load_seconds = Some(took.as_secs_f64());
    }
}

/// Calls of `batch` inputs of `length` tokens, one after another.
#[derive(Debug, Serialize)]
pub struct InProcessRow {
    pub model: String,
    pub dtype: String,
    pub batch: usize,
    /// Tokens asked for; `tokens_per_input` is what the model was fed (cut to its window).
    pub length: usize,
    pub tokens_per_input: f64,
    pub calls: usize,
    pub items_per_s: f64,
    pub tokens_per_s: f64,
    /// Per call.
    pub p50_ms: f64,
    pub p90_ms: f64,
}

/// The tokenizer pool alone: corpus sentences tokenized by `workers` threads, as fast as they go.
#[derive(Debug, Serialize)]
pub struct TokenizeRow {
    pub model: String,
    pub workers: usize,
    pub sentences: usize,
    pub seconds: f64,
    pub sentences_per_s: f64,
    pub tokens_per_s: f64,
}

/// Requests of `request_size` corpus sentences, `concurrency` in flight.
#[derive(Debug, Serialize)]
pub struct HttpRow {
    pub model: String,
    pub dtype: String,
    pub concurrency: usize,
    pub request_size: usize,
    pub requests: usize,
    pub errors: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    pub items_per_s: f64,
    pub requests_per_s: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
}

impl HttpRow {
    pub fn new(model: &str, dtype: &str, concurrency: usize, request_size: usize, load: &LoadReport) -> Self {
        HttpRow {
            model: model.to_string(),
            dtype: dtype.to_string(),
            concurrency,
            request_size,
            requests: load.requests(),
            errors: load.errors.len(),
            first_error: load.errors.first().cloned(),
            items_per_s: (load.requests() * request_size) as f64 / load.seconds.max(1e-9),
            requests_per_s: load.requests_per_s(),
            p50_ms: load.percentile_ms(0.5),
            p90_ms: load.percentile_ms(0.9),
            p99_ms: load.percentile_ms(0.99),
        }
    }
}

impl BenchReport {
    /// The served names in the order benchmarked, once each.
    fn models(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for v in &self.variants {
            if !names.contains(&v.model.as_str()) {
                names.push(&v.model);
            }
        }
        names
    }

    /// The dtypes `model` was measured at, in the order asked.
    fn dtypes_of(&self, model: &str) -> Vec<&str> {
        self.variants.iter().filter(|v| v.model == model && v.note.is_none()).map(|v| v.dtype.as_str()).collect()
    }

    /// A markdown table of the models, then per model one table in-process and one over HTTP, one column
    /// per dtype.
    pub fn tables(&self) -> String {
        let mut out = String::new();
        let m = &self.machine;
        let _ = writeln!(
            out,
            "Machine: {} · {} threads · kernels {} (bf16: {}, int8: {})\n",
            m.cpu, m.threads, m.kernels, m.bf16_kernel, m.int8_kernel
        );
        let _ = writeln!(out, "| model | dtype | architecture | backend | weights | load s | note |");
        let _ = writeln!(out, "|---|---|---|---|---:|---:|---|");
        for v in &self.variants {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                v.model,
                v.dtype,
                v.architecture.as_deref().unwrap_or("—"),
                v.backend.as_deref().unwrap_or("—"),
                v.weight_bytes.map(human_bytes).unwrap_or_else(|| "—".into()),
                v.load_seconds.map(|s| format!("{s:.2}")).unwrap_or_else(|| "—".into()),
                v.note.as_deref().map(one_line).unwrap_or_default()
            );
        }
        for model in self.models() {
            let dtypes = self.dtypes_of(model);
            if dtypes.is_empty() {
                continue;
            }
            let rows: Vec<&InProcessRow> = self.in_process.iter().filter(|r| r.model == model).collect();
            if !rows.is_empty() {
                let _ = writeln!(out, "\nIn-process, `{model}`: inputs/s (median ms per call)\n");
                header(&mut out, &["tokens", "batch"], &dtypes);
                let mut cells: Vec<(usize, usize)> = rows.iter().map(|r| (r.length, r.batch)).collect();
                cells.sort_unstable();
                cells.dedup();
                for (length, batch) in cells {
                    // What the model was fed: the length asked, or its window.
                    let fed = rows
                        .iter()
                        .find(|r| r.length == length)
                        .map_or(length, |r| r.tokens_per_input.round() as usize);
                    let tokens = if fed < length { format!("{fed} (window)") } else { length.to_string() };
                    let _ = write!(out, "| {tokens} | {batch} |");
                    for dtype in &dtypes {
                        let cell = rows.iter().find(|r| r.dtype == *dtype && r.length == length && r.batch == batch);
                        let _ = match cell {
                            Some(r) => write!(out, " {} ({} ms) |", significant(r.items_per_s), significant(r.p50_ms)),
                            None => write!(out, " — |"),
                        };
                    }
                    out.push('\n');
                }
            }
            if let Some(t) = self.tokenize.iter().find(|r| r.model == model) {
                let _ = writeln!(
                    out,
                    "\nTokenizer pool, `{model}`: {} sentences/s ({} tokens/s) on {} threads",
                    significant(t.sentences_per_s),
                    significant(t.tokens_per_s),
                    t.workers
                );
            }
            let rows: Vec<&HttpRow> = self.http.iter().filter(|r| r.model == model).collect();
            if let Some(first) = rows.first() {
                let _ = writeln!(
                    out,
                    "\nHTTP, `{model}`, {} sentences per request: inputs/s (latency p50 / p99 ms)\n",
                    first.request_size
                );
                header(&mut out, &["concurrency"], &dtypes);
                let mut levels: Vec<usize> = rows.iter().map(|r| r.concurrency).collect();
                levels.sort_unstable();
                levels.dedup();
                for c in levels {
                    let _ = write!(out, "| {c} |");
                    for dtype in &dtypes {
                        let _ = match rows.iter().find(|r| r.dtype == *dtype && r.concurrency == c) {
                            Some(r) if r.errors > 0 => write!(
                                out,
                                " {} of {} failed: {} |",
                                r.errors,
                                r.errors + r.requests,
                                one_line(r.first_error.as_deref().unwrap_or(""))
                            ),
                            Some(r) => write!(
                                out,
                                " {} ({} / {} ms) |",
                                significant(r.items_per_s),
                                significant(r.p50_ms),
                                significant(r.p99_ms)
                            ),
                            None => write!(out, " — |"),
                        };
                    }
                    out.push('\n');
                }
            }
        }
        out
    }
}

fn header(out: &mut String, first: &[&str], dtypes: &[&str]) {
    let _ = writeln!(out, "| {} | {} |", first.join(" | "), dtypes.join(" | "));
    let _ = writeln!(out, "|{}{}", "---:|".repeat(first.len()), "---:|".repeat(dtypes.len()));
}

/// Text for a table cell: one line, no column separators.
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ").replace('|', "/")
}

/// A measurement to three significant digits (whole numbers from 100 up).
pub fn significant(x: f64) -> String {
    let a = x.abs();
    if !x.is_finite() {
        "—".into()
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}
