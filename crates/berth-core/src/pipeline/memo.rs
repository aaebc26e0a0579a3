//! The visit memo: what the filters and the ranking said about a node for a request, kept
//! while neither changes, so that a node visited again for an equal request costs a lookup.
//!
//! Steady state is the common case: between two visits of a node (the early-stopping visit
//! moves round the cluster), most nodes did not change, and requests come in few shapes
//! (replicas, batches of one task). Kubernetes' scheduler once cached predicate results per
//! node and "equivalence class" of pods, and dropped the cache because invalidating it right
//! was hard. Here nothing is invalidated: an entry holds the node's [`Version`], which every
//! change to the node replaces, and the ID of the request's shape (the parts of a request the
//! stages read: resources, tolerations, node-label selectors; compared in full, not hashed). Only stages that read nothing else
//! ([`Filter::node_and_request_only`](super::stage::Filter::node_and_request_only)) are
//! memoized; an attempt with any other stage visits every node as before, and so does
//! `berth explain`.

use std::collections::VecDeque;

use crate::diagnosis::ReasonKind;
use crate::node::{Node, Version};
use crate::request::{NodeLabel, Request, Strategy};
use crate::resource::ResourceSet;
use crate::selector::Tolerations;

/// Shapes remembered: a new shape beyond these forgets the oldest (its entries then never
/// match again, as shape IDs are not reused).
const SHAPES_KEPT: usize = 16;

/// What the filters and the ranking said about one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// It passed, with this preference tier and weighted score.
    Fit { tier: u32, score: u64 },
    /// The first filter it failed said this.
    Unfit(ReasonKind),
}

/// The parts of a request the memoized stages read (see
/// [`Filter::node_and_request_only`](super::stage::Filter::node_and_request_only)), and which
/// preferences and scorers applied (so that an answer given under some stages is never reused
/// under others: a scorer may apply on clusters of one kind only, an attempt may not rank).
/// Not the rest of the strategy: actor affinity, say, names a service per request, and is
/// read by the candidate stage and by soft affinity's scorer, which is not memoized.
#[derive(Debug, PartialEq, Eq)]
struct Shape {
    resources: ResourceSet,
    tolerations: Tolerations,
    node_label: Option<NodeLabel>,
    stages: u64,
}

impl Shape {
    fn matches(&self, request: &Request, stages: u64) -> bool {
        self.stages == stages
            && self.resources == *request.resources()
            && self.tolerations == *request.tolerations()
            && self.node_label.as_ref() == node_label(request)
    }
}

/// The node-label selectors of a NODE_LABEL request.
fn node_label(request: &Request) -> Option<&NodeLabel> {
    match request.strategy() {
        Strategy::NodeLabel(node_label) => Some(node_label),
        _ => None,
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    version: Version,
    shape: u64,
    outcome: Outcome,
}

/// Per node (by index), the outcome of its last visit; the shapes seen last. One per
/// scheduler: the stages and their settings are the scheduler's. About 32 bytes per node.
#[derive(Debug, Default)]
pub(super) struct VisitMemo {
    shapes: VecDeque<(Shape, u64)>,
    /// The last shape ID handed out; 0 is none.
    last_shape: u64,
    entries: Vec<Option<Entry>>,
}

impl VisitMemo {
    /// The ID of `request`'s shape when the preferences and scorers in `stages` (one bit
    /// each) apply: the same ID for an equal request while the shape is remembered.
    pub(super) fn shape(&mut self, request: &Request, stages: u64) -> u64 {
        if let Some((_, id)) = self.shapes.iter().find(|(shape, _)| shape.matches(request, stages))
        {
            return *id;
        }
        if self.shapes.len() == SHAPES_KEPT {
            self.shapes.pop_front();
        }
        self.last_shape += 1;
        let shape = Shape {
            resources: request.resources().clone(),
            tolerations: request.tolerations().clone(),
            node_label: node_label(request).cloned(),
            stages,
        };
        self.shapes.push_back((shape, self.last_shape));
        self.last_shape
    }

    /// What the last visit of `node` with a request of `shape` said, if the node has not
    /// changed since.
    #[inline]
    pub(super) fn get(&self, node: &Node, shape: u64) -> Option<Outcome> {
        let entry = self.entries.get(node.index().0 as usize)?.as_ref()?;
        (entry.shape == shape && entry.version == node.version()).then_some(entry.outcome)
    }

    /// Remembers what a visit of `node` with a request of `shape` said.
    #[inline]
    pub(super) fn put(&mut self, node: &Node, shape: u64, outcome: Outcome) {
        let at = node.index().0 as usize;
        if at >= self.entries.len() {
            self.entries.resize(at + 1, None);
        }
        self.entries[at] = Some(Entry { version: node.version(), shape, outcome });
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::VisitMemo;
    use crate::actors::{ActorAffinity, AffinityExpression, AffinityOperator};
    use crate::cluster::{Allocation, Cluster};
    use crate::labels::Labels;
    use crate::node::NodeState;
    use crate::pipeline::profile::{Profile, ScorerSpec};
    use crate::pipeline::{Decision, NodesToScore, Scheduler, SchedulerConfig};
    use crate::request::{NodeAffinity, NodeLabel, Request, Strategy as Placement};
    use crate::resource::ResourceId;
    use crate::testutil::{labelled_cluster, request, selector, tolerations};
    use crate::Quantity;

    fn hybrid(nodes_to_score: NodesToScore) -> SchedulerConfig {
        SchedulerConfig {
            profile: Profile::of_scorers(vec![ScorerSpec::Hybrid { weight: 1 }]),
            nodes_to_score,
            ..SchedulerConfig::default()
        }
    }

    fn nodes() -> Cluster {
        labelled_cluster(&[
            ("n0", "CPU=4", "zone=a", ""),
            ("n1", "CPU=8,GPU=2", "zone=b", ""),
            ("n2", "CPU=4", "zone=a", "team=ml"),
            ("n3", "CPU=16,GPU=4", "zone=b", ""),
            ("n4", "CPU=2", "zone=c", ""),
            ("n5", "CPU=8", "zone=a", "spot=true"),
            ("n6", "CPU=8,GPU=1", "zone=c", ""),
            ("n7", "CPU=4", "zone=b", ""),
        ])
    }

    /// The `shape`-th of a few request shapes: plain, GPU shares, tolerations, soft labels.
    /// Some differ only in their tolerations or in their strategy.
    fn shaped(cluster: &mut Cluster, shape: usize) -> Request {
        let soft = |zone: &str| {
            let soft = NodeLabel { hard: Default::default(), soft: selector(&[("zone", zone)]) };
            Placement::NodeLabel(soft)
        };
        match shape {
            0 => request(cluster, "CPU=1", Placement::Default),
            1 => request(cluster, "CPU=2,GPU=0.5", Placement::Default),
            2 => request(cluster, "CPU=1,GPU=1", Placement::Default),
            3 => request(cluster, "CPU=1", Placement::Default)
                .with_tolerations(tolerations(&[("team", "in(ml)"), ("spot", "exists()")])),
            4 => request(cluster, "CPU=1", soft("c")),
            5 => request(cluster, "CPU=1", soft("a")),
            // Away from another service per request: the same shape for the memo.
            7 | 8 => {
                let away = AffinityExpression::new(
                    "app",
                    AffinityOperator::NotIn,
                    vec![format!("svc-{shape}")],
                    false,
                    Some("zone".to_string()),
                )
                .unwrap();
                let affinity = ActorAffinity { expressions: vec![away], ..Default::default() };
                request(cluster, "CPU=1", Placement::ActorAffinity(affinity))
            }
            // One node first (no ranking), then DEFAULT.
            _ => {
                let node = NodeAffinity {
                    node: "n1".to_string(),
                    soft: true,
                    spill_on_unavailable: true,
                    fail_on_unavailable: false,
                };
                request(cluster, "CPU=1", Placement::NodeAffinity(node))
            }
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Place(usize),
        Release(usize),
        Taint(u32, bool),
        Zone(u32, &'static str),
        Cpu(u32, u32),
        State(u32, bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..9usize).prop_map(Op::Place),
            2 => any::<prop::sample::Index>().prop_map(|i| Op::Release(i.index(64))),
            1 => (0..8u32, any::<bool>()).prop_map(|(n, on)| Op::Taint(n, on)),
            1 => (0..8u32, prop::sample::select(vec!["a", "b", "c"])).prop_map(|(n, z)| Op::Zone(n, z)),
            1 => (0..8u32, 1..12u32).prop_map(|(n, cpu)| Op::Cpu(n, cpu)),
            1 => (0..8u32, any::<bool>()).prop_map(|(n, draining)| Op::State(n, draining)),
        ]
    }

    fn apply(cluster: &mut Cluster, live: &mut Vec<Allocation>, op: &Op) {
        let node = |n: u32| crate::node::NodeIndex(n);
        match *op {
            Op::Place(_) => {}
            Op::Release(i) if !live.is_empty() => cluster.release(&live.remove(i % live.len())),
            Op::Release(_) => {}
            Op::Taint(n, true) => drop(cluster.add_taint(node(n), "team", "ml")),
            Op::Taint(n, false) => drop(cluster.remove_taint(node(n), "team", "ml")),
            Op::Zone(n, zone) => {
                let facts = cluster.node(node(n)).unwrap().facts().clone();
                let labels = Labels::from_pairs([("zone", zone)]).unwrap();
                cluster.set_labels(node(n), facts, labels).unwrap();
            }
            Op::Cpu(n, cpu) => {
                cluster
                    .set_capacity(node(n), ResourceId::CPU, Quantity::from_whole(i64::from(cpu)))
                    .unwrap();
            }
            Op::State(n, draining) => {
                let state = if draining { NodeState::Draining } else { NodeState::Alive };
                cluster.set_state(node(n), state).unwrap();
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// The memo changes no decision: a scheduler that remembers decides as one that
        /// forgets before every decision, whatever changed in between.
        #[test]
        fn decisions_with_the_memo_equal_decisions_without(
            ops in prop::collection::vec(op(), 1..80),
            early_stop in any::<bool>(),
        ) {
            let nodes_to_score = if early_stop {
                NodesToScore::Adaptive { from_nodes: 4, feasible: 3 }
            } else {
                NodesToScore::default()
            };
            let (mut remembering, mut forgetting) =
                (Scheduler::new(hybrid(nodes_to_score)), Scheduler::new(hybrid(nodes_to_score)));
            let (mut a, mut b) = (nodes(), nodes());
            let (mut live_a, mut live_b) = (Vec::new(), Vec::new());
            let (mut rng_a, mut rng_b) = (ChaCha8Rng::seed_from_u64(7), ChaCha8Rng::seed_from_u64(7));
            for op in &ops {
                if let Op::Place(shape) = *op {
                    let request = shaped(&mut a, shape);
                    forgetting.memo = VisitMemo::default();
                    let remembered = remembering.place(&mut a, &request, &mut rng_a);
                    let fresh = forgetting.place(&mut b, &request, &mut rng_b);
                    prop_assert_eq!(&remembered, &fresh);
                    if let (Decision::Placed(x), Decision::Placed(y)) = (remembered, fresh) {
                        live_a.push(x);
                        live_b.push(y);
                    }
                } else {
                    apply(&mut a, &mut live_a, op);
                    apply(&mut b, &mut live_b, op);
                }
            }
        }
    }

    /// The stages a plain request runs under `hybrid`: the GPU-avoiding preference (the
    /// second) and the hybrid score (the first scorer).
    const STAGES: u64 = 1 << 1 | 1 << 32;

    #[test]
    fn an_entry_takes_32_bytes() {
        assert_eq!(std::mem::size_of::<Option<super::Entry>>(), 32);
    }

    #[test]
    fn an_unchanged_node_is_remembered_and_a_changed_one_is_not() {
        let mut cluster = nodes();
        let mut scheduler = Scheduler::new(hybrid(NodesToScore::default()));
        let request = shaped(&mut cluster, 0);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let Decision::Placed(allocation) = scheduler.place(&mut cluster, &request, &mut rng) else {
            panic!("placed")
        };
        let shape = scheduler.memo.shape(&request, STAGES);
        let remembered: Vec<bool> = (0..8)
            .map(|n| {
                let node = cluster.node(crate::node::NodeIndex(n)).unwrap();
                scheduler.memo.get(node, shape).is_some()
            })
            .collect();
        let chosen = allocation.node().0 as usize;
        for (n, remembered) in remembered.iter().enumerate() {
            assert_eq!(*remembered, n != chosen, "node {n}; the request went to {chosen}");
        }
        // Another shape has its own entries: none yet.
        let other = shaped(&mut cluster, 3);
        let other = scheduler.memo.shape(&other, STAGES);
        assert_ne!(other, shape);
        assert!(scheduler
            .memo
            .get(cluster.node(crate::node::NodeIndex(0)).unwrap(), other)
            .is_none());
    }
}
