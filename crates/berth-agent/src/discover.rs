//! What the machine has, for an agent started without explicit amounts: CPUs, memory, and
//! NVIDIA GPUs with their model (from `nvidia-smi -L`, when that tool is installed).

use std::process::Command;

/// The machine as discovered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Machine {
    /// Logical CPUs this process may use.
    pub cpus: usize,
    /// Total memory in bytes (`/proc/meminfo`), when known.
    pub memory_bytes: Option<u64>,
    /// GPU model names in index order (`NVIDIA A100-SXM4-80GB`), empty without GPUs or
    /// without `nvidia-smi`.
    pub gpus: Vec<String>,
}

impl Machine {
    /// The accelerator type of the machine's first GPU (the `berth.io/accelerator-type`
    /// label), when it has one.
    pub fn accelerator_type(&self) -> Option<String> {
        self.gpus.first().map(|name| accelerator_type(name))
    }
}

/// Looks at this machine. Never fails: what cannot be found is left out.
pub fn discover() -> Machine {
    Machine {
        cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        memory_bytes: std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| mem_total(&t)),
        gpus: Command::new("nvidia-smi")
            .arg("-L")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| parse_nvidia_smi(&String::from_utf8_lossy(&o.stdout)))
            .unwrap_or_default(),
    }
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
pub fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The model names of `nvidia-smi -L`'s lines `GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-…)`.
pub fn parse_nvidia_smi(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("GPU ")?;
            let (_, name) = rest.split_once(": ")?;
            let name = name.split(" (UUID").next().unwrap_or(name).trim();
            (!name.is_empty()).then(|| name.to_string())
        })
        .collect()
}

/// A model name as an accelerator type: `NVIDIA A100-SXM4-80GB` → `nvidia-a100`,
/// `Tesla V100-SXM2-16GB` → `nvidia-v100`, `NVIDIA GeForce RTX 4090` → `nvidia-rtx-4090`,
/// `NVIDIA L4` → `nvidia-l4`. The vendor and family words are dropped; the model is the next
/// word up to its first `-`, with the word after it when the model is letters only (`RTX`).
pub fn accelerator_type(name: &str) -> String {
    let words: Vec<&str> = name
        .split_whitespace()
        .filter(|w| {
            !matches!(w.to_ascii_lowercase().as_str(), "nvidia" | "tesla" | "geforce" | "quadro")
        })
        .collect();
    let mut model = match words.first() {
        Some(word) => word.split('-').next().unwrap_or(word).to_ascii_lowercase(),
        None => return "nvidia-gpu".to_string(),
    };
    if model.chars().all(|c| c.is_ascii_alphabetic()) {
        if let Some(next) = words.get(1) {
            model =
                format!("{model}-{}", next.split('-').next().unwrap_or(next).to_ascii_lowercase());
        }
    }
    let model: String = model
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' })
        .collect();
    format!("nvidia-{model}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_smi_lines_and_models() {
        let text = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1b2c)\nGPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-3d4e)\n\nNo devices were found\n";
        let gpus = parse_nvidia_smi(text);
        assert_eq!(gpus, ["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"]);
        assert_eq!(accelerator_type(&gpus[0]), "nvidia-a100");
        assert_eq!(accelerator_type("Tesla V100-SXM2-16GB"), "nvidia-v100");
        assert_eq!(accelerator_type("NVIDIA GeForce RTX 4090"), "nvidia-rtx-4090");
        assert_eq!(accelerator_type("NVIDIA L4"), "nvidia-l4");
        assert_eq!(accelerator_type("NVIDIA H100 80GB HBM3"), "nvidia-h100");
        assert_eq!(accelerator_type("NVIDIA"), "nvidia-gpu");
        assert!(parse_nvidia_smi("").is_empty());
    }

    #[test]
    fn memory_from_meminfo() {
        assert_eq!(mem_total("MemTotal:       16384 kB\nMemFree: 1 kB\n"), Some(16384 * 1024));
        assert_eq!(mem_total("nothing"), None);
    }

    #[test]
    fn this_machine_has_at_least_one_cpu() {
        assert!(discover().cpus >= 1);
    }
}
