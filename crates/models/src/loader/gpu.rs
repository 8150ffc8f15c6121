//! Whether this process can compute on a GPU and, when it cannot, why.
//!
//! A `cuda` build opens the driver and CUDA's libraries at run time (`scripts/cuda-build.sh`), so the same binary
//! starts on a machine without them. candle aborts the process when a library it opens is missing, so the
//! libraries and a device are looked for here first, once, and a missing one becomes a reason instead.

use std::sync::OnceLock;

/// What the GPU side of this build can do on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuStatus {
    /// Built without the `cuda` feature.
    NotBuilt,
    /// A CUDA build that cannot use a GPU here, and why.
    Unusable(String),
    /// The GPUs the driver reports.
    Ready { devices: usize },
}

/// The probe's result, computed on first use.
pub fn gpu_status() -> &'static GpuStatus {
    static STATUS: OnceLock<GpuStatus> = OnceLock::new();
    STATUS.get_or_init(probe)
}

/// Whether this build can compute on a GPU, and one is present.
pub fn gpu_available() -> bool {
    matches!(gpu_status(), GpuStatus::Ready { .. })
}

#[cfg(not(feature = "cuda"))]
fn probe() -> GpuStatus {
    GpuStatus::NotBuilt
}

#[cfg(feature = "cuda")]
fn probe() -> GpuStatus {
    use candle_core::cuda_backend::cudarc::driver::result;
    // The sonames of CUDA 13 and 12 (the driver's is always .1); the bare names are a toolkit's development links.
    const LIBRARIES: [(&str, &[&str]); 5] = [
        ("the CUDA driver", &["libcuda.so.1", "libcuda.so"]),
        ("cuBLAS", &["libcublas.so.13", "libcublas.so.12", "libcublas.so"]),
        ("cuBLASLt", &["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"]),
        ("cuRAND", &["libcurand.so.10", "libcurand.so"]),
        ("NVRTC", &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]),
    ];
    for (what, names) in LIBRARIES {
        // SAFETY: opening a library runs its initialisers; these are NVIDIA's own, the ones candle opens next.
        let found = names.iter().any(|name| unsafe { libloading::Library::new(*name) }.is_ok());
        if !found {
            return GpuStatus::Unusable(format!("{what} is not installed (looked for {})", names.join(", ")));
        }
    }
    if let Err(e) = result::init() {
        return GpuStatus::Unusable(format!("the CUDA driver did not start: {e}"));
    }
    match result::device::get_count() {
        Ok(n) if n > 0 => GpuStatus::Ready { devices: n as usize },
        Ok(_) => GpuStatus::Unusable("the CUDA driver sees no GPU".into()),
        Err(e) => GpuStatus::Unusable(format!("the CUDA driver could not count GPUs: {e}")),
    }
}

/// The memory of GPU `ordinal` in bytes, where this build can ask the driver.
pub fn gpu_memory_bytes(ordinal: usize) -> Option<u64> {
    if !gpu_available() {
        return None;
    }
    total_memory(ordinal)
}

#[cfg(not(feature = "cuda"))]
fn total_memory(_ordinal: usize) -> Option<u64> {
    None
}

#[cfg(feature = "cuda")]
fn total_memory(ordinal: usize) -> Option<u64> {
    use candle_core::cuda_backend::cudarc::driver::result;
    let device = result::device::get(i32::try_from(ordinal).ok()?).ok()?;
    // SAFETY: `device` is the handle the driver returned for this ordinal, as total_mem requires.
    unsafe { result::device::total_mem(device) }.ok().map(|b| b as u64)
}
