//! Measured usage in the REST answers: what a node's machine and the work on it actually use,
//! as its agent measured it (beside what was reserved, which `resources` shows).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a node's machine uses, as its agent last measured it (every heartbeat). Kept by the
/// head in memory only: absent after a head restart until the next heartbeat, and from nodes
/// whose agent does not measure (simulated nodes, older agents).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeMeasured {
    /// When the head received the measurement (ms since the Unix epoch).
    pub at_ms: u64,
    /// CPU in use, in thousandths of a core (1500: one and a half cores busy), averaged over
    /// the last heartbeat interval; absent from an agent's first measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_millicores: Option<u64>,
    /// The machine's logical CPUs.
    pub cpus: u32,
    /// Memory in use (total less what the kernel reports available), in bytes.
    pub memory_used_bytes: u64,
    /// The machine's memory, in bytes.
    pub memory_total_bytes: u64,
    /// The machine's GPUs, as the NVIDIA driver's management library (NVML) reports them, as
    /// `nvidia-smi` would; empty where that library is not (no NVIDIA driver).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuMeasured>,
    /// Each attempt running on the node, by work ID: only in `GET /api/v1/nodes/{node}`, not
    /// in lists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub work: Vec<WorkMeasured>,
}

/// One GPU of a node's machine, as its agent last measured it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GpuMeasured {
    /// The device's index: the GPU instance ID work gets (`CUDA_VISIBLE_DEVICES`).
    pub index: u32,
    /// Device memory in use, in bytes.
    pub memory_used_bytes: u64,
    /// The device's memory, in bytes.
    pub memory_total_bytes: u64,
    /// The share of the driver's last sample period in which a kernel ran, 0 to 100; absent
    /// when the device does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_percent: Option<u32>,
}

/// What one attempt of an actor or task uses: every process of its process group, summed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorkMeasured {
    /// The actor's or task's ID.
    pub work_id: String,
    /// The attempt measured.
    pub attempt: u32,
    /// When the head received the measurement (ms since the Unix epoch).
    pub at_ms: u64,
    /// CPU in use, in thousandths of a core, over the last heartbeat interval; absent from
    /// the attempt's first measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_millicores: Option<u64>,
    /// Resident memory (RSS) of its processes, summed, in bytes.
    pub memory_bytes: u64,
    /// Its processes.
    pub processes: u32,
}
