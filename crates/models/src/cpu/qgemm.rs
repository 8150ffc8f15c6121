//! int8 GEMM for dynamically quantized linear layers (`--dtype int8`): weights quantized once per output
//! channel (symmetric int8), activations per row at run time (u8 over the row's own range with a zero
//! point, which the column sums of the weights remove again). AVX-512 VNNI's `vpdpbusd` does 64 multiply-adds per
//! instruction; machines without it run a portable kernel.

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
    /// `vpmaddubsw` + `vpmaddwd`: the same sums through i16. Activations use 7 bits so the i16 pair sums
    /// cannot saturate (127 · 127 · 2 < 32767).
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

/// The largest activation code the kernel takes.
fn top_code() -> u8 {
    if kernel_kind() == Kernel::Avx2 {
        127
    } else {
        255
    }
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

/// How many quantization levels activations get on this machine's kernel: 256, or 128 where the AVX2 kernel
/// keeps them to 7 bits (twice the step, so twice the rounding).
pub fn activation_levels() -> u32 {
    top_code() as u32 + 1
}

/// The name of the int8 kernel this machine uses.
pub fn kernel_name() -> &'static str {
    match kernel_kind() {
        Kernel::Amx => "amx-int8",
        Kernel::Vnni => "avx512-vnni",
        Kernel::Avx2 => "avx2 (7-bit activations)",
        Kernel::Portable => "portable",
    }
}

/// A weight `[n, k]` quantized per output channel and packed for the kernel: panels of 32 columns, each
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
        let mut scales = vec![1f32; n];
        let mut colsum = vec![0i32; n];
        for j in 0..n {
            let row = &w[j * k..(j + 1) * k];
            let amax = row.iter().fold(0f32, |m, x| m.max(x.abs()));
            let scale = if amax > 0.0 { amax / 127.0 } else { 1.0 };
            scales[j] = scale;
            let (p, jj) = (j / NR, j % NR);
            for (kk, x) in row.iter().enumerate() {
                let q = (x / scale).round().clamp(-127.0, 127.0) as i8;
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
        let (scale, zero) = ops::quantize_row(isa, src, &mut dst[..a.cols], top_code());
        dst[a.cols..].fill(zero.clamp(0, 255) as u8);
        out.scale.push(scale);
        out.zero.push(zero);
    }
}

/// `C = dequant(quant(A) · W_q)` then the epilogue; `C` row-major with row stride `ldc`.
pub fn gemm_i8(a: MatRef, w: &PackedI8, c: &mut [f32], ldc: usize, epi: Epilogue, parallel: bool) {
    gemm_on(kernel_kind() == Kernel::Amx && w.kp.is_multiple_of(amx::A_STEP), a, w, c, ldc, epi, parallel)
}

/// Rows of the AMX tile pair.
const AMX_MR: usize = 32;

/// [`gemm_i8`] on AMX tiles or on the micro-kernel of [`kernel_kind`] (`on_amx` only where AMX is available
/// and `w`'s depth is whole tiles).
fn gemm_on(on_amx: bool, a: MatRef, w: &PackedI8, c: &mut [f32], ldc: usize, epi: Epilogue, parallel: bool) {
    let (m, n) = (a.rows, w.n);
    assert_eq!(a.cols, w.k, "inner dimensions differ");
    assert!(m == 0 || c.len() >= (m - 1) * ldc + n, "C is too small");
    if m == 0 || n == 0 {
        return;
    }
    let out = Out { ptr: c.as_mut_ptr(), ld: ldc };
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

/// `acc[MR × NR] = Σ a_u8 · b_i8` over `k4` steps of 4.
///
/// # Safety
/// `a` is readable for `MR` rows of `4 · k4` codes (stride `lda`), with codes up to [`top_code`]; `b` for a
/// packed panel of `k4` steps; `acc` writable for `MR × NR` sums.
#[inline]
unsafe fn kernel(k4: usize, a: *const u8, lda: usize, b: *const i8, acc: *mut i32) {
    match kernel_kind() {
        #[cfg(target_arch = "x86_64")]
        Kernel::Vnni | Kernel::Amx => x86::kernel_12x32(k4, a, lda, b, acc),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => {
            for group in 0..MR / 3 {
                x86::kernel_3x32_avx2(k4, a.add(group * 3 * lda), lda, b, acc.add(group * 3 * NR));
            }
        }
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

    /// 3 rows × 32 columns with AVX2: 12 accumulators of 8 i32 lanes.
    ///
    /// # Safety
    /// The CPU has AVX2; the pointers are valid as [`super::kernel`] says, for 3 rows; codes are at most 127.
    #[target_feature(enable = "avx2")]
    pub unsafe fn kernel_3x32_avx2(k4: usize, a: *const u8, lda: usize, b: *const i8, acc: *mut i32) {
        let ones = _mm256_set1_epi16(1);
        let mut s = [[_mm256_setzero_si256(); 4]; 3];
        for p in 0..k4 {
            let bp = b.add(p * NR * 4);
            let bv = [
                _mm256_loadu_si256(bp as *const _),
                _mm256_loadu_si256(bp.add(32) as *const _),
                _mm256_loadu_si256(bp.add(64) as *const _),
                _mm256_loadu_si256(bp.add(96) as *const _),
            ];
            for (r, row) in s.iter_mut().enumerate() {
                let av = _mm256_set1_epi32(std::ptr::read_unaligned(a.add(r * lda + p * 4) as *const i32));
                for (acc, b) in row.iter_mut().zip(&bv) {
                    let pairs = _mm256_maddubs_epi16(av, *b);
                    *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(pairs, ones));
                }
            }
        }
        for (r, row) in s.iter().enumerate() {
            for (c, v) in row.iter().enumerate() {
                _mm256_storeu_si256(acc.add(r * NR + c * 8) as *mut _, *v);
            }
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
            row!(0);
            row!(1);
            row!(2);
            row!(3);
            row!(4);
            row!(5);
            row!(6);
            row!(7);
            row!(8);
            row!(9);
            row!(10);
            row!(11);
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

    #[test]
    fn kernels_agree() {
        let k4 = 37;
        // Codes up to what this machine's kernel takes (7 bits for AVX2, where i16 pair sums must not saturate).
        let top = top_code() as usize + 1;
        let a: Vec<u8> = (0..MR * k4 * 4).map(|i| (i * 31 % top) as u8).collect();
        let b: Vec<i8> = (0..NR * k4 * 4).map(|i| ((i * 17 % 255) as i32 - 127) as i8).collect();
        let mut want = [0i32; MR * NR];
        let mut got = [0i32; MR * NR];
        // SAFETY: `a` holds MR rows of `4 · k4` codes up to `top_code`, `b` a panel of `k4` steps, and the sums
        // are MR × NR; `kernel` runs this machine's kernel.
        unsafe {
            kernel_portable(k4, a.as_ptr(), k4 * 4, b.as_ptr(), want.as_mut_ptr());
            kernel(k4, a.as_ptr(), k4 * 4, b.as_ptr(), got.as_mut_ptr());
        }
        assert_eq!(got, want, "{} kernel", kernel_name());
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
            for on_amx in if amx { vec![true, false] } else { vec![false] } {
                let mut c = vec![f32::NAN; m * n];
                let a = MatRef { data: &a, rows: m, cols: k, ld: k };
                gemm_on(on_amx, a, &packed, &mut c, n, Epilogue::Bias(&bias), true);
                check(m, n, k, a.data, &w, &bias, &c);
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
