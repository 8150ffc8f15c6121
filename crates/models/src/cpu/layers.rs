//! The pieces `crate::backend::cpu` is built from: row-parallel layer norms, dense layers with packed (f32
//! int8 or bf16) weights, and padding-free multi-head attention over a packed batch.

use std::cell::RefCell;

use rayon::prelude::*;

use super::bgemm::{gemm_bf16, PackedBf16};
use super::gemm::{gemm, Epilogue, MatRef, PackedB};
use super::qgemm::{gemm_i8, PackedI8};
use super::{ops, Isa};
use crate::backend::{AttentionSpec, Disentangled, RelativeBias, ScoreBias};

pub(crate) fn host(t: candle_core::Tensor) -> candle_core::Result<Vec<f32>> {
    t.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1::<f32>()
}

/// A dense layer with its weight packed for the GEMM: f32, int8 (`--dtype int8`) or bf16 (`--dtype bfloat16`).
pub struct Dense {
    w: Weights,
    pub b: Vec<f32>,
}

enum Weights {
    F32(PackedB),
    I8(PackedI8),
    Bf16(PackedBf16),
}

/// How a linear layer keeps its weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    F32,
    /// Per-channel int8 with dynamically quantized activations.
    Int8,
    /// bfloat16, multiplied natively where the CPU has AVX512-BF16.
    Bf16,
}

impl Dense {
    /// `w` is the checkpoint's `[out, in]`.
    pub fn new(w: &[f32], b: Vec<f32>, inp: usize, out: usize, format: WeightFormat) -> Self {
        let w = match format {
            WeightFormat::Int8 => Weights::I8(PackedI8::quantize(inp, out, w)),
            WeightFormat::F32 => Weights::F32(PackedB::pack(inp, out, w, 1, inp)),
            WeightFormat::Bf16 => Weights::Bf16(PackedBf16::pack(inp, out, w)),
        };
        Dense { w, b }
    }

    /// An int8 layer smoothed against its input's per-channel magnitudes `act_max` (see
    /// [`PackedI8::quantize_smoothed`]): `s_j = act_max_j^α / w_max_j^(1-α)`.
    pub fn new_smoothed(w: &[f32], b: Vec<f32>, inp: usize, out: usize, act_max: &[f32], alpha: f32) -> Self {
        let mut w_max = vec![0f32; inp];
        for row in w.chunks_exact(inp) {
            for (m, v) in w_max.iter_mut().zip(row) {
                *m = m.max(v.abs());
            }
        }
        let s: Vec<f32> = act_max
            .iter()
            .zip(&w_max)
            .map(
                |(&a, &w)| {
                    if a > 0.0 && w > 0.0 {
                        (a.powf(alpha) / w.powf(1.0 - alpha)).clamp(1e-4, 1e4)
                    } else {
                        1.0
                    }
                },
            )
            .collect();
        Dense { w: Weights::I8(PackedI8::quantize_smoothed(inp, out, w, &s)), b }
    }

    /// `c = x · wᵀ`, then the epilogue.
    pub fn forward(&self, x: MatRef, c: &mut [f32], ldc: usize, epi: Epilogue) {
        match &self.w {
            Weights::F32(p) => gemm(x, p, c, ldc, epi, true),
            Weights::I8(q) => gemm_i8(x, q, c, ldc, epi, true),
            Weights::Bf16(h) => gemm_bf16(x, h, c, ldc, epi, true),
        }
    }

    /// Output width.
    pub fn out(&self) -> usize {
        self.b.len()
    }

    pub fn bytes(&self) -> usize {
        let w = match &self.w {
            Weights::F32(p) => p.bytes(),
            Weights::I8(q) => q.bytes(),
            Weights::Bf16(h) => h.bytes(),
        };
        w + 4 * self.b.len()
    }
}

/// The activations, as the CPU kernels compute them: erf GELU fused into the GEMM's epilogue, the rest
/// in a pass over the product.
pub(crate) use crate::backend::Activation as Act;

impl Act {
    /// The epilogue of the GEMM that feeds the activation.
    pub fn epilogue(self, bias: &[f32]) -> Epilogue<'_> {
        match self {
            Act::GeluErf => Epilogue::BiasGelu(bias),
            Act::GeluTanh | Act::QuickGelu | Act::Relu | Act::Silu | Act::Tanh => Epilogue::Bias(bias),
        }
    }

    /// What the epilogue left to do.
    pub fn finish(self, isa: Isa, x: &mut [f32]) {
        match self {
            Act::GeluErf => {}
            _ => self.apply_rows(isa, x),
        }
    }

    /// The whole activation, in place.
    pub fn apply_rows(self, isa: Isa, x: &mut [f32]) {
        match self {
            Act::GeluErf => ops::gelu_erf(isa, x),
            Act::GeluTanh => ops::gelu_tanh(isa, x),
            Act::QuickGelu => ops::quick_gelu(isa, x),
            Act::Relu => ops::relu(isa, x),
            Act::Silu => ops::silu(isa, x),
            Act::Tanh => ops::tanh(isa, x),
        }
    }
}

/// Layer-normalizes each `h`-wide row, in parallel when there are many.
pub(crate) fn layer_norm_rows(isa: Isa, x: &mut [f32], gamma: &[f32], beta: &[f32], h: usize, eps: f32) {
    let rows = x.len() / h;
    let run = |row: &mut [f32]| ops::layer_norm(isa, row, gamma, beta, eps);
    if rows >= 64 {
        super::parallel(|| x.par_chunks_mut(h).for_each(run));
    } else {
        x.chunks_mut(h).for_each(run);
    }
}

/// Query rows one attention task computes at once.
const QUERY_BLOCK: usize = 256;
/// Keys per step of the online softmax: a task holds `QUERY_BLOCK × KEY_BLOCK` scores, whatever the length.
const KEY_BLOCK: usize = 256;

/// Self-attention for every (sequence, query head) of a packed batch:
/// `ctx[t, head] = softmax(scale · q kᵀ) v`. `qkv` holds each token's query heads, key heads and value
/// heads side by side (see [`AttentionSpec`]); `ctx` is `[tokens, heads · head_dim]`.
///
/// Blocked with an online softmax: queries go `QUERY_BLOCK` rows at a time over keys `KEY_BLOCK` at a time,
/// each row keeping its running maximum, sum and weighted values, so no task holds more than one block of
/// scores and key blocks that no query of the block sees (causal, windows) are skipped. DeBERTa's position
/// terms are added over a sequence's whole square of scores (its inputs are short).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(
    isa: Isa,
    qkv: &[f32],
    ctx: &mut [f32],
    cu_seqlens: &[usize],
    spec: &AttentionSpec,
    bias: ScoreBias<'_, Vec<f32>>,
    bf16: bool,
) {
    let heads = spec.heads;
    let (ld, width) = (spec.qkv_width(), spec.out_width());
    let tokens = cu_seqlens.last().copied().unwrap_or(0);
    assert!(qkv.len() >= tokens * ld, "qkv buffer too small");
    assert!(ctx.len() >= tokens * width, "context buffer too small");
    let out = SharedOut(ctx.as_mut_ptr());
    let job = |(s, head): (usize, usize)| {
        let (r0, n) = (cu_seqlens[s], cu_seqlens[s + 1] - cu_seqlens[s]);
        if n == 0 {
            return;
        }
        let task = HeadTask { isa, qkv, spec, bias, r0, n, head, ld, width, out: &out, bf16 };
        with_scratch(|scratch| match bias {
            ScoreBias::Disentangled(d) => task.square(scratch, &d),
            _ => task.blocked(scratch),
        });
    };
    let seqs = cu_seqlens.len().saturating_sub(1);
    let pairs: Vec<(usize, usize)> = (0..seqs).flat_map(|s| (0..heads).map(move |hh| (s, hh))).collect();
    super::parallel(|| pairs.into_par_iter().for_each(job));
}

/// One (sequence, query head) of [`attention`].
struct HeadTask<'a> {
    isa: Isa,
    qkv: &'a [f32],
    spec: &'a AttentionSpec,
    bias: ScoreBias<'a, Vec<f32>>,
    /// The sequence's first row and length.
    r0: usize,
    n: usize,
    head: usize,
    ld: usize,
    width: usize,
    out: &'a SharedOut,
    /// Scores and weighted values from bf16 products (`--dtype bfloat16` where they are fast).
    bf16: bool,
}

impl HeadTask<'_> {
    /// Columns of this head's key (`part` 1) or value (`part` 2) head, from row `row` of the sequence.
    fn kv_at(&self, part: usize, row: usize) -> &[f32] {
        let AttentionSpec { heads, kv_heads, head_dim: hd, .. } = *self.spec;
        let kv = self.head / (heads / kv_heads.max(1));
        let col = if part == 1 { (heads + kv) * hd } else { (heads + kv_heads + kv) * hd };
        &self.qkv[(self.r0 + row) * self.ld + col..]
    }

    /// Query rows `b0..` of this head.
    fn queries(&self, b0: usize, rows: usize) -> MatRef<'_> {
        let hd = self.spec.head_dim;
        MatRef { data: &self.qkv[(self.r0 + b0) * self.ld + self.head * hd..], rows, cols: hd, ld: self.ld }
    }

    /// Writes `rows` rows of `hd` values (`src`, row-major) as context rows `b0..` of this head.
    fn write(&self, b0: usize, rows: usize, src: &[f32]) {
        let hd = self.spec.head_dim;
        for r in 0..rows {
            let dst = self.out.at((self.r0 + b0 + r) * self.width + self.head * hd);
            // SAFETY: the row lies inside ctx (asserted in `attention`: every row < total tokens, every column
            // < width), and this (sequence, head) task is the only one touching these columns of it.
            unsafe { std::ptr::copy_nonoverlapping(src[r * hd..].as_ptr(), dst, hd) };
        }
    }

    fn blocked(&self, scratch: &mut Scratch) {
        let Scratch { scores, key_blocks, value_blocks, key_blocks_bf16, value_blocks_bf16, acc, pv, .. } = scratch;
        if self.bf16 {
            self.blocked_on(key_blocks_bf16, value_blocks_bf16, scores, acc, pv);
        } else {
            self.blocked_on(key_blocks, value_blocks, scores, acc, pv);
        }
    }

    /// [`Self::blocked`] with keys and values packed as `P`: f32 panels, or bf16 ones.
    fn blocked_on<P: Operand>(
        &self,
        key_blocks: &mut Vec<P>,
        value_blocks: &mut Vec<P>,
        scores: &mut Vec<f32>,
        acc: &mut Vec<f32>,
        pv: &mut Vec<f32>,
    ) {
        let (spec, n, hd) = (self.spec, self.n, self.spec.head_dim);
        let blocks = n.div_ceil(KEY_BLOCK);
        key_blocks.resize_with(blocks.max(key_blocks.len()), P::default);
        value_blocks.resize_with(blocks.max(value_blocks.len()), P::default);
        for b in 0..blocks {
            let (c0, w) = (b * KEY_BLOCK, KEY_BLOCK.min(n - b * KEY_BLOCK));
            key_blocks[b].repack(hd, w, self.kv_at(1, c0), 1, self.ld);
            value_blocks[b].repack(w, hd, self.kv_at(2, c0), self.ld, 1);
        }
        let (mut max, mut sum) = (Vec::new(), Vec::new());
        for b0 in (0..n).step_by(QUERY_BLOCK) {
            let rows = QUERY_BLOCK.min(n - b0);
            let q = self.queries(b0, rows);
            // Visible ranges grow with the row (causal and windowed alike): the block sees their union.
            let (first, last) = (spec.visible(b0, n).0, spec.visible(b0 + rows - 1, n).1);
            max.clear();
            max.resize(rows, f32::NEG_INFINITY);
            sum.clear();
            sum.resize(rows, 0.0);
            acc.clear();
            acc.resize(rows * hd, 0.0);
            for kb in first / KEY_BLOCK..last.div_ceil(KEY_BLOCK) {
                let (c0, w) = (kb * KEY_BLOCK, KEY_BLOCK.min(n - kb * KEY_BLOCK));
                scores.clear();
                scores.resize(rows * w, 0.0);
                key_blocks[kb].product(q, scores, w);
                for (r, row) in scores.chunks_mut(w).enumerate() {
                    let i = b0 + r;
                    let (lo, hi) = spec.visible(i, n);
                    let (lo, hi) = (lo.clamp(c0, c0 + w) - c0, hi.clamp(c0, c0 + w) - c0);
                    if lo >= hi {
                        row.fill(0.0);
                        continue;
                    }
                    let seen = &mut row[lo..hi];
                    let mut scale = spec.scale;
                    if let ScoreBias::Relative(RelativeBias { table, span }) = self.bias {
                        // Offset j − i of column j is at column j − i + span − 1 of the head's table.
                        let t = &table[self.head * (2 * span - 1) + span - 1 + c0 + lo - i..][..hi - lo];
                        seen.iter_mut().zip(t).for_each(|(v, b)| *v = *v * scale + b);
                        scale = 1.0;
                    }
                    let top = max[r].max(ops::row_max(seen) * scale);
                    // The sums and values so far, rescaled to the new maximum.
                    let keep = if max[r] == f32::NEG_INFINITY { 0.0 } else { ops::exp(max[r] - top) };
                    sum[r] *= keep;
                    acc[r * hd..(r + 1) * hd].iter_mut().for_each(|v| *v *= keep);
                    max[r] = top;
                    ops::exp_block(self.isa, seen, scale, top, &mut sum[r]);
                    row[..lo].fill(0.0);
                    row[hi..].fill(0.0);
                }
                pv.clear();
                pv.resize(rows * hd, 0.0);
                value_blocks[kb].product(MatRef { data: scores, rows, cols: w, ld: w }, pv, hd);
                ops::add(self.isa, acc, pv);
            }
            for (r, row) in acc.chunks_mut(hd).enumerate() {
                let inv = if sum[r] > 0.0 { 1.0 / sum[r] } else { 0.0 };
                row.iter_mut().for_each(|v| *v *= inv);
            }
            self.write(b0, rows, acc);
        }
    }

    /// DeBERTa: the whole `n × n` square of scores, with its position terms, at once.
    fn square(&self, scratch: &mut Scratch, d: &Disentangled<'_, Vec<f32>>) {
        let (spec, n, hd) = (self.spec, self.n, self.spec.head_dim);
        let Scratch { scores, keys, values, positions, terms, acc, .. } = scratch;
        let q = self.queries(0, n);
        let k = MatRef { data: self.kv_at(1, 0), rows: n, cols: hd, ld: self.ld };
        keys.repack(hd, n, k.data, 1, self.ld);
        values.repack(n, hd, self.kv_at(2, 0), self.ld, 1);
        scores.clear();
        scores.resize(n * n, 0.0);
        gemm(q, keys, scores, n, Epilogue::None, false);
        add_disentangled(d, q, k, self.head * hd, self.width, scores, positions, terms);
        for (i, row) in scores.chunks_mut(n).enumerate() {
            let (lo, hi) = spec.visible(i, n);
            ops::softmax(self.isa, &mut row[lo..hi], spec.scale);
            row[..lo].fill(0.0);
            row[hi..].fill(0.0);
        }
        acc.clear();
        acc.resize(n * hd, 0.0);
        gemm(MatRef { data: scores, rows: n, cols: n, ld: n }, values, acc, hd, Epilogue::None, false);
        self.write(0, n, acc);
    }
}

/// Adds DeBERTa's content-by-position terms to one (sequence, head)'s `n × n` raw scores. Only the table rows
/// the sequence's offsets reach (`lo..=hi`, at most `2n − 1`) are multiplied: `q · pos_keyᵀ` and
/// `k · pos_queryᵀ` as two small GEMMs, then each score picks its offset's column.
#[allow(clippy::too_many_arguments)]
fn add_disentangled(
    d: &Disentangled<'_, Vec<f32>>,
    q: MatRef,
    k: MatRef,
    col: usize,
    width: usize,
    scores: &mut [f32],
    positions: &mut PackedB,
    terms: &mut Vec<f32>,
) {
    let n = q.rows;
    let (lo, hi) = d.row_range(n);
    let r = hi - lo + 1;
    // Column of score (i, j) in a `terms` row: its offset's table row, from `lo`.
    let column = |i: usize, j: usize| d.rows[i + d.span - 1 - j] as usize - lo;
    for (table, content_is_query) in [(d.pos_key, true), (d.pos_query, false)] {
        let Some(table) = table else { continue };
        positions.repack(q.cols, r, &table[lo * width + col..], 1, width);
        terms.clear();
        terms.resize(n * r, 0.0);
        gemm(if content_is_query { q } else { k }, positions, terms, r, Epilogue::None, false);
        for (i, row) in scores.chunks_mut(n).enumerate() {
            for (j, s) in row.iter_mut().enumerate() {
                // c2p reads the query's row of terms, p2c the key's.
                let t = if content_is_query { i } else { j };
                *s += terms[t * r + column(i, j)];
            }
        }
    }
}

struct SharedOut(*mut f32);

impl SharedOut {
    fn at(&self, offset: usize) -> *mut f32 {
        // No reference is formed: wrapping_add keeps this a plain address computation; `attention`
        // bounds every offset by the buffer's length.
        self.0.wrapping_add(offset)
    }
}

// SAFETY: a pointer to the context buffer; the attention tasks write disjoint regions of it (see `attention`).
unsafe impl Send for SharedOut {}
// SAFETY: as for `Send`: shared by the tasks of one attention call, each writing only its own region.
unsafe impl Sync for SharedOut {}

/// A right-hand operand of attention's two products, packed from the batch: f32 panels, or bf16 ones where
/// bf16 products are fast and the model runs at reduced precision.
trait Operand: Default {
    fn repack(&mut self, k: usize, n: usize, src: &[f32], s_k: usize, s_n: usize);
    /// `c = a · self` on the calling thread (attention's tasks are already one per core).
    fn product(&self, a: MatRef, c: &mut [f32], ldc: usize);
}

impl Operand for PackedB {
    fn repack(&mut self, k: usize, n: usize, src: &[f32], s_k: usize, s_n: usize) {
        PackedB::repack(self, k, n, src, s_k, s_n)
    }
    fn product(&self, a: MatRef, c: &mut [f32], ldc: usize) {
        gemm(a, self, c, ldc, Epilogue::None, false)
    }
}

impl Operand for PackedBf16 {
    fn repack(&mut self, k: usize, n: usize, src: &[f32], s_k: usize, s_n: usize) {
        PackedBf16::repack(self, k, n, src, s_k, s_n)
    }
    fn product(&self, a: MatRef, c: &mut [f32], ldc: usize) {
        gemm_bf16(a, self, c, ldc, Epilogue::None, false)
    }
}

/// Per-thread buffers for one attention head: a block of scores, its keys and values packed per key block,
/// the running weighted values, and (DeBERTa) the whole packed keys and values, position table and
/// content-by-position terms.
#[derive(Default)]
pub(crate) struct Scratch {
    pub scores: Vec<f32>,
    pub key_blocks: Vec<PackedB>,
    pub value_blocks: Vec<PackedB>,
    pub key_blocks_bf16: Vec<PackedBf16>,
    pub value_blocks_bf16: Vec<PackedBf16>,
    pub acc: Vec<f32>,
    pub pv: Vec<f32>,
    pub keys: PackedB,
    pub values: PackedB,
    pub positions: PackedB,
    pub terms: Vec<f32>,
}

/// Runs `f` with this thread's attention buffers.
pub(crate) fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|s| f(&mut s.borrow_mut()))
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `softmax(q kᵀ / √d) v` for one (sequence, head), written the plain way.
    fn naive(qkv: &[f32], r0: usize, n: usize, h: usize, hd: usize, head: usize, causal: bool) -> Vec<f32> {
        let at = |t: usize, part: usize, d: usize| qkv[(r0 + t) * 3 * h + part * h + head * hd + d];
        let mut out = vec![0.0; n * hd];
        for i in 0..n {
            let seen = if causal { i + 1 } else { n };
            let scores: Vec<f32> = (0..seen)
                .map(|j| (0..hd).map(|d| at(i, 0, d) * at(j, 1, d)).sum::<f32>() / (hd as f32).sqrt())
                .collect();
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let exps: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f32 = exps.iter().sum();
            for (j, e) in exps.iter().enumerate() {
                for d in 0..hd {
                    out[i * hd + d] += e / total * at(j, 2, d);
                }
            }
        }
        out
    }

    #[test]
    fn activations_match_their_formulas_on_every_kernel_set() {
        let xs: Vec<f32> = (-40..=40).map(|i| i as f32 * 0.25).collect();
        for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512].into_iter().filter(|i| (*i as u8) >= (Isa::get() as u8)) {
            for (name, f) in [
                ("relu", (|x: f32| x.max(0.0)) as fn(f32) -> f32),
                ("silu", |x: f32| x / (1.0 + (-x).exp())),
                ("quick_gelu", |x: f32| x / (1.0 + (-1.702 * x).exp())),
                ("tanh", f32::tanh),
            ] {
                let act = Act::parse(name).unwrap();
                let mut got = xs.clone();
                act.finish(isa, &mut got);
                for (x, g) in xs.iter().zip(&got) {
                    assert!((g - f(*x)).abs() <= 1e-5 * (1.0 + f(*x).abs()), "{name} {isa:?} at {x}: {g}");
                }
            }
        }
        assert!(Act::parse("mish").is_err());
    }

    // Small enough for Miri: two sequences (one of a single token), two heads writing interleaved
    // column blocks of the same rows.
    #[test]
    fn attention_matches_the_plain_formula_per_sequence_and_head() {
        let (h, nh) = (8, 2);
        let hd = h / nh;
        let cu = [0, 3, 4, 6];
        let tokens = 6;
        let qkv: Vec<f32> = (0..tokens * 3 * h).map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.05).collect();
        // bf16 products (where they are fast here) within bf16's rounding, f32 within f32's.
        let precisions =
            if crate::cpu::bgemm::fast() { vec![(false, 1e-5), (true, 1e-2)] } else { vec![(false, 1e-5)] };
        for ((bf16, tol), causal) in precisions.into_iter().flat_map(|p| [(p, false), (p, true)]) {
            let mut ctx = vec![f32::NAN; tokens * h];
            let spec = AttentionSpec::new(h, nh, causal);
            attention(Isa::get(), &qkv, &mut ctx, &cu, &spec, ScoreBias::None, bf16);
            for s in 0..cu.len() - 1 {
                let (r0, n) = (cu[s], cu[s + 1] - cu[s]);
                for head in 0..nh {
                    let want = naive(&qkv, r0, n, h, hd, head, causal);
                    for t in 0..n {
                        for d in 0..hd {
                            let got = ctx[(r0 + t) * h + head * hd + d];
                            let err = (got - want[t * hd + d]).abs();
                            assert!(err < tol, "bf16 {bf16} causal {causal} seq {s} head {head}: {err}");
                        }
                    }
                }
            }
        }
    }
}
