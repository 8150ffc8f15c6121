//! Aleph's CPU kernels as a backend: activations are host matrices, linear layers packed f32 or int8
//! (optionally smoothed against calibrated input magnitudes), attention per (sequence, head) over the
//! packed batch, with no padding anywhere.

use std::borrow::Cow;
use std::collections::HashMap;

use candle_core::Tensor;

use super::{Activation, AttentionSpec, Norm, NormKind, Ops, Post, ScoreBias};
use crate::cpu::gemm::{gemm, Epilogue, MatRef};
use crate::cpu::layers::{attention, host, layer_norm_rows, with_scratch, Dense, Scratch, WeightFormat};
use crate::cpu::{ops, Isa};
use crate::error::{weights, ModelError};
use crate::loader::{Compute, MappedMatrix};

/// Shortest longest-sequence of a batch whose attention runs in bf16 under bf16 and int8 weights: below it
/// the products are too small to repay rounding the keys and values. MiniLM int8, 32 sequences: at 16 and 48
/// tokens the forward pass was 12-15 % faster with f32 attention, at 64-200 the two were even, at 4,096 bf16
/// was 1.6× (BENCHMARKS).
const BF16_ATTENTION_FROM: usize = 64;

/// How much of an activation outlier moves into the weight (SmoothQuant's α).
pub const SMOOTH_ALPHA: f32 = 0.5;

/// The CPU backend: f32, int8 or bf16 linear layers.
pub struct Cpu {
    isa: Isa,
    format: WeightFormat,
    /// Per linear layer (by name), its inputs' largest magnitude per channel, from a calibration run.
    smoothing: HashMap<String, Vec<f32>>,
}

impl Cpu {
    pub fn f32() -> Self {
        Cpu { isa: Isa::get(), format: WeightFormat::F32, smoothing: HashMap::new() }
    }

    /// bf16 weights (half the bytes), multiplied on AMX tiles or with AVX512-BF16 where the CPU has them, as
    /// are attention's scores and weighted values then.
    pub fn bf16() -> Self {
        Cpu { isa: Isa::get(), format: WeightFormat::Bf16, smoothing: HashMap::new() }
    }

    /// int8 weights with dynamically quantized activations; layers named in `smoothing` are smoothed
    /// (SmoothQuant) against the magnitudes recorded for them. Attention multiplies in bf16 where that is fast.
    pub fn int8(smoothing: HashMap<String, Vec<f32>>) -> Self {
        Cpu { isa: Isa::get(), format: WeightFormat::Int8, smoothing }
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }
}

/// Runs `f` on each `width`-wide row, on the compute pool when there are many.
fn rows_in_parallel(x: &mut [f32], width: usize, f: impl Fn(&mut [f32]) + Send + Sync) {
    if width == 0 {
        return;
    }
    if x.len() / width >= 64 {
        use rayon::prelude::*;
        crate::cpu::parallel(|| x.par_chunks_mut(width).for_each(&f));
    } else {
        x.chunks_mut(width).for_each(f);
    }
}

/// A row-major host matrix.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Mat {
    pub data: Vec<f32>,
    pub rows: usize,
    pub cols: usize,
}

impl Mat {
    /// Sets the shape, keeping the buffer (and its capacity) where it can.
    fn reshape_for(&mut self, rows: usize, cols: usize) {
        self.data.resize(rows * cols, 0.0);
        self.rows = rows;
        self.cols = cols;
    }

    fn as_ref(&self) -> MatRef<'_> {
        MatRef { data: &self.data, rows: self.rows, cols: self.cols, ld: self.cols }
    }
}

/// An embedding table: held as f32, or read in place from the mapped checkpoint (a decoder's 150k-row
/// vocabulary costs no memory beyond the pages of the rows a workload touches).
pub enum Table {
    Held { data: Vec<f32>, cols: usize },
    Mapped(MappedMatrix),
}

impl Table {
    fn check(&self, ids: &[u32], width: usize) -> Result<(), ModelError> {
        let (rows, cols) = match self {
            Table::Held { data, cols } => (data.len() / (*cols).max(1), *cols),
            Table::Mapped(m) => (m.rows(), m.cols()),
        };
        if cols != width {
            return Err(ModelError::Forward(format!("a {cols}-wide table read as {width}-wide")));
        }
        match ids.iter().find(|&&id| id as usize >= rows) {
            Some(id) => Err(ModelError::Forward(format!("id {id} is outside an embedding table"))),
            None => Ok(()),
        }
    }

    /// Writes row `r` into `dst`, or adds it with `add`.
    fn row_into(&self, r: usize, dst: &mut [f32], add: bool) -> Result<(), ModelError> {
        match self {
            Table::Held { data, cols } => {
                let src = &data[r * cols..][..*cols];
                if add {
                    ops::add_assign(dst, src);
                } else {
                    dst.copy_from_slice(src);
                }
                Ok(())
            }
            Table::Mapped(m) => m.row_into(r, dst, add),
        }
    }
}

impl Ops for Cpu {
    type T = Mat;
    type Linear = Dense;
    type Param = Vec<f32>;
    type Table = Table;
    type Seqs = Vec<usize>;

    fn compute(&self) -> Compute {
        Compute::AlephCpu
    }

    fn linear(&self, w: Tensor, b: Option<Tensor>, name: &str) -> Result<Dense, ModelError> {
        let (out, inp) = w.dims2().map_err(weights)?;
        let w = host(w).map_err(weights)?;
        let b = match b {
            Some(b) => host(b).map_err(weights)?,
            None => vec![0.0; out],
        };
        Ok(match self.smoothing.get(name) {
            Some(act_max) if self.format == WeightFormat::Int8 => {
                Dense::new_smoothed(&w, b, inp, out, act_max, SMOOTH_ALPHA)
            }
            _ => Dense::new(&w, b, inp, out, self.format),
        })
    }

    fn param(&self, t: Tensor) -> Result<Vec<f32>, ModelError> {
        host(t).map_err(weights)
    }

    fn table(&self, t: Tensor) -> Result<Table, ModelError> {
        let cols = t.dims2().map_err(weights)?.1;
        Ok(Table::Held { data: host(t).map_err(weights)?, cols })
    }

    fn mapped_table(&self, m: &MappedMatrix) -> Option<Table> {
        Some(Table::Mapped(m.clone()))
    }

    fn linear_bytes(&self, l: &Dense) -> usize {
        l.bytes()
    }

    fn param_bytes(&self, p: &Vec<f32>) -> usize {
        4 * p.len()
    }

    fn table_bytes(&self, t: &Table) -> usize {
        match t {
            Table::Held { data, .. } => 4 * data.len(),
            Table::Mapped(_) => 0,
        }
    }

    fn empty(&self) -> Result<Mat, ModelError> {
        Ok(Mat::default())
    }

    fn dims(&self, x: &Mat) -> (usize, usize) {
        (x.rows, x.cols)
    }

    fn upload(&self, rows: usize, cols: usize, data: Vec<f32>) -> Result<Mat, ModelError> {
        if data.len() != rows * cols {
            return Err(ModelError::Forward(format!("{} values for a {rows}x{cols} matrix", data.len())));
        }
        Ok(Mat { data, rows, cols })
    }

    fn host<'a>(&self, x: &'a Mat) -> Result<Cow<'a, [f32]>, ModelError> {
        Ok(Cow::Borrowed(&x.data))
    }

    fn download(&self, x: Mat) -> Result<Vec<f32>, ModelError> {
        Ok(x.data)
    }

    fn seqs(&self, cu_seqlens: &[usize]) -> Result<Vec<usize>, ModelError> {
        Ok(cu_seqlens.to_vec())
    }

    fn embed(&self, out: &mut Mat, width: usize, tables: &[(&Table, &[u32])]) -> Result<(), ModelError> {
        let rows = tables.first().map_or(0, |(_, ids)| ids.len());
        for (table, ids) in tables {
            if ids.len() != rows {
                return Err(ModelError::Forward("embedding id lists differ in length".into()));
            }
            table.check(ids, width)?;
        }
        out.reshape_for(rows, width);
        for (r, row) in out.data.chunks_exact_mut(width.max(1)).enumerate().take(rows) {
            for (k, (table, ids)) in tables.iter().enumerate() {
                table.row_into(ids[r] as usize, row, k > 0)?;
            }
        }
        Ok(())
    }

    fn linear_fwd(&self, x: &Mat, l: &Dense, post: Post<'_, Mat>, out: &mut Mat) -> Result<(), ModelError> {
        out.reshape_for(x.rows, l.out());
        let ld = out.cols;
        match post {
            Post::None => l.forward(x.as_ref(), &mut out.data, ld, Epilogue::Bias(&l.b)),
            Post::Act(a) => {
                l.forward(x.as_ref(), &mut out.data, ld, a.epilogue(&l.b));
                a.finish(self.isa, &mut out.data);
            }
            Post::Residual(r) => {
                if (r.rows, r.cols) != (out.rows, out.cols) {
                    return Err(ModelError::Forward("residual shape differs from the layer's output".into()));
                }
                l.forward(x.as_ref(), &mut out.data, ld, Epilogue::BiasResidual(&l.b, &r.data))
            }
        }
        Ok(())
    }

    fn activate(&self, x: &mut Mat, act: Activation) -> Result<(), ModelError> {
        act.apply_rows(self.isa, &mut x.data);
        Ok(())
    }

    fn add_rows(&self, x: &mut Mat, table: &Table, ids: &[u32]) -> Result<(), ModelError> {
        let w = x.cols;
        if ids.len() != x.rows {
            return Err(ModelError::Forward("one table row per row is needed".into()));
        }
        table.check(ids, w)?;
        for (row, &id) in x.data.chunks_exact_mut(w.max(1)).zip(ids) {
            table.row_into(id as usize, row, true)?;
        }
        Ok(())
    }

    fn gather_rows(&self, out: &mut Mat, parts: &[&Mat], rows: &[(u32, u32)]) -> Result<(), ModelError> {
        let w = parts.first().map_or(0, |p| p.cols);
        if parts.iter().any(|p| p.cols != w) {
            return Err(ModelError::Forward("gathered matrices differ in width".into()));
        }
        if rows.iter().any(|&(p, r)| parts.get(p as usize).is_none_or(|m| r as usize >= m.rows)) {
            return Err(ModelError::Forward("a gathered row is out of range".into()));
        }
        out.reshape_for(rows.len(), w);
        for (dst, &(p, r)) in out.data.chunks_exact_mut(w.max(1)).zip(rows) {
            dst.copy_from_slice(&parts[p as usize].data[r as usize * w..][..w]);
        }
        Ok(())
    }

    fn norm_to(&self, x: &Mat, n: &Norm<Vec<f32>>, out: &mut Mat) -> Result<(), ModelError> {
        out.reshape_for(x.rows, x.cols);
        out.data.copy_from_slice(&x.data);
        self.norm(out, n)
    }

    fn norm(&self, x: &mut Mat, n: &Norm<Vec<f32>>) -> Result<(), ModelError> {
        let w = x.cols;
        if n.weight.len() != w || n.bias.as_ref().is_some_and(|b| b.len() != w) {
            return Err(ModelError::Forward("norm width differs from its input".into()));
        }
        let (isa, eps) = (self.isa, n.eps);
        match (n.kind, &n.bias) {
            (NormKind::Layer, Some(b)) => layer_norm_rows(isa, &mut x.data, &n.weight, b, w, eps),
            (NormKind::Layer, None) => layer_norm_rows(isa, &mut x.data, &n.weight, &vec![0.0; w], w, eps),
            (NormKind::Rms, _) => rows_in_parallel(&mut x.data, w, |row| ops::rms_norm(isa, row, &n.weight, eps)),
        }
        Ok(())
    }

    fn add_norm(&self, x: &mut Mat, n: &Norm<Vec<f32>>, acc: &mut Mat) -> Result<(), ModelError> {
        if (acc.rows, acc.cols) != (x.rows, x.cols) {
            return Err(ModelError::Forward("a residual differs in shape from the block's output".into()));
        }
        self.norm(x, n)?;
        let run = |(dst, src): (&mut [f32], &[f32])| ops::add_assign(dst, src);
        if x.cols > 0 && x.rows >= 64 {
            crate::cpu::parallel(|| {
                use rayon::prelude::*;
                acc.data.par_chunks_mut(x.cols).zip(x.data.par_chunks(x.cols)).for_each(run)
            });
        } else {
            run((&mut acc.data, &x.data));
        }
        Ok(())
    }

    fn glu(&self, x: &Mat, act: Activation, out: &mut Mat) -> Result<(), ModelError> {
        if !x.cols.is_multiple_of(2) {
            return Err(ModelError::Forward("a gated MLP's input has an odd width".into()));
        }
        let half = x.cols / 2;
        out.reshape_for(x.rows, half);
        if half == 0 {
            return Ok(());
        }
        let isa = self.isa;
        let run = |(dst, src): (&mut [f32], &[f32])| {
            dst.copy_from_slice(&src[..half]);
            act.apply_rows(isa, dst);
            ops::mul(isa, dst, &src[half..]);
        };
        crate::cpu::parallel(|| {
            use rayon::prelude::*;
            out.data.par_chunks_mut(half).zip(x.data.par_chunks(x.cols)).for_each(run)
        });
        Ok(())
    }

    fn rotary(&self, qkv: &mut Mat, spec: &AttentionSpec, cos: &Mat, sin: &Mat) -> Result<(), ModelError> {
        let half = spec.head_dim / 2;
        if qkv.cols != spec.qkv_width()
            || (cos.rows, cos.cols) != (qkv.rows, half)
            || (sin.rows, sin.cols) != (qkv.rows, half)
            || spec.head_dim != 2 * half
        {
            return Err(ModelError::Forward("rotary tables do not fit the attention input".into()));
        }
        let (heads, hd, ld) = (spec.heads + spec.kv_heads, spec.head_dim, qkv.cols);
        if ld == 0 {
            return Ok(());
        }
        let rotate = |(r, row): (usize, &mut [f32])| {
            let (c, s) = (&cos.data[r * half..][..half], &sin.data[r * half..][..half]);
            for head in row[..heads * hd].chunks_exact_mut(hd) {
                let (a, b) = head.split_at_mut(half);
                for j in 0..half {
                    let (x, y) = (a[j], b[j]);
                    a[j] = x * c[j] - y * s[j];
                    b[j] = y * c[j] + x * s[j];
                }
            }
        };
        crate::cpu::parallel(|| {
            use rayon::prelude::*;
            qkv.data.par_chunks_mut(ld).enumerate().for_each(rotate)
        });
        Ok(())
    }

    fn head_norm(
        &self,
        qkv: &mut Mat,
        spec: &AttentionSpec,
        q: &Norm<Vec<f32>>,
        k: &Norm<Vec<f32>>,
    ) -> Result<(), ModelError> {
        let hd = spec.head_dim;
        if qkv.cols != spec.qkv_width() || [q, k].iter().any(|n| n.weight.len() != hd || n.kind != NormKind::Rms) {
            return Err(ModelError::Forward("head norms do not fit the attention input".into()));
        }
        let (isa, heads) = (self.isa, spec.heads);
        rows_in_parallel(&mut qkv.data, spec.qkv_width(), |row| {
            let (qs, rest) = row.split_at_mut(heads * hd);
            qs.chunks_exact_mut(hd).for_each(|h| ops::rms_norm(isa, h, &q.weight, q.eps));
            rest[..spec.kv_heads * hd].chunks_exact_mut(hd).for_each(|h| ops::rms_norm(isa, h, &k.weight, k.eps));
        });
        Ok(())
    }

    fn reshape(&self, x: &mut Mat, rows: usize, cols: usize) -> Result<(), ModelError> {
        if rows * cols != x.data.len() {
            return Err(ModelError::Forward(format!("{}x{} cannot be read as {rows}x{cols}", x.rows, x.cols)));
        }
        x.rows = rows;
        x.cols = cols;
        Ok(())
    }

    fn attention(
        &self,
        qkv: &Mat,
        seqs: &Vec<usize>,
        spec: &AttentionSpec,
        bias: ScoreBias<'_, Vec<f32>>,
        out: &mut Mat,
    ) -> Result<(), ModelError> {
        spec.check()?;
        let longest = seqs.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        match &bias {
            ScoreBias::None => {}
            ScoreBias::Relative(b) => b.check(spec.heads, longest)?,
            ScoreBias::Disentangled(d) => d.check(longest, |t| t.len() / spec.out_width())?,
        }
        if qkv.cols != spec.qkv_width() || seqs.last().copied().unwrap_or(0) != qkv.rows {
            return Err(ModelError::Forward("attention input does not fit its layout".into()));
        }
        out.reshape_for(qkv.rows, spec.out_width());
        // Reduced precision stays reduced: under bf16 and int8 weights, attention multiplies in bf16 where that
        // is fast here and the batch has a sequence long enough for its products to outweigh rounding the
        // keys and values (it dominates long inputs); under f32 it stays f32.
        let bf16 = self.format != WeightFormat::F32 && longest >= BF16_ATTENTION_FROM && crate::cpu::bgemm::fast();
        attention(self.isa, &qkv.data, &mut out.data, seqs, spec, bias, bf16);
        Ok(())
    }

    fn pooled_attention(
        &self,
        q: &Mat,
        kv: &Mat,
        seqs: &Vec<usize>,
        spec: &AttentionSpec,
        out: &mut Mat,
    ) -> Result<(), ModelError> {
        spec.check()?;
        let AttentionSpec { heads, kv_heads, head_dim: hd, scale, .. } = *spec;
        let b = seqs.len().saturating_sub(1);
        if q.rows != b || q.cols != heads * hd || kv.cols != 2 * kv_heads * hd || seqs.last() != Some(&kv.rows) {
            return Err(ModelError::Forward("pooled attention inputs do not fit their layout".into()));
        }
        let (group, ld) = (heads / kv_heads, kv.cols);
        out.reshape_for(b, heads * hd);
        let isa = self.isa;
        let job = |(i, dst): (usize, &mut [f32])| {
            let rows = &kv.data[seqs[i] * ld..seqs[i + 1] * ld];
            let mut scores = vec![0f32; seqs[i + 1] - seqs[i]];
            dst.fill(0.0);
            for head in 0..heads {
                let (qh, k0, v0) =
                    (&q.data[i * q.cols + head * hd..][..hd], (head / group) * hd, (kv_heads + head / group) * hd);
                for (s, row) in scores.iter_mut().zip(rows.chunks_exact(ld)) {
                    *s = qh.iter().zip(&row[k0..k0 + hd]).map(|(a, k)| a * k).sum();
                }
                ops::softmax(isa, &mut scores, scale);
                let d = &mut dst[head * hd..(head + 1) * hd];
                for (p, row) in scores.iter().zip(rows.chunks_exact(ld)) {
                    d.iter_mut().zip(&row[v0..v0 + hd]).for_each(|(d, v)| *d += p * v);
                }
            }
        };
        let width = out.cols.max(1);
        crate::cpu::parallel(|| {
            use rayon::prelude::*;
            out.data.par_chunks_mut(width).enumerate().for_each(job)
        });
        Ok(())
    }

    fn window_attention(
        &self,
        qkv: &Mat,
        n: usize,
        spec: &AttentionSpec,
        bias: &Vec<f32>,
        groups: Option<&[u32]>,
        out: &mut Mat,
    ) -> Result<(), ModelError> {
        spec.check()?;
        let AttentionSpec { heads, kv_heads, head_dim: hd, scale, .. } = *spec;
        if n == 0
            || kv_heads != heads
            || qkv.cols != spec.qkv_width()
            || !qkv.rows.is_multiple_of(n)
            || bias.len() != heads * n * n
            || groups.is_some_and(|g| g.len() != qkv.rows)
        {
            return Err(ModelError::Forward("window attention inputs do not fit their layout".into()));
        }
        let (c, ld, isa) = (heads * hd, qkv.cols, self.isa);
        out.reshape_for(qkv.rows, c);
        let attend = |(w, dst): (usize, &mut [f32])| {
            with_scratch(|Scratch { scores, keys, values, .. }| {
                for head in 0..heads {
                    let base = w * n * ld + head * hd;
                    let q = MatRef { data: &qkv.data[base..], rows: n, cols: hd, ld };
                    keys.repack(hd, n, &qkv.data[base + c..], 1, ld);
                    scores.clear();
                    scores.resize(n * n, 0.0);
                    gemm(q, keys, scores, n, Epilogue::None, false);
                    let bias = &bias[head * n * n..(head + 1) * n * n];
                    for (i, row) in scores.chunks_mut(n).enumerate() {
                        for (j, v) in row.iter_mut().enumerate() {
                            *v = *v * scale + bias[i * n + j];
                            if groups.is_some_and(|g| g[w * n + i] != g[w * n + j]) {
                                *v -= 100.0;
                            }
                        }
                        ops::softmax(isa, row, 1.0);
                    }
                    values.repack(n, hd, &qkv.data[base + 2 * c..], ld, 1);
                    let pm = MatRef { data: scores, rows: n, cols: n, ld: n };
                    gemm(pm, values, &mut dst[head * hd..], c, Epilogue::None, false);
                }
            })
        };
        crate::cpu::parallel(|| {
            use rayon::prelude::*;
            out.data.par_chunks_mut(n * c).enumerate().for_each(attend)
        });
        Ok(())
    }
}
