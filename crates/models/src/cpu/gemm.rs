//! Single-precision GEMM, `C = A · B` with a fused epilogue, in the BLIS style: `B` is packed into
//! column panels as wide as the micro-kernel (weights once, at load), and a register-blocked
//! micro-kernel does the multiply-adds reading rows of `A` in place (a chunk of `A` stays in L2), deep
//! blocks at a time, prefetching `B`'s panel ahead of its loads.
//!
//! Kernels: AVX-512 14×32 (28 accumulators of the 32 registers), AVX2+FMA 6×16, and a portable 4×8.
//! Threads split the rows of `C` (and its columns when there are few rows) on the compute pool.

use std::cell::RefCell;

use rayon::prelude::*;

use super::ops;
use super::Isa;

/// Most depth of one block: every pass over `C` reads and writes all of it, so few deep passes beat many
/// shallow ones; the `KC × NR` panel of `B` then lives in L2, streamed to L1 by the kernel's prefetches.
/// Measured on Sapphire Rapids (2 threads, 2048×1024×3072): 256 deep 290, 1024 deep 330 GFLOP/s.
const KC: usize = 1024;

/// Panels of `B` a thread sweeps from which the AVX-512 kernel reads `A` packed in micro-panel order (one
/// sequential stream instead of 14 rows a page apart): the copy pays for itself only over many panels.
/// Measured on Sapphire Rapids (2 threads, three rounds alternating): n = 3072-6144 +3-14 %, n = 2048 within
/// noise, n = 1024-1536 1-4 % slower.
const PACK_A_FROM: usize = 64;

impl Isa {
    /// Micro-kernel rows.
    pub fn mr(self) -> usize {
        match self {
            Isa::Avx512 => 14,
            Isa::Avx2 => 6,
            Isa::Scalar => 4,
        }
    }

    /// Micro-kernel columns.
    pub fn nr(self) -> usize {
        match self {
            Isa::Avx512 => 32,
            Isa::Avx2 => 16,
            Isa::Scalar => 8,
        }
    }

    /// Rows of `A` swept per pass over the panels of `B` at depth `kc` (a multiple of `mr`): at most 16
    /// micro-panels, and at most 512 KiB of `A`, so it stays in a 1 MiB L2 beside B's panel.
    fn mc(self, kc: usize) -> usize {
        let fit = (512 << 10) / (4 * kc.max(1)) / self.mr();
        self.mr() * fit.clamp(1, 16)
    }
}

/// `B` (`k × n`) packed into panels of `nr` columns: element `(kk, j)` of panel `p` sits at
/// `p·k·nr + kk·nr + (j − p·nr)`. Columns past `n` are zero.
#[derive(Debug, Clone, Default)]
pub struct PackedB {
    k: usize,
    n: usize,
    nr: usize,
    data: Vec<f32>,
}

impl PackedB {
    /// Packs the `k × n` matrix whose element `(kk, j)` is `src[kk·s_k + j·s_n]`. A weight stored
    /// `[out, in]` (as checkpoints do) is `B` with `s_k = 1, s_n = in`.
    pub fn pack(k: usize, n: usize, src: &[f32], s_k: usize, s_n: usize) -> Self {
        let mut p = PackedB::default();
        p.repack(k, n, src, s_k, s_n);
        p
    }

    /// Like [`PackedB::pack`], reusing this buffer.
    pub fn repack(&mut self, k: usize, n: usize, src: &[f32], s_k: usize, s_n: usize) {
        let nr = Isa::get().nr();
        let panels = n.div_ceil(nr);
        self.k = k;
        self.n = n;
        self.nr = nr;
        self.data.clear();
        self.data.resize(panels * k * nr, 0.0);
        for p in 0..panels {
            let cols = nr.min(n - p * nr);
            let panel = &mut self.data[p * k * nr..(p + 1) * k * nr];
            if s_k == 1 {
                // Column-major source (a weight `[out, in]`): walk each column contiguously.
                for j in 0..cols {
                    let col = &src[(p * nr + j) * s_n..];
                    for kk in 0..k {
                        panel[kk * nr + j] = col[kk];
                    }
                }
            } else {
                for kk in 0..k {
                    let row = &src[kk * s_k + p * nr * s_n..];
                    for j in 0..cols {
                        panel[kk * nr + j] = row[j * s_n];
                    }
                }
            }
        }
    }

    /// Bytes held by the packed panels.
    pub fn bytes(&self) -> usize {
        4 * self.data.len()
    }

    pub fn k(&self) -> usize {
        self.k
    }

    pub fn n(&self) -> usize {
        self.n
    }

    fn panel(&self, p: usize) -> &[f32] {
        &self.data[p * self.k * self.nr..(p + 1) * self.k * self.nr]
    }
}

/// What happens to each tile of `C` once its sums are complete.
#[derive(Clone, Copy)]
pub enum Epilogue<'a> {
    None,
    /// `c += bias[col]`
    Bias(&'a [f32]),
    /// `c = gelu(c + bias[col])` (erf form)
    BiasGelu(&'a [f32]),
    /// `c += bias[col] + residual[row, col]`; `residual` has `C`'s row stride.
    BiasResidual(&'a [f32], &'a [f32]),
}

/// Row-major `A`: `rows × cols`, row `i` starting at `data[i·ld]`.
#[derive(Clone, Copy)]
pub struct MatRef<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
}

/// Where `C` goes. Threads write disjoint tiles through the raw pointer.
#[derive(Clone, Copy)]
pub(crate) struct Out {
    pub ptr: *mut f32,
    pub ld: usize,
}

// SAFETY: `Out` is a pointer and a stride; the GEMMs hand it to tasks that write disjoint tiles of `C`
// (`split_tiles`), so moving it to another thread races with nothing.
unsafe impl Send for Out {}
// SAFETY: as for `Send`: shared between the tasks of one product, each of which writes only its own tiles.
unsafe impl Sync for Out {}

thread_local! {
    /// A short micro-panel's zero-padded rows, and the chunk of `A` packed in micro-panel order.
    static A_PACK: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// `C[m × n] = A[m × k] · B[k × n]`, then the epilogue. `c` is row-major with row stride `ldc`.
/// `parallel` spreads the work over the compute pool.
pub fn gemm(a: MatRef, b: &PackedB, c: &mut [f32], ldc: usize, epi: Epilogue, parallel: bool) {
    let (m, n) = (a.rows, b.n);
    assert!(m == 0 || c.len() >= (m - 1) * ldc + n, "C is too small");
    // SAFETY: `c` is exclusively borrowed and holds every element the product writes.
    unsafe { gemm_raw(a, b, Out { ptr: c.as_mut_ptr(), ld: ldc }, epi, parallel) }
}

/// [`gemm`] into a raw output: for callers whose tasks write disjoint, interleaved parts of one buffer
/// (attention heads write column blocks of the same rows), where no `&mut` slice may cover another
/// task's elements.
///
/// # Safety
/// `out.ptr + r * out.ld + j` must be valid for reads and writes for every `r < a.rows`, `j < b.n`, and
/// nothing else may access those elements while this runs.
pub(crate) unsafe fn gemm_raw(a: MatRef, b: &PackedB, out: Out, epi: Epilogue, parallel: bool) {
    let (m, n, k) = (a.rows, b.n, b.k);
    let ldc = out.ld;
    assert_eq!(a.cols, k, "inner dimensions differ");
    if let Epilogue::BiasResidual(_, r) = epi {
        assert!(m == 0 || r.len() >= (m - 1) * ldc + n, "residual is too small");
    }
    if m == 0 || n == 0 {
        return;
    }
    let isa = Isa::get();
    let (panels, mr) = (n.div_ceil(b.nr), isa.mr());
    split_tiles(m, mr, panels, n * k, parallel, |rows, cols| {
        // SAFETY: the tasks cover disjoint (rows, panels) rectangles of C.
        unsafe { gemm_block(isa, a, b, out, rows, cols, epi) }
    });
}

/// Most multiply-adds in one parallel region of a product: about 10-20 ms on two cores. A larger product runs
/// as several regions over consecutive row chunks, so the compute scheduler can give the cores to another
/// model between them (a big model's warm-up GEMM is otherwise one region of most of a second). Each row's
/// arithmetic does not depend on where its chunk starts: the results are the same either way.
const REGION_MACS: usize = 1 << 30;

/// Splits a product's `m` rows (in micro-panels of `mr`) and `panels` column panels into one task per compute
/// thread, by balanced contiguous row ranges, or by columns when the rows are few, and runs `f(rows, panels)`
/// for each non-empty one (on the compute pool when `parallel` and there are several). Products of more than
/// [`REGION_MACS`] (`macs_per_row` each row) go by in row chunks, one parallel region each. The f32, int8 and
/// bf16 GEMMs share it.
pub(crate) fn split_tiles(
    m: usize,
    mr: usize,
    panels: usize,
    macs_per_row: usize,
    parallel: bool,
    f: impl Fn(std::ops::Range<usize>, std::ops::Range<usize>) + Send + Sync,
) {
    let chunk = if parallel { (REGION_MACS / macs_per_row.max(1) / mr).max(1) * mr } else { m };
    let mut start = 0;
    while start < m {
        let end = (start + chunk).min(m);
        split_chunk(start..end, mr, panels, parallel, &f);
        start = end;
    }
}

/// [`split_tiles`] for the rows `span`, as one parallel region.
fn split_chunk(
    span: std::ops::Range<usize>,
    mr: usize,
    panels: usize,
    parallel: bool,
    f: &(impl Fn(std::ops::Range<usize>, std::ops::Range<usize>) + Send + Sync),
) {
    let (base, m) = (span.start, span.len());
    let micro = m.div_ceil(mr);
    let threads = if parallel { super::pool().current_num_threads() } else { 1 };
    let m_tasks = if micro >= 4 * threads { threads } else { 1 };
    let n_splits = if m_tasks >= threads { 1 } else { threads.min(panels) };
    let run = |t: usize| {
        let (mt, ns) = (t / n_splits, t % n_splits);
        let rows = (mt * micro / m_tasks * mr).min(m)..((mt + 1) * micro / m_tasks * mr).min(m);
        let per = panels.div_ceil(n_splits);
        let cols = ns * per..((ns + 1) * per).min(panels);
        if !rows.is_empty() && !cols.is_empty() {
            f(base + rows.start..base + rows.end, cols);
        }
    };
    let tasks = m_tasks * n_splits;
    if tasks > 1 {
        super::parallel(|| (0..tasks).into_par_iter().for_each(run));
    } else {
        run(0);
    }
}

/// One thread's share: rows `rows` of C, panels `panels` of B. Rows go by in chunks of `mc`, so the
/// chunk of A stays in L2 while the panels of B go by.
///
/// # Safety
/// `isa` is one this CPU has ([`Isa::get`]); `rows` lie within `a`, `panels` within `b`, and `out` is valid
/// for the elements of that rectangle of `C` (and of no other task's) as [`gemm_raw`] requires.
unsafe fn gemm_block(
    isa: Isa,
    a: MatRef,
    b: &PackedB,
    out: Out,
    rows: std::ops::Range<usize>,
    panels: std::ops::Range<usize>,
    epi: Epilogue,
) {
    let (mr, nr, k) = (isa.mr(), isa.nr(), b.k);
    // Blocks of equal depth (1536 goes by as 2 × 768, not 1024 + 512).
    let depth = k.div_ceil(k.div_ceil(KC).max(1));
    let mc = isa.mc(depth);
    let pack = isa == Isa::Avx512 && panels.len() >= PACK_A_FROM;
    A_PACK.with(|buf| {
        let mut buffers = buf.borrow_mut();
        let (apad, packed) = &mut *buffers;
        let mut tile = [0f32; 14 * 32];
        for pc in (0..k).step_by(depth.max(1)) {
            let kc = depth.min(k - pc);
            let last = pc + kc == k;
            for chunk in (rows.start..rows.end).step_by(mc) {
                let chunk_end = (chunk + mc).min(rows.end);
                // A short last micro-panel is copied out once, zero-padded, for all panels of B.
                let tail = chunk + (chunk_end - chunk) / mr * mr;
                if tail < chunk_end {
                    pad_rows(apad, a, tail, chunk_end - tail, pc, kc, mr);
                }
                if pack {
                    pack_panels(packed, a, chunk, tail, pc, kc, mr);
                }
                for p in panels.clone() {
                    let bpanel = &b.panel(p)[pc * nr..];
                    let col0 = p * nr;
                    let cols = nr.min(b.n - col0);
                    for row0 in (chunk..chunk_end).step_by(mr) {
                        let rows_here = mr.min(chunk_end - row0);
                        // Full micro-panels read A in place; the short tail reads its padded copy.
                        let (ap, lda) = if rows_here == mr {
                            (a.data[row0 * a.ld + pc..].as_ptr(), a.ld)
                        } else {
                            (apad.as_ptr(), kc)
                        };
                        let cptr = out.ptr.add(row0 * out.ld + col0);
                        if rows_here == mr && cols == nr && pack {
                            let ap = packed.as_ptr().add((row0 - chunk) * kc);
                            packed_kernel(isa, kc, ap, bpanel.as_ptr(), cptr, out.ld, pc > 0);
                        } else if rows_here == mr && cols == nr {
                            kernel(isa, kc, ap, lda, bpanel.as_ptr(), cptr, out.ld, pc > 0);
                        } else {
                            // Edge tile: compute the whole tile aside, keep the part inside C.
                            if pc > 0 {
                                for r in 0..rows_here {
                                    for j in 0..cols {
                                        tile[r * nr + j] = *cptr.add(r * out.ld + j);
                                    }
                                }
                            }
                            kernel(isa, kc, ap, lda, bpanel.as_ptr(), tile.as_mut_ptr(), nr, pc > 0);
                            for r in 0..rows_here {
                                for j in 0..cols {
                                    *cptr.add(r * out.ld + j) = tile[r * nr + j];
                                }
                            }
                        }
                        if last {
                            apply_epilogue(isa, epi, cptr, out.ld, row0, col0, rows_here, cols);
                        }
                    }
                }
            }
        }
    });
}

/// Copies the full micro-panels of rows `row0..end` of A, depth `pc..pc+kc`, into micro-panel order:
/// element `(r, p)` of micro-panel `i` at `i·kc·mr + p·mr + r`.
/// Every element is written, so the buffer only grows (no zeroing per chunk); writes go in order, one
/// depth step of `mr` rows at a time.
fn pack_panels(buf: &mut Vec<f32>, a: MatRef, row0: usize, end: usize, pc: usize, kc: usize, mr: usize) {
    let len = (end - row0) * kc;
    if buf.len() < len {
        buf.resize(len, 0.0);
    }
    for (i, panel) in buf[..len].chunks_exact_mut(kc * mr).enumerate() {
        let first = (row0 + i * mr) * a.ld + pc;
        for (p, step) in panel.chunks_exact_mut(mr).enumerate() {
            for (r, v) in step.iter_mut().enumerate() {
                *v = a.data[first + r * a.ld + p];
            }
        }
    }
}

/// Copies `rows` (< `mr`) rows of A, depth `pc..pc+kc`, into an `mr × kc` block, the rest zero.
fn pad_rows(buf: &mut Vec<f32>, a: MatRef, row0: usize, rows: usize, pc: usize, kc: usize, mr: usize) {
    buf.clear();
    buf.resize(mr * kc, 0.0);
    for r in 0..rows {
        buf[r * kc..(r + 1) * kc].copy_from_slice(&a.data[(row0 + r) * a.ld + pc..][..kc]);
    }
}

/// Finishes a `rows × cols` tile of `C` at `c` (row stride `ldc`), whose origin is `(row0, col0)` of the
/// product. One call per tile, compiled once per instruction set: the rows are short (at most 32 columns), so a
/// dispatch per row would cost more than its arithmetic.
///
/// # Safety
/// `isa` is one this CPU has; `c + r * ldc + j` is valid for reads and writes for `r < rows`, `j < cols`, and
/// no other thread touches those elements; a bias covers columns `col0 + cols`, a residual the same elements
/// of a `ldc`-strided matrix at `(row0, col0)`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn apply_epilogue(
    isa: Isa,
    epi: Epilogue,
    c: *mut f32,
    ldc: usize,
    row0: usize,
    col0: usize,
    rows: usize,
    cols: usize,
) {
    /// # Safety
    /// The CPU has these features; otherwise as for [`apply_epilogue`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma")]
    unsafe fn avx512(epi: Epilogue, c: *mut f32, ldc: usize, row0: usize, col0: usize, rows: usize, cols: usize) {
        epilogue_rows(epi, c, ldc, row0, col0, rows, cols)
    }
    /// # Safety
    /// The CPU has these features; otherwise as for [`apply_epilogue`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn avx2(epi: Epilogue, c: *mut f32, ldc: usize, row0: usize, col0: usize, rows: usize, cols: usize) {
        epilogue_rows(epi, c, ldc, row0, col0, rows, cols)
    }
    match (isa, epi) {
        (_, Epilogue::None) => {}
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, _) => avx512(epi, c, ldc, row0, col0, rows, cols),
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, _) => avx2(epi, c, ldc, row0, col0, rows, cols),
        _ => epilogue_rows(epi, c, ldc, row0, col0, rows, cols),
    }
}

/// [`apply_epilogue`]'s rows, compiled into each instruction set's wrapper.
///
/// # Safety
/// As for [`apply_epilogue`].
#[inline(always)]
unsafe fn epilogue_rows(epi: Epilogue, c: *mut f32, ldc: usize, row0: usize, col0: usize, rows: usize, cols: usize) {
    for r in 0..rows {
        let row = std::slice::from_raw_parts_mut(c.add(r * ldc), cols);
        match epi {
            Epilogue::None => {}
            Epilogue::Bias(bias) => ops::add_assign(row, &bias[col0..col0 + cols]),
            Epilogue::BiasGelu(bias) => {
                ops::add_assign(row, &bias[col0..col0 + cols]);
                ops::gelu_erf_body(row);
            }
            Epilogue::BiasResidual(bias, res) => {
                ops::add_assign(row, &bias[col0..col0 + cols]);
                ops::add_assign(row, &res[(row0 + r) * ldc + col0..][..cols]);
            }
        }
    }
}

/// `C tile (mr × nr) (+)= A rows (row stride lda) · B panel`, over depth `kc`.
///
/// # Safety
/// `isa` is one this CPU has; `a` is readable for `isa.mr()` rows of `kc` (stride `lda`), `b` for a packed
/// panel of `kc × nr` (and the prefetch distance past it is never dereferenced), `c` readable and writable for
/// `mr` rows of `nr` (stride `ldc`), and nothing else writes them meanwhile.
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn kernel(isa: Isa, kc: usize, a: *const f32, lda: usize, b: *const f32, c: *mut f32, ldc: usize, acc: bool) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => x86::kernel_14x32::<false>(kc, a, lda, b, c, ldc, acc),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86::kernel_6x16(kc, a, lda, b, c, ldc, acc),
        _ => kernel_4x8(kc, a, lda, b, c, ldc, acc),
    }
}

/// [`kernel`] over a micro-panel [`pack_panels`] wrote (only the AVX-512 kernel reads packed `A`).
///
/// # Safety
/// As for [`kernel`], with `a` a whole packed micro-panel of `kc` steps; `isa` is AVX-512.
#[inline]
unsafe fn packed_kernel(isa: Isa, kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, acc: bool) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => x86::kernel_14x32::<true>(kc, a, 0, b, c, ldc, acc),
        _ => unreachable!("gemm_block packs A for the AVX-512 kernel only"),
    }
}

/// Portable kernel: the reference the SIMD ones are tested against.
///
/// # Safety
/// As for [`kernel`], for a 4 × 8 tile.
unsafe fn kernel_4x8(kc: usize, a: *const f32, lda: usize, b: *const f32, c: *mut f32, ldc: usize, acc: bool) {
    let mut sum = [[0f32; 8]; 4];
    for p in 0..kc {
        for (r, row) in sum.iter_mut().enumerate() {
            let av = *a.add(r * lda + p);
            for (j, s) in row.iter_mut().enumerate() {
                *s += av * *b.add(p * 8 + j);
            }
        }
    }
    for (r, row) in sum.iter().enumerate() {
        for (j, s) in row.iter().enumerate() {
            let dst = c.add(r * ldc + j);
            *dst = if acc { *dst + s } else { *s };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    macro_rules! rows6 {
        ($m:ident) => {
            $m!(0);
            $m!(1);
            $m!(2);
            $m!(3);
            $m!(4);
            $m!(5);
        };
    }

    /// AVX2+FMA: 6 rows × 16 columns, 12 accumulators.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; the pointers are valid as [`super::kernel`] says, for a 6 × 16 tile.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn kernel_6x16(kc: usize, a: *const f32, lda: usize, b: *const f32, c: *mut f32, ldc: usize, acc: bool) {
        let mut s = [[_mm256_setzero_ps(); 2]; 6];
        for p in 0..kc {
            let b0 = _mm256_loadu_ps(b.add(p * 16));
            let b1 = _mm256_loadu_ps(b.add(p * 16 + 8));
            _mm_prefetch::<_MM_HINT_T0>(b.add(p * 16 + 16 * 8) as *const i8);
            let ap = a.add(p);
            macro_rules! fma_row {
                ($r:expr) => {
                    let av = _mm256_broadcast_ss(&*ap.add($r * lda));
                    s[$r][0] = _mm256_fmadd_ps(av, b0, s[$r][0]);
                    s[$r][1] = _mm256_fmadd_ps(av, b1, s[$r][1]);
                };
            }
            rows6!(fma_row);
        }
        macro_rules! store_row {
            ($r:expr) => {
                let dst = c.add($r * ldc);
                if acc {
                    s[$r][0] = _mm256_add_ps(s[$r][0], _mm256_loadu_ps(dst));
                    s[$r][1] = _mm256_add_ps(s[$r][1], _mm256_loadu_ps(dst.add(8)));
                }
                _mm256_storeu_ps(dst, s[$r][0]);
                _mm256_storeu_ps(dst.add(8), s[$r][1]);
            };
        }
        rows6!(store_row);
    }

    macro_rules! rows14 {
        ($m:ident) => {
            $m!(0);
            $m!(1);
            $m!(2);
            $m!(3);
            $m!(4);
            $m!(5);
            $m!(6);
            $m!(7);
            $m!(8);
            $m!(9);
            $m!(10);
            $m!(11);
            $m!(12);
            $m!(13);
        };
    }

    /// AVX-512: 14 rows × 32 columns, 28 accumulators (two B loads and 14 broadcasts feed 28 FMAs). `A` is
    /// read in place (row stride `lda`) or, `PACKED`, from a micro-panel `pack_panels` wrote (`lda` unused).
    ///
    /// # Safety
    /// The CPU has AVX-512F; the pointers are valid as [`super::kernel`] says, for a 14 × 32 tile.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn kernel_14x32<const PACKED: bool>(
        kc: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        acc: bool,
    ) {
        let mut s = [[_mm512_setzero_ps(); 2]; 14];
        // C's tile is fetched while the sums run (the last pass over it was a whole block of B ago), and
        // B's panel eight steps ahead of its loads.
        macro_rules! prefetch_row {
            ($r:expr) => {
                _mm_prefetch::<_MM_HINT_T0>(c.add($r * ldc) as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(c.add($r * ldc + 16) as *const i8);
            };
        }
        rows14!(prefetch_row);
        for p in 0..kc {
            let b0 = _mm512_loadu_ps(b.add(p * 32));
            let b1 = _mm512_loadu_ps(b.add(p * 32 + 16));
            _mm_prefetch::<_MM_HINT_T0>(b.add(p * 32 + 32 * 8) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(b.add(p * 32 + 32 * 8 + 16) as *const i8);
            let ap = if PACKED { a.add(p * 14) } else { a.add(p) };
            macro_rules! fma_row {
                ($r:expr) => {
                    let av = _mm512_set1_ps(*ap.add(if PACKED { $r } else { $r * lda }));
                    s[$r][0] = _mm512_fmadd_ps(av, b0, s[$r][0]);
                    s[$r][1] = _mm512_fmadd_ps(av, b1, s[$r][1]);
                };
            }
            rows14!(fma_row);
        }
        macro_rules! store_row {
            ($r:expr) => {
                let dst = c.add($r * ldc);
                if acc {
                    s[$r][0] = _mm512_add_ps(s[$r][0], _mm512_loadu_ps(dst));
                    s[$r][1] = _mm512_add_ps(s[$r][1], _mm512_loadu_ps(dst.add(16)));
                }
                _mm512_storeu_ps(dst, s[$r][0]);
                _mm512_storeu_ps(dst.add(16), s[$r][1]);
            };
        }
        rows14!(store_row);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(m: usize, n: usize, k: usize, a: &[f32], w: &[f32]) -> Vec<f32> {
        // w is [n, k] (a checkpoint weight): C = A · wᵀ
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] as f64 * w[j * k + p] as f64).sum::<f64>() as f32;
            }
        }
        c
    }

    use crate::cpu::test_values as data;

    #[test]
    fn matches_naive_on_awkward_shapes() {
        // 2100 deep goes by in three blocks of 700: the later ones add to C, edge tiles included. 2053 wide is
        // 65 panels: one thread reads A packed (PACK_A_FROM), over two depth blocks, beside a row tail.
        let shapes = [(1, 1, 1), (7, 13, 5), (13, 33, 300), (100, 70, 513), (37, 384, 384), (3, 1152, 20)];
        for &(m, n, k) in shapes.iter().chain(&[(29, 45, 2100), (31, 2053, 1100)]) {
            let a = data(m * k, 1);
            let w = data(n * k, 2);
            let bias = data(n, 3);
            let res = data(m * n, 4);
            let packed = PackedB::pack(k, n, &w, 1, k);
            for parallel in [false, true] {
                let mut c = vec![f32::NAN; m * n];
                let a_ref = MatRef { data: &a, rows: m, cols: k, ld: k };
                gemm(a_ref, &packed, &mut c, n, Epilogue::BiasResidual(&bias, &res), parallel);
                let want = naive(m, n, k, &a, &w);
                for i in 0..m * n {
                    let expect = want[i] + bias[i % n] + res[i];
                    assert!(
                        (c[i] - expect).abs() < 1e-3 * (1.0 + expect.abs()),
                        "{m}x{n}x{k} [{i}]: {} vs {expect}",
                        c[i]
                    );
                }
            }
        }
    }

    #[test]
    fn strided_operands() {
        // A with a row stride wider than its columns; B packed from a row-major [k, n] source; C strided.
        let (m, n, k, lda, ldc) = (9, 20, 17, 40, 33);
        let a = data(m * lda, 5);
        let b = data(k * n, 6);
        let packed = PackedB::pack(k, n, &b, n, 1);
        let mut c = vec![0f32; m * ldc];
        gemm(MatRef { data: &a, rows: m, cols: k, ld: lda }, &packed, &mut c, ldc, Epilogue::None, true);
        for i in 0..m {
            for j in 0..n {
                let want: f32 = (0..k).map(|p| a[i * lda + p] * b[p * n + j]).sum();
                assert!((c[i * ldc + j] - want).abs() < 1e-4, "({i},{j})");
            }
        }
    }

    /// A product past [`REGION_MACS`] runs as several parallel regions, each offering the scheduler its turn,
    /// and every row comes out bit for bit as it does computed on its own.
    #[test]
    fn a_large_product_yields_between_row_chunks_with_the_same_rows() {
        let (m, n, k) = (2200, 768, 768);
        assert!(m * n * k > REGION_MACS);
        let a = data(m * k, 7);
        let w = data(n * k, 8);
        let packed = PackedB::pack(k, n, &w, 1, k);
        let offers = std::rc::Rc::new(std::cell::Cell::new(0));
        let mut c = vec![0f32; m * n];
        let counter = offers.clone();
        crate::cpu::with_yield_point(std::rc::Rc::new(move || counter.set(counter.get() + 1)), || {
            gemm(MatRef { data: &a, rows: m, cols: k, ld: k }, &packed, &mut c, n, Epilogue::None, true)
        });
        assert!(offers.get() >= 2, "{} yield points for {} multiply-adds", offers.get(), m * n * k);
        for start in [0, 1000, 2193] {
            let rows = 7.min(m - start);
            let mut alone = vec![0f32; rows * n];
            let a_ref = MatRef { data: &a[start * k..], rows, cols: k, ld: k };
            gemm(a_ref, &packed, &mut alone, n, Epilogue::None, false);
            assert!(alone == c[start * n..(start + rows) * n], "rows from {start} differ");
        }
    }
}
