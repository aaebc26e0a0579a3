//! Scale-down: which idle autoscaled nodes to remove.

use std::collections::BTreeMap;
use std::time::Duration;

use berth_api::spec::node_types::AutoscalerSettings;

/// An autoscaled node with nothing placed or reserved on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdleNode {
    /// Its ID.
    pub id: String,
    /// Its type.
    pub node_type: String,
    /// How long it has been idle.
    pub idle_for: Duration,
}

/// The idle nodes to remove: those idle past `idle_timeout_s`, longest idle first, keeping
/// each type at `min_nodes` (`alive` counts each type's autoscaled nodes that are alive,
/// idle or not). A node that holds work is never in `idle`, so it is never removed.
pub fn scale_down(
    settings: &AutoscalerSettings,
    alive: &BTreeMap<String, u32>,
    idle: &[IdleNode],
) -> Vec<String> {
    let mut left = alive.clone();
    let mut candidates: Vec<&IdleNode> =
        idle.iter().filter(|n| n.idle_for >= settings.idle_timeout).collect();
    candidates.sort_by(|a, b| b.idle_for.cmp(&a.idle_for).then_with(|| a.id.cmp(&b.id)));
    let mut out = Vec::new();
    for node in candidates {
        let min = settings
            .node_types
            .iter()
            .find(|t| t.name == node.node_type)
            .map_or(0, |t| t.min_nodes);
        let count = left.entry(node.node_type.clone()).or_insert(0);
        if *count > min {
            *count -= 1;
            out.push(node.id.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use berth_api::spec::node_types::parse_autoscaler;

    use super::*;

    fn idle(id: &str, node_type: &str, secs: u64) -> IdleNode {
        IdleNode { id: id.into(), node_type: node_type.into(), idle_for: Duration::from_secs(secs) }
    }

    #[test]
    fn only_nodes_idle_past_the_timeout_go_and_never_below_min_nodes() {
        let settings = parse_autoscaler(
            "t.yaml",
            "idle_timeout_s: 60\nnode_types:\n  cpu: {resources: {CPU: 1}, min_nodes: 1}\n  gpu: {resources: {GPU: 1}}\n"
                .into(),
        )
        .unwrap();
        let alive = [("cpu".to_string(), 3), ("gpu".to_string(), 1)].into();
        let nodes = [
            idle("cpu-1", "cpu", 61),
            idle("cpu-2", "cpu", 600),
            idle("cpu-3", "cpu", 900),
            idle("gpu-1", "gpu", 59),
        ];
        // All three CPU nodes are idle past the timeout; one stays for min_nodes (the one idle
        // the shortest). The GPU node is not idle long enough.
        assert_eq!(scale_down(&settings, &alive, &nodes), ["cpu-3", "cpu-2"]);
        let nodes = [idle("gpu-1", "gpu", 60)];
        assert_eq!(scale_down(&settings, &alive, &nodes), ["gpu-1"]);
    }
}
