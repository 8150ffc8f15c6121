//! The memory budget (`--memory-budget`): how many bytes of model weights each device may hold, and where a
//! model's weights go. The registry holds loads to it; this module turns the flag and a model's spec into the
//! registry's terms.

use std::path::Path;
use std::str::FromStr;

use aleph_engine::{Memory, MemoryBudget};
use aleph_models::{DType, Device, ModelInfo};

use crate::cli::{Engine, ModelSpec};

/// `--memory-budget`: bytes (`8Gi`, `512MiB`, `2G`, `1000000`), or a fraction of each device's memory (`0.8`,
/// `80%`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BudgetSize {
    Bytes(u64),
    Fraction(f64),
}

impl FromStr for BudgetSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let bad = || {
            format!(
                "`{s}` is neither bytes (1000000, 512Mi, 8GiB, 2G) nor a fraction of the device's memory (0.8, 80%)"
            )
        };
        if let Some(percent) = s.strip_suffix('%') {
            let p: f64 = percent.trim().parse().map_err(|_| bad())?;
            return fraction(p / 100.0).ok_or_else(bad);
        }
        if s.contains('.') && s.chars().all(|c| c.is_ascii_digit() || c == '.') {
            return fraction(s.parse().map_err(|_| bad())?).ok_or_else(bad);
        }
        let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let number: u64 = s[..digits].parse().map_err(|_| bad())?;
        // Kubernetes' spellings (Ki, Mi, Gi binary; K, M, G decimal), with or without a trailing B.
        let unit = s[digits..].trim();
        let unit = unit.strip_suffix(['B', 'b']).unwrap_or(unit);
        let scale: u64 = match unit.to_ascii_lowercase().as_str() {
            "" => 1,
            "k" => 1_000,
            "m" => 1_000_000,
            "g" => 1_000_000_000,
            "t" => 1_000_000_000_000,
            "ki" => 1 << 10,
            "mi" => 1 << 20,
            "gi" => 1 << 30,
            "ti" => 1 << 40,
            _ => return Err(bad()),
        };
        number.checked_mul(scale).map(BudgetSize::Bytes).ok_or_else(bad)
    }
}

/// The flag as given: no budget when empty.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetFlag(pub Option<BudgetSize>);

fn fraction(f: f64) -> Option<BudgetSize> {
    (f > 0.0 && f <= 1.0).then_some(BudgetSize::Fraction(f))
}

impl BudgetSize {
    /// The limit on a device of `total` bytes (a fraction needs the total).
    fn of(self, total: Option<u64>) -> Option<u64> {
        match self {
            BudgetSize::Bytes(b) => Some(b),
            BudgetSize::Fraction(f) => total.map(|t| (t as f64 * f) as u64),
        }
    }
}

/// The budget per device: the host's (`cpu`) and, in a CUDA build, each GPU's.
pub fn budget(size: Option<BudgetSize>) -> Result<MemoryBudget, String> {
    let mut budget = MemoryBudget::default();
    let Some(size) = size else { return Ok(budget) };
    let host = size
        .of(host_memory())
        .ok_or("--memory-budget as a fraction: this machine's memory size is unknown (no /proc/meminfo)")?;
    budget.0.insert("cpu".into(), host);
    if let aleph_models::GpuStatus::Ready { devices } = aleph_models::gpu_status() {
        for gpu in 0..*devices {
            let limit = size.of(aleph_models::gpu_memory_bytes(gpu)).ok_or_else(|| {
                format!("--memory-budget as a fraction: the memory of cuda:{gpu} is unknown (give bytes)")
            })?;
            budget.0.insert(format!("cuda:{gpu}"), limit);
        }
    }
    Ok(budget)
}

/// The memory this process may use: the machine's (`MemTotal`), or its cgroup's limit when that is lower (a
/// container's memory limit).
pub fn host_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let total_kib: u64 =
        meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    let total = total_kib * 1024;
    // cgroup v2, then v1 (whose "no limit" is a huge number).
    let limit = ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
        .iter()
        .find_map(|f| std::fs::read_to_string(f).ok()?.trim().parse::<u64>().ok());
    Some(limit.map_or(total, |l| l.min(total)))
}

/// The devices a model's weights go to: one copy on the CPU (replicas there share the weights), or one per
/// GPU it runs on.
pub fn placement(spec: &ModelSpec) -> Vec<String> {
    let on_gpu = match spec.device {
        Device::Cuda(_) => true,
        Device::Auto => aleph_models::gpu_available(),
        Device::Cpu => false,
    };
    if !on_gpu || spec.engine == Engine::Debug {
        return vec!["cpu".into()];
    }
    if spec.device_ids.is_empty() {
        let id = if let Device::Cuda(id) = spec.device { id } else { 0 };
        return vec![format!("cuda:{id}")];
    }
    spec.device_ids.iter().map(|id| format!("cuda:{id}")).collect()
}

/// The least the model in `dir` will hold, on each device it goes to, from its checkpoint's headers; nothing
/// where they cannot be read (the load then says what is wrong).
pub fn expected(spec: &ModelSpec, dir: Option<&Path>) -> Memory {
    let bytes = match dir {
        Some(dir) if spec.engine != Engine::Debug => {
            let dtype = if spec.dtype == DType::Auto { DType::Float32 } else { spec.dtype };
            aleph_models::min_weight_bytes(dir, dtype).unwrap_or_else(|e| {
                tracing::debug!(model = spec.served_name, "no estimate of the weights before loading: {e}");
                0
            })
        }
        _ => 0,
    };
    placement(spec).into_iter().map(|d| (d, bytes)).collect()
}

/// What a loaded model holds, on each device it went to.
pub fn held(spec: &ModelSpec, info: &ModelInfo) -> Memory {
    placement(spec).into_iter().map(|d| (d, info.weight_bytes)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_read_as_bytes_or_fractions() {
        let ok = |s: &str| s.parse::<BudgetSize>().unwrap();
        assert_eq!(ok("1000000"), BudgetSize::Bytes(1_000_000));
        assert_eq!(ok("512Mi"), BudgetSize::Bytes(512 << 20));
        assert_eq!(ok("8GiB"), BudgetSize::Bytes(8 << 30));
        assert_eq!(ok("2G"), BudgetSize::Bytes(2_000_000_000));
        assert_eq!(ok("300 MB"), BudgetSize::Bytes(300_000_000));
        assert_eq!(ok("0.8"), BudgetSize::Fraction(0.8));
        assert_eq!(ok("80%"), BudgetSize::Fraction(0.8));
        for bad in ["", "lots", "1.5", "0%", "120%", "-1", "8 parsecs", "99999999999999999999"] {
            let err = bad.parse::<BudgetSize>().expect_err(bad);
            assert!(err.contains("neither bytes"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_fraction_of_this_machine() {
        let host = host_memory().expect("/proc/meminfo on Linux");
        let half = budget(Some(BudgetSize::Fraction(0.5))).unwrap();
        assert_eq!(half.0.get("cpu"), Some(&(host / 2)));
        assert!(budget(None).unwrap().0.is_empty(), "no flag, no limit");
    }
}
