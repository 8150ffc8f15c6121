//! int8 GEMM for dynamically quantized linear layers (`--dtype int8`): weights quantized once per output
//! channel (symmetric int8), activations per row at run time (u8 over the row's own range with a zero
//! point, which the column sums of the weights remove again). AMX's `tdpbusd` and AVX-512 VNNI's `vpdpbusd`
//! multiply u8 by i8 and sum in i32; AVX2 goes through `vpmaddubsw`'s i16 pair sums (weights at 7 bits, so
//! they cannot saturate); machines without AVX2 run a portable kernel.

use std::cell::RefCell;
use std::sync::OnceLock;

use super::gemm::{apply_epilogue, split_tiles, Epilogue, MatRef, Out};
use super::{amx, ops, Isa};

const MR: usize = 12;
const NR: usize = 32;

/// Which int8 kernel runs here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kernel {
    /// AMX tiles (`tdpbusd`), for weights whose depth is whole tiles (a multiple of 64); `Vnni` for the others.
    Amx,
    /// `vpdpbusd`: u8 × i8 summed in fours into i32, 64 per instruction.
    Vnni,
    /// `vpmaddubsw` + `vpmaddwd`: the same sums through i16 pair sums, which saturate unless one operand gives
    /// up a bit. The weights do (±63, per output channel): 255 · 63 · 2 < 32767. On MiniLM that split is the
    /// more exact one: cosine to f32 at least 0.9940 over the parity sentences, against 0.9883 with the
    /// activations at 7 bits (BENCHMARKS.md, AVX2).
    Avx2,
    Portable,
}

fn kernel_kind() -> Kernel {
    static KIND: OnceLock<Kernel> = OnceLock::new();
    *KIND.get_or_init(|| {
        if amx::available() && vnni() {
            Kernel::Amx
        } else if vnni() {
            Kernel::Vnni
        } else if Isa::get() != Isa::Scalar {
            Kernel::Avx2
        } else {
            Kernel::Portable
        }
    })
}

/// Whether the VNNI kernel can run here.
fn vnni() -> bool {
    static VNNI: OnceLock<bool> = OnceLock::new();
    *VNNI.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            Isa::get() == Isa::Avx512 && is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512bw")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// The largest weight code the kernel takes: 127, or 63 where the AVX2 kernel keeps weights to 7 bits.
fn weight_top() -> i8 {
    if kernel_kind() == Kernel::Avx2 {
        63
    } else {
        127
    }
}

/// How much coarser than 8 bits the weights are quantized on this machine: 2 on AVX2 (7 bits), else 1.
pub fn weight_coarsening() -> f32 {
    127.0 / weight_top() as f32
}

/// The name of the int8 kernel this machine uses.
pub fn kernel_name() -> &'static str {
    match kernel_kind() {
        Kernel::Amx => "amx-int8",
        Kernel::Vnni => "avx512-vnni",
        Kernel::Avx2 => "avx2 (7-bit weights)",
        Kernel::Portable => "portable",
    }
}

/// A weight `[n, k]` quantized per output channel (to ±[`weight_top`]) and packed for the kernel: panels of 32 columns, each
/// k-step of 4 holding 32 × 4 bytes (column-major within the step, as `vpdpbusd` consumes them).
#[derive(Debug, Clone)]
pub struct PackedI8 {
    k: usize,
    /// `k` rounded up to a multiple of 4.
    kp: usize,
    n: usize,
    data: Vec<i8>,
    scales: Vec<f32>,
    /// Σ_k w_q[j][k]: removes the activations' zero point.
    colsum: Vec<i32>,
    /// Per input channel `1 / s`, applied to activations before they are quantized when the weight was
    /// smoothed by `s` (empty: no smoothing).
    inv_smooth: Vec<f32>,
}

impl PackedI8 {
    /// Quantizes `W · diag(s)` and divides activations by `s` at run time: the product is unchanged,
    /// but channels whose activations have outliers (large `s`) move their range into the weight,
    /// which is quantized per output row and absorbs it better (SmoothQuant, Xiao et al. 2023).
    pub fn quantize_smoothed(k: usize, n: usize, w: &[f32], s: &[f32]) -> Self {
        assert_eq!(s.len(), k);
        let scaled: Vec<f32> = w.chunks_exact(k).flat_map(|row| row.iter().zip(s).map(|(w, s)| w * s)).collect();
        let mut packed = Self::quantize(k, n, &scaled);
        packed.inv_smooth = s.iter().map(|s| 1.0 / s).collect();
        packed
    }

    /// Quantizes the row-major `[n, k]` weight (a checkpoint's `[out, in]`).
    pub fn quantize(k: usize, n: usize, w: &[f32]) -> Self {
        let kp = k.div_ceil(4) * 4;
        let panels = n.div_ceil(NR);
        let mut data = vec![0i8; panels * kp * NR];
        // Whole panels of scales and column sums (the padding columns' are 0), so a kernel's epilogue loads
        // a panel's worth without a bound check.
        let mut scales = vec![0f32; panels * NR];
        let mut colsum = vec![0i32; panels * NR];
        for j in 0..n {
            let row = &w[j * k..(j + 1) * k];
            let amax = row.iter().fold(0f32, |m, x| m.max(x.abs()));
            let top = weight_top() as f32;
            let scale = if amax > 0.0 { amax / top } else { 1.0 };
            scales[j] = scale;
            let (p, jj) = (j / NR, j % NR);
            for (kk, x) in row.iter().enumerate() {
                let q = (x / scale).round().clamp(-top, top) as i8;
                colsum[j] += q as i32;
                data[p * kp * NR + ((kk / 4) * NR + jj) * 4 + kk % 4] = q;
            }
        }
        PackedI8 { k, kp, n, data, scales, colsum, inv_smooth: Vec::new() }
    }

    pub fn n(&self) -> usize {
        self.n
    }

    pub fn bytes(&self) -> usize {
        self.data.len() + 8 * self.n
    }
}

/// Rows of A quantized for one task: u8 codes (`kp` per row), and each row's scale and zero point.
#[derive(Default)]
struct QuantRows {
    q: Vec<u8>,
    scale: Vec<f32>,
    zero: Vec<i32>,
    /// One smoothed row of A.
    smoothed: Vec<f32>,
}

thread_local! {
    static ROWS: RefCell<QuantRows> = RefCell::new(QuantRows::default());
}

/// Quantizes rows `rows` of `a` (divided by the weight's smoothing factors, if any), each over its own
/// range; the padding past `a.cols` is the value zero.
fn quantize_rows(a: MatRef, rows: std::ops::Range<usize>, w: &PackedI8, out: &mut QuantRows) {
    let isa = Isa::get();
    let kp = w.kp;
    out.q.clear();
    out.q.resize(rows.len() * kp, 0);
    out.scale.clear();
    out.zero.clear();
    for (i, r) in rows.enumerate() {
        let dst = &mut out.q[i * kp..(i + 1) * kp];
        let mut src = &a.data[r * a.ld..r * a.ld + a.cols];
        if !w.inv_smooth.is_empty() {
            out.smoothed.clear();
            out.smoothed.extend(src.iter().zip(&w.inv_smooth).map(|(x, s)| x * s));
            src = &out.smoothed;
        }
        let (scale, zero) = ops::quantize_row(isa, src, &mut dst[..a.cols], 255);
        dst[a.cols..].fill(zero.clamp(0, 255) as u8);
        out.scale.push(scale);
        out.zero.push(zero);
    }
}

/// `C = dequant(quant(A) · W_q)` then the epilogue; `C` row-major with row stride `ldc`.
pub fn gemm_i8(a: MatRef, w: &PackedI8, c: &mut [f32], ldc: usize, epi: Epilogue, parallel: bool) {
    let route = if kernel_kind() == Kernel::Amx && w.kp.is_multiple_of(amx::A_STEP) {
        Route::Amx
    } else if avx2_fused() {
        Route::Avx2Fused
    } else {
        Route::Tiles
    };
    gemm_on(route, a, w, c, ldc, epi, parallel)
}

/// How [`gemm_on`] computes the tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// AMX tiles (where AMX is available and the depth is whole tiles).
    Amx,
    /// AVX2's kernel, dequantizing in registers (where the kernel is AVX2's).
    Avx2Fused,
    /// The micro-kernel of [`kernel_kind`] into integer sums, dequantized after.
    Tiles,
}

/// Rows of the AMX tile pair.
const AMX_MR: usize = 32;

/// [`gemm_i8`] by `route`, which this machine must be able to take.
fn gemm_on(route: Route, a: MatRef, w: &PackedI8, c: &mut [f32], ldc: usize, epi: Epilogue, parallel: bool) {
    let (m, n) = (a.rows, w.n);
    assert_eq!(a.cols, w.k, "inner dimensions differ");
    assert!(m == 0 || c.len() >= (m - 1) * ldc + n, "C is too small");
    if m == 0 || n == 0 {
        return;
    }
    let out = Out { ptr: c.as_mut_ptr(), ld: ldc };
    let on_amx = route == Route::Amx;
    let tile_rows = if on_amx { AMX_MR } else { MR };
    split_tiles(m, tile_rows, n.div_ceil(NR), n * w.k, parallel, |rows, cols| {
        ROWS.with(|buf| {
            let quant = &mut *buf.borrow_mut();
            quantize_rows(a, rows.clone(), w, quant);
            // Whole tiles of rows; the padding rows' sums are never read.
            quant.q.resize(rows.len().div_ceil(tile_rows) * tile_rows * w.kp, 0);
            let kp = w.kp;
            // SAFETY: the tasks cover disjoint (rows, panels) rectangles of C; each tile reads `tile_rows`
            // quantized rows of `kp` codes from its first, which the padding above provides.
            unsafe {
                if on_amx {
                    let tiles = amx::Tiles::configure();
                    let steps = kp / amx::A_STEP;
                    by_tiles(quant, w, out, rows, cols, epi, AMX_MR, |local, rows_here, b, acc| {
                        let a = quant.q[local * kp..].as_ptr();
                        if rows_here > AMX_MR / 2 {
                            tiles.u8i8_32x32(a, kp, b, steps, acc.as_mut_ptr());
                        } else {
                            tiles.u8i8_16x32(a, kp, b, steps, acc.as_mut_ptr());
                        }
                    });
                } else if route == Route::Avx2Fused {
                    by_tiles_avx2(quant, w, out, rows, cols, epi);
                } else {
                    by_tiles(quant, w, out, rows, cols, epi, MR, |local, _, b, acc| {
                        kernel(kp / 4, quant.q[local * kp..].as_ptr(), kp, b, acc.as_mut_ptr());
                    });
                }
            }
        })
    });
}

/// One task: its quantized rows (starting at `rows.start`) against panels `panels` of the weight, a
/// `tile_rows × 32` tile at a time: `tile(local row, rows here, panel, sums)` fills the integer sums, which
/// are dequantized into `C` and finished by the epilogue.
///
/// # Safety
/// `quant` holds whole tiles of rows from `rows.start`; `out` is valid for reads and writes of the rectangle
/// `rows` × the columns of `panels` of `C`, which no other thread touches meanwhile; `panels` lie within `w`,
/// and `epi`'s operands cover that rectangle.
#[allow(clippy::too_many_arguments)]
unsafe fn by_tiles(
    quant: &QuantRows,
    w: &PackedI8,
    out: Out,
    rows: std::ops::Range<usize>,
    panels: std::ops::Range<usize>,
    epi: Epilogue,
    tile_rows: usize,
    mut tile: impl FnMut(usize, usize, *const i8, &mut [i32]),
) {
    let kp = w.kp;
    let mut acc = [0i32; AMX_MR * NR];
    let isa = Isa::get();
    for p in panels {
        let bpanel = w.data[p * kp * NR..].as_ptr();
        let col0 = p * NR;
        let cols = NR.min(w.n - col0);
        for row0 in rows.clone().step_by(tile_rows) {
            let local = row0 - rows.start;
            let rows_here = tile_rows.min(rows.end - row0);
            tile(local, rows_here, bpanel, &mut acc[..tile_rows * NR]);
            for r in 0..rows_here {
                let dst = std::slice::from_raw_parts_mut(out.ptr.add((row0 + r) * out.ld + col0), cols);
                let (sa, za) = (quant.scale[local + r], quant.zero[local + r]);
                let acc_row = &acc[r * NR..r * NR + cols];
                for (j, d) in dst.iter_mut().enumerate() {
                    *d = (acc_row[j] - za * w.colsum[col0 + j]) as f32 * sa * w.scales[col0 + j];
                }
            }
            apply_epilogue(isa, epi, out.ptr.add(row0 * out.ld + col0), out.ld, row0, col0, rows_here, cols);
        }
    }
}

/// Whether the AVX2 kernel that dequantizes in its own registers runs (this machine's kernel is AVX2's).
fn avx2_fused() -> bool {
    cfg!(target_arch = "x86_64") && kernel_kind() == Kernel::Avx2
}

/// [`by_tiles`] for the AVX2 kernel, which dequantizes its sums into `C` itself (a 12 × 32 tile at a time),
/// then the epilogue.
///
/// # Safety
/// As for [`by_tiles`], and the CPU has AVX2 ([`avx2_fused`]).
unsafe fn by_tiles_avx2(
    quant: &QuantRows,
    w: &PackedI8,
    out: Out,
    rows: std::ops::Range<usize>,
    panels: std::ops::Range<usize>,
    epi: Epilogue,
) {
    #[cfg(target_arch = "x86_64")]
    {
        let kp = w.kp;
        let isa = Isa::get();
        for p in panels {
            let col0 = p * NR;
            let cols = NR.min(w.n - col0);
            for row0 in rows.clone().step_by(MR) {
                let local = row0 - rows.start;
                let rows_here = MR.min(rows.end - row0);
                let tile = x86::Tile {
                    k4: kp / 4,
                    a: quant.q[local * kp..].as_ptr(),
                    lda: kp,
                    b: w.data[p * kp * NR..].as_ptr(),
                    rows: rows_here,
                    cols,
                    c: out.ptr.add(row0 * out.ld + col0),
                    ldc: out.ld,
                    scale_a: quant.scale[local..].as_ptr(),
                    zero_a: quant.zero[local..].as_ptr(),
                    colsum: w.colsum[col0..].as_ptr(),
                    scale_w: w.scales[col0..].as_ptr(),
                };
                x86::tile_12x32_avx2(&tile);
                apply_epilogue(isa, epi, tile.c, out.ld, row0, col0, rows_here, cols);
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!(
        "the AVX2 kernel on {}: {:?}",
        std::env::consts::ARCH,
        (quant.q.len(), w.n, out.ld, rows, panels, epi)
    );
}

/// `acc[MR × NR] = Σ a_u8 · b_i8` over `k4` steps of 4.
///
/// # Safety
/// `a` is readable for `MR` rows of `4 · k4` codes (stride `lda`); `b` for a
/// packed panel of `k4` steps; `acc` writable for `MR × NR` sums.
#[inline]
unsafe fn kernel(k4: usize, a: *const u8, lda: usize, b: *const i8, acc: *mut i32) {
    match kernel_kind() {
        #[cfg(target_arch = "x86_64")]
        Kernel::Vnni | Kernel::Amx => x86::kernel_12x32(k4, a, lda, b, acc),
        // AVX2's kernel dequantizes in place (`tile_12x32_avx2`); these integer sums are the portable kernel's.
        _ => kernel_portable(k4, a, lda, b, acc),
    }
}

/// The reference kernel, for machines without VNNI.
///
/// # Safety
/// As for [`kernel`].
unsafe fn kernel_portable(k4: usize, a: *const u8, lda: usize, b: *const i8, acc: *mut i32) {
    for r in 0..MR {
        for j in 0..NR {
            let mut s = 0i32;
            for p in 0..k4 {
                for t in 0..4 {
                    s += *a.add(r * lda + p * 4 + t) as i32 * *b.add((p * NR + j) * 4 + t) as i32;
                }
            }
            *acc.add(r * NR + j) = s;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{MR, NR};

    /// `$m!(r)` for each of the 12 rows of a tile: constant indices, so the accumulators stay in registers.
    macro_rules! rows12 {
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
        };
    }

    /// One `MR × NR` tile for [`tile_12x32_avx2`]: its operands and where its dequantized values go.
    pub struct Tile {
        /// Steps of 4 in the depth.
        pub k4: usize,
        /// `MR` rows of `4 · k4` activation codes, `lda` apart (rows past `rows` are padding, never stored).
        pub a: *const u8,
        pub lda: usize,
        /// The weight panel (`k4` steps of 32 × 4 codes).
        pub b: *const i8,
        /// The rows and columns of the tile that lie in `C`.
        pub rows: usize,
        pub cols: usize,
        /// The tile's first element in `C`, rows `ldc` apart.
        pub c: *mut f32,
        pub ldc: usize,
        /// Per row of the tile: the activations' scale and zero point.
        pub scale_a: *const f32,
        pub zero_a: *const i32,
        /// Per column of the panel (32 of each): the weights' column sums and scales.
        pub colsum: *const i32,
        pub scale_w: *const f32,
    }

    /// A 12 × 32 tile with AVX2, as four strips of 12 × 8: twelve accumulators of 8 i32 sums, the strip's
    /// 32 weight bytes of a step in one register, and each row's 4 codes broadcast (16 registers in all;
    /// wider strips spill). The sums are dequantized in registers, `(Σ − zero_a · colsum) · scale_a · scale_w`,
    /// and stored into `C`.
    ///
    /// # Safety
    /// The CPU has AVX2; `t.a` is readable for `MR` rows of `4 · k4` codes, `t.b` for a packed panel of `k4`
    /// steps of codes within ±63 (so no pair sum saturates), `t.scale_a`/`t.zero_a` for `t.rows` values and `t.colsum`/`t.scale_w` for 32;
    /// `t.c` is writable for `t.rows × t.cols` elements (`t.rows ≤ 12`, `t.cols ≤ 32`), `t.ldc` apart, which
    /// nothing else accesses meanwhile.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn tile_12x32_avx2(t: &Tile) {
        let ones = _mm256_set1_epi16(1);
        let (a, lda) = (t.a, t.lda);
        for strip in 0..t.cols.div_ceil(8) {
            let b = t.b.add(strip * 32);
            let mut s = [_mm256_setzero_si256(); MR];
            for p in 0..t.k4 {
                let bv = _mm256_loadu_si256(b.add(p * NR * 4) as *const _);
                let ap = a.add(p * 4);
                macro_rules! row {
                    ($r:expr) => {
                        let av = _mm256_set1_epi32(std::ptr::read_unaligned(ap.add($r * lda) as *const i32));
                        s[$r] = _mm256_add_epi32(s[$r], _mm256_madd_epi16(_mm256_maddubs_epi16(av, bv), ones));
                    };
                }
                rows12!(row);
            }
            let j0 = strip * 8;
            let width = (t.cols - j0).min(8);
            let colsum = _mm256_loadu_si256(t.colsum.add(j0) as *const _);
            let scale_w = _mm256_loadu_ps(t.scale_w.add(j0));
            // Lanes below `width` are stored.
            let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(width as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            let c = t.c.add(j0);
            // Constant indices, so the accumulators stay in registers through the loop above.
            macro_rules! store {
                ($r:expr) => {
                    if $r < t.rows {
                        let zero = _mm256_set1_epi32(*t.zero_a.add($r));
                        let sums = _mm256_sub_epi32(s[$r], _mm256_mullo_epi32(zero, colsum));
                        let scale = _mm256_mul_ps(_mm256_set1_ps(*t.scale_a.add($r)), scale_w);
                        let v = _mm256_mul_ps(_mm256_cvtepi32_ps(sums), scale);
                        if width == 8 {
                            _mm256_storeu_ps(c.add($r * t.ldc), v);
                        } else {
                            _mm256_maskstore_ps(c.add($r * t.ldc), mask, v);
                        }
                    }
                };
            }
            rows12!(store);
        }
    }

    /// `vpdpbusd`: 12 rows × 32 columns, 24 accumulators.
    ///
    /// # Safety
    /// The CPU has AVX-512F, BW and VNNI; the pointers are valid as [`super::kernel`] says.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn kernel_12x32(k4: usize, a: *const u8, lda: usize, b: *const i8, acc: *mut i32) {
        let mut s = [[_mm512_setzero_si512(); 2]; MR];
        for p in 0..k4 {
            let b0 = _mm512_loadu_si512(b.add(p * NR * 4) as *const _);
            let b1 = _mm512_loadu_si512(b.add(p * NR * 4 + 64) as *const _);
            macro_rules! row {
                ($r:expr) => {
                    let av = _mm512_set1_epi32(std::ptr::read_unaligned(a.add($r * lda + p * 4) as *const i32));
                    s[$r][0] = _mm512_dpbusd_epi32(s[$r][0], av, b0);
                    s[$r][1] = _mm512_dpbusd_epi32(s[$r][1], av, b1);
                };
            }
            rows12!(row);
        }
        for (r, pair) in s.iter().enumerate() {
            _mm512_storeu_si512(acc.add(r * NR) as *mut _, pair[0]);
            _mm512_storeu_si512(acc.add(r * NR + 16) as *mut _, pair[1]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine's kernel's integer sums equal the portable kernel's, the extreme codes included (where
    /// `vpmaddubsw`'s pair sums would saturate with 8-bit weights). AVX2's kernel, which dequantizes in place,
    /// runs with unit scales and no zero point, so its floats are the sums (exact below 2^24).
    #[test]
    fn kernels_agree() {
        let k4 = 37;
        let top = weight_top() as i32;
        type Codes = fn(usize) -> u8;
        type Weights = fn(usize, i32) -> i8;
        let patterns: [(Codes, Weights); 3] = [
            (|i| (i * 31 % 256) as u8, |i, top| ((i * 17 % (2 * top as usize + 1)) as i32 - top) as i8),
            (|_| 255, |_, top| top as i8),
            (|_| 255, |_, top| -top as i8),
        ];
        for (code, weight) in patterns {
            let a: Vec<u8> = (0..MR * k4 * 4).map(code).collect();
            let b: Vec<i8> = (0..NR * k4 * 4).map(|i| weight(i, top)).collect();
            let mut want = [0i32; MR * NR];
            let mut got = [0i32; MR * NR];
            // SAFETY: `a` holds MR rows of `4 · k4` codes, `b` a panel of `k4` steps within ±`weight_top`, and the
            // sums are MR × NR; `kernel` runs this machine's kernel.
            unsafe {
                kernel_portable(k4, a.as_ptr(), k4 * 4, b.as_ptr(), want.as_mut_ptr());
                kernel(k4, a.as_ptr(), k4 * 4, b.as_ptr(), got.as_mut_ptr());
            }
            assert_eq!(got, want, "{} kernel", kernel_name());
            #[cfg(target_arch = "x86_64")]
            if avx2_fused() {
                let mut floats = [0f32; MR * NR];
                let (ones, zeros) = ([1f32; NR], [0i32; NR]);
                let tile = x86::Tile {
                    k4,
                    a: a.as_ptr(),
                    lda: k4 * 4,
                    b: b.as_ptr(),
                    rows: MR,
                    cols: NR,
                    c: floats.as_mut_ptr(),
                    ldc: NR,
                    scale_a: ones.as_ptr(),
                    zero_a: zeros.as_ptr(),
                    colsum: zeros.as_ptr(),
                    scale_w: ones.as_ptr(),
                };
                // SAFETY: the kernel is AVX2's (`avx2_fused`); the operands are as above, with MR scales and
                // zero points and NR column sums and scales; `floats` holds the MR × NR tile.
                unsafe { x86::tile_12x32_avx2(&tile) };
                let sums: Vec<i32> = floats.iter().map(|&v| v as i32).collect();
                assert_eq!(sums, want.to_vec(), "AVX2 kernel");
            }
        }
    }

    #[test]
    fn close_to_f32_on_awkward_shapes() {
        let shapes = [(1, 1, 1), (7, 33, 13), (30, 70, 384), (13, 384, 1536), (1, 1, 64), (17, 40, 128), (70, 33, 192)];
        for &(m, n, k) in &shapes {
            let a: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
            let w: Vec<f32> = (0..n * k).map(|i| ((i * 53 % 97) as f32 - 48.0) / 480.0).collect();
            let bias: Vec<f32> = (0..n).map(|j| j as f32 / 100.0).collect();
            let packed = PackedI8::quantize(k, n, &w);
            // AMX where this machine has it and the depth is whole tiles, and the micro-kernel.
            let amx = kernel_kind() == Kernel::Amx && k.is_multiple_of(amx::A_STEP);
            let mut routes = vec![Route::Tiles];
            if amx {
                routes.push(Route::Amx);
            }
            if avx2_fused() {
                routes.push(Route::Avx2Fused);
            }
            let mut tiles = Vec::new();
            for route in routes {
                let mut c = vec![f32::NAN; m * n];
                let a = MatRef { data: &a, rows: m, cols: k, ld: k };
                gemm_on(route, a, &packed, &mut c, n, Epilogue::Bias(&bias), true);
                check(m, n, k, a.data, &w, &bias, &c);
                // Every route sums the same integers: only the dequantization's rounding may differ.
                if route == Route::Tiles {
                    tiles = c;
                } else {
                    for (x, y) in c.iter().zip(&tiles) {
                        assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{route:?} {m}x{n}x{k}: {x} vs {y}");
                    }
                }
            }
        }

        fn check(m: usize, n: usize, k: usize, a: &[f32], w: &[f32], bias: &[f32], c: &[f32]) {
            for i in 0..m {
                for j in 0..n {
                    let exact: f32 = (0..k).map(|p| a[i * k + p] * w[j * k + p]).sum::<f32>() + bias[j];
                    let scale: f32 = (0..k).map(|p| (a[i * k + p] * w[j * k + p]).abs()).sum::<f32>();
                    assert!(
                        (c[i * n + j] - exact).abs() <= 0.02 * scale + 1e-4,
                        "{m}x{n}x{k} ({i},{j}): {} vs {exact}",
                        c[i * n + j]
                    );
                }
            }
        }
    }

    /// The AMX tiles' integer sums equal the portable kernel's, exactly, for a 32-row and a 16-row tile.
    #[test]
    fn amx_tiles_equal_the_portable_sums() {
        if kernel_kind() != Kernel::Amx {
            eprintln!("no AMX here: {}", kernel_name());
            return;
        }
        let steps = 3;
        let kp = steps * amx::A_STEP;
        let a: Vec<u8> = (0..AMX_MR * kp).map(|i| (i * 31 % 256) as u8).collect();
        let b: Vec<i8> = (0..NR * kp).map(|i| ((i * 17 % 255) as i32 - 127) as i8).collect();
        let mut want = vec![0i32; AMX_MR * NR];
        let mut got = vec![0i32; AMX_MR * NR];
        // SAFETY: AMX is available (checked above); `a` holds 32 rows of `kp` codes, `b` `steps` panels' steps,
        // and `want`/`got` 32 × 32 sums; every portable call reads a zero-padded copy of MR rows.
        unsafe {
            for block in 0..AMX_MR.div_ceil(MR) {
                let rows = MR.min(AMX_MR - block * MR);
                let mut tile = [0i32; MR * NR];
                let mut a_rows = a[block * MR * kp..(block * MR + rows) * kp].to_vec();
                a_rows.resize(MR * kp, 0);
                kernel_portable(kp / 4, a_rows.as_ptr(), kp, b.as_ptr(), tile.as_mut_ptr());
                want[block * MR * NR..(block * MR + rows) * NR].copy_from_slice(&tile[..rows * NR]);
            }
            let tiles = amx::Tiles::configure();
            tiles.u8i8_32x32(a.as_ptr(), kp, b.as_ptr(), steps, got.as_mut_ptr());
            assert_eq!(got, want, "32-row tile");
            got.fill(0);
            tiles.u8i8_16x32(a.as_ptr(), kp, b.as_ptr(), steps, got.as_mut_ptr());
            assert_eq!(got[..16 * NR], want[..16 * NR], "16-row tile");
        }
    }
}
