//! Property test: placement groups and the work placed into them never break the ledger, and
//! removing every group and releasing every allocation restores every node exactly — totals,
//! free amounts and each GPU instance.

use berth_core::pipeline::group::GroupDecision;
use berth_core::placement_group::{BundleSet, GroupId, GroupSpec, GroupStrategy};
use berth_core::request::GroupPlacement;
use berth_core::selector::Tolerations;
use berth_core::testutil::{labelled_cluster, resources};
use berth_core::{
    Decision, Request, ResourceId, Scheduler, SchedulerConfig, Strategy as Scheduling,
};
use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const BUNDLES: [&str; 6] =
    ["CPU=1", "CPU=2", "CPU=1,GPU=0.5", "GPU=1", "CPU=1,GPU=2", "CPU=3,GPU=0.25"];
const TASKS: [&str; 4] = ["CPU=1", "GPU=0.25", "CPU=1,GPU=1", "GPU=0.5"];
const STRATEGIES: [GroupStrategy; 4] = [
    GroupStrategy::Pack,
    GroupStrategy::Spread,
    GroupStrategy::StrictPack,
    GroupStrategy::StrictSpread,
];

#[derive(Clone, Debug)]
enum Op {
    Create { strategy: usize, bundles: Vec<usize> },
    Remove(usize),
    Task { group: usize, task: usize, bundle: Option<usize> },
    Release(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..4usize, prop::collection::vec(0..BUNDLES.len(), 1..4))
            .prop_map(|(strategy, bundles)| Op::Create { strategy, bundles }),
        1 => (0..6usize).prop_map(Op::Remove),
        3 => (0..6usize, 0..TASKS.len(), prop::option::of(0..3usize))
            .prop_map(|(group, task, bundle)| Op::Task { group, task, bundle }),
        1 => (0..12usize).prop_map(Op::Release),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn removing_groups_restores_the_ledger(ops in prop::collection::vec(op(), 1..25), seed in any::<u64>()) {
        let mut c = labelled_cluster(&[
            ("a", "CPU=4,GPU=2", "", ""),
            ("b", "CPU=4,GPU=1", "", ""),
            ("c", "CPU=8", "", ""),
        ]);
        let pristine: Vec<_> = c.nodes().map(|(_, n)| (n.available().clone(), n.pool(ResourceId::GPU).cloned())).collect();
        let mut scheduler = Scheduler::new(SchedulerConfig::default());
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut created = 0usize;
        let mut held = Vec::new();
        for op in &ops {
            match op {
                Op::Create { strategy, bundles } => {
                    let bundles = bundles.iter().map(|&b| resources(c.registry_mut(), BUNDLES[b])).collect();
                    let spec = GroupSpec {
                        id: GroupId::new(&format!("g{created}")).unwrap(),
                        name: String::new(),
                        namespace: "default".into(),
                        strategy: STRATEGIES[*strategy],
                        alternatives: vec![BundleSet { bundles, selectors: vec![], unknown: vec![] }],
                        tolerations: Tolerations::default(),
                    };
                    created += 1;
                    let before: Vec<_> = c.nodes().map(|(_, n)| n.available().clone()).collect();
                    let decision = scheduler.place_group(&mut c, &spec);
                    if !matches!(decision, GroupDecision::Created { .. }) {
                        let after: Vec<_> = c.nodes().map(|(_, n)| n.available().clone()).collect();
                        prop_assert_eq!(before, after, "a failed group left a trace");
                    }
                }
                Op::Remove(g) => {
                    c.remove_group(&format!("g{g}"));
                }
                Op::Task { group, task, bundle } => {
                    let strategy = Scheduling::PlacementGroup(GroupPlacement {
                        group: GroupId::new(&format!("g{group}")).unwrap(),
                        bundle: *bundle,
                    });
                    let set = resources(c.registry_mut(), TASKS[*task]);
                    let request = Request::new(set, strategy, c.registry()).unwrap();
                    if let Decision::Placed(allocation) = scheduler.place(&mut c, &request, &mut rng) {
                        held.push(allocation);
                    }
                }
                Op::Release(i) => {
                    if *i < held.len() {
                        let allocation = held.remove(*i);
                        c.release(&allocation);
                    }
                }
            }
            c.check_invariants().map_err(TestCaseError::fail)?;
            for group in c.groups() {
                for i in 0..group.bundles.len() {
                    if let Some(bundle) = group.bundle(i) {
                        prop_assert!(bundle.available().is_subset_of(bundle.reserved()), "a bundle over-committed");
                    }
                }
            }
        }
        for allocation in held.drain(..) {
            c.release(&allocation);
        }
        for g in 0..created {
            c.remove_group(&format!("g{g}"));
        }
        let restored: Vec<_> = c.nodes().map(|(_, n)| (n.available().clone(), n.pool(ResourceId::GPU).cloned())).collect();
        prop_assert_eq!(restored, pristine);
    }
}
