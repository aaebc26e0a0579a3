//! GPU figures for measured usage: each GPU's memory in use and utilisation, read through NVML,
//! the NVIDIA driver's management library (`libnvidia-ml.so.1`), loaded at run time as
//! `nvidia-smi` loads it, so the agent runs the same on machines with and without the driver.
//!
//! Where the library cannot be loaded (no NVIDIA driver, another vendor's GPUs, a container
//! without the driver mounted) there are no figures: absent, never zero. It is tried once; a
//! machine does not grow a driver while its agent runs. A device that fails to answer is left
//! out of that measurement and asked again at the next one.

use berth_api::agent::GpuMeasured;

/// Where GPU figures come from: NVML on a real machine, a fixed list in tests.
pub trait GpuSource: Send + std::fmt::Debug {
    /// The machine's GPUs now, by index; empty when there is nothing to read.
    fn read(&mut self) -> Vec<GpuMeasured>;
}

/// NVML, loaded on the first read.
#[derive(Default)]
pub struct Nvml {
    state: State,
}

#[derive(Default)]
enum State {
    #[default]
    Untried,
    Loaded(Box<nvml_wrapper::Nvml>),
    /// The library could not be loaded: never tried again.
    Absent,
}

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            State::Untried => "untried",
            State::Loaded(_) => "loaded",
            State::Absent => "absent",
        };
        f.debug_struct("Nvml").field("state", &state).finish()
    }
}

impl Nvml {
    /// Whether the library was found (after a first read).
    pub fn loaded(&self) -> bool {
        matches!(self.state, State::Loaded(_))
    }

    fn library(&mut self) -> Option<&nvml_wrapper::Nvml> {
        if let State::Untried = self.state {
            self.state = match nvml_wrapper::Nvml::init() {
                Ok(nvml) => State::Loaded(Box::new(nvml)),
                Err(err) => {
                    tracing::debug!(error = %err, "no NVML: GPU memory and utilisation are not measured");
                    State::Absent
                }
            };
        }
        match &self.state {
            State::Loaded(nvml) => Some(nvml),
            _ => None,
        }
    }
}

impl GpuSource for Nvml {
    fn read(&mut self) -> Vec<GpuMeasured> {
        let Some(nvml) = self.library() else { return Vec::new() };
        let count = match nvml.device_count() {
            Ok(count) => count,
            Err(err) => {
                tracing::debug!(error = %err, "NVML could not count the GPUs");
                return Vec::new();
            }
        };
        (0..count.min(MAX_GPUS as u32))
            .filter_map(|index| {
                let device = nvml.device_by_index(index).ok()?;
                let memory = device.memory_info().ok()?;
                Some(GpuMeasured {
                    index,
                    memory_used_bytes: memory.used.min(memory.total),
                    memory_total_bytes: memory.total,
                    utilization_percent: device.utilization_rates().ok().map(|u| u.gpu.min(100)),
                })
            })
            .collect()
    }
}

/// The most GPUs one measurement lists (the head's rule too).
pub const MAX_GPUS: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_driver_there_are_no_figures_and_it_is_not_tried_again() {
        // Machines that run this project's tests have no NVIDIA driver; where one has, the
        // figures must at least be consistent.
        let mut nvml = Nvml::default();
        let first = nvml.read();
        if !nvml.loaded() {
            assert!(first.is_empty());
            assert!(matches!(nvml.state, State::Absent));
            assert!(nvml.read().is_empty());
            return;
        }
        for gpu in first {
            assert!(gpu.memory_used_bytes <= gpu.memory_total_bytes, "{gpu:?}");
            assert!(gpu.utilization_percent.is_none_or(|u| u <= 100), "{gpu:?}");
        }
    }
}
