//! Everything computed after the model, in one place: prompts, the `dimensions` cut and its re-normalization,
//! output quantization, sparse and ColBERT outputs, rerank scores (sigmoid or raw, MaxSim) and classifier
//! labels. The HTTP dialects and the Python package map their own field names onto [`EmbedSpec`] and read the
//! typed results; none of them does model math.

use aleph_models::pooling::l2_normalize;
use aleph_models::quantize::EmbeddingDtype;
use aleph_models::tokenizer::Truncation;
use aleph_models::{OutputKind, Task};

use crate::error::EngineError;
use crate::handle::{Input, ModelHandle, RunOptions, RunResult};

/// What an embedding request wants back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmbedSpec {
    /// A prompt of the model's (`prompts` in its sentence-transformers config) put before each text; else
    /// `--default-prompt-name`'s, if any.
    pub prompt_name: Option<String>,
    /// Keep the first `dimensions` of each vector (re-normalized where the model normalizes); `None` keeps
    /// `--truncate-dim`'s, else all.
    pub dimensions: Option<usize>,
    /// The dense embedding ([`OutputKind::Default`]), the sparse weights, the ColBERT vectors or every token's
    /// state ([`OutputKind::Tokens`], as rows).
    pub output: OutputKind,
    /// How inputs past the window are cut (from the end by default), or refused.
    pub truncation: Truncation,
    /// Whether dense vectors come back unit length: as the model makes them (the default), always, or never.
    pub normalize: Normalization,
    /// Float32 vectors whatever the server's `--embedding-dtype` (Cohere quantizes each of its
    /// `embedding_types` from them with [`ModelHandle::quantize_as`]).
    pub float32: bool,
    /// The task whose adapter the texts run with (jina-embeddings-v3's `retrieval.query`, ...); its prompt
    /// goes before each text unless `prompt_name` names another, as the model card's
    /// `encode(task=t, prompt_name=t)` does.
    pub task: Option<String>,
}

/// Whether a dense embedding is L2-normalized (after the `dimensions` cut).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Normalization {
    /// As the model's own modules make it (sentence-transformers' `Normalize`), re-normalized after a cut.
    #[default]
    AsModel,
    /// Always (TEI's `normalize: true`): from the raw pooled vector where the model gives one.
    Always,
    /// Never (TEI's `normalize: false`): the raw pooled vector; a model that returns only normalized vectors
    /// refuses it.
    Never,
}

/// One input's embedding.
#[derive(Debug, Clone, PartialEq)]
pub enum Embedding {
    /// A vector, cut, re-normalized and quantized as asked (quantized values are whole numbers in f32).
    Dense(Vec<f32>),
    /// Vocabulary weights: the non-zero ones, by token id.
    Sparse(Vec<(u32, f32)>),
    /// One vector per token (a ColBERT checkpoint's output, or BGE-M3's ColBERT head).
    Multi(Vec<Vec<f32>>),
}

/// Embeddings in input order, with what they cost.
#[derive(Debug, Clone)]
pub struct Embedded {
    pub embeddings: Vec<Embedding>,
    pub run: RunResult,
}

/// One label's score.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelScore {
    pub label: String,
    pub score: f32,
}

impl ModelHandle {
    /// The dimensions a request asking for `requested` gets: the request's, else `--truncate-dim`'s, else all
    /// (0 counts as none). `Err` names the valid range.
    pub fn embedding_dimensions(&self, requested: Option<i64>) -> Result<usize, String> {
        let dim = self.info().dim;
        match requested.filter(|&d| d != 0).or(self.default_dimensions().map(|d| d as i64)) {
            None => Ok(dim),
            Some(d) if d >= 1 && d as u64 <= dim as u64 => Ok(d as usize),
            Some(d) => Err(format!("dimensions={d} is not in a valid range: select between 1 and {dim}")),
        }
    }

    /// The adapter a request naming `task` runs with, or why it cannot.
    pub fn adapter(&self, task: Option<&str>) -> Result<Option<u16>, EngineError> {
        let Some(task) = task else {
            return Ok(None);
        };
        let adapters = &self.info().adapters;
        if adapters.is_empty() {
            return Err(EngineError::InvalidInput(format!(
                "model `{}` has no task adapters: `task` selects one of jina-embeddings-v3's",
                self.name()
            )));
        }
        match adapters.iter().position(|a| a == task) {
            Some(i) => Ok(Some(i as u16)),
            None => Err(EngineError::InvalidInput(format!(
                "task `{task}` is not one of model `{}`'s: {}",
                self.name(),
                adapters.join(", ")
            ))),
        }
    }

    /// The texts with the prompt `spec` names (or the model's default one) before each.
    pub fn with_prompt(&self, inputs: Vec<Input>, prompt_name: Option<&str>) -> Result<Vec<Input>, EngineError> {
        let prompt = self.prompt(prompt_name).map_err(EngineError::InvalidInput)?;
        Ok(match prompt {
            None => inputs,
            Some(p) => inputs
                .into_iter()
                .map(|i| match i {
                    Input::Text(t) => Input::Text(format!("{p}{t}")),
                    other => other,
                })
                .collect(),
        })
    }

    /// Embeds `inputs` (texts get the prompt; images and audio do not) as `spec` asks.
    pub async fn embed(&self, inputs: Vec<Input>, spec: &EmbedSpec) -> Result<Embedded, EngineError> {
        let info = self.info();
        let dims = self.embedding_dimensions(spec.dimensions.map(|d| d as i64)).map_err(EngineError::Unsupported)?;
        if info.task != Task::Embed && info.task != Task::MultiVector {
            return Err(EngineError::Unsupported(format!("model `{}` does not embed", self.name())));
        }
        let kind = match spec.output {
            // A ColBERT checkpoint's own output is its token vectors.
            OutputKind::MultiVector if info.task == Task::MultiVector => OutputKind::Default,
            // Normalized here, after the cut: the raw pooled vector where the model gives one.
            OutputKind::Default if spec.normalize != Normalization::AsModel && info.token_outputs => {
                OutputKind::Unnormalized
            }
            other => other,
        };
        if spec.normalize == Normalization::Never && kind == OutputKind::Default && info.normalize {
            return Err(EngineError::Unsupported(format!(
                "model `{}` returns normalized vectors only; send normalize: true",
                self.name()
            )));
        }
        let adapter = self.adapter(spec.task.as_deref())?;
        let task_prompt = spec.task.as_deref().filter(|t| info.prompts.get(t).is_ok());
        let inputs = self.with_prompt(inputs, spec.prompt_name.as_deref().or(task_prompt))?;
        let run = self.run_with(inputs, RunOptions { output: kind, truncation: spec.truncation, adapter }).await?;
        // Token states (`OutputKind::Tokens`) come as rows like ColBERT's, never normalized.
        let tokens = kind == OutputKind::Tokens;
        let multi = info.task == Task::MultiVector || kind == OutputKind::MultiVector || tokens;
        let dim = if kind == OutputKind::MultiVector { info.colbert_dim.unwrap_or(0) } else { info.dim };
        let dtype = if spec.float32 { EmbeddingDtype::Float32 } else { self.config().embedding_dtype };
        // A cut unit vector is no longer unit: rescale it, as OpenAI, TEI and sentence-transformers do, so dot
        // products still rank by cosine. Quantized outputs keep the cut values, which the calibrated ranges were
        // measured on.
        let renormalize = match spec.normalize {
            Normalization::AsModel => {
                !tokens && dims < dim && (multi || info.normalize) && dtype == EmbeddingDtype::Float32
            }
            Normalization::Always => !tokens && kind != OutputKind::Sparse,
            Normalization::Never => false,
        };
        let cut = |v: &[f32]| {
            let mut v = v[..dims.min(v.len())].to_vec();
            if renormalize {
                l2_normalize(&mut v);
            }
            v
        };
        let embeddings = run
            .vectors
            .iter()
            .map(|v| {
                if kind == OutputKind::Sparse {
                    Embedding::Sparse(aleph_models::read_sparse_pairs(v).collect())
                } else if multi {
                    // `dimensions` cuts each token's vector (Infinity cuts the token list).
                    Embedding::Multi(v.chunks_exact(dim.max(1)).map(cut).collect())
                } else if dtype == EmbeddingDtype::Float32 {
                    Embedding::Dense(cut(v))
                } else {
                    // Cut to the requested dimensions first, then quantize: `dimensions` counts dimensions
                    // whatever the output type.
                    Embedding::Dense(self.quantize(&cut(v)))
                }
            })
            .collect();
        Ok(Embedded { embeddings, run })
    }

    /// How relevant each document is to `query`: a cross-encoder's (or LLM reranker's, with `instruction` in
    /// its prompt) logit, squashed by a sigmoid unless `raw_scores`; for a ColBERT model, MaxSim over the
    /// query's tokens, averaged over them unless `raw_scores`. In document order.
    pub async fn relevance(
        &self,
        query: &str,
        documents: &[String],
        instruction: Option<&str>,
        raw_scores: bool,
        opts: RunOptions,
    ) -> Result<(Vec<f32>, RunResult), EngineError> {
        let late_interaction = self.info().task == Task::MultiVector;
        if instruction.is_some() && !self.info().takes_instruction {
            return Err(EngineError::InvalidInput(
                "`instruction` is for LLM rerankers (Qwen3-Reranker); this model has no prompt to put it in".into(),
            ));
        }
        let inputs = if late_interaction {
            // Query and documents are embedded alone (they batch with other requests) and scored by MaxSim.
            std::iter::once(query)
                .chain(documents.iter().map(String::as_str))
                .map(|t| Input::Text(t.to_string()))
                .collect()
        } else {
            let pair = |d: &String| match instruction {
                Some(i) => Input::InstructedPair { query: query.into(), document: d.clone(), instruction: i.into() },
                None => Input::Pair(query.to_string(), d.clone()),
            };
            documents.iter().map(pair).collect()
        };
        let out = self.run_with(inputs, opts).await?;
        let scores: Vec<f32> = if late_interaction {
            let dim = self.info().dim;
            let q = out.vectors.first().map(Vec::as_slice).unwrap_or_default();
            let query_tokens = (q.len() / dim.max(1)).max(1) as f32;
            out.vectors
                .iter()
                .skip(1)
                .map(|d| {
                    let s = maxsim(q, d, dim);
                    if raw_scores {
                        s
                    } else {
                        s / query_tokens
                    }
                })
                .collect()
        } else {
            out.vectors
                .iter()
                .map(|logits| {
                    let logit = logits.first().copied().unwrap_or(f32::NAN);
                    if raw_scores {
                        logit
                    } else {
                        sigmoid(logit)
                    }
                })
                .collect()
        };
        Ok((scores, out))
    }

    /// A score for each `(left, right)` pair, as the model scores: a cross-encoder's logit (through a sigmoid
    /// unless `raw_scores`), an embedder's cosine of the two embeddings, or a ColBERT model's MaxSim (the sum
    /// over the left side's tokens, as vLLM's `/score` has it). Each distinct text is embedded once.
    pub async fn score_pairs(
        &self,
        pairs: &[(String, String)],
        raw_scores: bool,
    ) -> Result<(Vec<f32>, RunResult), EngineError> {
        let info = self.info();
        let cross_encoder = self.info().capabilities().contains(&"rerank") && info.task != Task::MultiVector;
        if cross_encoder {
            let inputs = pairs.iter().map(|(a, b)| Input::Pair(a.clone(), b.clone())).collect();
            let out = self.run_with(inputs, RunOptions::default()).await?;
            let scores = out
                .vectors
                .iter()
                .map(|l| {
                    let logit = l.first().copied().unwrap_or(f32::NAN);
                    if raw_scores {
                        logit
                    } else {
                        sigmoid(logit)
                    }
                })
                .collect();
            return Ok((scores, out));
        }
        if info.task != Task::Embed && info.task != Task::MultiVector {
            return Err(EngineError::Unsupported(format!(
                "model `{}` scores no pairs: it is neither a cross-encoder (one label) nor an embedder",
                self.name()
            )));
        }
        let mut texts: Vec<String> = Vec::new();
        let mut at = std::collections::HashMap::new();
        let mut index = |t: &String| -> usize {
            *at.entry(t.clone()).or_insert_with(|| {
                texts.push(t.clone());
                texts.len() - 1
            })
        };
        let ids: Vec<(usize, usize)> = pairs.iter().map(|(a, b)| (index(a), index(b))).collect();
        let out = self.run_with(texts.into_iter().map(Input::Text).collect(), RunOptions::default()).await?;
        let v = &out.vectors;
        let scores = ids
            .iter()
            .map(
                |&(a, b)| {
                    if info.task == Task::MultiVector {
                        maxsim(&v[a], &v[b], info.dim)
                    } else {
                        cosine(&v[a], &v[b])
                    }
                },
            )
            .collect();
        Ok((scores, out))
    }

    /// Each text's labels, best first: softmax over the logits (a sigmoid each for multi-label models), or the
    /// logits themselves with `raw_scores`.
    pub async fn classify(
        &self,
        texts: Vec<String>,
        raw_scores: bool,
    ) -> Result<(Vec<Vec<LabelScore>>, RunResult), EngineError> {
        let Task::Classify { labels, multi_label } = &self.info().task else {
            return Err(EngineError::Unsupported(format!("model `{}` does not classify", self.name())));
        };
        let out = self.run(texts.into_iter().map(Input::Text).collect()).await?;
        let data = out.vectors.iter().map(|logits| label_scores(logits, labels, *multi_label, raw_scores)).collect();
        Ok((data, out))
    }
}

/// Scores per label, best first: the logits, or their softmax (sigmoid for multi-label models).
pub fn label_scores(logits: &[f32], labels: &[String], multi_label: bool, raw: bool) -> Vec<LabelScore> {
    let mut out: Vec<LabelScore> = scores(logits, multi_label, raw)
        .into_iter()
        .zip(labels)
        .map(|(score, label)| LabelScore { score, label: label.clone() })
        .collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score));
    out
}

/// Scores in label order: the logits, or their softmax (sigmoid each when `sigmoid_each`).
pub fn scores(logits: &[f32], sigmoid_each: bool, raw: bool) -> Vec<f32> {
    if raw {
        logits.to_vec()
    } else if sigmoid_each {
        logits.iter().map(|&x| sigmoid(x)).collect()
    } else {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let exps: Vec<f32> = logits.iter().map(|&x| (x - max).exp()).collect();
        let sum: f32 = exps.iter().sum();
        exps.iter().map(|e| e / sum).collect()
    }
}

/// ColBERT's late interaction: for each query token its best dot product over the document's tokens, summed.
pub fn maxsim(query: &[f32], doc: &[f32], dim: usize) -> f32 {
    query
        .chunks_exact(dim.max(1))
        .map(|q| {
            doc.chunks_exact(dim.max(1))
                .map(|d| q.iter().zip(d).map(|(a, b)| a * b).sum::<f32>())
                .fold(f32::NEG_INFINITY, f32::max)
        })
        .filter(|m| m.is_finite())
        .sum()
}

/// The cosine of two vectors (0 where either is all zeros), summed in f64 so long vectors keep f32's precision.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let norm = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let n = norm(a) * norm(b);
    if n > 0.0 {
        (dot / n) as f32
    } else {
        0.0
    }
}

pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> Vec<String> {
        vec!["a".into(), "b".into(), "c".into()]
    }

    #[test]
    fn softmax_sorted() {
        let out = label_scores(&[0.0, 2.0, 1.0], &labels(), false, false);
        assert_eq!(out.iter().map(|l| l.label.as_str()).collect::<Vec<_>>(), vec!["b", "c", "a"]);
        let total: f32 = out.iter().map(|l| l.score).sum();
        assert!((total - 1.0).abs() < 1e-6);
    }

    #[test]
    fn sigmoid_and_raw() {
        let out = label_scores(&[0.0, 2.0, -1.0], &labels(), true, false);
        assert!((out[2].score - sigmoid(-1.0)).abs() < 1e-7);
        assert_eq!(out[0].score, sigmoid(2.0));
        let raw = label_scores(&[0.0, 2.0, -1.0], &labels(), false, true);
        assert_eq!(raw.iter().map(|l| l.score).collect::<Vec<_>>(), vec![2.0, 0.0, -1.0]);
    }

    #[test]
    fn cosine_is_scale_free_and_zero_for_a_zero_vector() {
        assert!((cosine(&[1.0, 0.0], &[3.0, 3.0]) - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 2.0]), 0.0);
    }

    #[test]
    fn maxsim_takes_each_query_tokens_best_match() {
        // Query tokens (1,0) and (0,1); document tokens (0.5,0.5) and (1,0): best matches 1 and 0.5.
        assert_eq!(maxsim(&[1.0, 0.0, 0.0, 1.0], &[0.5, 0.5, 1.0, 0.0], 2), 1.5);
    }
}
