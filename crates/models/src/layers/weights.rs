//! Reading a checkpoint's tensors into a backend: every family spells each tensor name once, here,
//! and the backend prepares what it reads (packs, quantizes, uploads). The bytes prepared are counted
//! for `ModelInfo::weight_bytes`.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use candle_core::Tensor;
use candle_nn::VarBuilder;

use crate::backend::{Norm, NormKind, Ops};
use crate::error::{weights, ModelError};
use crate::loader::MappedTensors;

pub struct Weights<'a, O: Ops> {
    vb: VarBuilder<'a>,
    /// The same files memory-mapped, where tables can be read in place (safetensors).
    mapped: Option<Arc<MappedTensors>>,
    ops: &'a O,
    bytes: Rc<Cell<usize>>,
}

impl<O: Ops> Clone for Weights<'_, O> {
    fn clone(&self) -> Self {
        Weights { vb: self.vb.clone(), mapped: self.mapped.clone(), ops: self.ops, bytes: Rc::clone(&self.bytes) }
    }
}

impl<'a, O: Ops> Weights<'a, O> {
    pub fn new(vb: VarBuilder<'a>, ops: &'a O) -> Self {
        Weights { vb, mapped: None, ops, bytes: Rc::new(Cell::new(0)) }
    }

    /// Lets the backend read embedding tables in place from `mapped`, the files `vb` reads.
    pub fn with_mapped(mut self, mapped: Option<Arc<MappedTensors>>) -> Self {
        self.mapped = mapped;
        self
    }

    /// The same checkpoint under `name.` (the byte count is shared).
    pub fn pp(&self, name: impl ToString) -> Self {
        Weights { vb: self.vb.pp(name), mapped: self.mapped.clone(), ops: self.ops, bytes: Rc::clone(&self.bytes) }
    }

    pub fn ops(&self) -> &'a O {
        self.ops
    }

    /// The candle var builder at this prefix, for families that read raw tensors.
    pub fn vb(&self) -> &VarBuilder<'a> {
        &self.vb
    }

    pub fn contains(&self, name: &str) -> bool {
        self.vb.contains_tensor(name)
    }

    /// Bytes prepared so far, over every prefix of this checkpoint.
    pub fn bytes(&self) -> usize {
        self.bytes.get()
    }

    fn count(&self, n: usize) {
        self.bytes.set(self.bytes.get() + n);
    }

    fn get(&self, shape: impl Into<candle_core::Shape>, name: &str) -> Result<Tensor, ModelError> {
        self.vb.get(shape, name).map_err(weights)
    }

    /// `weight` `[out, inp]` and, with `bias`, `bias` `[out]`.
    pub fn linear(&self, inp: usize, out: usize, bias: bool) -> Result<O::Linear, ModelError> {
        let w = self.get((out, inp), "weight")?;
        let b = if bias { Some(self.get(out, "bias")?) } else { None };
        let l = self.ops.linear(w, b, self.vb.prefix().as_str())?;
        self.count(self.ops.linear_bytes(&l));
        Ok(l)
    }

    /// A linear layer from tensors the family read and reshaped itself (a patch convolution as `[out, c·p·p]`),
    /// named by this prefix.
    pub fn linear_from(&self, w: Tensor, b: Option<Tensor>) -> Result<O::Linear, ModelError> {
        let l = self.ops.linear(w, b, self.vb.prefix().as_str())?;
        self.count(self.ops.linear_bytes(&l));
        Ok(l)
    }

    /// Several linear layers over the same input as one wider layer (their outputs side by side, in
    /// order): query, key and value as one GEMM.
    pub fn linear_cat(&self, parts: &[(&str, usize)], inp: usize, bias: bool) -> Result<O::Linear, ModelError> {
        let mut ws = Vec::with_capacity(parts.len());
        let mut bs = Vec::with_capacity(parts.len());
        for &(name, out) in parts {
            let part = self.vb.pp(name);
            ws.push(part.get((out, inp), "weight").map_err(weights)?);
            if bias {
                bs.push(part.get(out, "bias").map_err(weights)?);
            }
        }
        let w = Tensor::cat(&ws, 0).map_err(weights)?;
        let b = if bias { Some(Tensor::cat(&bs, 0).map_err(weights)?) } else { None };
        let names: Vec<&str> = parts.iter().map(|p| p.0).collect();
        let l = self.ops.linear(w, b, &format!("{}.{}", self.vb.prefix(), names.join("+")))?;
        self.count(self.ops.linear_bytes(&l));
        Ok(l)
    }

    /// A layer norm's `weight` and `bias`.
    pub fn layer_norm(&self, width: usize, eps: f64) -> Result<Norm<O::Param>, ModelError> {
        Ok(Norm {
            kind: NormKind::Layer,
            weight: self.param(width, "weight")?,
            bias: Some(self.param(width, "bias")?),
            eps: eps as f32,
        })
    }

    /// An RMS norm's `weight`; `plus_one` for Gemma's norms, which scale by `1 + weight`.
    pub fn rms_norm(&self, width: usize, eps: f64, plus_one: bool) -> Result<Norm<O::Param>, ModelError> {
        let mut w = self.get(width, "weight")?;
        if plus_one {
            w = (w + 1.0).map_err(weights)?;
        }
        Ok(Norm { kind: NormKind::Rms, weight: self.param_from(w)?, bias: None, eps: eps as f32 })
    }

    /// An embedding table's `weight`, `[rows, cols]`.
    pub fn table(&self, rows: usize, cols: usize) -> Result<O::Table, ModelError> {
        self.scaled_table(rows, cols, 1.0)
    }

    /// An embedding table's `weight` times `scale` (Gemma's √hidden): read in place from the mapped file
    /// where the backend can, else loaded.
    pub fn scaled_table(&self, rows: usize, cols: usize, scale: f32) -> Result<O::Table, ModelError> {
        self.table_at("weight", rows, cols, scale)
    }

    /// The table stored as `leaf` under this prefix (torch's `parametrizations.weight.original`), times
    /// `scale`, read in place where the backend can.
    pub fn table_at(&self, leaf: &str, rows: usize, cols: usize, scale: f32) -> Result<O::Table, ModelError> {
        let name = match self.vb.prefix() {
            p if p.is_empty() => leaf.to_string(),
            p => format!("{p}.{leaf}"),
        };
        if let Some(m) = self.mapped.as_ref().map(|m| m.table(&name, rows, cols)).transpose()?.flatten() {
            if let Some(t) = self.ops.mapped_table(&m.scaled(scale)) {
                self.count(self.ops.table_bytes(&t));
                return Ok(t);
            }
        }
        let mut t = self.get((rows, cols), leaf)?;
        if scale != 1.0 {
            t = (t * scale as f64).map_err(weights)?;
        }
        self.table_from(t)
    }

    /// A table the family computed at load (SigLIP's probe query) or read under another shape.
    pub fn table_from(&self, t: Tensor) -> Result<O::Table, ModelError> {
        let t = self.ops.table(t)?;
        self.count(self.ops.table_bytes(&t));
        Ok(t)
    }

    /// A parameter the family computed at load (SigLIP's probe query).
    pub fn param_from(&self, t: Tensor) -> Result<O::Param, ModelError> {
        let p = self.ops.param(t)?;
        self.count(self.ops.param_bytes(&p));
        Ok(p)
    }

    /// A tensor stored as `stored`, kept as a table of `shape` (same element count): a class token `[h]` as
    /// a one-row table.
    pub fn table_as(
        &self,
        stored: impl Into<candle_core::Shape>,
        name: &str,
        shape: impl Into<candle_core::Shape>,
    ) -> Result<O::Table, ModelError> {
        let t = self.get(stored, name)?.reshape(shape).map_err(weights)?;
        self.table_from(t)
    }

    pub fn param(&self, shape: impl Into<candle_core::Shape>, name: &str) -> Result<O::Param, ModelError> {
        let p = self.ops.param(self.get(shape, name)?)?;
        self.count(self.ops.param_bytes(&p));
        Ok(p)
    }
}
