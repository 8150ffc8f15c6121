//! GEMM with bf16 weights (`--dtype bfloat16`): `C = A · W` where `W` is kept as bfloat16, half the bytes
//! of f32. Where the CPU has AVX512-BF16, `A`'s rows are rounded to bf16 too and a 12×32 micro-kernel
//! multiplies pairs of them with `vdpbf16ps` (two products per f32 lane per instruction, summed in f32);
//! elsewhere each panel of `W` is widened to f32 on the fly and the f32 kernels of `gemm` run on it, `A`
//! staying f32.
//!
//! Layout: `W` (`k × n`) in panels of 32 columns; within a panel, depth pairs `(2q, 2q + 1)` of column `j` sit
//! side by side at `(q·32 + j)·2 + {0, 1}`, which is the operand order `vdpbf16ps` reads. An odd depth is
//! padded with a zero row. The panels start [`LEAD`] zeros into the buffer, for the AVX2 kernel's loads two
//! bytes early.

use std::cell::RefCell;

use super::gemm::{apply_epilogue, gemm_raw, split_tiles, Epilogue, MatRef, Out, PackedB};
use super::{amx, Isa};

const MR: usize = 12;
const NR: usize = 32;

/// `f32 → bf16`, rounding to nearest even (NaNs stay NaN).
pub fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) as u16
}

pub fn from_bf16(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// Zeros before the first panel: the AVX2 kernel reads each 8-pair row from two bytes before it (so its even
/// depths land in the high halves), which for the first pair of the first panel is the last of these.
const LEAD: usize = 16;

/// A weight in bf16, packed as the module comment describes.
#[derive(Debug, Clone, Default)]
pub struct PackedBf16 {
    k: usize,
    /// Depth pairs: `k.div_ceil(2)`.
    kp: usize,
    n: usize,
    data: Vec<u16>,
}

impl PackedBf16 {
    /// Packs a checkpoint weight `w` (`[n, k]`, row `j` the weights of output `j`).
    pub fn pack(k: usize, n: usize, w: &[f32]) -> Self {
        let mut p = PackedBf16::default();
        p.repack(k, n, w, 1, k);
        p
    }

    /// Packs (reusing this buffer) the `k × n` matrix whose element `(kk, j)` is `src[kk·s_k + j·s_n]`, as
    /// [`crate::cpu::gemm::PackedB::repack`] reads it: attention's keys and values, straight from the batch.
    pub fn repack(&mut self, k: usize, n: usize, src: &[f32], s_k: usize, s_n: usize) {
        let kp = k.div_ceil(2);
        let panels = n.div_ceil(NR);
        self.data.clear();
        self.data.resize(LEAD + panels * kp * NR * 2, 0);
        for j in 0..n {
            let (p, jj) = (j / NR, j % NR);
            let panel = &mut self.data[LEAD + p * kp * NR * 2..];
            for kk in 0..k {
                panel[((kk / 2) * NR + jj) * 2 + kk % 2] = to_bf16(src[kk * s_k + j * s_n]);
            }
        }
        (self.k, self.kp, self.n) = (k, kp, n);
    }

    pub fn bytes(&self) -> usize {
        2 * self.data.len().saturating_sub(LEAD)
    }

    pub fn k(&self) -> usize {
        self.k
    }

    pub fn n(&self) -> usize {
        self.n
    }

    fn panel(&self, p: usize) -> &[u16] {
        let start = LEAD + p * self.kp * NR * 2;
        &self.data[start..start + self.kp * NR * 2]
    }

    /// Columns `p·32 ..` of the weight, widened to f32 and packed for the f32 kernels.
    fn widen_panel(&self, p: usize, scratch: &mut Vec<f32>, out: &mut PackedB) {
        let cols = NR.min(self.n - p * NR);
        let panel = self.panel(p);
        scratch.clear();
        scratch.resize(self.k * cols, 0.0);
        for kk in 0..self.k {
            for j in 0..cols {
                scratch[kk * cols + j] = from_bf16(panel[((kk / 2) * NR + j) * 2 + kk % 2]);
            }
        }
        out.repack(self.k, cols, scratch, cols, 1);
    }
}

/// Whether this CPU multiplies bf16 pairs natively (and the ISA chosen lets it).
pub fn native() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static NATIVE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *NATIVE.get_or_init(|| Isa::get() == Isa::Avx512 && std::arch::is_x86_feature_detected!("avx512bf16"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// How a product with a bf16 weight runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// AMX tiles (`tdpbf16ps`): where the CPU has them and the depth is whole tiles (a multiple of 32).
    Amx,
    /// The AVX512-BF16 micro-kernel (`vdpbf16ps`).
    Native,
    /// AVX2: a 6 × 16 f32 kernel that widens the bf16 pairs in registers (a shift and a mask per 8 columns
    /// of two depths), `A` staying f32.
    Avx2,
    /// Panels widened to f32 for the f32 kernels.
    Widened,
}

impl Path {
    fn for_weight(w: &PackedBf16) -> Path {
        if amx::available() && w.kp.is_multiple_of(amx::A_STEP / 4) {
            Path::Amx
        } else if native() {
            Path::Native
        } else if Isa::get() == Isa::Avx2 {
            Path::Avx2
        } else {
            Path::Widened
        }
    }

    /// Rows of `C` one tile covers.
    fn tile_rows(self) -> usize {
        match self {
            Path::Amx => AMX_MR,
            Path::Native | Path::Widened => MR,
            Path::Avx2 => AVX2_MR,
        }
    }
}

/// Rows of the AMX tile pair.
const AMX_MR: usize = 32;

/// Whether bf16 products beat f32 ones here (AMX or AVX512-BF16): attention under `--dtype bfloat16` multiplies
/// in bf16 only then, since the widened path would be slower than f32 and no more exact.
pub fn fast() -> bool {
    amx::available() || native()
}

/// What bf16 weights cost on this CPU where it has no bf16 arithmetic (`None` where it has: AMX or AVX512-BF16),
/// for the load log: the weights keep half the memory, the products run in f32.
pub fn cost_note() -> Option<&'static str> {
    if fast() {
        None
    } else if Isa::get() == Isa::Avx2 {
        Some(
            "this CPU has no bf16 arithmetic: the bf16 weights (half of f32's memory) are widened to f32 in \
             registers and multiplied at about f32's speed (BENCHMARKS.md, AVX2), with bf16's rounding on the \
             weights; --dtype float32 is as fast and exact, --dtype int8 about twice as fast",
        )
    } else {
        Some(
            "this CPU has no bf16 arithmetic: the bf16 weights (half of f32's memory) are widened to f32 panel by \
             panel before each product, which is slower than --dtype float32; keep bfloat16 only for the memory",
        )
    }
}

/// The name of the bf16 kernel a weight of the model's usual depths (multiples of 32) runs on here.
pub fn kernel_name() -> &'static str {
    if amx::available() {
        "amx-bf16"
    } else if native() {
        "avx512-bf16"
    } else if Isa::get() == Isa::Avx2 {
        "avx2 (bf16 widened in registers, f32 arithmetic)"
    } else {
        "bf16 widened to f32"
    }
}

thread_local! {
    /// A task's rows of `A` as bf16 pairs (`kp` per row), or the widened panel's buffers.
    static ROWS: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    static WIDE: RefCell<(Vec<f32>, PackedB)> = RefCell::new((Vec::new(), PackedB::default()));
}

/// `C[m × n] = A[m × k] · W`, then the epilogue; `c` row-major with row stride `ldc`.
pub fn gemm_bf16(a: MatRef, w: &PackedBf16, c: &mut [f32], ldc: usize, epi: Epilogue, parallel: bool) {
    gemm_on(Path::for_weight(w), a, w, c, ldc, epi, parallel)
}

/// [`gemm_bf16`] on the given path (one this machine has: `Amx` only where [`Path::for_weight`] picks it,
/// `Native` only where [`native()`] holds).
fn gemm_on(path: Path, a: MatRef, w: &PackedBf16, c: &mut [f32], ldc: usize, epi: Epilogue, parallel: bool) {
    let (m, n) = (a.rows, w.n);
    assert_eq!(a.cols, w.k, "inner dimensions differ");
    assert!(m == 0 || c.len() >= (m - 1) * ldc + n, "C is too small");
    if let Epilogue::BiasResidual(_, r) = epi {
        assert!(m == 0 || r.len() >= (m - 1) * ldc + n, "residual is too small");
    }
    if m == 0 || n == 0 {
        return;
    }
    let out = Out { ptr: c.as_mut_ptr(), ld: ldc };
    split_tiles(m, path.tile_rows(), n.div_ceil(NR), n * w.k, parallel, |rows, cols| {
        // The tasks cover disjoint (rows, panels) rectangles of C, inside `c` (asserted above), and `path` is
        // one this CPU runs (`Path::get`).
        match path {
            // SAFETY: as above; AMX is available and its permission granted.
            Path::Amx => ROWS.with(|buf| unsafe { amx_block(a, &mut buf.borrow_mut(), w, out, rows, cols, epi) }),
            // SAFETY: as above; the CPU has AVX512-BF16.
            Path::Native => ROWS.with(|buf| unsafe { native_block(a, &mut buf.borrow_mut(), w, out, rows, cols, epi) }),
            // SAFETY: as above; the CPU has AVX2 and FMA (`Isa::get`).
            Path::Avx2 => WIDE.with(|buf| unsafe { avx2_block(a, &mut buf.borrow_mut().0, w, out, rows, cols, epi) }),
            Path::Widened => {
                // SAFETY: as above; the f32 kernels run on `Isa::get`.
                WIDE.with(|buf| unsafe { widened_block(a, &mut buf.borrow_mut(), w, out, rows, cols, epi) })
            }
        }
    });
}

/// Rounds rows `rows` of `a` to bf16 pairs, `kp` a row, into `pairs`, with zero rows up to a multiple of
/// `tile_rows`.
fn round_rows(a: MatRef, rows: std::ops::Range<usize>, kp: usize, tile_rows: usize, pairs: &mut Vec<u32>) {
    pairs.clear();
    pairs.resize(rows.len().div_ceil(tile_rows) * tile_rows * kp, 0);
    #[cfg(target_arch = "x86_64")]
    let vector = native();
    for (local, r) in rows.enumerate() {
        let src = &a.data[r * a.ld..r * a.ld + a.cols];
        let dst = &mut pairs[local * kp..(local + 1) * kp];
        // 32 values at a time with `vcvtne2ps2bf16` (the same rounding) where the CPU has it.
        #[cfg(target_arch = "x86_64")]
        let done = if vector {
            // SAFETY: AVX512-BF16 is there (`native`); the function stays within both slices.
            unsafe { x86::round_pairs(src, dst) }
        } else {
            0
        };
        #[cfg(not(target_arch = "x86_64"))]
        let done = 0;
        for (q, d) in dst.iter_mut().enumerate().skip(done) {
            let lo = to_bf16(src[2 * q]) as u32;
            let hi = src.get(2 * q + 1).map_or(0, |&v| to_bf16(v) as u32);
            *d = lo | (hi << 16);
        }
    }
}

/// Each `tile_rows × 32` tile of a task's rectangle: `tile(local row, rows here, panel, sums)` fills the sums
/// (`tile_rows` rows of 32), which are then copied into `C` and finished by the epilogue.
///
/// # Safety
/// `out` is valid for reads and writes of the rectangle `rows` × the columns of `panels` of `C`, which no other
/// thread touches meanwhile; `panels` lie within `w`, and `epi`'s operands cover that rectangle.
unsafe fn by_tiles(
    w: &PackedBf16,
    out: Out,
    rows: std::ops::Range<usize>,
    panels: std::ops::Range<usize>,
    epi: Epilogue,
    tile_rows: usize,
    mut tile: impl FnMut(usize, usize, &[u16], &mut [f32]),
) {
    let isa = Isa::get();
    let mut sums = [0f32; AMX_MR * NR];
    for p in panels {
        let bpanel = w.panel(p);
        let col0 = p * NR;
        let cols = NR.min(w.n - col0);
        for row0 in rows.clone().step_by(tile_rows) {
            let rows_here = tile_rows.min(rows.end - row0);
            tile(row0 - rows.start, rows_here, bpanel, &mut sums[..tile_rows * NR]);
            for r in 0..rows_here {
                let dst = std::slice::from_raw_parts_mut(out.ptr.add((row0 + r) * out.ld + col0), cols);
                dst.copy_from_slice(&sums[r * NR..r * NR + cols]);
            }
            apply_epilogue(isa, epi, out.ptr.add(row0 * out.ld + col0), out.ld, row0, col0, rows_here, cols);
        }
    }
}

/// One task on AVX512-BF16: its rows rounded to bf16 pairs once, then each 12 × 32 tile over the whole depth.
///
/// # Safety
/// The CPU has AVX512-BF16; `rows` lie within `a`; otherwise as for [`by_tiles`].
unsafe fn native_block(
    a: MatRef,
    pairs: &mut Vec<u32>,
    w: &PackedBf16,
    out: Out,
    rows: std::ops::Range<usize>,
    panels: std::ops::Range<usize>,
    epi: Epilogue,
) {
    let kp = w.kp;
    round_rows(a, rows.clone(), kp, MR, pairs);
    by_tiles(w, out, rows, panels, epi, MR, |local, _, bpanel, sums| {
        #[cfg(target_arch = "x86_64")]
        x86::kernel_12x32(kp, pairs[local * kp..].as_ptr(), kp, bpanel.as_ptr(), sums.as_mut_ptr());
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("AVX512-BF16 is x86-64 only: {local} {bpanel:p} {sums:p}");
    });
}

/// One task on AMX: its rows rounded to bf16 pairs once, then each 32 × 32 tile (16 × 32 where 16 rows are
/// left) over the whole depth.
///
/// # Safety
/// AMX is available ([`amx::available`]); `rows` lie within `a`; otherwise as for [`by_tiles`].
unsafe fn amx_block(
    a: MatRef,
    pairs: &mut Vec<u32>,
    w: &PackedBf16,
    out: Out,
    rows: std::ops::Range<usize>,
    panels: std::ops::Range<usize>,
    epi: Epilogue,
) {
    let kp = w.kp;
    round_rows(a, rows.clone(), kp, AMX_MR, pairs);
    let steps = kp * 4 / amx::A_STEP;
    let tiles = amx::Tiles::configure();
    by_tiles(w, out, rows, panels, epi, AMX_MR, |local, rows_here, bpanel, sums| {
        let (a, b) = (pairs[local * kp..].as_ptr() as *const u8, bpanel.as_ptr() as *const u8);
        if rows_here > AMX_MR / 2 {
            tiles.bf16_32x32(a, kp * 4, b, steps, sums.as_mut_ptr());
        } else {
            tiles.bf16_16x32(a, kp * 4, b, steps, sums.as_mut_ptr());
        }
    });
}

/// Rows of the AVX2 kernel's tile.
const AVX2_MR: usize = 6;

/// Rows of `A` one pass over a task's panels takes: 16 tiles, about 100 KiB of `A` at MiniLM's depths, which
/// stay in L2 while the panels go by.
const AVX2_MC: usize = 16 * AVX2_MR;

/// One task on AVX2: for each chunk of [`AVX2_MC`] rows, each half panel (16 columns) of each panel, each 6-row
/// tile over the whole depth. Full tiles read `A` in place and write `C`; the edges go through zero-padded copies.
///
/// # Safety
/// The CPU has AVX2 and FMA; `rows` lie within `a`; otherwise as for [`by_tiles`].
#[allow(unused_variables)]
unsafe fn avx2_block(
    a: MatRef,
    pad: &mut Vec<f32>,
    w: &PackedBf16,
    out: Out,
    rows: std::ops::Range<usize>,
    panels: std::ops::Range<usize>,
    epi: Epilogue,
) {
    #[cfg(target_arch = "x86_64")]
    {
        let (k, isa) = (w.k, Isa::get());
        let mut tile = [0f32; AVX2_MR * 16];
        for chunk in rows.clone().step_by(AVX2_MC) {
            let chunk_end = (chunk + AVX2_MC).min(rows.end);
            // A short last tile reads a zero-padded copy of its rows.
            let tail = chunk + (chunk_end - chunk) / AVX2_MR * AVX2_MR;
            if tail < chunk_end {
                pad.clear();
                pad.resize(AVX2_MR * k, 0.0);
                for r in tail..chunk_end {
                    pad[(r - tail) * k..(r - tail + 1) * k].copy_from_slice(&a.data[r * a.ld..r * a.ld + k]);
                }
            }
            for p in panels.clone() {
                for half in 0..2 {
                    let col0 = p * NR + half * 16;
                    if col0 >= w.n {
                        break;
                    }
                    let cols = 16.min(w.n - col0);
                    // From the whole buffer, whose `LEAD` zeros the kernel's first early load reads.
                    let b = w.data.as_ptr().add(LEAD + p * w.kp * NR * 2 + half * 32);
                    for row0 in (chunk..chunk_end).step_by(AVX2_MR) {
                        let rows_here = AVX2_MR.min(chunk_end - row0);
                        let (ap, lda) = if rows_here == AVX2_MR {
                            (a.data[row0 * a.ld..].as_ptr(), a.ld)
                        } else {
                            (pad.as_ptr(), k)
                        };
                        let cptr = out.ptr.add(row0 * out.ld + col0);
                        if rows_here == AVX2_MR && cols == 16 {
                            x86::kernel_6x16_avx2(k, ap, lda, b, cptr, out.ld);
                        } else {
                            x86::kernel_6x16_avx2(k, ap, lda, b, tile.as_mut_ptr(), 16);
                            for r in 0..rows_here {
                                std::ptr::copy_nonoverlapping(tile[r * 16..].as_ptr(), cptr.add(r * out.ld), cols);
                            }
                        }
                        apply_epilogue(isa, epi, cptr, out.ld, row0, col0, rows_here, cols);
                    }
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("the AVX2 bf16 kernel on {}", std::env::consts::ARCH);
}

/// One task elsewhere: each panel widened to f32 and multiplied by the f32 kernels, `A` as it is.
///
/// # Safety
/// `rows` lie within `a`; otherwise as for [`by_tiles`].
unsafe fn widened_block(
    a: MatRef,
    (scratch, wide): &mut (Vec<f32>, PackedB),
    w: &PackedBf16,
    out: Out,
    rows: std::ops::Range<usize>,
    panels: std::ops::Range<usize>,
    epi: Epilogue,
) {
    let sub = MatRef { data: &a.data[rows.start * a.ld..], rows: rows.len(), cols: a.cols, ld: a.ld };
    for p in panels {
        w.widen_panel(p, scratch, wide);
        let col0 = p * NR;
        // The epilogue's operands from this tile's origin on, as the sub-product sees them.
        let epi = match epi {
            Epilogue::None => Epilogue::None,
            Epilogue::Bias(b) => Epilogue::Bias(&b[col0..]),
            Epilogue::BiasGelu(b) => Epilogue::BiasGelu(&b[col0..]),
            Epilogue::BiasResidual(b, r) => Epilogue::BiasResidual(&b[col0..], &r[rows.start * out.ld + col0..]),
        };
        let at = Out { ptr: out.ptr.add(rows.start * out.ld + col0), ld: out.ld };
        gemm_raw(sub, wide, at, epi, false);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{MR, NR};

    /// `C[6 × 16] = A[6 × k] · W` on AVX2 from the bf16 pair layout, the 16 columns at `b` within a panel (pair
    /// rows `NR` apart). A bf16 in the high half of a 32-bit lane, the low half zeroed, is that number as an
    /// f32: masking a row of 8 pairs keeps the odd depth's values, and masking the same row loaded two bytes
    /// early (each lane's low half moved up) keeps the even depth's. Masks run on any vector port, where a
    /// shift would take FMA slots (15 % of the f32 rate on Zen 3); 12 accumulators (16 registers in all).
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `a` is readable for 6 rows of `k` floats (stride `lda`), `b` for
    /// `k.div_ceil(2)` pair rows of 16 pairs `NR` apart and for the 2 bytes before it (so `b` is never a
    /// buffer's start), `c` writable for 6 rows of 16 floats (stride `ldc`).
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn kernel_6x16_avx2(k: usize, a: *const f32, lda: usize, b: *const u16, c: *mut f32, ldc: usize) {
        let high = _mm256_set1_epi32(0xffff_0000_u32 as i32);
        let mut s = [[_mm256_setzero_ps(); 2]; 6];
        let raw = |q: usize, half: usize| _mm256_loadu_si256(b.add((q * NR + half * 8) * 2) as *const _);
        // Two bytes early: each lane's high half is its own even depth.
        let early = |q: usize, half: usize| _mm256_loadu_si256(b.add((q * NR + half * 8) * 2).sub(1) as *const _);
        macro_rules! depth {
            ($kk:expr, $b0:expr, $b1:expr) => {
                let (b0, b1) = ($b0, $b1);
                for (r, row) in s.iter_mut().enumerate() {
                    let av = _mm256_broadcast_ss(&*a.add(r * lda + $kk));
                    row[0] = _mm256_fmadd_ps(av, b0, row[0]);
                    row[1] = _mm256_fmadd_ps(av, b1, row[1]);
                }
            };
        }
        let even = |q: usize| {
            (
                _mm256_castsi256_ps(_mm256_and_si256(early(q, 0), high)),
                _mm256_castsi256_ps(_mm256_and_si256(early(q, 1), high)),
            )
        };
        let odd = |q: usize| {
            (
                _mm256_castsi256_ps(_mm256_and_si256(raw(q, 0), high)),
                _mm256_castsi256_ps(_mm256_and_si256(raw(q, 1), high)),
            )
        };
        for q in 0..k / 2 {
            let (b0, b1) = even(q);
            depth!(2 * q, b0, b1);
            let (b0, b1) = odd(q);
            depth!(2 * q + 1, b0, b1);
        }
        if k % 2 == 1 {
            let (b0, b1) = even(k / 2);
            depth!(k - 1, b0, b1);
        }
        for (r, row) in s.iter().enumerate() {
            _mm256_storeu_ps(c.add(r * ldc), row[0]);
            _mm256_storeu_ps(c.add(r * ldc + 8), row[1]);
        }
    }

    /// Rounds `src` to bf16 pairs in `dst` 32 values at a time, as far as whole groups of 32 go; returns the
    /// pairs written. `vcvtne2ps2bf16` rounds to nearest even, as `to_bf16` does (it flushes subnormals).
    ///
    /// # Safety
    /// The CPU has AVX-512F and AVX512-BF16 (the slices bound every access).
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub unsafe fn round_pairs(src: &[f32], dst: &mut [u32]) -> usize {
        let groups = (src.len() / 32).min(dst.len() / 16);
        for g in 0..groups {
            let lo = _mm512_loadu_ps(src.as_ptr().add(32 * g));
            let hi = _mm512_loadu_ps(src.as_ptr().add(32 * g + 16));
            // The second operand lands in the low half: values in memory order.
            let packed: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
            _mm512_storeu_si512(dst.as_mut_ptr().add(16 * g) as *mut _, packed);
        }
        16 * groups
    }

    /// `acc[12 × 32] = Σ_q a_pair(r, q) · b_pair(q, j)` with `vdpbf16ps`: 24 accumulators of 16 lanes.
    ///
    /// # Safety
    /// The CPU has AVX-512F and AVX512-BF16; `a` is readable for 12 rows of `kp` pairs (stride `lda`), `b` for
    /// a packed panel of `kp × 32` pairs, and `acc` writable for 12 × 32 floats.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub unsafe fn kernel_12x32(kp: usize, a: *const u32, lda: usize, b: *const u16, acc: *mut f32) {
        let mut s = [[_mm512_setzero_ps(); 2]; MR];
        for q in 0..kp {
            let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.add(q * NR * 2) as *const _));
            let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.add(q * NR * 2 + NR) as *const _));
            for (r, row) in s.iter_mut().enumerate() {
                let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(*a.add(r * lda + q) as i32));
                row[0] = _mm512_dpbf16_ps(row[0], av, b0);
                row[1] = _mm512_dpbf16_ps(row[1], av, b1);
            }
        }
        for (r, row) in s.iter().enumerate() {
            _mm512_storeu_ps(acc.add(r * NR), row[0]);
            _mm512_storeu_ps(acc.add(r * NR + 16), row[1]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cpu::test_values as data;

    #[test]
    fn rounds_to_nearest_even() {
        assert_eq!(to_bf16(1.0), 0x3f80);
        assert_eq!(from_bf16(to_bf16(1.0 + 1.0 / 256.0)), 1.0, "a tie goes to the even mantissa");
        assert_eq!(from_bf16(to_bf16(1.0 + 3.0 / 256.0)), 1.0 + 4.0 / 256.0);
        assert!(from_bf16(to_bf16(f32::NAN)).is_nan());
        assert_eq!(from_bf16(to_bf16(-2.5)), -2.5);
    }

    /// The vector rounding of `A`'s rows gives `to_bf16`'s pairs, ties included.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vector_rounding_equals_scalar() {
        if !native() {
            return;
        }
        let mut src = data(4 * 32 + 7, 5);
        // Exact ties between two bf16 values, both ways, and signs.
        src.extend((0..64).map(|i| (1.0 + (2 * i + 1) as f32 / 256.0) * if i % 2 == 0 { 1.0 } else { -1.0 }));
        let mut dst = vec![0u32; src.len().div_ceil(2)];
        // SAFETY: `native()` holds, so the CPU has AVX512-BF16.
        let done = unsafe { x86::round_pairs(&src, &mut dst) };
        assert_eq!(done, src.len() / 32 * 16);
        for (q, &pair) in dst[..done].iter().enumerate() {
            let want = to_bf16(src[2 * q]) as u32 | (to_bf16(src[2 * q + 1]) as u32) << 16;
            assert_eq!(pair, want, "pair {q}");
        }
    }

    /// Against an f64 product of the bf16-rounded weights (and, on the AMX and native paths, rounded inputs):
    /// what is left is f32 summation error. Every path this machine has runs (AMX where it is there).
    #[test]
    fn matches_the_rounded_product_on_awkward_shapes() {
        // Depths that are whole AMX tiles (multiples of 32) and others; row counts around 16 and 32.
        let shapes = [(1, 1, 1), (7, 13, 5), (13, 33, 300), (100, 70, 513), (37, 384, 384), (3, 1152, 20)];
        let amx_shapes = [(1, 1, 32), (16, 32, 64), (17, 40, 96), (33, 65, 160), (70, 33, 1024)];
        for &(m, n, k) in shapes.iter().chain(&amx_shapes) {
            let (a, w, bias, res) = (data(m * k, 1), data(n * k, 2), data(n, 3), data(m * n, 4));
            let packed = PackedBf16::pack(k, n, &w);
            let round = |v: f32| from_bf16(to_bf16(v)) as f64;
            let mut paths = vec![Path::for_weight(&packed), Path::Widened];
            // The AVX2 kernel wherever the hardware has AVX2, so an AVX-512 machine tests it too.
            if Isa::Avx2.usable() == Isa::Avx2 && !paths.contains(&Path::Avx2) {
                paths.push(Path::Avx2);
            }
            if native() {
                paths.push(Path::Native);
            }
            for (path, parallel) in paths.into_iter().flat_map(|p| [(p, false), (p, true)]) {
                let input = |v: f32| if matches!(path, Path::Widened | Path::Avx2) { v as f64 } else { round(v) };
                let mut c = vec![f32::NAN; m * n];
                let a_ref = MatRef { data: &a, rows: m, cols: k, ld: k };
                gemm_on(path, a_ref, &packed, &mut c, n, Epilogue::BiasResidual(&bias, &res), parallel);
                for i in 0..m {
                    for j in 0..n {
                        let dot: f64 = (0..k).map(|p| input(a[i * k + p]) * round(w[j * k + p])).sum();
                        let want = dot + bias[j] as f64 + res[i * n + j] as f64;
                        let got = c[i * n + j] as f64;
                        assert!(
                            (got - want).abs() < 1e-4 * (1.0 + want.abs()),
                            "{path:?} {m}x{n}x{k} ({i},{j}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
