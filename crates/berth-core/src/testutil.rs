//! Builders for tests: clusters and requests from short literals.

use crate::cluster::Cluster;
use crate::node::{NodeId, NodeIndex};
use crate::quantity::Quantity;
use crate::request::{Request, Strategy};
use crate::resource::{ResourceRegistry, ResourceSet};

/// A resource set from `"CPU=4,GPU=0.5"` (custom names are interned). Panics on bad input:
/// tests only.
pub fn resources(registry: &mut ResourceRegistry, spec: &str) -> ResourceSet {
    spec.split(',')
        .filter(|part| !part.trim().is_empty())
        .map(|part| {
            let (name, quantity) = part.split_once('=').expect("name=quantity");
            let id = registry.intern(name.trim()).expect("valid resource name");
            (id, Quantity::parse(quantity).expect("valid quantity"))
        })
        .collect()
}

/// A cluster of nodes `(id, "CPU=4,GPU=1")`, indices in the order given.
pub fn cluster(nodes: &[(&str, &str)]) -> Cluster {
    let mut cluster = Cluster::new(ResourceRegistry::default());
    for (id, spec) in nodes {
        let total = resources(cluster.registry_mut(), spec);
        cluster.add_node(NodeId::new(id).expect("valid node id"), total).expect("valid node");
    }
    cluster
}

/// A validated request for `spec` under `strategy`.
pub fn request(cluster: &mut Cluster, spec: &str, strategy: Strategy) -> Request {
    let set = resources(cluster.registry_mut(), spec);
    Request::new(set, strategy, cluster.registry()).expect("valid request")
}

/// The index of node `id`.
pub fn index(cluster: &Cluster, id: &str) -> NodeIndex {
    cluster.index_of(id).expect("node exists")
}

/// A node spec from literals: resources `"CPU=4,GPU=1"`, labels and taints as `"k=v,k2=v2"`.
pub fn node_spec(
    registry: &mut ResourceRegistry,
    id: &str,
    spec: &str,
    labels: &str,
    taints: &str,
) -> crate::cluster::NodeSpec {
    let mut node = crate::cluster::NodeSpec::new(
        NodeId::new(id).expect("valid node id"),
        resources(registry, spec),
    );
    node.labels = crate::labels::Labels::parse_list(labels).expect("valid labels");
    node.taints = crate::labels::Labels::parse_list(taints)
        .expect("valid taints")
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    node
}

/// A cluster of nodes `(id, resources, labels, taints)`, indices in the order given.
pub fn labelled_cluster(nodes: &[(&str, &str, &str, &str)]) -> Cluster {
    let mut cluster = Cluster::new(ResourceRegistry::default());
    for (id, spec, labels, taints) in nodes {
        let node = node_spec(cluster.registry_mut(), id, spec, labels, taints);
        cluster.add_node_with(node).expect("valid node");
    }
    cluster
}

/// A selector from `[(key, expression)]`.
pub fn selector(pairs: &[(&str, &str)]) -> crate::selector::LabelSelector {
    crate::selector::LabelSelector::parse(pairs.iter().copied()).expect("valid selector")
}

/// Tolerations from `[(key, expression)]`.
pub fn tolerations(pairs: &[(&str, &str)]) -> crate::selector::Tolerations {
    crate::selector::Tolerations::parse(pairs.iter().copied()).expect("valid tolerations")
}

/// The seed a model-based property test runs with, for proptest's `RngSeed::Fixed`; `None`
/// when `PROPTEST_RNG_SEED` is set (proptest reads it itself). In CI (`CI` set) it is `fixed`,
/// so that a failure there replays exactly; elsewhere a fresh one each run, printed with how to
/// replay it, so that runs keep covering new cases (a failure is also saved under
/// `proptest-regressions/`, as proptest does).
pub fn model_seed(test: &str, fixed: u64) -> Option<u64> {
    if std::env::var_os("PROPTEST_RNG_SEED").is_some() {
        return None;
    }
    if std::env::var_os("CI").is_some() {
        return Some(fixed);
    }
    let seed = rand::random::<u64>();
    eprintln!("{test}: seed {seed} (PROPTEST_RNG_SEED={seed} replays this run)");
    Some(seed)
}
