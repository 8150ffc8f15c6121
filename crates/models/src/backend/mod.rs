//! The operations a model family is written against, once, and the backends that compute them.
//!
//! A family (`crate::models::*`) composes these operations over packed activations: `[tokens, width]`
//! row-major, the sequences of a batch end to end (row `r` of sequence `i` is token `cu_seqlens[i] + r`),
//! with no padding anywhere outside [`Ops::attention`]. Each backend prepares weights its own way at load
//! ([`Ops::linear`]) and keeps its own activation type:
//! - [`cpu::Cpu`]: Aleph's kernels. Packed f32 or int8 weights, fused GEMM epilogues, attention per
//!   (sequence, head) over real tokens only.
//! - [`candle::Candle`]: candle's tensors, on any device candle has (CUDA, Metal, CPU). On a GPU its attention
//!   runs unpadded ([`varlen`]); elsewhere it pads inside attention only.
//! - [`record::Recording`]: wraps another backend and records each linear layer's input magnitudes; int8
//!   smoothing is calibrated by running a family on it.
//!
//! Outputs are written into a destination the caller keeps (`out: &mut T`), so a forward pass reuses its
//! few buffers layer after layer instead of allocating per operation.

pub mod candle;
pub mod cpu;
pub mod record;
pub mod varlen;

use std::borrow::Cow;

use candle_core::Tensor;

use crate::error::ModelError;
use crate::loader::{Compute, MappedMatrix};
use crate::pooling::{pool_packed, Pooling};

/// The activations transformers names in `hidden_act` (its `ACT2FN` table) that Aleph computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// erf GELU (`gelu`).
    GeluErf,
    /// tanh-approximated GELU.
    GeluTanh,
    /// OpenAI CLIP's `x · sigmoid(1.702 x)`.
    QuickGelu,
    Relu,
    /// `x · sigmoid(x)`, the gate of Llama-style MLPs.
    Silu,
    /// Also BERT's pooler and CLAP's.
    Tanh,
}

impl Activation {
    /// Refuses, naming it, any activation Aleph does not compute.
    pub fn parse(name: &str) -> Result<Self, ModelError> {
        match name {
            "gelu" => Ok(Activation::GeluErf),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(Activation::GeluTanh),
            "quick_gelu" => Ok(Activation::QuickGelu),
            "relu" => Ok(Activation::Relu),
            "silu" | "swish" => Ok(Activation::Silu),
            "tanh" => Ok(Activation::Tanh),
            other => Err(ModelError::Unsupported(format!(
                "hidden_act `{other}` (supported: gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, quick_gelu, relu, silu, tanh)"
            ))),
        }
    }
}

/// What a linear layer does to its product before writing it (the bias, if any, is part of the layer).
pub enum Post<'a, T> {
    None,
    Act(Activation),
    /// Adds `residual`, which has the output's shape.
    Residual(&'a T),
}

/// A norm over each row: layer norm (`(x − mean) / std · w + b`) or RMS norm (`x / rms(x) · w`).
pub struct Norm<P> {
    pub kind: NormKind,
    pub weight: P,
    /// Layer norm's bias (RMS norms have none).
    pub bias: Option<P>,
    pub eps: f32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormKind {
    Layer,
    Rms,
}

/// Multi-head attention over a fused projection whose columns are every query head, then every key
/// head, then every value head (`(heads + 2·kv_heads) · head_dim` wide). Grouped-query attention is
/// `kv_heads < heads`: key/value head `g` serves query heads `g·r .. (g+1)·r` for `r = heads / kv_heads`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionSpec {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Multiplies `q·k` before the softmax (usually `1/√head_dim`).
    pub scale: f32,
    /// Token `i` attends to tokens `0..=i` of its sequence only.
    pub causal: bool,
    /// Token `i` attends only to tokens `j` with `|i − j| ≤ window` (ModernBERT's local layers; with
    /// `causal`, a window behind the token).
    pub window: Option<usize>,
}

impl AttentionSpec {
    /// Plain multi-head self-attention of `heads` heads over `hidden` columns.
    pub fn new(hidden: usize, heads: usize, causal: bool) -> Self {
        let head_dim = hidden / heads.max(1);
        AttentionSpec { heads, kv_heads: heads, head_dim, scale: 1.0 / (head_dim as f32).sqrt(), causal, window: None }
    }

    /// The same attention within `window` tokens either side.
    pub fn windowed(self, window: Option<usize>) -> Self {
        AttentionSpec { window, ..self }
    }

    /// The keys `lo..hi` query `i` of an `n`-token sequence sees.
    pub fn visible(&self, i: usize, n: usize) -> (usize, usize) {
        let hi = if self.causal { i + 1 } else { n };
        match self.window {
            Some(w) => (i.saturating_sub(w), hi.min(i + w + 1)),
            None => (0, hi),
        }
    }

    /// Width of the fused query/key/value input.
    pub fn qkv_width(&self) -> usize {
        (self.heads + 2 * self.kv_heads) * self.head_dim
    }

    /// Width of the output: one `head_dim` block per query head.
    pub fn out_width(&self) -> usize {
        self.heads * self.head_dim
    }

    fn check(&self) -> Result<(), ModelError> {
        if self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) || self.head_dim == 0 {
            return Err(ModelError::Forward(format!(
                "attention with {} query heads over {} key/value heads of width {}",
                self.heads, self.kv_heads, self.head_dim
            )));
        }
        Ok(())
    }
}

/// A learned per-head bias on the attention scores that depends only on the key's offset from the query
/// (MPNet's bucketed relative positions, resolved on the host): `table[head · (2·span − 1) + j − i + span − 1]`
/// for sequences of at most `span` tokens. It is added after the scale.
#[derive(Debug, Clone, Copy)]
pub struct RelativeBias<'a> {
    pub table: &'a [f32],
    pub span: usize,
}

impl RelativeBias<'_> {
    fn check(&self, heads: usize, longest: usize) -> Result<(), ModelError> {
        if longest > self.span || self.table.len() != heads * (2 * self.span).saturating_sub(1) {
            return Err(ModelError::Forward("relative position bias does not fit the attention".into()));
        }
        Ok(())
    }
}

/// DeBERTa's disentangled attention terms: besides `q_i·k_j`, the query's content against the key's relative
/// position (`c2p`: `q_i · pos_key[row(i, j)]`) and the key's content against the query's (`p2c`:
/// `k_j · pos_query[row(i, j)]`), summed before the one scale. Each table is `[table rows, heads · head_dim]`
/// (the shared relative embeddings through a projection, one block per query head); `row(i, j) =
/// rows[i − j + span − 1]`, non-decreasing in `i − j`, for sequences of at most `span` tokens.
pub struct Disentangled<'a, P> {
    pub pos_key: Option<&'a P>,
    pub pos_query: Option<&'a P>,
    pub rows: &'a [u32],
    pub span: usize,
}

impl<P> Clone for Disentangled<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for Disentangled<'_, P> {}

impl<P> Disentangled<'_, P> {
    /// The table rows of every offset a sequence of `n` tokens has: `lo..=hi`.
    pub fn row_range(&self, n: usize) -> (usize, usize) {
        let n = n.max(1);
        (self.rows[self.span - n] as usize, self.rows[self.span + n - 2] as usize)
    }

    fn check(&self, longest: usize, table_rows: impl Fn(&P) -> usize) -> Result<(), ModelError> {
        let rows = [self.pos_key, self.pos_query].into_iter().flatten().map(table_rows).min();
        let fits = self.rows.len() == (2 * self.span).saturating_sub(1)
            && longest <= self.span
            && self.rows.windows(2).all(|w| w[0] <= w[1])
            && rows.is_none_or(|r| self.rows.iter().all(|&x| (x as usize) < r));
        if !fits {
            return Err(ModelError::Forward("disentangled attention tables do not fit the attention".into()));
        }
        Ok(())
    }
}

/// What attention adds to `q·k` beyond the mask.
pub enum ScoreBias<'a, P> {
    None,
    /// A learned bias by offset (MPNet), added after the scale.
    Relative(RelativeBias<'a>),
    /// Content-by-position terms (DeBERTa), added before the scale.
    Disentangled(Disentangled<'a, P>),
}

impl<P> Clone for ScoreBias<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for ScoreBias<'_, P> {}

/// The primitive operations of a backend. Families are generic over it (static dispatch); only the
/// finished model is boxed as a [`crate::Model`].
pub trait Ops: Send + Sync + Sized + 'static {
    /// Packed activations, `[rows, cols]`.
    type T: Send + Sync;
    /// A linear layer's weight (and bias), prepared once at load.
    type Linear: Send + Sync;
    /// An f32 vector kept on the device: norm gains, biases, a class token.
    type Param: Send + Sync;
    /// An embedding table (token, position, token-type rows) where the backend reads its rows.
    type Table: Send + Sync;
    /// One forward pass's sequence layout, built once and shared by every attention layer.
    type Seqs: Send + Sync;

    /// What `/models` reports as the backend.
    fn compute(&self) -> Compute;

    /// Prepares `w` (`[out, in]`, as checkpoints store it) and its bias. `name` identifies the layer
    /// across loads (int8 smoothing keys its statistics by it).
    fn linear(&self, w: Tensor, b: Option<Tensor>, name: &str) -> Result<Self::Linear, ModelError>;
    fn param(&self, t: Tensor) -> Result<Self::Param, ModelError>;
    fn table(&self, t: Tensor) -> Result<Self::Table, ModelError>;
    /// A table read in place from the memory-mapped checkpoint, where the backend can (Aleph's CPU
    /// kernels); `None` has the caller load it through [`Ops::table`].
    fn mapped_table(&self, _m: &MappedMatrix) -> Option<Self::Table> {
        None
    }
    /// Bytes the prepared layer holds.
    fn linear_bytes(&self, l: &Self::Linear) -> usize;
    fn param_bytes(&self, p: &Self::Param) -> usize;
    /// Bytes the table holds in memory (none for a mapped one: its pages belong to the file).
    fn table_bytes(&self, t: &Self::Table) -> usize;

    /// A destination for outputs; its shape is set by whatever writes it.
    fn empty(&self) -> Result<Self::T, ModelError>;
    /// `[rows, cols]` of `x`.
    fn dims(&self, x: &Self::T) -> (usize, usize);
    /// A `[rows, cols]` matrix from row-major host data.
    fn upload(&self, rows: usize, cols: usize, data: Vec<f32>) -> Result<Self::T, ModelError>;
    /// `x`'s rows on the host, row-major (a borrow where `x` already lives there).
    fn host<'a>(&self, x: &'a Self::T) -> Result<Cow<'a, [f32]>, ModelError>;
    /// Moves `x` to the host, row-major.
    fn download(&self, x: Self::T) -> Result<Vec<f32>, ModelError>;
    /// Moves `x` to the host, one vector per row.
    fn download_rows(&self, x: Self::T) -> Result<Vec<Vec<f32>>, ModelError> {
        let width = self.dims(&x).1.max(1);
        Ok(self.download(x)?.chunks(width).map(<[f32]>::to_vec).collect())
    }
    fn seqs(&self, cu_seqlens: &[usize]) -> Result<Self::Seqs, ModelError>;
    /// Each sequence's pooled row of `x` (`[tokens, width]`, packed by `cu_seqlens`), on the host. A backend on
    /// a device pools there, so only `[sequences, width]` comes back; this default moves `x` to the host and
    /// pools it there.
    fn pool(&self, x: Self::T, cu_seqlens: &[usize], pooling: Pooling) -> Result<Vec<Vec<f32>>, ModelError> {
        let width = self.dims(&x).1;
        Ok(pool_packed(&self.download(x)?, width, cu_seqlens, pooling))
    }

    /// `out[r] = Σ_k tables[k].0[tables[k].1[r]]`: rows gathered from each `width`-wide table and summed,
    /// in the order given. Every id list has the same length; callers check ids against the tables.
    fn embed(&self, out: &mut Self::T, width: usize, tables: &[(&Self::Table, &[u32])]) -> Result<(), ModelError>;
    /// `out = post(x · wᵀ + b)`.
    fn linear_fwd(
        &self,
        x: &Self::T,
        l: &Self::Linear,
        post: Post<'_, Self::T>,
        out: &mut Self::T,
    ) -> Result<(), ModelError>;
    /// `x = act(x)`, in place: an activation applied after something else was added to a product (a LoRA
    /// adapter's low-rank term).
    fn activate(&self, x: &mut Self::T, act: Activation) -> Result<(), ModelError>;
    /// `x[r] += table[ids[r]]`: positions added to patch embeddings.
    fn add_rows(&self, x: &mut Self::T, table: &Self::Table, ids: &[u32]) -> Result<(), ModelError>;
    /// `out[r] = parts[rows[r].0][rows[r].1]`: rows picked from several matrices of one width (pooled
    /// rows, a class token before patches).
    fn gather_rows(&self, out: &mut Self::T, parts: &[&Self::T], rows: &[(u32, u32)]) -> Result<(), ModelError>;
    /// Normalizes each row of `x` in place.
    fn norm(&self, x: &mut Self::T, n: &Norm<Self::Param>) -> Result<(), ModelError>;
    /// `out` = each row of `x` normalized (pre-norm blocks keep `x` for the residual).
    fn norm_to(&self, x: &Self::T, n: &Norm<Self::Param>, out: &mut Self::T) -> Result<(), ModelError>;
    /// `acc += norm(x)`, `x` normalized in place on the way: Gemma 3's sandwich norms, which normalize a
    /// block's output before the residual adds it.
    fn add_norm(&self, x: &mut Self::T, n: &Norm<Self::Param>, acc: &mut Self::T) -> Result<(), ModelError>;
    /// `out = act(x[:, ..w]) · x[:, w..]` for `x` `[rows, 2w]`: a gated MLP's gate and up projections, fused.
    fn glu(&self, x: &Self::T, act: Activation, out: &mut Self::T) -> Result<(), ModelError>;
    /// Rotary position embedding, in place, on every query and key head of the fused `qkv` (see
    /// [`AttentionSpec`]): each head's halves `(a, b)` become `(a·cos − b·sin, b·cos + a·sin)` with the
    /// row's `cos`, `sin` (`[rows, head_dim / 2]`; transformers' `rotate_half` layout).
    fn rotary(&self, qkv: &mut Self::T, spec: &AttentionSpec, cos: &Self::T, sin: &Self::T) -> Result<(), ModelError>;
    /// RMS-normalizes each query head of the fused `qkv` by `q` and each key head by `k` (`head_dim` wide;
    /// Qwen3's and Gemma 3's `q_norm` / `k_norm`); value heads stay as they are.
    fn head_norm(
        &self,
        qkv: &mut Self::T,
        spec: &AttentionSpec,
        q: &Norm<Self::Param>,
        k: &Norm<Self::Param>,
    ) -> Result<(), ModelError>;
    /// Reinterprets the row-major data as `[rows, cols]` (the same number of elements).
    fn reshape(&self, x: &mut Self::T, rows: usize, cols: usize) -> Result<(), ModelError>;
    /// `out[t, head] = softmax(scale · q kᵀ + bias) v` within each sequence, for the fused `qkv` (see
    /// [`AttentionSpec`], [`ScoreBias`]); `out` is `[tokens, heads · head_dim]`.
    fn attention(
        &self,
        qkv: &Self::T,
        seqs: &Self::Seqs,
        spec: &AttentionSpec,
        bias: ScoreBias<'_, Self::Param>,
        out: &mut Self::T,
    ) -> Result<(), ModelError>;
    /// Attention within consecutive windows of `n` rows (`qkv` `[windows · n, qkv_width]`, each window a
    /// sequence) with a learned additive bias `bias[head][i][j]` (`[heads · n, n]`) on the scaled scores and,
    /// with `groups` (one label per row), −100 where two rows' labels differ: Swin's (shifted) windows.
    #[allow(clippy::too_many_arguments)]
    fn window_attention(
        &self,
        qkv: &Self::T,
        n: usize,
        spec: &AttentionSpec,
        bias: &Self::Param,
        groups: Option<&[u32]>,
        out: &mut Self::T,
    ) -> Result<(), ModelError>;
    /// Attention pooling: row `i` of `q` (`[sequences, heads · head_dim]`) attends over sequence `i`'s rows
    /// of `kv` (`[tokens, 2 · kv_heads · head_dim]`: key heads, then value heads). `spec.causal` is ignored.
    fn pooled_attention(
        &self,
        q: &Self::T,
        kv: &Self::T,
        seqs: &Self::Seqs,
        spec: &AttentionSpec,
        out: &mut Self::T,
    ) -> Result<(), ModelError>;
}

#[cfg(test)]
mod conformance;
