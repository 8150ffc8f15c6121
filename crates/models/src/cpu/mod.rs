//! Aleph's own CPU kernels: packed-weight GEMM (f32 and int8) with AVX-512 / AVX2 micro-kernels chosen at
//! run time, fused element-wise kernels, and padding-free attention. `crate::backend::cpu` runs the model
//! families on them.
//!
//! candle stays the tensor library for loading weights and for other devices; on CPU this path does
//! the forward pass, because candle's per-op allocations, padded attention and AVX2-only matmul leave
//! most of the machine idle (see BENCHMARKS.md).

pub mod amx;
pub mod bgemm;
pub mod gemm;
pub mod layers;
pub mod ops;
pub mod qgemm;

use std::sync::OnceLock;

/// The widest vector instruction set this CPU offers, detected once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    Avx512,
    Avx2,
    Scalar,
}

impl Isa {
    /// Detected, unless `ALEPH_CPU_ISA` (avx512, avx2, scalar) asks for a narrower one.
    pub fn get() -> Isa {
        static ISA: OnceLock<Isa> = OnceLock::new();
        *ISA.get_or_init(|| {
            let best = hardware();
            let wanted = match std::env::var("ALEPH_CPU_ISA").ok().as_deref() {
                Some("scalar") => Isa::Scalar,
                Some("avx2") => Isa::Avx2,
                _ => best,
            };
            // Never pick wider than the hardware has.
            if (wanted as u8) < (best as u8) {
                best
            } else {
                wanted
            }
        })
    }

    /// `self`, or the widest set this CPU has where `self` is wider: what a kernel dispatch may run for an
    /// `Isa` a caller built, so no safe call can reach instructions the CPU lacks.
    pub fn usable(self) -> Isa {
        let best = hardware();
        if (self as u8) < (best as u8) {
            best
        } else {
            self
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2+fma",
            Isa::Scalar => "scalar",
        }
    }
}

/// The widest set the hardware has, detected once.
fn hardware() -> Isa {
    static HARDWARE: OnceLock<Isa> = OnceLock::new();
    *HARDWARE.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Isa {
    if is_x86_feature_detected!("avx512f") {
        Isa::Avx512
    } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        Isa::Avx2
    } else {
        Isa::Scalar
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Isa {
    Isa::Scalar
}

/// Deterministic values in `[-1, 1)` for the kernels' tests (xorshift from `seed`).
#[cfg(test)]
pub(crate) fn test_values(len: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2654435761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

thread_local! {
    /// The serving engine's yield point for the forward pass this thread runs, if any.
    static YIELD_POINT: std::cell::RefCell<Option<std::rc::Rc<dyn Fn()>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` (a forward pass) with `hook` called before each of its parallel regions, where the engine's
/// compute scheduler may give the pool to another model's batch. Only this thread's regions call it.
pub fn with_yield_point<R>(hook: std::rc::Rc<dyn Fn()>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<std::rc::Rc<dyn Fn()>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            YIELD_POINT.with(|y| *y.borrow_mut() = previous);
        }
    }
    let _restore = Restore(YIELD_POINT.with(|y| y.borrow_mut().replace(hook)));
    f()
}

/// Runs `op` on the compute pool, first offering the turn at this thread's yield point.
pub(crate) fn parallel<R: Send>(op: impl FnOnce() -> R + Send) -> R {
    let hook = YIELD_POINT.with(|y| y.borrow().clone());
    if let Some(hook) = hook {
        hook();
    }
    pool().install(op)
}

/// Compute threads for the forward pass: `ALEPH_COMPUTE_THREADS`, else one per core.
pub fn pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::env::var("ALEPH_COMPUTE_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("aleph-compute-{i}"))
            .build()
            .expect("building the compute thread pool")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A caller's `Isa` never reaches instructions the CPU lacks: wider sets fall back to the hardware's.
    #[test]
    fn usable_never_answers_wider_than_the_hardware() {
        let best = hardware();
        for isa in [Isa::Avx512, Isa::Avx2, Isa::Scalar] {
            let usable = isa.usable();
            assert!(usable as u8 >= best as u8, "{isa:?} -> {usable:?} on {best:?}");
            if isa as u8 >= best as u8 {
                assert_eq!(usable, isa, "a set the CPU has is kept");
            }
        }
    }
}
