//! Property test: explaining a placement group never changes it, and the explanation is the
//! decision: on random clusters, groups and earlier reservations, `place_group_explained`
//! decides exactly as `place_group`, every bundle attempt lists every node, and the node each
//! recorded attempt chose is the decision's node for that bundle, one that passed every filter.

use berth_core::pipeline::group::GroupDecision;
use berth_core::placement_group::{BundleSet, GroupId, GroupSpec, GroupStrategy};
use berth_core::selector::Tolerations;
use berth_core::testutil::{labelled_cluster, resources, selector};
use berth_core::{AttemptKind, Scheduler, SchedulerConfig};
use proptest::prelude::*;

const BUNDLES: [&str; 6] =
    ["CPU=1", "CPU=2", "CPU=1,GPU=0.5", "GPU=1", "CPU=1,GPU=2", "CPU=3,GPU=0.25"];
const STRATEGIES: [GroupStrategy; 4] = [
    GroupStrategy::Pack,
    GroupStrategy::Spread,
    GroupStrategy::StrictPack,
    GroupStrategy::StrictSpread,
];

/// A group: strategy, bundles, whether each bundle asks for zone `a`, and a fallback.
fn group() -> impl Strategy<Value = (usize, Vec<(usize, bool)>, bool)> {
    (0..4usize, prop::collection::vec((0..BUNDLES.len(), any::<bool>()), 1..4), any::<bool>())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn explaining_a_group_decides_the_same_and_records_the_decision(
        groups in prop::collection::vec(group(), 1..6),
    ) {
        let mut plain = labelled_cluster(&[
            ("a", "CPU=4,GPU=2", "zone=a", ""),
            ("b", "CPU=4,GPU=1", "zone=b", ""),
            ("c", "CPU=8", "zone=a", ""),
            ("d", "CPU=2,GPU=4", "zone=b", "team=ml"),
        ]);
        let mut explained = plain.clone();
        let mut scheduler = Scheduler::new(SchedulerConfig::default());
        for (n, (strategy, bundles, fallback)) in groups.iter().enumerate() {
            let set = BundleSet {
                bundles: bundles.iter().map(|(b, _)| resources(plain.registry_mut(), BUNDLES[*b])).collect(),
                selectors: bundles
                    .iter()
                    .map(|(_, zoned)| if *zoned { selector(&[("zone", "a")]) } else { selector(&[]) })
                    .collect(),
                unknown: vec![],
            };
            let mut alternatives = vec![set.clone()];
            if *fallback {
                alternatives.push(BundleSet { selectors: vec![], ..set });
            }
            let spec = GroupSpec {
                id: GroupId::new(&format!("g{n}")).unwrap(),
                name: String::new(),
                namespace: "default".into(),
                strategy: STRATEGIES[*strategy],
                alternatives,
                tolerations: Tolerations::default(),
            };
            let decision = scheduler.place_group(&mut plain, &spec);
            let (again, explanation) = scheduler.place_group_explained(&mut explained, &spec);
            prop_assert_eq!(&again, &decision);
            let tried = match &decision {
                GroupDecision::Created { alternative, .. } => alternative + 1,
                GroupDecision::Pending(d) | GroupDecision::Infeasible(d) => d.alternatives.len(),
            };
            prop_assert_eq!(explanation.alternatives.len(), tried);
            for alternative in &explanation.alternatives {
                for attempt in &alternative.bundles {
                    prop_assert_eq!(attempt.nodes.len(), 4, "every node has a line");
                    let AttemptKind::Bundle { index } = attempt.kind else {
                        return Err(TestCaseError::fail("a bundle attempt"));
                    };
                    if let Some(chosen) = attempt.chosen {
                        let line = attempt.nodes.iter().find(|l| l.node == chosen).unwrap();
                        prop_assert!(line.passed(), "the chosen node passed every filter");
                    }
                    if let GroupDecision::Created { alternative: created, nodes, .. } = &decision {
                        if alternative.alternative == *created {
                            prop_assert_eq!(attempt.chosen, Some(nodes[index]));
                        }
                    }
                }
            }
        }
    }
}
