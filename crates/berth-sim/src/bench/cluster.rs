//! Synthetic clusters for the speed benchmark: a realistic mix at any size.
//!
//! Node `i` of `n`: zone `z{i % 10}` (regions `us-west` for zones 0–4, `us-east` for 5–9);
//! market type spot for odd `i`, on-demand for even; every fifth node is a GPU node (8 ×
//! `nvidia-a100`, 8 × `nvidia-h100` or 4 × `nvidia-t4`, in turn) with 96 CPUs and 768 GiB,
//! the others CPU nodes with 32 CPUs and 128 GiB; one GPU node in ten is tainted
//! `reserved=ml-team`. The same `n` always gives the same cluster.

use berth_core::cluster::NodeSpec;
use berth_core::labels::{Labels, NodeFacts};
use berth_core::{Cluster, NodeId, Quantity, ResourceId, ResourceRegistry, ResourceSet};

/// Zones in every synthetic cluster.
pub const ZONES: usize = 10;

/// The accelerator models, with the GPUs per node of each.
pub const ACCELERATORS: [(&str, i64); 3] =
    [("nvidia-a100", 8), ("nvidia-h100", 8), ("nvidia-t4", 4)];

/// True when node `i` is a GPU node.
pub fn is_gpu_node(i: usize) -> bool {
    i.is_multiple_of(5)
}

/// The spec of node `i`.
pub fn node_spec(i: usize) -> NodeSpec {
    let zone = i % ZONES;
    let gpu = is_gpu_node(i);
    let mut total = ResourceSet::new();
    let mut facts = NodeFacts {
        market_type: Some(if i % 2 == 1 { "spot" } else { "on-demand" }.to_string()),
        availability_zone: Some(format!("z{zone}")),
        availability_region: Some(if zone < 5 { "us-west" } else { "us-east" }.to_string()),
        ..NodeFacts::default()
    };
    let mut taints = Vec::new();
    if gpu {
        let (model, gpus) = ACCELERATORS[(i / 5) % ACCELERATORS.len()];
        total.set(ResourceId::CPU, Quantity::from_whole(96));
        total.set(ResourceId::MEMORY, Quantity::from_whole(768 << 30));
        total.set(ResourceId::GPU, Quantity::from_whole(gpus));
        facts.accelerator_type = Some(model.to_string());
        if (i / 5).is_multiple_of(10) {
            taints.push(("reserved".to_string(), "ml-team".to_string()));
        }
    } else {
        total.set(ResourceId::CPU, Quantity::from_whole(32));
        total.set(ResourceId::MEMORY, Quantity::from_whole(128 << 30));
    }
    NodeSpec {
        id: NodeId::new(&format!("node-{i}")).expect("a valid node id"),
        total,
        labels: Labels::new(),
        facts,
        taints,
    }
}

/// A cluster of `n` synthetic nodes.
pub fn build(n: usize) -> Cluster {
    let mut cluster = Cluster::new(ResourceRegistry::default());
    for i in 0..n {
        cluster.add_node_with(node_spec(i)).expect("synthetic nodes are valid");
    }
    cluster
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_is_as_documented() {
        let cluster = build(1000);
        assert_eq!(cluster.len(), 1000);
        let gpu = cluster.nodes().filter(|(_, n)| n.has_resource(ResourceId::GPU)).count();
        assert_eq!(gpu, 200);
        assert_eq!(cluster.tainted().len(), 20);
        let zone3 = cluster.label_index().nodes_with("berth.io/availability-zone", "z3").unwrap();
        assert_eq!(zone3.len(), 100);
        cluster.check_invariants().unwrap();
    }
}
