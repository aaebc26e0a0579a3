//! Trace rows as Berth's types: the cluster (nodes labelled with their GPU model, GPUs as unit
//! instances) and one request per pod.
//!
//! Units: `cpu_milli` → CPU (0.001 CPU is exact at Berth's 0.0001 resolution); `memory_mib` →
//! `memory` in bytes; GPUs → the predefined unit-instance resource `GPU`. A 1-GPU pod with
//! `gpu_milli` below 1000 asks for that share of one GPU (460 → 0.46); any other GPU pod for
//! `num_gpu` whole GPUs. `gpu_spec` becomes the label selector
//! `berth.io/accelerator-type: in(…)`, so the label index narrows the candidates.

use berth_core::cluster::NodeSpec;
use berth_core::labels::{NodeFacts, ACCELERATOR_TYPE};
use berth_core::selector::LabelSelector;
use berth_core::{
    Cluster, NodeId, Quantity, Request, ResourceId, ResourceRegistry, ResourceSet, Strategy,
};

use crate::trace::{NodeRow, PodRow};

/// Bytes in a MiB.
const MIB: i64 = 1 << 20;

/// CPU from millicores (at most [`crate::trace::MAX_CPU_MILLI`], as the reader checks).
pub fn cpu(milli: u64) -> Quantity {
    Quantity::from_units(milli as i64 * 10)
}

/// A pod's GPU request: 0, a share of one GPU, or whole GPUs.
pub fn pod_gpu(pod: &PodRow) -> Quantity {
    match pod.num_gpu {
        0 => Quantity::ZERO,
        1 if pod.gpu_milli < 1000 => Quantity::from_units(i64::from(pod.gpu_milli) * 10),
        n => Quantity::from_whole(i64::from(n)),
    }
}

/// The cluster of a node list: every node alive, labelled `berth.io/accelerator-type=<model>`.
pub fn cluster(nodes: &[NodeRow]) -> Result<Cluster, String> {
    let mut cluster = Cluster::new(ResourceRegistry::default());
    for row in nodes {
        let id = NodeId::new(&row.name).map_err(|err| format!("node {}: {err}", row.name))?;
        let mut total = ResourceSet::new();
        total.set(ResourceId::CPU, cpu(row.cpu_milli));
        total.set(ResourceId::MEMORY, Quantity::from_whole(row.memory_mib as i64 * MIB));
        total.set(ResourceId::GPU, Quantity::from_whole(i64::from(row.gpus)));
        let mut spec = NodeSpec::new(id, total);
        spec.facts = NodeFacts {
            accelerator_type: (!row.model.is_empty()).then(|| row.model.clone()),
            ..NodeFacts::default()
        };
        cluster.add_node_with(spec).map_err(|err| format!("node {}: {err}", row.name))?;
    }
    Ok(cluster)
}

/// The request of one pod under `strategy`.
pub fn request(pod: &PodRow, strategy: Strategy, cluster: &Cluster) -> Result<Request, String> {
    let mut resources = ResourceSet::new();
    resources.set(ResourceId::CPU, cpu(pod.cpu_milli));
    resources.set(ResourceId::MEMORY, Quantity::from_whole(pod.memory_mib as i64 * MIB));
    resources.set(ResourceId::GPU, pod_gpu(pod));
    let request = Request::new(resources, strategy, cluster.registry())
        .map_err(|err| format!("pod {}: {err}", pod.name))?;
    if pod.gpu_spec.is_empty() {
        return Ok(request);
    }
    let expression = format!("in({})", pod.gpu_spec.join(","));
    let selector = LabelSelector::parse([(ACCELERATOR_TYPE, expression.as_str())])
        .map_err(|err| format!("pod {}: gpu_spec: {err}", pod.name))?;
    Ok(request.with_label_selector(selector))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{NodeRow, MAX_CPU_MILLI, MAX_MEMORY_MIB};

    #[test]
    fn the_largest_values_the_reader_accepts_convert_exactly() {
        let row = NodeRow {
            name: "big".into(),
            cpu_milli: MAX_CPU_MILLI,
            memory_mib: MAX_MEMORY_MIB,
            gpus: 0,
            model: String::new(),
        };
        let cluster = cluster(&[row]).expect("converts");
        let node = cluster.node(berth_core::NodeIndex(0)).expect("one node");
        assert_eq!(node.total().get(ResourceId::CPU), Quantity::MAX);
        assert!(node.total().get(ResourceId::MEMORY) <= Quantity::MAX);
    }
}
