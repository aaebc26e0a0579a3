//! Property test: the actor-label index answers "which nodes host a named actor" and "where
//! does anti-affinity keep this actor away" exactly as a scan of every placed actor does, over
//! random sequences of placements, removals (and re-placements) and node deaths.

use std::collections::BTreeSet;

use berth_core::actor_index::PlacedActor;
use berth_core::actors::{ActorAffinity, ActorId, ActorSpec, AffinityExpression, AffinityOperator};
use berth_core::labels::Labels;
use berth_core::testutil::labelled_cluster;
use berth_core::{Cluster, NodeIndex, NodeState};
use proptest::prelude::*;

const KEYS: [&str; 3] = ["app", "tier", "berth.io/actor-id"];
// "x1" and "x2" name placed actors (`x{n}`), so that rules on `berth.io/actor-id` match some.
const VALUES: [&str; 4] = ["web", "db", "x1", "x2"];
const NAMESPACES: [&str; 2] = ["default", "other"];
const OPERATORS: [AffinityOperator; 4] = [
    AffinityOperator::In,
    AffinityOperator::NotIn,
    AffinityOperator::Exists,
    AffinityOperator::DoesNotExist,
];

fn expression() -> impl Strategy<Value = AffinityExpression> {
    (0..KEYS.len(), 0..OPERATORS.len(), prop::sample::subsequence(&VALUES[..], 1..3), any::<bool>())
        .prop_map(|(key, op, values, zoned)| {
            let operator = OPERATORS[op];
            let values = match operator {
                AffinityOperator::In | AffinityOperator::NotIn => {
                    values.iter().map(|v| v.to_string()).collect()
                }
                _ => vec![],
            };
            let topology = zoned.then(|| "zone".to_string());
            AffinityExpression::new(KEYS[key], operator, values, false, topology).unwrap()
        })
}

fn labels() -> impl Strategy<Value = Labels> {
    prop::collection::vec((0..2usize, 0..VALUES.len()), 0..3).prop_map(|pairs| {
        Labels::from_pairs(pairs.into_iter().map(|(k, v)| (KEYS[k], VALUES[v]))).unwrap()
    })
}

/// A placed actor's labels, `berth.io/actor-id` included, as a label map.
fn all_labels(actor: &PlacedActor) -> Labels {
    Labels::from_pairs(actor.labels()).unwrap()
}

#[derive(Clone, Debug)]
enum Op {
    Place {
        actor: usize,
        node: usize,
        namespace: usize,
        labels: Labels,
        guard: Option<AffinityExpression>,
    },
    Remove(usize),
    Kill(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..10usize, 0..6usize, 0..2usize, labels(), prop::option::of(expression()))
            .prop_map(|(actor, node, namespace, labels, guard)| Op::Place { actor, node, namespace, labels, guard }),
        2 => (0..10usize).prop_map(Op::Remove),
        1 => (0..6usize).prop_map(Op::Kill),
    ]
}

fn cluster() -> Cluster {
    labelled_cluster(&[
        ("n0", "CPU=1", "zone=z1", ""),
        ("n1", "CPU=1", "zone=z1", ""),
        ("n2", "CPU=1", "zone=z2", ""),
        ("n3", "CPU=1", "zone=z2", ""),
        ("n4", "CPU=1", "zone=z3", ""),
        ("n5", "CPU=1", "", ""),
    ])
}

/// `nodes` widened to their zones, by scanning node labels.
fn widen_by_scan(
    cluster: &Cluster,
    topology: Option<&str>,
    nodes: BTreeSet<NodeIndex>,
) -> BTreeSet<NodeIndex> {
    let Some(topology) = topology else { return nodes };
    let zones: BTreeSet<String> = nodes
        .iter()
        .filter_map(|&n| {
            cluster.node(n).and_then(|node| node.labels().get(topology)).map(str::to_string)
        })
        .collect();
    cluster
        .nodes()
        .filter(|(_, node)| node.labels().get(topology).is_some_and(|z| zones.contains(z)))
        .map(|(i, _)| i)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    #[test]
    fn index_matches_a_scan_of_placed_actors(
        ops in prop::collection::vec(op(), 0..30),
        query in expression(),
        namespace in 0..2usize,
        newcomer in labels(),
    ) {
        let mut cluster = cluster();
        for op in &ops {
            match op {
                Op::Place { actor, node, namespace, labels, guard } => {
                    let spec = ActorSpec::new(
                        ActorId::new(&format!("x{actor}")).unwrap(),
                        NAMESPACES[*namespace],
                        labels.clone(),
                    ).unwrap();
                    let affinity = ActorAffinity { expressions: guard.iter().cloned().collect(), ..ActorAffinity::default() };
                    let _ = cluster.place_actor(&spec, NodeIndex(*node as u32), affinity);
                }
                Op::Remove(actor) => {
                    cluster.remove_actor(&format!("x{actor}"));
                }
                Op::Kill(node) => {
                    let _ = cluster.set_state(NodeIndex(*node as u32), NodeState::Dead);
                }
            }
        }
        let ns = NAMESPACES[namespace];
        let placed: Vec<&PlacedActor> = cluster.actors().iter().collect();
        for actor in &placed {
            prop_assert!(cluster.node(actor.node()).unwrap().state() != NodeState::Dead, "no actor on a dead node");
        }

        // Named nodes.
        let hosting: BTreeSet<NodeIndex> = placed
            .iter()
            .filter(|a| a.namespace() == ns && query.names_actor(&all_labels(a)))
            .map(|a| a.node())
            .collect();
        let expected = widen_by_scan(&cluster, query.topology_key.as_deref(), hosting);
        let got: BTreeSet<NodeIndex> =
            cluster.actors().named_nodes(ns, &query, cluster.label_index()).iter().collect();
        prop_assert_eq!(got, expected, "named nodes of {}", query);

        // Guarded domains, for a newcomer with `newcomer` labels.
        let mut newcomer_labels = newcomer.clone();
        newcomer_labels.insert("berth.io/actor-id", "new").unwrap();
        let mut expected = BTreeSet::new();
        for actor in placed.iter().filter(|a| a.namespace() == ns) {
            for guard in actor.affinity().expressions.iter().filter(|e| !e.soft && !e.operator.is_positive()) {
                if guard.names_actor(&newcomer_labels) {
                    expected.extend(widen_by_scan(&cluster, guard.topology_key.as_deref(), [actor.node()].into()));
                }
            }
        }
        let got: BTreeSet<NodeIndex> =
            cluster.actors().guarded(ns, &newcomer_labels, cluster.label_index()).iter().collect();
        prop_assert_eq!(&got, &expected, "guarded domains");

        // The pipeline's domain-by-domain forms agree with the widened sets.
        let all: berth_core::NodeSet = cluster.nodes().map(|(i, _)| i).collect();
        let unguarded: BTreeSet<NodeIndex> = cluster
            .actors()
            .unguarded(ns, &newcomer_labels, cluster.label_index(), &all)
            .iter()
            .collect();
        let all_set: BTreeSet<NodeIndex> = all.iter().collect();
        prop_assert_eq!(unguarded, all_set.difference(&expected).copied().collect::<BTreeSet<_>>());
        let named: BTreeSet<NodeIndex> =
            cluster.actors().named_nodes(ns, &query, cluster.label_index()).iter().collect();
        let satisfying: BTreeSet<NodeIndex> =
            cluster.actors().satisfying(ns, &query, cluster.label_index(), &all).iter().collect();
        let expected: BTreeSet<NodeIndex> = if query.operator.is_positive() {
            named
        } else {
            all_set.difference(&named).copied().collect()
        };
        prop_assert_eq!(satisfying, expected, "satisfying {}", query);
    }
}
