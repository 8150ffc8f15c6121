//! The pieces every encoder on Aleph's CPU path is built from: layer norms, dense layers with packed
//! (f32 or int8) weights, and padding-free multi-head attention over a packed batch.

use std::cell::RefCell;

use candle_nn::VarBuilder;
use rayon::prelude::*;

use super::gemm::{gemm, Epilogue, MatRef, PackedB};
use super::qgemm::{gemm_i8, PackedI8};
use super::{ops, Isa};

pub(crate) fn host(t: candle_core::Tensor) -> candle_core::Result<Vec<f32>> {
    t.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1::<f32>()
}

/// Gains and biases of a layer norm.
pub(crate) struct Norm {
    pub gamma: Vec<f32>,
    pub beta: Vec<f32>,
}

impl Norm {
    pub fn load(vb: VarBuilder, h: usize) -> candle_core::Result<Self> {
        Ok(Norm { gamma: host(vb.get(h, "weight")?)?, beta: host(vb.get(h, "bias")?)? })
    }
}

/// A dense layer with its weight packed for the GEMM: f32, or int8 (`--dtype int8`).
pub(crate) struct Dense {
    w: Weights,
    pub b: Vec<f32>,
}

enum Weights {
    F32(PackedB),
    I8(PackedI8),
}

impl Dense {
    pub fn load(vb: VarBuilder, inp: usize, out: usize, int8: bool) -> candle_core::Result<Self> {
        let w = host(vb.get((out, inp), "weight")?)?;
        Ok(Dense::new(&w, host(vb.get(out, "bias")?)?, inp, out, int8))
    }

    /// `w` is the checkpoint's `[out, in]`.
    pub fn new(w: &[f32], b: Vec<f32>, inp: usize, out: usize, int8: bool) -> Self {
        let w = if int8 {
            Weights::I8(PackedI8::quantize(inp, out, w))
        } else {
            Weights::F32(PackedB::pack(inp, out, w, 1, inp))
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
        }
    }

    pub fn bytes(&self) -> usize {
        let w = match &self.w {
            Weights::F32(p) => p.bytes(),
            Weights::I8(q) => q.bytes(),
        };
        w + 4 * self.b.len()
    }
}

/// The feed-forward activations the CPU encoders run, as `hidden_act` names them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Act {
    /// erf GELU, fused into the GEMM's epilogue.
    GeluErf,
    GeluTanh,
    /// OpenAI CLIP's `x · sigmoid(1.702 x)`.
    QuickGelu,
}

impl Act {
    pub fn parse(name: &str) -> Result<Self, crate::error::ModelError> {
        match name {
            "gelu" => Ok(Act::GeluErf),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(Act::GeluTanh),
            "quick_gelu" => Ok(Act::QuickGelu),
            other => Err(crate::error::ModelError::Unsupported(format!("hidden_act `{other}` on the fast CPU path"))),
        }
    }

    /// The epilogue of the GEMM that feeds the activation.
    pub fn epilogue(self, bias: &[f32]) -> Epilogue<'_> {
        match self {
            Act::GeluErf => Epilogue::BiasGelu(bias),
            Act::GeluTanh | Act::QuickGelu => Epilogue::Bias(bias),
        }
    }

    /// What the epilogue left to do.
    pub fn finish(self, isa: Isa, x: &mut [f32]) {
        match self {
            Act::GeluErf => {}
            Act::GeluTanh => ops::gelu_tanh(isa, x),
            Act::QuickGelu => ops::quick_gelu(isa, x),
        }
    }
}

/// Layer-normalizes each `h`-wide row, in parallel when there are many.
pub(crate) fn norm_rows(isa: Isa, x: &mut [f32], norm: &Norm, h: usize, eps: f32) {
    let rows = x.len() / h;
    let run = |row: &mut [f32]| ops::layer_norm(isa, row, &norm.gamma, &norm.beta, eps);
    if rows >= 64 {
        super::pool().install(|| x.par_chunks_mut(h).for_each(run));
    } else {
        x.chunks_mut(h).for_each(run);
    }
}

/// Self-attention for every (sequence, head) of a packed batch: `ctx[t, head] = softmax(q kᵀ / √d) v`.
/// `qkv` holds each token's query, key and value side by side (`[tokens, 3h]`); `causal` lets token
/// `i` see tokens `0..=i` only.
pub(crate) fn attention(
    isa: Isa,
    qkv: &[f32],
    ctx: &mut [f32],
    cu_seqlens: &[usize],
    h: usize,
    nh: usize,
    causal: bool,
) {
    let hd = h / nh;
    let scale = 1.0 / (hd as f32).sqrt();
    let out = SharedOut(ctx.as_mut_ptr());
    let job = |(s, head): (usize, usize)| {
        let (r0, n) = (cu_seqlens[s], cu_seqlens[s + 1] - cu_seqlens[s]);
        if n == 0 {
            return;
        }
        with_scratch(|scratch| {
            let Scratch { scores, keys, values } = scratch;
            let base = r0 * 3 * h + head * hd;
            let q = MatRef { data: &qkv[base..], rows: n, cols: hd, ld: 3 * h };
            keys.repack(hd, n, &qkv[base + h..], 1, 3 * h);
            scores.clear();
            scores.resize(n * n, 0.0);
            gemm(q, keys, scores, n, Epilogue::None, false);
            for (i, row) in scores.chunks_mut(n).enumerate() {
                if causal {
                    ops::softmax(isa, &mut row[..=i], scale);
                    row[i + 1..].fill(0.0);
                } else {
                    ops::softmax(isa, row, scale);
                }
            }
            values.repack(n, hd, &qkv[base + 2 * h..], 3 * h, 1);
            let p = MatRef { data: scores, rows: n, cols: n, ld: n };
            // SAFETY: this task alone writes rows r0..r0+n, columns head·hd..(head+1)·hd of ctx.
            let dst = unsafe { std::slice::from_raw_parts_mut(out.at(r0 * h + head * hd), (n - 1) * h + hd) };
            gemm(p, values, dst, h, Epilogue::None, false);
        });
    };
    let seqs = cu_seqlens.len().saturating_sub(1);
    let pairs: Vec<(usize, usize)> = (0..seqs).flat_map(|s| (0..nh).map(move |hh| (s, hh))).collect();
    super::pool().install(|| pairs.into_par_iter().for_each(job));
}

struct SharedOut(*mut f32);

impl SharedOut {
    fn at(&self, offset: usize) -> *mut f32 {
        // SAFETY: offsets stay inside the context buffer; see `attention`.
        unsafe { self.0.add(offset) }
    }
}

// SAFETY: tasks write disjoint regions (see `attention`).
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

/// Per-thread buffers for one attention head: its scores and its packed keys and values.
#[derive(Default)]
pub(crate) struct Scratch {
    pub scores: Vec<f32>,
    pub keys: PackedB,
    pub values: PackedB,
}

/// Runs `f` with this thread's attention buffers.
pub(crate) fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|s| f(&mut s.borrow_mut()))
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}
