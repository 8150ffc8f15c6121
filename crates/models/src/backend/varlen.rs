//! Attention over packed sequences, without padding, for the candle backend: flash-attention 2's semantics
//! (cumulative lengths; bidirectional or causal; sliding windows; grouped-query heads; head dims up to 256)
//! plus a bias by offset (MPNet's relative buckets, JinaBERT's ALiBi). DeBERTa's disentangled terms keep the
//! padded path.
//!
//! On a GPU it is kernels/varlen_attention.cu, compiled at run time with NVRTC (nothing added to the build;
//! `scripts/nvrtc_check.py` compiles it in CI, where there is no GPU). On candle's CPU device the same
//! computation runs in Rust ([`VarlenAttention::cpu_fwd`]): the reference the tests hold the op to, beside
//! the padded path. Both stage values in f32, scale the query before the product, and take the online
//! softmax's result back to the activations' width. docs/gpu-attention.md says why this kernel and not
//! candle-flash-attn.

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};

use super::{AttentionSpec, RelativeBias};

/// Queries per tile: one warp each in the kernel (its `WARPS`).
const WARPS: usize = 8;

/// The widest head the kernel stages (its `MAX_PER_LANE` · 32).
pub const MAX_HEAD_DIM: usize = 256;

/// Which attention candle runs for the families without disentangled terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttentionKernel {
    /// On a GPU, unpadded for the batches that padding would cost most ([`pays_off`]); padded on the CPU
    /// (candle's CPU GEMM makes the padded path the faster there). `ALEPH_ATTENTION=padded|unpadded|auto`
    /// overrides it.
    #[default]
    Auto,
    /// Each batch padded to its longest sequence, with a key mask: batched GEMMs.
    Padded,
    /// Sequences packed end to end (this module), every batch.
    Unpadded,
}

/// What a backend does per batch, once [`AttentionKernel`] is resolved for its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionChoice {
    Padded,
    Unpadded,
    /// Unpadded where [`pays_off`].
    ByPadding,
}

impl AttentionKernel {
    /// The choice on a GPU (`on_gpu`) or the CPU.
    pub fn resolve(self, on_gpu: bool) -> Result<AttentionChoice, String> {
        let asked = match std::env::var("ALEPH_ATTENTION").as_deref() {
            _ if self != AttentionKernel::Auto => self,
            Ok("padded") => AttentionKernel::Padded,
            Ok("unpadded") => AttentionKernel::Unpadded,
            Ok("auto") | Err(_) => AttentionKernel::Auto,
            Ok(other) => return Err(format!("ALEPH_ATTENTION is `{other}`: padded, unpadded or auto")),
        };
        Ok(match asked {
            AttentionKernel::Padded => AttentionChoice::Padded,
            AttentionKernel::Unpadded => AttentionChoice::Unpadded,
            AttentionKernel::Auto if on_gpu => AttentionChoice::ByPadding,
            AttentionKernel::Auto => AttentionChoice::Padded,
        })
    }
}

/// How many times the unpadded kernel's work a padded batch's attention must be before the kernel is used. The
/// padded path multiplies on tensor cores but reads and writes every padded score several times; the kernel
/// computes on CUDA cores. 3 is an estimate from the H100's figures (docs/gpu-attention.md), to be replaced by
/// `scripts/gpu-check.sh`'s measurement of both.
const PADDED_COST_RATIO: usize = 3;

/// Whether a batch (`cu_seqlens`) is better served unpadded: its padded attention (`batch · longest²` scores)
/// costs at least [`PADDED_COST_RATIO`] times its packed one (`Σ len²`).
pub fn pays_off(cu_seqlens: &[usize]) -> bool {
    let lens = cu_seqlens.windows(2).map(|w| w[1] - w[0]);
    let longest = lens.clone().max().unwrap_or(0);
    let packed: usize = lens.map(|l| l * l).sum();
    (cu_seqlens.len().saturating_sub(1)) * longest * longest >= PADDED_COST_RATIO * packed.max(1)
}

/// `(sequence, first query)` of each tile of [`WARPS`] queries, every tile within one sequence: the kernel's
/// grid, flattened.
pub fn tiles(cu_seqlens: &[usize]) -> Vec<u32> {
    let mut out = Vec::new();
    for (s, w) in cu_seqlens.windows(2).enumerate() {
        for q0 in (0..w[1] - w[0]).step_by(WARPS) {
            out.extend([s as u32, q0 as u32]);
        }
    }
    out
}

/// The op: `qkv` (`[tokens, qkv_width]`, the fused layout of [`AttentionSpec`]) to `[tokens, heads · head_dim]`.
pub struct VarlenAttention {
    pub spec: AttentionSpec,
    /// `u32 [batch + 1]` on the op's device.
    pub cu: Tensor,
    /// `u32 [2 · tiles]` ([`tiles`]) on the op's device.
    pub tiles: Tensor,
    /// A bias by offset, `f32 [heads · (2·span − 1)]` on the op's device, and its span.
    pub relative: Option<(Tensor, usize)>,
}

impl VarlenAttention {
    pub fn new(
        spec: AttentionSpec,
        cu: Tensor,
        tiles: Tensor,
        relative: Option<&RelativeBias<'_>>,
    ) -> candle_core::Result<Self> {
        if spec.head_dim > MAX_HEAD_DIM || spec.kv_heads == 0 || !spec.heads.is_multiple_of(spec.kv_heads) {
            candle_core::bail!("unpadded attention takes head dims up to {MAX_HEAD_DIM} and whole query groups");
        }
        let relative = match relative {
            Some(r) => Some((Tensor::from_slice(r.table, r.table.len(), cu.device())?, r.span)),
            None => None,
        };
        Ok(VarlenAttention { spec, cu, tiles, relative })
    }

    /// The rows `qkv` holds, checked against the layout.
    fn tokens(&self, layout: &Layout) -> candle_core::Result<usize> {
        match layout.shape().dims() {
            &[tokens, width] if width == self.spec.qkv_width() && layout.is_contiguous() => Ok(tokens),
            dims => candle_core::bail!("unpadded attention: qkv {dims:?} does not fit {:?}", self.spec),
        }
    }

    /// The computation on the host, element type `E` read and written through `load` and `store`.
    fn host<E: Copy>(
        &self,
        qkv: &[E],
        tokens: usize,
        load: impl Fn(E) -> f32,
        store: impl Fn(f32) -> E,
    ) -> candle_core::Result<Vec<E>> {
        let AttentionSpec { heads, kv_heads, head_dim: hd, scale, .. } = self.spec;
        let cu = self.cu.to_vec1::<u32>()?;
        let relative = match &self.relative {
            Some((t, span)) => Some((t.to_vec1::<f32>()?, *span)),
            None => None,
        };
        if cu.last().copied() != Some(tokens as u32) || cu.windows(2).any(|w| w[0] > w[1]) {
            candle_core::bail!("unpadded attention: cumulative lengths {cu:?} do not cover {tokens} rows");
        }
        let width = self.spec.qkv_width();
        let group = heads / kv_heads;
        let mut out = vec![store(0.0); tokens * heads * hd];
        let (mut q, mut scores) = (vec![0f32; hd], Vec::new());
        for w in cu.windows(2) {
            let (start, n) = (w[0] as usize, (w[1] - w[0]) as usize);
            for head in 0..heads {
                let kv = head / group;
                let (k_col, v_col) = ((heads + kv) * hd, (heads + kv_heads + kv) * hd);
                for i in 0..n {
                    let row = (start + i) * width;
                    for (d, x) in q.iter_mut().enumerate() {
                        *x = load(qkv[row + head * hd + d]) * scale;
                    }
                    let (lo, hi) = self.spec.visible(i, n);
                    scores.clear();
                    for j in lo..hi {
                        let k = &qkv[(start + j) * width + k_col..][..hd];
                        let mut s: f32 = q.iter().zip(k).map(|(a, &b)| a * load(b)).sum();
                        if let Some((table, span)) = &relative {
                            s += table[head * (2 * span - 1) + j + span - 1 - i];
                        }
                        scores.push(s);
                    }
                    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let mut sum = 0f32;
                    for s in scores.iter_mut() {
                        *s = (*s - max).exp();
                        sum += *s;
                    }
                    let o = &mut out[(start + i) * heads * hd + head * hd..][..hd];
                    for (d, o) in o.iter_mut().enumerate() {
                        let acc: f32 =
                            (lo..hi).zip(&scores).map(|(j, p)| p * load(qkv[(start + j) * width + v_col + d])).sum();
                        *o = store(acc / sum);
                    }
                }
            }
        }
        Ok(out)
    }
}

impl CustomOp1 for VarlenAttention {
    fn name(&self) -> &'static str {
        "varlen-attention"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let tokens = self.tokens(layout)?;
        let (a, b) = layout.contiguous_offsets().unwrap_or((0, 0));
        let out = match storage {
            CpuStorage::F32(v) => CpuStorage::F32(self.host(&v[a..b], tokens, |x| x, |x| x)?),
            CpuStorage::F16(v) => {
                CpuStorage::F16(self.host(&v[a..b], tokens, half::f16::to_f32, half::f16::from_f32)?)
            }
            CpuStorage::BF16(v) => {
                CpuStorage::BF16(self.host(&v[a..b], tokens, half::bf16::to_f32, half::bf16::from_f32)?)
            }
            other => {
                candle_core::bail!("unpadded attention over {:?}", candle_core::backend::BackendStorage::dtype(other))
            }
        };
        Ok((out, Shape::from((tokens, self.spec.out_width()))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        storage: &candle_core::cuda::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::cuda::CudaStorage, Shape)> {
        use candle_core::backend::BackendStorage;
        use candle_core::cuda::CudaStorageSlice;
        let tokens = self.tokens(layout)?;
        let out = match &storage.slice {
            CudaStorageSlice::F32(s) => cuda::run(self, &storage.device, s, layout, tokens, "varlen_attention_f32")?,
            CudaStorageSlice::F16(s) => cuda::run(self, &storage.device, s, layout, tokens, "varlen_attention_f16")?,
            CudaStorageSlice::BF16(s) => cuda::run(self, &storage.device, s, layout, tokens, "varlen_attention_bf16")?,
            _ => candle_core::bail!("unpadded attention over {:?}", storage.dtype()),
        };
        Ok((out, Shape::from((tokens, self.spec.out_width()))))
    }
}

/// The kernel's launch on candle's CUDA device.
#[cfg(feature = "cuda")]
pub mod cuda {
    use std::sync::OnceLock;

    use candle_core::cuda::cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits};
    use candle_core::cuda::{CudaDType, CudaDevice, CudaStorage, WrapErr};
    use candle_core::{Layout, Storage, Tensor};

    use super::{VarlenAttention, WARPS};

    const SOURCE: &str = include_str!("kernels/varlen_attention.cu");
    /// Shared memory a block may take without opting in to more.
    const SHARED_LIMIT: usize = 48 * 1024;

    /// The kernel's PTX, compiled once per process.
    fn ptx() -> candle_core::Result<&'static str> {
        static PTX: OnceLock<Result<String, String>> = OnceLock::new();
        PTX.get_or_init(|| {
            candle_core::cuda::cudarc::nvrtc::compile_ptx(SOURCE)
                .map(|p| p.to_src())
                .map_err(|e| format!("NVRTC could not compile the unpadded attention kernel: {e}"))
        })
        .as_deref()
        .map_err(|e| candle_core::Error::Msg(e.clone()))
    }

    /// Compiles the kernel and loads it on `device`: done at a model's load, so a failure names itself there.
    pub fn prepare(device: &candle_core::Device) -> candle_core::Result<()> {
        if let candle_core::Device::Cuda(d) = device {
            d.get_or_load_custom_func("varlen_attention_f32", "aleph_varlen_attention", ptx()?)?;
        }
        Ok(())
    }

    /// Keys staged per chunk for `hd`-wide heads (32, one per lane, where the shared memory allows), and the
    /// dynamic shared memory that takes (the kernel's layout).
    fn chunk(hd: usize) -> candle_core::Result<(usize, usize)> {
        let bytes = |kc: usize| 4 * (kc * (hd + 1) + kc * hd + WARPS * hd + WARPS * 32);
        match [32, 16].into_iter().find(|&kc| bytes(kc) <= SHARED_LIMIT) {
            Some(kc) => Ok((kc, bytes(kc))),
            None => candle_core::bail!("unpadded attention: heads of {hd} do not fit the kernel's shared memory"),
        }
    }

    /// The `u32` or `f32` slice a device tensor holds (contiguous from its start).
    fn slice_of<T: CudaDType>(storage: &Storage) -> candle_core::Result<&CudaSlice<T>> {
        match storage {
            Storage::Cuda(s) => s.as_cuda_slice::<T>(),
            _ => candle_core::bail!("unpadded attention: an index tensor is not on the GPU"),
        }
    }

    fn guard(t: &Tensor) -> candle_core::Result<std::sync::RwLockReadGuard<'_, Storage>> {
        let (storage, layout) = t.storage_and_layout();
        if !layout.is_contiguous() || layout.start_offset() != 0 {
            candle_core::bail!("unpadded attention: an index tensor is a view");
        }
        Ok(storage)
    }

    pub(super) fn run<T: CudaDType + DeviceRepr + ValidAsZeroBits>(
        op: &VarlenAttention,
        device: &CudaDevice,
        qkv: &CudaSlice<T>,
        layout: &Layout,
        tokens: usize,
        name: &str,
    ) -> candle_core::Result<CudaStorage> {
        let spec = op.spec;
        let (kc, shared) = chunk(spec.head_dim)?;
        let qkv = qkv.slice(layout.start_offset()..);
        let mut out = device.alloc_zeros::<T>(tokens * spec.out_width())?;
        let n_tiles = op.tiles.elem_count() / 2;
        if n_tiles == 0 {
            return Ok(CudaStorage::wrap_cuda_slice(out, device.clone()));
        }
        let (cu, tiles) = (guard(&op.cu)?, guard(&op.tiles)?);
        let relative =
            op.relative.as_ref().map(|(t, span)| Ok::<_, candle_core::Error>((guard(t)?, *span))).transpose()?;
        // The kernel reads the table only when `span > 0`; without one it gets a one-float stand-in.
        let stand_in = device.alloc_zeros::<f32>(1)?;
        let (table, span) = match &relative {
            Some((t, span)) => (slice_of::<f32>(t)?, *span as i32),
            None => (&stand_in, 0),
        };
        let func = device.get_or_load_custom_func(name, "aleph_varlen_attention", ptx()?)?;
        let (heads, kv_heads, hd) = (spec.heads as i32, spec.kv_heads as i32, spec.head_dim as i32);
        let (causal, window, kc) = (spec.causal as i32, spec.window.map_or(-1, |w| w as i32), kc as i32);
        let cfg = LaunchConfig {
            grid_dim: (n_tiles as u32, spec.heads as u32, 1),
            block_dim: (32 * WARPS as u32, 1, 1),
            shared_mem_bytes: shared as u32,
        };
        let mut launch = func.builder();
        launch.arg(&qkv).arg(&mut out).arg(slice_of::<u32>(&cu)?).arg(slice_of::<u32>(&tiles)?).arg(table);
        launch.arg(&span).arg(&heads).arg(&kv_heads).arg(&hd).arg(&spec.scale).arg(&causal).arg(&window).arg(&kc);
        // SAFETY: the arguments are the kernel's, in its order and types (pointers to T, T, u32, u32 and
        // f32; then i32s and an f32). `qkv` holds `tokens` rows of `qkv_width`, `out` `tokens` rows of
        // `out_width` (checked by `tokens()`); `cu` ends at `tokens` (the packed layout's own offsets) and every
        // tile names a sequence of `cu` and a query inside it ([`super::tiles`]); the table, when used, has
        // `heads · (2·span − 1)` floats (RelativeBias::check ran before). The shared memory is `chunk`'s.
        unsafe { launch.launch(cfg) }.w()?;
        Ok(CudaStorage::wrap_cuda_slice(out, device.clone()))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device};

    use super::super::candle::Candle;
    use super::super::{AttentionSpec, Ops, RelativeBias, ScoreBias};
    use super::*;

    /// Seeded values in [-2, 2).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((x >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
            })
            .collect()
    }

    /// Attention on candle's CPU device at `dtype`, padded or not, as f32 rows.
    fn attend(
        spec: &AttentionSpec,
        lens: &[usize],
        bias: ScoreBias<'_, Tensor>,
        dtype: DType,
        unpadded: bool,
    ) -> Vec<f32> {
        let choice = if unpadded { AttentionChoice::Unpadded } else { AttentionChoice::Padded };
        let ops = Candle::with_dtype(Device::Cpu, dtype).unwrap().with_attention(choice).unwrap();
        let cu: Vec<usize> =
            std::iter::once(0).chain(lens.iter().scan(0, |c, l| Some(*c + l).inspect(|v| *c = *v))).collect();
        let tokens = *cu.last().unwrap();
        let qkv = ops.upload(tokens, spec.qkv_width(), values(tokens * spec.qkv_width(), 7)).unwrap();
        let seqs = ops.seqs(&cu).unwrap();
        let mut out = ops.empty().unwrap();
        ops.attention(&qkv, &seqs, spec, bias, &mut out).unwrap();
        assert_eq!(ops.dims(&out), (tokens, spec.out_width()));
        ops.download(out).unwrap()
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
    }

    fn spec(heads: usize, kv_heads: usize, head_dim: usize, causal: bool, window: Option<usize>) -> AttentionSpec {
        let scale = 1.0 / (head_dim as f32).sqrt();
        AttentionSpec { heads, kv_heads, head_dim, scale, causal, window }
    }

    const LENS: [usize; 5] = [1, 5, 17, 9, 8];

    #[test]
    fn tiles_cover_every_query_once_within_its_sequence() {
        let t = tiles(&[0, 1, 6, 23, 23, 31]);
        let pairs: Vec<(u32, u32)> = t.chunks(2).map(|p| (p[0], p[1])).collect();
        assert_eq!(pairs, [(0, 0), (1, 0), (2, 0), (2, 8), (2, 16), (4, 0)]);
    }

    #[test]
    fn unpadded_attention_computes_what_the_padded_path_does() {
        let cases = [
            spec(2, 2, 8, false, None),
            spec(4, 2, 40, true, None),
            spec(2, 2, 16, false, Some(2)),
            spec(4, 1, 16, true, Some(3)),
            spec(2, 2, 256, false, None),
            spec(1, 1, 64, true, None),
        ];
        for s in &cases {
            let want = attend(s, &LENS, ScoreBias::None, DType::F32, false);
            let got = attend(s, &LENS, ScoreBias::None, DType::F32, true);
            let d = max_diff(&got, &want);
            assert!(d < 1e-5, "{s:?}: {d}");
        }
    }

    #[test]
    fn a_bias_by_offset_is_added_as_the_padded_path_adds_it() {
        let s = spec(3, 3, 8, false, None);
        let span = 17;
        let table = values(3 * (2 * span - 1), 11);
        let bias = || ScoreBias::Relative(RelativeBias { table: &table, span });
        let want = attend(&s, &LENS, bias(), DType::F32, false);
        let got = attend(&s, &LENS, bias(), DType::F32, true);
        assert!(max_diff(&got, &want) < 1e-5, "{}", max_diff(&got, &want));
        // The bias matters: without it the answer differs.
        assert!(max_diff(&attend(&s, &LENS, ScoreBias::None, DType::F32, true), &want) > 1e-2);
    }

    #[test]
    fn half_precision_stays_within_its_rounding() {
        let s = spec(4, 2, 32, true, None);
        let want = attend(&s, &LENS, ScoreBias::None, DType::F32, true);
        for (dtype, tol) in [(DType::F16, 5e-3), (DType::BF16, 4e-2)] {
            let got = attend(&s, &LENS, ScoreBias::None, dtype, true);
            let padded = attend(&s, &LENS, ScoreBias::None, dtype, false);
            assert!(max_diff(&got, &want) < tol, "{dtype:?}: {}", max_diff(&got, &want));
            assert!(max_diff(&padded, &want) < tol, "{dtype:?} padded: {}", max_diff(&padded, &want));
        }
    }

    #[test]
    fn what_the_kernel_cannot_take_is_refused() {
        let dev = Device::Cpu;
        let cu = Tensor::from_vec(vec![0u32, 2], 2, &dev).unwrap();
        let t = Tensor::from_vec(tiles(&[0, 2]), 2, &dev).unwrap();
        assert!(VarlenAttention::new(spec(2, 2, 512, false, None), cu.clone(), t.clone(), None).is_err());
        assert!(VarlenAttention::new(spec(3, 2, 8, false, None), cu.clone(), t.clone(), None).is_err());
        // qkv of the wrong width.
        let op = VarlenAttention::new(spec(2, 2, 8, false, None), cu, t, None).unwrap();
        let qkv = Tensor::zeros((2, 40), DType::F32, &dev).unwrap();
        assert!(qkv.apply_op1_no_bwd(&op).is_err());
    }

    #[test]
    fn explicit_choices_win_over_the_device() {
        assert_eq!(AttentionKernel::Padded.resolve(true), Ok(AttentionChoice::Padded));
        assert_eq!(AttentionKernel::Unpadded.resolve(false), Ok(AttentionChoice::Unpadded));
    }

    #[test]
    fn unpadded_pays_off_where_padding_would_multiply_the_work() {
        // One long sequence among short ones: 4 · 64² padded scores against 64² + 3 · 4².
        assert!(pays_off(&[0, 64, 68, 72, 76]));
        // Equal lengths: padding costs nothing.
        assert!(!pays_off(&[0, 32, 64, 96]));
        // Close lengths: not enough to pay for CUDA cores.
        assert!(!pays_off(&[0, 30, 62, 90]));
        assert!(!pays_off(&[0]));
    }
}
