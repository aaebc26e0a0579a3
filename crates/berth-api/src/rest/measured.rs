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
    /// Each attempt running on the node, by work ID: only in `GET /api/v1/nodes/{node}`, not
    /// in lists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub work: Vec<WorkMeasured>,
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
