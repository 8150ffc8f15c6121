//! A backend that computes with another and records, per linear layer, the largest magnitude each
//! input channel reached. int8 smoothing (SmoothQuant) is calibrated by running any family on it: the
//! family's code does not know it is being measured.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

use candle_core::Tensor;

use super::{Activation, AttentionSpec, Norm, Ops, Post, ScoreBias};
use crate::error::ModelError;
use crate::loader::{Compute, MappedMatrix};

pub struct Recording<O: Ops> {
    inner: O,
    maxima: Mutex<HashMap<String, Vec<f32>>>,
}

impl<O: Ops> Recording<O> {
    pub fn new(inner: O) -> Self {
        Recording { inner, maxima: Mutex::new(HashMap::new()) }
    }

    /// Per layer name, the per-channel input maxima seen so far.
    pub fn into_maxima(self) -> HashMap<String, Vec<f32>> {
        self.maxima.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn record(&self, name: &str, x: &O::T) -> Result<(), ModelError> {
        let cols = self.inner.dims(x).1;
        let rows = self.inner.host(x)?;
        let mut maxima = self.maxima.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let max = maxima.entry(name.to_string()).or_insert_with(|| vec![0.0; cols]);
        if max.len() != cols {
            return Err(ModelError::Forward(format!("layer `{name}` saw inputs of two widths")));
        }
        for row in rows.chunks_exact(cols.max(1)) {
            for (m, v) in max.iter_mut().zip(row) {
                *m = m.max(v.abs());
            }
        }
        Ok(())
    }
}

impl<O: Ops> Ops for Recording<O> {
    type T = O::T;
    type Linear = (O::Linear, String);
    type Param = O::Param;
    type Table = O::Table;
    type Seqs = O::Seqs;

    fn compute(&self) -> Compute {
        self.inner.compute()
    }

    fn linear(&self, w: Tensor, b: Option<Tensor>, name: &str) -> Result<Self::Linear, ModelError> {
        Ok((self.inner.linear(w, b, name)?, name.to_string()))
    }

    fn param(&self, t: Tensor) -> Result<O::Param, ModelError> {
        self.inner.param(t)
    }

    fn table(&self, t: Tensor) -> Result<O::Table, ModelError> {
        self.inner.table(t)
    }

    fn mapped_table(&self, m: &MappedMatrix) -> Option<O::Table> {
        self.inner.mapped_table(m)
    }

    fn linear_bytes(&self, l: &Self::Linear) -> usize {
        self.inner.linear_bytes(&l.0)
    }

    fn param_bytes(&self, p: &O::Param) -> usize {
        self.inner.param_bytes(p)
    }

    fn table_bytes(&self, t: &O::Table) -> usize {
        self.inner.table_bytes(t)
    }

    fn empty(&self) -> Result<O::T, ModelError> {
        self.inner.empty()
    }

    fn dims(&self, x: &O::T) -> (usize, usize) {
        self.inner.dims(x)
    }

    fn upload(&self, rows: usize, cols: usize, data: Vec<f32>) -> Result<O::T, ModelError> {
        self.inner.upload(rows, cols, data)
    }

    fn host<'a>(&self, x: &'a O::T) -> Result<Cow<'a, [f32]>, ModelError> {
        self.inner.host(x)
    }

    fn download(&self, x: O::T) -> Result<Vec<f32>, ModelError> {
        self.inner.download(x)
    }

    fn seqs(&self, cu_seqlens: &[usize]) -> Result<O::Seqs, ModelError> {
        self.inner.seqs(cu_seqlens)
    }

    fn embed(&self, out: &mut O::T, width: usize, tables: &[(&O::Table, &[u32])]) -> Result<(), ModelError> {
        self.inner.embed(out, width, tables)
    }

    fn linear_fwd(&self, x: &O::T, l: &Self::Linear, post: Post<'_, O::T>, out: &mut O::T) -> Result<(), ModelError> {
        self.record(&l.1, x)?;
        self.inner.linear_fwd(x, &l.0, post, out)
    }

    fn activate(&self, x: &mut O::T, act: Activation) -> Result<(), ModelError> {
        self.inner.activate(x, act)
    }

    fn add_rows(&self, x: &mut O::T, table: &O::Table, ids: &[u32]) -> Result<(), ModelError> {
        self.inner.add_rows(x, table, ids)
    }

    fn gather_rows(&self, out: &mut O::T, parts: &[&O::T], rows: &[(u32, u32)]) -> Result<(), ModelError> {
        self.inner.gather_rows(out, parts, rows)
    }

    fn norm_to(&self, x: &O::T, n: &Norm<O::Param>, out: &mut O::T) -> Result<(), ModelError> {
        self.inner.norm_to(x, n, out)
    }

    fn norm(&self, x: &mut O::T, n: &Norm<O::Param>) -> Result<(), ModelError> {
        self.inner.norm(x, n)
    }

    fn add_norm(&self, x: &mut O::T, n: &Norm<O::Param>, acc: &mut O::T) -> Result<(), ModelError> {
        self.inner.add_norm(x, n, acc)
    }

    fn glu(&self, x: &O::T, act: Activation, out: &mut O::T) -> Result<(), ModelError> {
        self.inner.glu(x, act, out)
    }

    fn rotary(&self, qkv: &mut O::T, spec: &AttentionSpec, cos: &O::T, sin: &O::T) -> Result<(), ModelError> {
        self.inner.rotary(qkv, spec, cos, sin)
    }

    fn head_norm(
        &self,
        qkv: &mut O::T,
        spec: &AttentionSpec,
        q: &Norm<O::Param>,
        k: &Norm<O::Param>,
    ) -> Result<(), ModelError> {
        self.inner.head_norm(qkv, spec, q, k)
    }

    fn reshape(&self, x: &mut O::T, rows: usize, cols: usize) -> Result<(), ModelError> {
        self.inner.reshape(x, rows, cols)
    }

    fn attention(
        &self,
        qkv: &O::T,
        seqs: &O::Seqs,
        spec: &AttentionSpec,
        bias: ScoreBias<'_, O::Param>,
        out: &mut O::T,
    ) -> Result<(), ModelError> {
        self.inner.attention(qkv, seqs, spec, bias, out)
    }

    fn pooled_attention(
        &self,
        q: &O::T,
        kv: &O::T,
        seqs: &O::Seqs,
        spec: &AttentionSpec,
        out: &mut O::T,
    ) -> Result<(), ModelError> {
        self.inner.pooled_attention(q, kv, seqs, spec, out)
    }

    fn window_attention(
        &self,
        qkv: &O::T,
        n: usize,
        spec: &AttentionSpec,
        bias: &O::Param,
        groups: Option<&[u32]>,
        out: &mut O::T,
    ) -> Result<(), ModelError> {
        self.inner.window_attention(qkv, n, spec, bias, groups, out)
    }
}
