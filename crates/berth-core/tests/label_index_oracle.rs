//! Property test: the label index answers every selector exactly as a brute-force scan of the
//! nodes' labels does, over random clusters, random label changes and node removals.

use berth_core::labels::{Labels, NodeFacts};
use berth_core::selector::LabelSelector;
use berth_core::testutil::node_spec;
use berth_core::{Cluster, NodeIndex, NodeSet, ResourceRegistry};
use proptest::prelude::*;

const KEYS: [&str; 4] = ["zone", "disk", "team", "example.com/gpu"];
const VALUES: [&str; 4] = ["a", "b", "c", ""];

fn labels() -> impl Strategy<Value = Vec<(usize, usize)>> {
    prop::collection::vec((0..KEYS.len(), 0..VALUES.len()), 0..4)
}

fn to_labels(pairs: &[(usize, usize)]) -> Labels {
    Labels::from_pairs(pairs.iter().map(|&(k, v)| (KEYS[k], VALUES[v]))).unwrap()
}

fn expression() -> impl Strategy<Value = String> {
    let value = prop::sample::select(&VALUES[..3]);
    let values = prop::collection::vec(value.clone(), 1..3).prop_map(|v| v.join(","));
    let one = prop_oneof![
        value.clone().prop_map(str::to_string),
        value.prop_map(|v| format!("!{v}")),
        values.clone().prop_map(|v| format!("in({v})")),
        values.prop_map(|v| format!("!in({v})")),
        Just("exists()".to_string()),
        Just("!exists()".to_string()),
        Just(String::new()),
    ];
    prop::collection::vec(one, 1..3).prop_map(|parts| {
        // An empty expression only stands alone (it means "equals the empty value").
        if parts.len() > 1 && parts.iter().any(String::is_empty) {
            parts.into_iter().filter(|p| !p.is_empty()).collect::<Vec<_>>().join(",")
        } else {
            parts.join(",")
        }
    })
}

#[derive(Clone, Debug)]
enum Op {
    Relabel(usize, Vec<(usize, usize)>),
    Remove(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..12, labels()).prop_map(|(n, l)| Op::Relabel(n, l)),
        (0usize..12).prop_map(Op::Remove),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn index_matches_a_scan(
        nodes in prop::collection::vec(labels(), 0..12),
        ops in prop::collection::vec(op(), 0..8),
        selector in prop::collection::vec((0..KEYS.len(), expression()), 0..3),
    ) {
        let mut cluster = Cluster::new(ResourceRegistry::default());
        for (i, pairs) in nodes.iter().enumerate() {
            let mut spec = node_spec(cluster.registry_mut(), &format!("n{i}"), "CPU=1", "", "");
            spec.labels = to_labels(pairs);
            cluster.add_node_with(spec).unwrap();
        }
        for op in &ops {
            match op {
                Op::Relabel(n, pairs) => {
                    let _ = cluster.set_labels(NodeIndex(*n as u32), NodeFacts::default(), to_labels(pairs));
                }
                Op::Remove(n) => {
                    let _ = cluster.remove_node(NodeIndex(*n as u32));
                }
            }
        }
        let selector = LabelSelector::parse(selector.iter().map(|(k, e)| (KEYS[*k], e.as_str()))).unwrap();
        let all: NodeSet = cluster.nodes().map(|(i, _)| i).collect();
        let by_index: Vec<NodeIndex> = cluster.label_index().select(&selector, &all).iter().collect();
        let by_scan: Vec<NodeIndex> = cluster
            .nodes()
            .filter(|(_, node)| selector.matches(|key| node.labels().get(key)))
            .map(|(i, _)| i)
            .collect();
        prop_assert_eq!(by_index, by_scan, "selector {}", selector);
    }
}
