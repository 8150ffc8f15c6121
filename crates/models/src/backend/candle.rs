//! candle's tensors as a backend, on whichever device candle runs (CUDA, Metal, CPU). Activations stay
//! packed like the CPU backend's. Attention runs unpadded on a GPU ([`super::varlen`]); elsewhere, and for
//! DeBERTa's disentangled terms, it pads, gathering each sequence into a `[batch, len]` rectangle with a key
//! mask, and gathers the real rows back.
//!
//! Weights, tables and activations are kept at the backend's width (f32, f16 or bf16) and multiplied at it;
//! what transformers accumulates in f32 under half precision is computed in f32 here too: norms (their gains
//! stay f32, as `Param`s), the attention scores' masks, biases and softmax, and everything handed to the host.

use std::borrow::Cow;

use candle_core::{DType, Device, Tensor};

use super::varlen::{self, AttentionChoice, VarlenAttention};
use super::{Activation, AttentionSpec, Disentangled, Norm, NormKind, Ops, Post, ScoreBias};
use crate::error::{weights, ModelError};
use crate::loader::Compute;
use crate::pooling::{pool_packed, Pooling};

pub struct Candle {
    device: Device,
    /// The width of weights and activations: F32, F16 or BF16.
    dtype: DType,
    /// Which batches attend over packed sequences ([`super::varlen`]), where the bias allows it.
    attention: AttentionChoice,
}

impl Candle {
    /// DeBERTa's content-by-position terms for a padded batch, `[b, heads, l, l]`, from already scaled
    /// queries and keys `[b, heads, l, hd]`: each content row against every table row, then the column of
    /// each score's offset (see [`Disentangled`]).
    fn disentangled(
        &self,
        d: &Disentangled<'_, Tensor>,
        q: &Tensor,
        k: &Tensor,
        spec: &AttentionSpec,
        b: usize,
        l: usize,
    ) -> candle_core::Result<Tensor> {
        let (heads, hd) = (spec.heads, spec.head_dim);
        // index[i][j] = row(i, j): for c2p, gathered along the table axis of row i's products.
        let index: Vec<u32> = (0..l * l).map(|e| d.rows[e / l + d.span - 1 - e % l]).collect();
        let index = Tensor::from_vec(index, (1, 1, l, l), &self.device)?;
        // In f32, as the scores they are added to (the tables are f32 parameters).
        let products = |content: &Tensor, table: &Tensor| -> candle_core::Result<Tensor> {
            let rows = table.dim(0)?;
            let t = table.reshape((rows, heads, hd))?.transpose(0, 1)?.contiguous()?.unsqueeze(0)?;
            content.to_dtype(DType::F32)?.contiguous()?.broadcast_matmul(&t.t()?)
        };
        let mut sum = Tensor::zeros((b, heads, l, l), DType::F32, &self.device)?;
        if let Some(pk) = d.pos_key {
            let idx = index.broadcast_as((b, heads, l, l))?.contiguous()?;
            sum = (sum + products(q, pk)?.contiguous()?.gather(&idx, 3)?)?;
        }
        if let Some(pq) = d.pos_query {
            // Row j of the key's products, column row(i, j): gathered as [j][i], then transposed.
            let idx = index.t()?.broadcast_as((b, heads, l, l))?.contiguous()?;
            sum = (sum + products(k, pq)?.contiguous()?.gather(&idx, 3)?.transpose(2, 3)?)?;
        }
        Ok(sum)
    }

    /// f32 weights and activations on `device`.
    pub fn new(device: Device) -> Self {
        Candle { device, dtype: DType::F32, attention: AttentionChoice::Padded }
    }

    /// Weights and activations of `dtype` (F32, F16 or BF16) on `device`.
    pub fn with_dtype(device: Device, dtype: DType) -> Result<Self, ModelError> {
        match dtype {
            DType::F32 | DType::F16 | DType::BF16 => Ok(Candle { device, dtype, attention: AttentionChoice::Padded }),
            other => Err(ModelError::InvalidOption(format!("candle computes f32, f16 or bf16, not {other:?}"))),
        }
    }

    /// The same backend with attention chosen by `attention`. On a GPU the unpadded kernel is compiled and
    /// loaded here: where that fails (an NVRTC newer than the driver writes PTX the driver refuses), a load that
    /// asked for it fails naming why, and the default falls back to padded attention with a warning.
    pub fn with_attention(self, attention: AttentionChoice) -> Result<Self, ModelError> {
        #[cfg(feature = "cuda")]
        if attention != AttentionChoice::Padded {
            if let Err(e) = varlen::cuda::prepare(&self.device) {
                if attention == AttentionChoice::Unpadded {
                    return Err(ModelError::Unsupported(format!("unpadded attention: {e}")));
                }
                tracing::warn!("attention stays padded: {e}");
                return Ok(Candle { attention: AttentionChoice::Padded, ..self });
            }
        }
        Ok(Candle { attention, ..self })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Attention through [`VarlenAttention`], for biases it takes.
    fn unpadded_attention(
        &self,
        qkv: &Tensor,
        seqs: &Seqs,
        spec: &AttentionSpec,
        bias: ScoreBias<'_, Tensor>,
    ) -> Result<Tensor, ModelError> {
        let Some((cu, tiles)) = &seqs.packed else {
            return Err(ModelError::Forward("unpadded attention without the batch's offsets".into()));
        };
        let relative = match &bias {
            ScoreBias::Relative(b) => {
                b.check(spec.heads, seqs.len)?;
                Some(b)
            }
            _ => None,
        };
        let op = VarlenAttention::new(*spec, cu.clone(), tiles.clone(), relative).map_err(forward_err)?;
        qkv.contiguous().and_then(|x| x.apply_op1_no_bwd(&op)).map_err(forward_err)
    }

    /// candle's CPU matmul has no bf16 kernel (its GEMM crate covers f16, f32 and f64): there a bf16 product
    /// is computed from operands widened to f32 and rounded back, which is what a GPU's bf16 GEMM does (f32
    /// accumulation, a bf16 result).
    fn widens_products(&self) -> bool {
        self.dtype == DType::BF16 && self.device.is_cpu()
    }

    /// `a · b` (candle's broadcasting matmul) at the backend's width.
    fn mm(&self, a: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
        if self.widens_products() {
            let wide = |t: &Tensor| t.to_dtype(DType::F32);
            return wide(a)?.broadcast_matmul(&wide(b)?)?.to_dtype(self.dtype);
        }
        a.broadcast_matmul(b)
    }

    /// `x` as the backend's width.
    fn at_width(&self, x: Tensor) -> candle_core::Result<Tensor> {
        x.to_dtype(self.dtype)
    }
}

/// A linear layer with its weight stored transposed (`[in, out]`), ready for `x @ w`.
pub struct Linear {
    weight_t: Tensor,
    bias: Option<Tensor>,
}

/// What a mask depends on: (causal, window).
type MaskKey = (bool, Option<usize>);

/// A batch's layout: its cumulative lengths, the packed form unpadded attention reads, and the padded
/// rectangle, built only when a layer first pads (an unpadded batch never uploads it).
pub struct Seqs {
    batch: usize,
    len: usize,
    cu_seqlens: Vec<usize>,
    device: Device,
    padded: std::sync::OnceLock<PaddedLayout>,
    /// `[len, len]`: 0 where a query may see a key (causally, or within a window), a huge negative
    /// elsewhere; built when first needed, per (causal, window).
    masks: std::sync::Mutex<Vec<(MaskKey, Tensor)>>,
    /// For unpadded attention: the cumulative lengths and the kernel's tiles ([`varlen::tiles`]), `u32`.
    packed: Option<(Tensor, Tensor)>,
}

/// Where each packed row sits in the `[batch, len]` rectangle of padded attention.
struct PaddedLayout {
    /// For each of the `batch · len` padded slots, the packed row it reads (padding reads row 0).
    gather: Tensor,
    /// For each packed row, its padded slot.
    scatter: Tensor,
    /// `[batch, 1, 1, len]`: 0 for real keys, a huge negative for padding.
    key_mask: Tensor,
}

impl Seqs {
    /// The padded layout, uploaded the first time a layer asks for it.
    fn padded(&self) -> candle_core::Result<&PaddedLayout> {
        if let Some(p) = self.padded.get() {
            return Ok(p);
        }
        let (batch, len, cu) = (self.batch, self.len, &self.cu_seqlens);
        let mut gather = vec![0u32; batch * len];
        let mut scatter = Vec::with_capacity(cu.last().copied().unwrap_or(0));
        let mut key_mask = vec![f32::MIN; batch * len];
        for i in 0..batch {
            for (t, row) in (cu[i]..cu[i + 1]).enumerate() {
                gather[i * len + t] = row as u32;
                scatter.push((i * len + t) as u32);
                key_mask[i * len + t] = 0.0;
            }
        }
        let dev = &self.device;
        let rows = scatter.len();
        let layout = PaddedLayout {
            gather: Tensor::from_vec(gather, batch * len, dev)?,
            scatter: Tensor::from_vec(scatter, rows, dev)?,
            key_mask: Tensor::from_vec(key_mask, (batch, 1, 1, len), dev)?,
        };
        // A layer on another thread may have built it meanwhile; either copy is the same.
        Ok(self.padded.get_or_init(|| layout))
    }

    fn rows(&self) -> usize {
        self.cu_seqlens.last().copied().unwrap_or(0)
    }

    /// The `[len, len]` mask of what each query may see under `spec` (causal, windowed), cached.
    fn mask(&self, spec: &AttentionSpec, device: &Device) -> candle_core::Result<Tensor> {
        let key = (spec.causal, spec.window);
        let mut masks = self.masks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, m)) = masks.iter().find(|(k, _)| *k == key) {
            return Ok(m.clone());
        }
        let l = self.len;
        let m: Vec<f32> = (0..l * l)
            .map(|e| {
                let (lo, hi) = spec.visible(e / l, l);
                if (lo..hi).contains(&(e % l)) {
                    0.0
                } else {
                    f32::MIN
                }
            })
            .collect();
        let m = Tensor::from_vec(m, (l, l), device)?;
        masks.push((key, m.clone()));
        Ok(m)
    }
}

impl Activation {
    pub(crate) fn apply(self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Activation::QuickGelu => x * candle_nn::ops::sigmoid(&(x * 1.702)?)?,
            Activation::GeluErf => x.gelu_erf(),
            Activation::GeluTanh => x.gelu(),
            Activation::Relu => x.relu(),
            Activation::Silu => candle_nn::ops::silu(x),
            Activation::Tanh => x.tanh(),
        }
    }
}

/// Layer norm through candle's fused op, RMS norm as transformers computes it; both in f32 (the gains are
/// f32) and returned at `x`'s width.
fn candle_norm(x: &Tensor, n: &Norm<Tensor>) -> candle_core::Result<Tensor> {
    let wide = x.to_dtype(DType::F32)?;
    let y = match (n.kind, &n.bias) {
        (NormKind::Layer, Some(b)) => candle_nn::ops::layer_norm(&wide, &n.weight, b, n.eps),
        (NormKind::Layer, None) => candle_nn::ops::layer_norm(&wide, &n.weight, &n.weight.zeros_like()?, n.eps),
        (NormKind::Rms, _) => {
            let rms = (wide.sqr()?.mean_keepdim(1)? + n.eps as f64)?.sqrt()?;
            wide.broadcast_div(&rms)?.broadcast_mul(&n.weight)
        }
    }?;
    y.to_dtype(x.dtype())
}

/// `softmax(scores)` over the last axis in f32 (scores already f32, masks and biases added), returned at
/// `dtype` for the product with the values.
fn softmax_to(scores: &Tensor, dtype: DType) -> candle_core::Result<Tensor> {
    candle_nn::ops::softmax_last_dim(scores)?.to_dtype(dtype)
}

fn forward_err(e: candle_core::Error) -> ModelError {
    ModelError::Forward(e.to_string())
}

impl Ops for Candle {
    type T = Tensor;
    type Linear = Linear;
    type Param = Tensor;
    type Table = Tensor;
    type Seqs = Seqs;

    fn compute(&self) -> Compute {
        Compute::Candle
    }

    fn linear(&self, w: Tensor, b: Option<Tensor>, _name: &str) -> Result<Linear, ModelError> {
        let on_device = |t: Tensor| t.to_device(&self.device).and_then(|t| self.at_width(t));
        let weight_t = on_device(w).and_then(|w| w.t()?.contiguous()).map_err(weights)?;
        let bias = b.map(on_device).transpose().map_err(weights)?;
        Ok(Linear { weight_t, bias })
    }

    /// Kept in f32 at every width: norm gains and score biases are read in f32 arithmetic.
    fn param(&self, t: Tensor) -> Result<Tensor, ModelError> {
        t.to_device(&self.device).and_then(|t| t.to_dtype(DType::F32)).map_err(weights)
    }

    fn table(&self, t: Tensor) -> Result<Tensor, ModelError> {
        t.to_device(&self.device).and_then(|t| self.at_width(t)).map_err(weights)
    }

    fn linear_bytes(&self, l: &Linear) -> usize {
        self.dtype.size_in_bytes() * (l.weight_t.elem_count() + l.bias.as_ref().map_or(0, Tensor::elem_count))
    }

    fn param_bytes(&self, p: &Tensor) -> usize {
        p.dtype().size_in_bytes() * p.elem_count()
    }

    fn table_bytes(&self, t: &Tensor) -> usize {
        t.dtype().size_in_bytes() * t.elem_count()
    }

    fn empty(&self) -> Result<Tensor, ModelError> {
        Tensor::zeros((0, 0), self.dtype, &self.device).map_err(forward_err)
    }

    fn dims(&self, x: &Tensor) -> (usize, usize) {
        x.dims2().unwrap_or((0, 0))
    }

    fn upload(&self, rows: usize, cols: usize, data: Vec<f32>) -> Result<Tensor, ModelError> {
        Tensor::from_vec(data, (rows, cols), &self.device).and_then(|t| self.at_width(t)).map_err(forward_err)
    }

    fn host<'a>(&self, x: &'a Tensor) -> Result<Cow<'a, [f32]>, ModelError> {
        Ok(Cow::Owned(self.download(x.clone())?))
    }

    fn download(&self, x: Tensor) -> Result<Vec<f32>, ModelError> {
        x.flatten_all().and_then(|t| t.to_dtype(DType::F32)?.to_vec1::<f32>()).map_err(forward_err)
    }

    fn seqs(&self, cu_seqlens: &[usize]) -> Result<Seqs, ModelError> {
        let batch = cu_seqlens.len().saturating_sub(1);
        let len = (0..batch).map(|i| cu_seqlens[i + 1] - cu_seqlens[i]).max().unwrap_or(0);
        let unpadded = match self.attention {
            AttentionChoice::Padded => false,
            AttentionChoice::Unpadded => true,
            AttentionChoice::ByPadding => varlen::pays_off(cu_seqlens),
        };
        let dev = &self.device;
        let packed = if unpadded {
            let cu: Vec<u32> = cu_seqlens.iter().map(|&c| c as u32).collect();
            let tiles = varlen::tiles(cu_seqlens);
            let n = tiles.len();
            (|| {
                Ok::<_, candle_core::Error>((
                    Tensor::from_vec(cu, cu_seqlens.len(), dev)?,
                    Tensor::from_vec(tiles, n, dev)?,
                ))
            })()
            .map(Some)
            .map_err(forward_err)?
        } else {
            None
        };
        Ok(Seqs {
            batch,
            len,
            cu_seqlens: cu_seqlens.to_vec(),
            device: dev.clone(),
            padded: Default::default(),
            masks: Default::default(),
            packed,
        })
    }

    /// On the device, in f32: first or last rows picked, or a weighted sum per sequence (`index_add` by
    /// sequence), scaled by its total. Max pooling and empty sequences take the host's way.
    fn pool(&self, x: Tensor, cu_seqlens: &[usize], pooling: Pooling) -> Result<Vec<Vec<f32>>, ModelError> {
        let lens: Vec<usize> = cu_seqlens.windows(2).map(|w| w[1] - w[0]).collect();
        if pooling == Pooling::Max || lens.contains(&0) {
            let width = self.dims(&x).1;
            return Ok(pool_packed(&self.download(x)?, width, cu_seqlens, pooling));
        }
        let dev = &self.device;
        let rows = |r: Vec<u32>| -> candle_core::Result<Tensor> {
            let n = r.len();
            x.index_select(&Tensor::from_vec(r, n, dev)?, 0)?.to_dtype(DType::F32)
        };
        let run = || -> candle_core::Result<Tensor> {
            match pooling {
                Pooling::Cls => rows(cu_seqlens[..lens.len()].iter().map(|&c| c as u32).collect()),
                Pooling::LastToken => rows(cu_seqlens[1..].iter().map(|&c| c as u32 - 1).collect()),
                _ => {
                    let (tokens, width) = x.dims2()?;
                    let mut seq_of = Vec::with_capacity(tokens);
                    let mut weight = Vec::with_capacity(tokens);
                    for (i, &len) in lens.iter().enumerate() {
                        seq_of.extend(std::iter::repeat_n(i as u32, len));
                        weight.extend((1..=len).map(|t| if pooling == Pooling::WeightedMean { t as f32 } else { 1.0 }));
                    }
                    let total = |len: usize| match pooling {
                        Pooling::MeanSqrtLen => (len as f32).sqrt(),
                        Pooling::WeightedMean => (len * (len + 1) / 2) as f32,
                        _ => len as f32,
                    };
                    let inv: Vec<f32> = lens.iter().map(|&l| 1.0 / total(l)).collect();
                    let wide = x.to_dtype(DType::F32)?.broadcast_mul(&Tensor::from_vec(weight, (tokens, 1), dev)?)?;
                    let sums = Tensor::zeros((lens.len(), width), DType::F32, dev)?.index_add(
                        &Tensor::from_vec(seq_of, tokens, dev)?,
                        &wide,
                        0,
                    )?;
                    sums.broadcast_mul(&Tensor::from_vec(inv, (lens.len(), 1), dev)?)
                }
            }
        };
        let pooled = run().map_err(forward_err)?;
        self.download_rows(pooled)
    }

    fn embed(&self, out: &mut Tensor, width: usize, tables: &[(&Tensor, &[u32])]) -> Result<(), ModelError> {
        let mut sum: Option<Tensor> = None;
        for (table, ids) in tables {
            let rows = table.dims2().map_err(forward_err)?.0;
            if let Some(&id) = ids.iter().find(|&&id| id as usize >= rows) {
                return Err(ModelError::Forward(format!("id {id} is outside an embedding table")));
            }
            let idx = Tensor::new(*ids, &self.device).map_err(forward_err)?;
            let rows = table.index_select(&idx, 0).map_err(forward_err)?;
            sum = Some(match sum {
                None => rows,
                Some(s) => (s + rows).map_err(forward_err)?,
            });
        }
        *out = match sum {
            Some(s) => s,
            None => Tensor::zeros((0, width), self.dtype, &self.device).map_err(forward_err)?,
        };
        Ok(())
    }

    fn linear_fwd(&self, x: &Tensor, l: &Linear, post: Post<'_, Tensor>, out: &mut Tensor) -> Result<(), ModelError> {
        let run = || -> candle_core::Result<Tensor> {
            let mut y = self.mm(x, &l.weight_t)?;
            if let Some(b) = &l.bias {
                y = y.broadcast_add(b)?;
            }
            match post {
                Post::None => Ok(y),
                Post::Act(a) => a.apply(&y),
                Post::Residual(r) => y + r,
            }
        };
        *out = run().map_err(forward_err)?;
        Ok(())
    }

    fn activate(&self, x: &mut Tensor, act: Activation) -> Result<(), ModelError> {
        *x = act.apply(x).map_err(forward_err)?;
        Ok(())
    }

    fn add_rows(&self, x: &mut Tensor, table: &Tensor, ids: &[u32]) -> Result<(), ModelError> {
        let rows = table.dims2().map_err(forward_err)?.0;
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= rows) {
            return Err(ModelError::Forward(format!("id {id} is outside a table")));
        }
        let idx = Tensor::new(ids, &self.device).map_err(forward_err)?;
        *x = table.index_select(&idx, 0).and_then(|t| x.add(&t)).map_err(forward_err)?;
        Ok(())
    }

    fn gather_rows(&self, out: &mut Tensor, parts: &[&Tensor], rows: &[(u32, u32)]) -> Result<(), ModelError> {
        let mut offsets = Vec::with_capacity(parts.len());
        let mut total = 0u32;
        for p in parts {
            offsets.push(total);
            total += p.dims2().map_err(forward_err)?.0 as u32;
        }
        let mut idx = Vec::with_capacity(rows.len());
        for &(p, r) in rows {
            match (offsets.get(p as usize), parts.get(p as usize)) {
                (Some(&o), Some(t)) if (r as usize) < t.dim(0).map_err(forward_err)? => idx.push(o + r),
                _ => return Err(ModelError::Forward("a gathered row is out of range".into())),
            }
        }
        let run = || -> candle_core::Result<Tensor> {
            let all = if parts.len() == 1 { parts[0].contiguous()? } else { Tensor::cat(parts, 0)?.contiguous()? };
            let n = idx.len();
            all.index_select(&Tensor::from_vec(idx, n, &self.device)?, 0)
        };
        *out = run().map_err(forward_err)?;
        Ok(())
    }

    fn norm_to(&self, x: &Tensor, n: &Norm<Tensor>, out: &mut Tensor) -> Result<(), ModelError> {
        *out = candle_norm(x, n).map_err(forward_err)?;
        Ok(())
    }

    fn norm(&self, x: &mut Tensor, n: &Norm<Tensor>) -> Result<(), ModelError> {
        *x = candle_norm(x, n).map_err(forward_err)?;
        Ok(())
    }

    fn add_norm(&self, x: &mut Tensor, n: &Norm<Tensor>, acc: &mut Tensor) -> Result<(), ModelError> {
        *x = candle_norm(x, n).map_err(forward_err)?;
        *acc = (&*acc + &*x).map_err(forward_err)?;
        Ok(())
    }

    fn glu(&self, x: &Tensor, act: Activation, out: &mut Tensor) -> Result<(), ModelError> {
        let (_, w) = x.dims2().map_err(forward_err)?;
        if !w.is_multiple_of(2) {
            return Err(ModelError::Forward("a gated MLP's input has an odd width".into()));
        }
        let run = || -> candle_core::Result<Tensor> {
            let gate = act.apply(&x.narrow(1, 0, w / 2)?)?;
            gate * x.narrow(1, w / 2, w / 2)?
        };
        *out = run().map_err(forward_err)?;
        Ok(())
    }

    fn rotary(&self, qkv: &mut Tensor, spec: &AttentionSpec, cos: &Tensor, sin: &Tensor) -> Result<(), ModelError> {
        let (rows, cols) = qkv.dims2().map_err(forward_err)?;
        if cols != spec.qkv_width() || cos.dims2().map_err(forward_err)? != (rows, spec.head_dim / 2) {
            return Err(ModelError::Forward("rotary tables do not fit the attention input".into()));
        }
        let hd = spec.head_dim;
        let run = || -> candle_core::Result<Tensor> {
            let rope = |start: usize, heads: usize| -> candle_core::Result<Tensor> {
                let part = qkv.narrow(1, start * hd, heads * hd)?.reshape((1, rows, heads, hd))?.contiguous()?;
                candle_nn::rotary_emb::rope_thd(&part, cos, sin)?.reshape((rows, heads * hd))
            };
            let q = rope(0, spec.heads)?;
            let k = rope(spec.heads, spec.kv_heads)?;
            let v = qkv.narrow(1, (spec.heads + spec.kv_heads) * hd, spec.kv_heads * hd)?.contiguous()?;
            Tensor::cat(&[&q, &k, &v], 1)
        };
        *qkv = run().map_err(forward_err)?;
        Ok(())
    }

    fn head_norm(
        &self,
        qkv: &mut Tensor,
        spec: &AttentionSpec,
        q: &Norm<Tensor>,
        k: &Norm<Tensor>,
    ) -> Result<(), ModelError> {
        let (rows, cols) = qkv.dims2().map_err(forward_err)?;
        if cols != spec.qkv_width() || q.kind != NormKind::Rms || k.kind != NormKind::Rms {
            return Err(ModelError::Forward("head norms do not fit the attention input".into()));
        }
        let hd = spec.head_dim;
        let run = || -> candle_core::Result<Tensor> {
            let normed = |start: usize, heads: usize, n: &Norm<Tensor>| -> candle_core::Result<Tensor> {
                let part = qkv.narrow(1, start * hd, heads * hd)?.reshape((rows * heads, hd))?;
                candle_norm(&part, n)?.reshape((rows, heads * hd))
            };
            let v = qkv.narrow(1, (spec.heads + spec.kv_heads) * hd, spec.kv_heads * hd)?;
            Tensor::cat(&[&normed(0, spec.heads, q)?, &normed(spec.heads, spec.kv_heads, k)?, &v], 1)
        };
        *qkv = run().map_err(forward_err)?;
        Ok(())
    }

    fn reshape(&self, x: &mut Tensor, rows: usize, cols: usize) -> Result<(), ModelError> {
        *x = x.reshape((rows, cols)).map_err(forward_err)?;
        Ok(())
    }

    fn attention(
        &self,
        qkv: &Tensor,
        seqs: &Seqs,
        spec: &AttentionSpec,
        bias: ScoreBias<'_, Tensor>,
        out: &mut Tensor,
    ) -> Result<(), ModelError> {
        spec.check()?;
        if seqs.packed.is_some() && !matches!(bias, ScoreBias::Disentangled(_)) && spec.head_dim <= varlen::MAX_HEAD_DIM
        {
            *out = self.unpadded_attention(qkv, seqs, spec, bias)?;
            return Ok(());
        }
        let disentangled = match &bias {
            ScoreBias::Disentangled(d) => {
                d.check(seqs.len, |t| t.dim(0).unwrap_or(0))?;
                Some(*d)
            }
            _ => None,
        };
        // The relative bias as `[heads, len, len]`, gathered on the host.
        let relative = match &bias {
            ScoreBias::Relative(b) => {
                b.check(spec.heads, seqs.len)?;
                let (l, w) = (seqs.len, 2 * b.span - 1);
                let rows: Vec<f32> = (0..spec.heads * l * l)
                    .map(|e| {
                        let (head, i, j) = (e / (l * l), e / l % l, e % l);
                        b.table[head * w + j + b.span - 1 - i]
                    })
                    .collect();
                Some(Tensor::from_vec(rows, (1, spec.heads, l, l), &self.device).map_err(forward_err)?)
            }
            _ => None,
        };
        let (b, l) = (seqs.batch, seqs.len);
        let AttentionSpec { heads, kv_heads, head_dim: hd, .. } = *spec;
        let run = || -> candle_core::Result<Tensor> {
            let layout = seqs.padded()?;
            let padded = qkv.contiguous()?.index_select(&layout.gather, 0)?.reshape((b, l, spec.qkv_width()))?;
            // [b, l, n·hd] columns from `start` heads on → [b, n, l, hd].
            let part = |start: usize, n: usize| -> candle_core::Result<Tensor> {
                padded.narrow(2, start * hd, n * hd)?.reshape((b, l, n, hd))?.transpose(1, 2)?.contiguous()
            };
            let q = (part(0, heads)? * spec.scale as f64)?;
            let (mut k, mut v) = (part(heads, kv_heads)?, part(heads + kv_heads, kv_heads)?);
            if kv_heads < heads {
                let r = heads / kv_heads;
                let repeat = |t: Tensor| -> candle_core::Result<Tensor> {
                    t.unsqueeze(2)?.expand((b, kv_heads, r, l, hd))?.reshape((b, heads, l, hd))
                };
                k = repeat(k)?;
                v = repeat(v)?;
            }
            // Scores, masks and softmax in f32; the products at the backend's width.
            let mut scores = self.mm(&q, &k.t()?)?.to_dtype(DType::F32)?.broadcast_add(&layout.key_mask)?;
            if let Some(d) = &disentangled {
                // `q` is already scaled; the key side is scaled here, as both terms share the one scale.
                scores = (scores + self.disentangled(d, &q, &(k.clone() * spec.scale as f64)?, spec, b, l)?)?;
            }
            if let Some(r) = &relative {
                scores = scores.broadcast_add(r)?;
            }
            if spec.causal || spec.window.is_some() {
                scores = scores.broadcast_add(&seqs.mask(spec, &self.device)?)?;
            }
            let probs = softmax_to(&scores, self.dtype)?;
            let ctx = self.mm(&probs, &v.contiguous()?)?.transpose(1, 2)?.reshape((b * l, spec.out_width()))?;
            ctx.index_select(&layout.scatter, 0)
        };
        let dims = qkv.dims2().map_err(forward_err)?;
        if dims.1 != spec.qkv_width() || dims.0 != seqs.rows() {
            return Err(ModelError::Forward("attention input does not fit its layout".into()));
        }
        *out = run().map_err(forward_err)?;
        Ok(())
    }

    fn pooled_attention(
        &self,
        q: &Tensor,
        kv: &Tensor,
        seqs: &Seqs,
        spec: &AttentionSpec,
        out: &mut Tensor,
    ) -> Result<(), ModelError> {
        spec.check()?;
        let (b, l) = (seqs.batch, seqs.len);
        let AttentionSpec { heads, kv_heads, head_dim: hd, .. } = *spec;
        if q.dims2().map_err(forward_err)? != (b, heads * hd)
            || kv.dims2().map_err(forward_err)? != (seqs.rows(), 2 * kv_heads * hd)
        {
            return Err(ModelError::Forward("pooled attention inputs do not fit their layout".into()));
        }
        let run = || -> candle_core::Result<Tensor> {
            let layout = seqs.padded()?;
            let padded = kv.contiguous()?.index_select(&layout.gather, 0)?.reshape((b, l, 2 * kv_heads * hd))?;
            let part = |start: usize| -> candle_core::Result<Tensor> {
                let t = padded.narrow(2, start * hd, kv_heads * hd)?.reshape((b, l, kv_heads, hd))?.transpose(1, 2)?;
                if kv_heads < heads {
                    let r = heads / kv_heads;
                    t.unsqueeze(2)?.expand((b, kv_heads, r, l, hd))?.reshape((b, heads, l, hd))
                } else {
                    t.contiguous()
                }
            };
            let (k, v) = (part(0)?, part(kv_heads)?);
            let q = (q.reshape((b, heads, 1, hd))? * spec.scale as f64)?;
            let scores = self.mm(&q, &k.t()?)?.to_dtype(DType::F32)?.broadcast_add(&layout.key_mask)?;
            let probs = softmax_to(&scores, self.dtype)?;
            self.mm(&probs, &v)?.reshape((b, heads * hd))
        };
        *out = run().map_err(forward_err)?;
        Ok(())
    }

    fn window_attention(
        &self,
        qkv: &Tensor,
        n: usize,
        spec: &AttentionSpec,
        bias: &Tensor,
        groups: Option<&[u32]>,
        out: &mut Tensor,
    ) -> Result<(), ModelError> {
        spec.check()?;
        let (rows, cols) = qkv.dims2().map_err(forward_err)?;
        let AttentionSpec { heads, kv_heads, head_dim: hd, .. } = *spec;
        if n == 0 || kv_heads != heads || cols != spec.qkv_width() || !rows.is_multiple_of(n) {
            return Err(ModelError::Forward("window attention inputs do not fit their layout".into()));
        }
        let windows = rows / n;
        let run = || -> candle_core::Result<Tensor> {
            let qkv = qkv.contiguous()?.reshape((windows, n, 3, heads, hd))?;
            let split = |i: usize| -> candle_core::Result<Tensor> {
                qkv.narrow(2, i, 1)?.squeeze(2)?.transpose(1, 2)?.contiguous()
            };
            let q = (split(0)? * spec.scale as f64)?;
            let (k, v) = (split(1)?, split(2)?);
            let mut scores =
                self.mm(&q, &k.t()?)?.to_dtype(DType::F32)?.broadcast_add(&bias.reshape((1, heads, n, n))?)?;
            if let Some(g) = groups {
                let mask: Vec<f32> = (0..windows * n * n)
                    .map(|e| {
                        let (w, i, j) = (e / (n * n), e / n % n, e % n);
                        if g[w * n + i] == g[w * n + j] {
                            0.0
                        } else {
                            -100.0
                        }
                    })
                    .collect();
                scores = scores.broadcast_add(&Tensor::from_vec(mask, (windows, 1, n, n), &self.device)?)?;
            }
            let probs = softmax_to(&scores, self.dtype)?;
            self.mm(&probs, &v)?.transpose(1, 2)?.reshape((rows, heads * hd))
        };
        if groups.is_some_and(|g| g.len() != rows) {
            return Err(ModelError::Forward("one group label per row is needed".into()));
        }
        *out = run().map_err(forward_err)?;
        Ok(())
    }
}
