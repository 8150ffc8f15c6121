//! Intel AMX tile kernels (Xeon 4th generation, Sapphire Rapids, and later): a `tdpbf16ps` or `tdpbusd`
//! multiplies a 16-row tile of `A` by a 16-column tile of `B` over 32 bf16 (or 64 int8) depths, 8,192 (16,384)
//! multiply-adds per instruction against 16 (64) for an AVX-512 FMA (`vpdpbusd`). `bgemm` and `qgemm` use them
//! where the CPU has AMX and Linux grants this process the tile state, and the depth fills whole tiles.
//!
//! No packing of their own: the weights of `bgemm` (depth pairs of bf16) and `qgemm` (depth quadruples of int8)
//! lie in panels of 32 columns whose group rows are 128 bytes, so a `B` tile is 16 group rows read with a
//! 128-byte stride, its right half 64 bytes further. `A` is the GEMMs' own rounded (bf16) or quantized (u8) rows.
//!
//! The tiles are not registers the compiler knows: each kernel is one `asm!` block that configures nothing,
//! loads, multiplies and stores, and [`Tiles`] configures them for a task (`ldtilecfg`) and releases them after.

/// Whether the AMX kernels run here: x86-64 with AMX-TILE, AMX-BF16 and AMX-INT8, the AVX-512 kernel set chosen
/// (`ALEPH_CPU_ISA` narrower turns AMX off too), `ALEPH_AMX` not `0`/`off`, and the kernel's permission to use
/// the tile data (Linux asks each process to request it: `arch_prctl(ARCH_REQ_XCOMP_PERM)`).
pub fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let off = matches!(std::env::var("ALEPH_AMX").ok().as_deref(), Some("0" | "off" | "false"));
        // Miri cannot run `asm!`: the kernels' tests there take the other paths.
        !off && !cfg!(miri) && super::Isa::get() == super::Isa::Avx512 && imp::detect_and_request()
    })
}

/// Bytes of one depth step of `A` in a tile row (32 bf16 or 64 int8), and of `B` (16 group rows of 128 bytes).
pub const A_STEP: usize = 64;
pub const B_STEP: usize = 16 * 128;

/// The tile configuration held for one task: every tile 16 rows of 64 bytes. Dropping it releases the tiles.
pub struct Tiles(());

impl Tiles {
    /// Configures this thread's tiles.
    ///
    /// # Safety
    /// Only where [`available`] holds.
    pub unsafe fn configure() -> Tiles {
        imp::configure();
        Tiles(())
    }

    /// `C[32 × 32] = Σ_steps A · B` in bf16 pairs, f32 sums. `a`: 32 rows of `lda` bytes, `steps · 64` bytes
    /// read from each; `b`: a panel of `bgemm`'s layout, `steps · 2048` bytes; `c`: 32 rows of 32 f32.
    ///
    /// # Safety
    /// The pointers are valid for those reads and writes; `steps ≥ 1`.
    pub unsafe fn bf16_32x32(&self, a: *const u8, lda: usize, b: *const u8, steps: usize, c: *mut f32) {
        imp::bf16_32x32(a, lda, b, steps, c as *mut u8)
    }

    /// The first 16 rows of [`Tiles::bf16_32x32`]: `a` holds 16 rows.
    ///
    /// # Safety
    /// As for [`Tiles::bf16_32x32`].
    pub unsafe fn bf16_16x32(&self, a: *const u8, lda: usize, b: *const u8, steps: usize, c: *mut f32) {
        imp::bf16_16x32(a, lda, b, steps, c as *mut u8)
    }

    /// `C[32 × 32] = Σ_steps A_u8 · B_i8`, i32 sums (no saturation, as `vpdpbusd`). `b`: a panel of `qgemm`'s
    /// layout, 2048 bytes a step of 64 depths.
    ///
    /// # Safety
    /// As for [`Tiles::bf16_32x32`].
    pub unsafe fn u8i8_32x32(&self, a: *const u8, lda: usize, b: *const i8, steps: usize, c: *mut i32) {
        imp::u8i8_32x32(a, lda, b as *const u8, steps, c as *mut u8)
    }

    /// The first 16 rows of [`Tiles::u8i8_32x32`].
    ///
    /// # Safety
    /// As for [`Tiles::bf16_32x32`].
    pub unsafe fn u8i8_16x32(&self, a: *const u8, lda: usize, b: *const i8, steps: usize, c: *mut i32) {
        imp::u8i8_16x32(a, lda, b as *const u8, steps, c as *mut u8)
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: only built by `configure`, where AMX is available; no tile data is live after a task.
        unsafe { imp::release() }
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::asm;

    /// `ldtilecfg`'s operand: palette 1, every tile 16 rows × 64 bytes.
    #[repr(C, align(64))]
    struct Config {
        palette: u8,
        start_row: u8,
        reserved: [u8; 14],
        colsb: [u16; 16],
        rows: [u8; 16],
    }

    static CONFIG: Config = Config {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        colsb: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
        rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
    };

    pub fn detect_and_request() -> bool {
        // CPUID.(EAX=7, ECX=0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE, bit 25 AMX-INT8.
        let leaf7 = std::arch::x86_64::__cpuid_count(7, 0);
        let has = |bit: u32| (leaf7.edx >> bit) & 1 == 1;
        if !(has(22) && has(24) && has(25)) {
            return false;
        }
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: a plain system call with integer arguments; it only changes what this process may use.
        let granted = unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) };
        granted == 0
    }

    /// Loads the tile configuration (eight tiles of 16 rows × 64 bytes) for this thread.
    ///
    /// # Safety
    /// The CPU has AMX and the kernel granted this process its tile state (`detect_and_request`).
    pub unsafe fn configure() {
        asm!("ldtilecfg [{}]", in(reg) &CONFIG as *const Config, options(nostack, readonly));
    }

    /// Returns this thread's tiles to the init state.
    ///
    /// # Safety
    /// As for [`configure`]; no tile holds data a caller still needs.
    pub unsafe fn release() {
        asm!("tilerelease", options(nostack, nomem));
    }

    /// One kernel per (instruction, rows): C tiles 0-3, A tiles 4-5, B tiles 6-7; the loop runs `steps` times.
    macro_rules! tile_kernel {
        ($name:ident, $op:literal, 32) => {
            /// # Safety
            /// The tiles are configured on this thread ([`configure`]); `a` is readable for 32 rows of
            /// `steps · 64` bytes (stride `lda`), `b` for `steps · 2048` bytes, `c` writable for 32 rows of 128
            /// bytes; `steps ≥ 1`.
            pub unsafe fn $name(a: *const u8, lda: usize, b: *const u8, steps: usize, c: *mut u8) {
                debug_assert!(steps > 0);
                asm!(
                    "tilezero tmm0",
                    "tilezero tmm1",
                    "tilezero tmm2",
                    "tilezero tmm3",
                    "2:",
                    "tileloadd tmm4, [{a} + {lda}*1]",
                    "tileloadd tmm6, [{b} + {ldb}*1]",
                    "tileloadd tmm7, [{b} + {ldb}*1 + 64]",
                    "tileloadd tmm5, [{a2} + {lda}*1]",
                    concat!($op, " tmm0, tmm4, tmm6"),
                    concat!($op, " tmm1, tmm4, tmm7"),
                    concat!($op, " tmm2, tmm5, tmm6"),
                    concat!($op, " tmm3, tmm5, tmm7"),
                    "add {a}, 64",
                    "add {a2}, 64",
                    "add {b}, 2048",
                    "dec {n}",
                    "jnz 2b",
                    "tilestored [{c} + {ldc}*1], tmm0",
                    "tilestored [{c} + {ldc}*1 + 64], tmm1",
                    "tilestored [{c2} + {ldc}*1], tmm2",
                    "tilestored [{c2} + {ldc}*1 + 64], tmm3",
                    a = inout(reg) a => _,
                    a2 = inout(reg) a.add(16 * lda) => _,
                    lda = in(reg) lda,
                    b = inout(reg) b => _,
                    ldb = in(reg) 128usize,
                    n = inout(reg) steps => _,
                    c = in(reg) c,
                    c2 = in(reg) c.add(16 * 128),
                    ldc = in(reg) 128usize,
                    options(nostack),
                );
            }
        };
        ($name:ident, $op:literal, 16) => {
            /// # Safety
            /// As for the 32-row kernels, for 16 rows of `a` and of `c`.
            pub unsafe fn $name(a: *const u8, lda: usize, b: *const u8, steps: usize, c: *mut u8) {
                debug_assert!(steps > 0);
                asm!(
                    "tilezero tmm0",
                    "tilezero tmm1",
                    "2:",
                    "tileloadd tmm4, [{a} + {lda}*1]",
                    "tileloadd tmm6, [{b} + {ldb}*1]",
                    "tileloadd tmm7, [{b} + {ldb}*1 + 64]",
                    concat!($op, " tmm0, tmm4, tmm6"),
                    concat!($op, " tmm1, tmm4, tmm7"),
                    "add {a}, 64",
                    "add {b}, 2048",
                    "dec {n}",
                    "jnz 2b",
                    "tilestored [{c} + {ldc}*1], tmm0",
                    "tilestored [{c} + {ldc}*1 + 64], tmm1",
                    a = inout(reg) a => _,
                    lda = in(reg) lda,
                    b = inout(reg) b => _,
                    ldb = in(reg) 128usize,
                    n = inout(reg) steps => _,
                    c = in(reg) c,
                    ldc = in(reg) 128usize,
                    options(nostack),
                );
            }
        };
    }

    tile_kernel!(bf16_32x32, "tdpbf16ps", 32);
    tile_kernel!(bf16_16x32, "tdpbf16ps", 16);
    tile_kernel!(u8i8_32x32, "tdpbusd", 32);
    tile_kernel!(u8i8_16x32, "tdpbusd", 16);
}

/// Never called elsewhere: [`available`] is false there, and only it leads to these.
#[cfg(not(target_arch = "x86_64"))]
mod imp {
    pub fn detect_and_request() -> bool {
        false
    }
    /// # Safety
    /// Never called (see above).
    pub unsafe fn configure() {}
    /// # Safety
    /// Never called (see above).
    pub unsafe fn release() {}
    /// # Safety
    /// Never called (see above).
    pub unsafe fn bf16_32x32(_: *const u8, _: usize, _: *const u8, _: usize, _: *mut u8) {
        unreachable!("AMX is x86-64 only")
    }
    /// # Safety
    /// Never called (see above).
    pub unsafe fn bf16_16x32(_: *const u8, _: usize, _: *const u8, _: usize, _: *mut u8) {
        unreachable!("AMX is x86-64 only")
    }
    /// # Safety
    /// Never called (see above).
    pub unsafe fn u8i8_32x32(_: *const u8, _: usize, _: *const u8, _: usize, _: *mut u8) {
        unreachable!("AMX is x86-64 only")
    }
    /// # Safety
    /// Never called (see above).
    pub unsafe fn u8i8_16x32(_: *const u8, _: usize, _: *const u8, _: usize, _: *mut u8) {
        unreachable!("AMX is x86-64 only")
    }
}
