//! Table-driven tests of every filter, scorer and strategy.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::filters::{InstancesFit, ResourcesFree, ResourcesTotal};
use super::profile::Profile;
use super::scorers::{AvoidGpuNodes, HybridUtilization};
use super::stage::{DecisionContext, Filter, Preference, Prepared, Score, Scorer, Verdict};
use super::visit::run_filters;
use super::*;
use crate::diagnosis::{Reason, ReasonKind};
use crate::node::{Node, NodeState};
use crate::quantity::Quantity;
use crate::request::NodeAffinity;
use crate::resource::{ResourceId, ResourceSet};
use crate::testutil::{cluster, index, request, resources};

fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

fn q(text: &str) -> Quantity {
    Quantity::parse(text).unwrap()
}

/// Reserves `spec` on node `id` to make it busy.
fn occupy(cluster: &mut Cluster, id: &str, spec: &str) -> Allocation {
    let set = resources(cluster.registry_mut(), spec);
    cluster.reserve(index(cluster, id), &set).unwrap()
}

fn placed_on(cluster: &Cluster, decision: &Decision) -> Option<String> {
    match decision {
        Decision::Placed(allocation) => {
            Some(cluster.node(allocation.node()).unwrap().id().to_string())
        }
        _ => None,
    }
}

fn affinity(node: &str, soft: bool, spill: bool, fail: bool) -> Strategy {
    Strategy::NodeAffinity(NodeAffinity {
        node: node.to_string(),
        soft,
        spill_on_unavailable: spill,
        fail_on_unavailable: fail,
    })
}

/// Loads `node` with `busy` (if any), then places `ask` under `strategy` with seed 0.
fn place_after_load(
    c: &mut Cluster,
    node: &str,
    busy: &str,
    ask: &str,
    strategy: &Strategy,
) -> Decision {
    if !busy.is_empty() {
        occupy(c, node, busy);
    }
    let req = request(c, ask, strategy.clone());
    Scheduler::new(SchedulerConfig::default()).place(c, &req, &mut rng(0))
}

/// `placed:<node>`, `pending` or `infeasible`.
fn outcome(c: &Cluster, decision: &Decision) -> String {
    match decision {
        Decision::Placed(_) => format!("placed:{}", placed_on(c, decision).unwrap()),
        Decision::Pending(_) => "pending".into(),
        Decision::Infeasible(_) => "infeasible".into(),
    }
}

fn rejected(diagnosis: &Diagnosis) -> Vec<(ReasonKind, u64)> {
    diagnosis.totals()
}

#[test]
fn filters_give_reasons_per_node() {
    // (node total, already used, request, filter, expected reason kind or None for Fit)
    type Case = (&'static str, &'static str, &'static str, &'static dyn Filter, Option<ReasonKind>);
    let cases: [Case; 10] = [
        ("CPU=4", "", "CPU=4", &ResourcesTotal, None),
        (
            "CPU=4",
            "",
            "CPU=5",
            &ResourcesTotal,
            Some(ReasonKind::InsufficientTotal(ResourceId::CPU)),
        ),
        (
            "CPU=4",
            "",
            "GPU=1",
            &ResourcesTotal,
            Some(ReasonKind::InsufficientTotal(ResourceId::GPU)),
        ),
        ("CPU=4", "CPU=3", "CPU=1", &ResourcesFree, None),
        (
            "CPU=4",
            "CPU=3",
            "CPU=2",
            &ResourcesFree,
            Some(ReasonKind::InsufficientAvailable(ResourceId::CPU)),
        ),
        ("GPU=2", "GPU=0.5", "GPU=1", &InstancesFit, None),
        ("GPU=2", "GPU=1", "GPU=0.75", &InstancesFit, None),
        // Short in sum is the free filter's reason, not fragmentation.
        ("GPU=1", "GPU=0.5", "GPU=0.75", &InstancesFit, None),
        ("CPU=4", "", "GPU=0.5", &InstancesFit, None),
        ("GPU=2", "GPU=0.5", "GPU=2", &InstancesFit, None),
    ];
    for (total, used, ask, filter, expected) in cases {
        let mut c = cluster(&[("n1", total)]);
        if !used.is_empty() {
            occupy(&mut c, "n1", used);
        }
        let req = request(&mut c, ask, Strategy::Default);
        let cx = DecisionContext { cluster: &c, request: &req, prepared: &Prepared::default() };
        let verdict = filter.check(&cx, c.node(index(&c, "n1")).unwrap());
        let got = match verdict {
            Verdict::Fit => None,
            Verdict::Unfit(reason) => Some(reason.kind()),
        };
        assert_eq!(got, expected, "{} on {total} used {used} asking {ask}", filter.name());
    }
}

#[test]
fn instances_filter_reports_fragmentation_only_when_enough_is_free_in_sum() {
    let mut c = cluster(&[("g", "GPU=2")]);
    let node = index(&c, "g");
    let half = resources(c.registry_mut(), "GPU=0.5");
    c.reserve_instances(node, &half, &[(ResourceId::GPU, vec![0])]).unwrap();
    c.reserve_instances(node, &half, &[(ResourceId::GPU, vec![1])]).unwrap();
    // 1.0 GPU free in sum, 0.5 on each instance.
    for (ask, expected) in
        [("GPU=1", true), ("GPU=0.75", true), ("GPU=0.5", false), ("GPU=2", false)]
    {
        let req = request(&mut c, ask, Strategy::Default);
        let cx = DecisionContext { cluster: &c, request: &req, prepared: &Prepared::default() };
        let verdict = InstancesFit.check(&cx, c.node(node).unwrap());
        assert_eq!(matches!(verdict, Verdict::Unfit(Reason::Fragmented { .. })), expected, "{ask}");
    }
}

#[test]
fn hybrid_score_packs_below_threshold_and_spreads_above() {
    // (total, used, request, threshold, expected score)
    let cases = [
        ("CPU=10", "", "CPU=1", "0.5", 100), // 10% < 50%: counts as empty
        ("CPU=10", "CPU=3", "CPU=1", "0.5", 100), // 40%
        ("CPU=10", "CPU=4", "CPU=1", "0.5", 50), // exactly 50%: spread from here
        ("CPU=10", "CPU=8", "CPU=1", "0.5", 10), // 90%
        ("CPU=10", "CPU=9", "CPU=1", "0.5", 0), // 100%
        ("CPU=10", "", "CPU=2", "0", 80),    // threshold 0: pure spread
        ("CPU=10", "", "CPU=6", "1", 100),   // threshold 1: pure pack
        ("CPU=10,GPU=2", "", "CPU=1,GPU=1", "0.5", 50), // the highest utilisation wins (GPU 50%)
        ("CPU=10,memory=100", "memory=70", "CPU=1", "0.5", 30), // memory counts too
        ("CPU=10,TPU=4", "TPU=4", "CPU=1", "0.5", 100), // custom resources do not count
    ];
    for (total, used, ask, threshold, expected) in cases {
        let mut c = cluster(&[("n1", total)]);
        if !used.is_empty() {
            occupy(&mut c, "n1", used);
        }
        let req = request(&mut c, ask, Strategy::Default);
        let cx = DecisionContext { cluster: &c, request: &req, prepared: &Prepared::default() };
        let scorer = HybridUtilization { spread_threshold: q(threshold) };
        let score = scorer.score(&cx, c.node(index(&c, "n1")).unwrap());
        assert_eq!(score, Score::new(expected), "{total} used {used} asking {ask} at {threshold}");
    }
}

/// The hybrid score as its rule states it, in i128 and without shortcuts: the reference the
/// scorer's widening arithmetic must match exactly.
fn hybrid_reference(node: &Node, request: &ResourceSet, threshold: Quantity) -> Score {
    let mut worst: (i128, i128) = (0, 1);
    let hybrid =
        [ResourceId::CPU, ResourceId::GPU, ResourceId::MEMORY, ResourceId::OBJECT_STORE_MEMORY];
    for resource in hybrid {
        let total = i128::from(node.total().get(resource).units());
        if total == 0 {
            continue;
        }
        let free = i128::from(node.available().get(resource).units());
        let used = (total - free + i128::from(request.get(resource).units())).min(total);
        if used * worst.1 > worst.0 * total {
            worst = (used, total);
        }
    }
    let (used, total) = worst;
    if used * i128::from(crate::quantity::UNITS_PER_WHOLE) < i128::from(threshold.units()) * total {
        return Score::MAX;
    }
    Score::new(100 - (used * 100 / total) as u32)
}

/// Quantities for the property below: often round (so that a node sits exactly on the threshold),
/// else any.
fn cpu_units() -> impl proptest::strategy::Strategy<Value = i64> {
    use proptest::prelude::*;
    prop_oneof![(1i64..=16).prop_map(|whole| whole * 10_000), 1i64..10_240_000]
}

fn share() -> impl proptest::strategy::Strategy<Value = f64> {
    use proptest::prelude::*;
    prop_oneof![Just(0.0), Just(0.25), Just(0.5), 0.0..=1.0f64]
}

fn threshold_units() -> impl proptest::strategy::Strategy<Value = i64> {
    use proptest::prelude::*;
    prop_oneof![(0i64..=4).prop_map(|k| k * 2_500), 0i64..=10_000]
}

/// `units` of CPU as a decimal quantity.
fn cpu_text(units: i64) -> String {
    format!("CPU={}.{:04}", units / 10_000, units % 10_000)
}

proptest::proptest! {
    /// On nodes up to 1,024 CPUs, the largest memory accepted and 8 GPUs, in any state, the
    /// hybrid score equals its rule computed in i128.
    #[test]
    fn the_hybrid_score_is_its_rule_exactly(
        cpus in cpu_units(),
        memory in 1i64..=crate::quantity::MAX_WHOLE,
        gpus in 0i64..=8,
        used in (share(), share(), 0i64..=8),
        asked in (0i64..=40_000, share(), 0i64..=8),
        threshold in threshold_units(),
    ) {
        let gpu_text = |n: i64| if n > 0 { format!(",GPU={n}") } else { String::new() };
        let part = |quantity: i64, share: f64| (quantity as f64 * share) as i64;
        let total = format!("{},memory={memory}{}", cpu_text(cpus), gpu_text(gpus));
        let mut c = cluster(&[("n1", &total)]);
        let (cpu_used, memory_used) = (part(cpus, used.0), part(memory, used.1));
        let busy = format!("{},memory={memory_used}{}", cpu_text(cpu_used), gpu_text(used.2.min(gpus)));
        let set = resources(c.registry_mut(), &busy);
        c.reserve(index(&c, "n1"), &set).unwrap();
        // A byte of memory at least, so that the request is never empty.
        let memory_asked = part(memory, asked.1) + 1;
        let ask = format!("{},memory={memory_asked}{}", cpu_text(asked.0), gpu_text(asked.2));
        let req = request(&mut c, &ask, Strategy::Default);
        let cx = DecisionContext { cluster: &c, request: &req, prepared: &Prepared::default() };
        let spread_threshold = Quantity::from_units(threshold);
        let node = c.node(index(&c, "n1")).unwrap();
        let score = HybridUtilization { spread_threshold }.score(&cx, node);
        let expected = hybrid_reference(node, req.resources(), spread_threshold);
        proptest::prop_assert_eq!(score, expected);
    }
}

#[test]
fn avoid_gpu_nodes_is_a_preference_for_cpu_requests_only() {
    let mut c = cluster(&[("cpu", "CPU=4"), ("gpu", "CPU=4,GPU=1")]);
    let cpu_req = request(&mut c, "CPU=1", Strategy::Default);
    let gpu_req = request(&mut c, "CPU=1,GPU=1", Strategy::Default);
    let cases = [
        (&cpu_req, "cpu", true),
        (&cpu_req, "gpu", false),
        (&gpu_req, "cpu", true),
        (&gpu_req, "gpu", true),
    ];
    for (req, node, expected) in cases {
        let cx = DecisionContext { cluster: &c, request: req, prepared: &Prepared::default() };
        assert_eq!(
            AvoidGpuNodes.prefers(&cx, c.node(index(&c, node)).unwrap()),
            expected,
            "{node}"
        );
    }
}

#[test]
fn default_packs_until_half_full_then_spreads() {
    // Three nodes: k = max(1, 20% of 3) = 1, so the choice is deterministic.
    let mut c = cluster(&[("a", "CPU=4"), ("b", "CPU=4"), ("c", "CPU=4")]);
    let mut s = Scheduler::new(SchedulerConfig::default());
    let req = request(&mut c, "CPU=1", Strategy::Default);
    let order: Vec<String> = (0..6)
        .map(|i| placed_on(&c.clone(), &s.place(&mut c, &req, &mut rng(i))).unwrap())
        .collect();
    // a: 1/4, 2/4 (50% after placing scores 50, but b and c score 100 at 25%)...
    assert_eq!(order, ["a", "b", "c", "a", "b", "c"].map(String::from).to_vec(), "{order:?}");
    let mut c = cluster(&[("a", "CPU=10"), ("b", "CPU=10")]);
    let order: Vec<String> = (0..6)
        .map(|i| placed_on(&c.clone(), &s.place(&mut c, &req, &mut rng(i))).unwrap())
        .collect();
    // Below 50% after placing, "a" ties with "b" at 100 and wins by node order: a packs to 4/10;
    // the 5th on "a" would make it 50%, so "b" (10%) goes first.
    assert_eq!(order, ["a", "a", "a", "a", "b", "b"].map(String::from).to_vec(), "{order:?}");
}

#[test]
fn default_avoids_gpu_nodes_unless_only_they_fit() {
    let mut c = cluster(&[("gpu", "CPU=8,GPU=2"), ("cpu", "CPU=2")]);
    let mut s = Scheduler::new(SchedulerConfig::default());
    let req = request(&mut c, "CPU=1", Strategy::Default);
    for seed in 0..2 {
        assert_eq!(
            placed_on(&c.clone(), &s.place(&mut c, &req, &mut rng(seed))).as_deref(),
            Some("cpu")
        );
    }
    // The CPU node is full: the GPU node is used rather than leaving the request pending.
    assert_eq!(placed_on(&c.clone(), &s.place(&mut c, &req, &mut rng(9))).as_deref(), Some("gpu"));
    // Without the preference, the default profile on this GPU cluster still keeps the CPU
    // task off the GPU node (best fit breaks the fragmentation scorers' tie: the CPU node is
    // left with less free)...
    let mut off =
        Scheduler::new(SchedulerConfig { avoid_gpu_nodes: false, ..SchedulerConfig::default() });
    let mut c = cluster(&[("gpu", "CPU=8,GPU=2"), ("cpu", "CPU=2")]);
    assert_eq!(
        placed_on(&c.clone(), &off.place(&mut c, &req, &mut rng(0))).as_deref(),
        Some("cpu")
    );
    // ...while the hybrid score alone sends it to the emptier GPU node.
    let mut off = Scheduler::new(SchedulerConfig {
        avoid_gpu_nodes: false,
        profile: Profile::of_scorers(vec![profile::ScorerSpec::Hybrid { weight: 1 }]),
        ..SchedulerConfig::default()
    });
    let mut c = cluster(&[("gpu", "CPU=8,GPU=2"), ("cpu", "CPU=2")]);
    assert_eq!(
        placed_on(&c.clone(), &off.place(&mut c, &req, &mut rng(0))).as_deref(),
        Some("gpu")
    );
}

#[test]
fn default_picks_among_top_k_and_the_preferred_node_wins_ties() {
    let nodes: Vec<(String, &str)> = (0..10).map(|i| (format!("n{i}"), "CPU=100")).collect();
    let nodes: Vec<(&str, &str)> = nodes.iter().map(|(id, spec)| (id.as_str(), *spec)).collect();
    let base = cluster(&nodes);
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..64 {
        let mut c = base.clone();
        let req = request(&mut c, "CPU=1", Strategy::Default);
        let decision =
            Scheduler::new(SchedulerConfig::default()).place(&mut c, &req, &mut rng(seed));
        seen.insert(placed_on(&c, &decision).unwrap());
    }
    // k = 20% of 10 = 2; all nodes tie, node order breaks ties: n0 and n1.
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["n0", "n1"]);

    for seed in 0..16 {
        let mut c = base.clone();
        let req =
            request(&mut c, "CPU=1", Strategy::Default).with_preferred_node(Some(index(&c, "n7")));
        let decision =
            Scheduler::new(SchedulerConfig::default()).place(&mut c, &req, &mut rng(seed));
        assert_eq!(
            placed_on(&c, &decision).as_deref(),
            Some("n7"),
            "the caller's node wins the tie"
        );
    }
    // A preferred node that scores worse does not win.
    let mut c = base.clone();
    occupy(&mut c, "n7", "CPU=90");
    let req =
        request(&mut c, "CPU=1", Strategy::Default).with_preferred_node(Some(index(&c, "n7")));
    let decision = Scheduler::new(SchedulerConfig::default()).place(&mut c, &req, &mut rng(0));
    assert_ne!(placed_on(&c, &decision).as_deref(), Some("n7"));
}

#[test]
fn pending_when_busy_infeasible_when_never() {
    let mut c = cluster(&[("a", "CPU=4"), ("b", "CPU=2"), ("d", "CPU=8"), ("x", "CPU=8")]);
    c.set_state(index(&c, "d"), NodeState::Draining).unwrap();
    c.set_state(index(&c, "x"), NodeState::Dead).unwrap();
    occupy(&mut c, "a", "CPU=3");
    let mut s = Scheduler::new(SchedulerConfig::default());

    let req = request(&mut c, "CPU=3", Strategy::Default);
    let Decision::Pending(diagnosis) = s.place(&mut c, &req, &mut rng(0)) else {
        panic!("pending expected")
    };
    assert_eq!(
        rejected(&diagnosis),
        [
            (ReasonKind::InsufficientAvailable(ResourceId::CPU), 1),
            (ReasonKind::InsufficientTotal(ResourceId::CPU), 1),
            (ReasonKind::Draining, 1),
            (ReasonKind::Dead, 1),
        ]
    );
    assert_eq!(
        diagnosis.describe(&c),
        "DEFAULT: 0/4 nodes can take it now: 1 too little CPU free, 1 too little CPU in total, 1 draining, 1 dead"
    );

    let req = request(&mut c, "CPU=1,GPU=1", Strategy::Default);
    let Decision::Infeasible(diagnosis) = s.place(&mut c, &req, &mut rng(0)) else {
        panic!("infeasible expected")
    };
    assert_eq!(diagnosis.totals()[0], (ReasonKind::InsufficientTotal(ResourceId::GPU), 2));
    c.check_invariants().unwrap();
}

#[test]
fn seed_fractional_gpu_cannot_combine_two_halves() {
    let mut c = cluster(&[("g", "CPU=8,GPU=2")]);
    occupy(&mut c, "g", "GPU=0.5");
    occupy(&mut c, "g", "GPU=1");
    occupy(&mut c, "g", "GPU=0.5"); // best fit: joins the first half-used instance
    let mut s = Scheduler::new(SchedulerConfig::default());
    let req = request(&mut c, "GPU=0.5", Strategy::Default);
    // GPU 0 is full (two halves), GPU 1 is whole and taken: nothing free.
    assert!(matches!(s.place(&mut c, &req, &mut rng(0)), Decision::Pending(_)));

    let mut c = cluster(&[("g", "CPU=8,GPU=2")]);
    let a = occupy(&mut c, "g", "GPU=0.5"); // GPU 0
    let _b = occupy(&mut c, "g", "GPU=0.5"); // GPU 0 again: the tightest fit
    let _c = occupy(&mut c, "g", "GPU=0.5"); // GPU 1
    c.release(&a);
    // Now each GPU has exactly 0.5 free: 1.0 GPU free in total, but not in one instance.
    assert_eq!(c.node(index(&c, "g")).unwrap().available().get(ResourceId::GPU), q("1"));
    let req = request(&mut c, "GPU=0.75", Strategy::Default);
    let Decision::Pending(diagnosis) = s.place(&mut c, &req, &mut rng(0)) else {
        panic!("pending expected")
    };
    assert_eq!(diagnosis.totals(), [(ReasonKind::Fragmented(ResourceId::GPU), 1)]);
    let req = request(&mut c, "GPU=0.5", Strategy::Default);
    let Decision::Placed(allocation) = s.place(&mut c, &req, &mut rng(0)) else {
        panic!("placed expected")
    };
    assert_eq!(allocation.instance_ids(ResourceId::GPU).len(), 1);
}

#[test]
fn placements_report_instance_ids() {
    let mut c = cluster(&[("g", "CPU=8,GPU=4")]);
    let mut s = Scheduler::new(SchedulerConfig::default());
    let req = request(&mut c, "GPU=2", Strategy::Default);
    let Decision::Placed(first) = s.place(&mut c, &req, &mut rng(0)) else { panic!() };
    let Decision::Placed(second) = s.place(&mut c, &req, &mut rng(0)) else { panic!() };
    assert_eq!(first.instance_ids(ResourceId::GPU), [0, 1]);
    assert_eq!(second.instance_ids(ResourceId::GPU), [2, 3]);
    c.release(&first);
    let half = request(&mut c, "GPU=0.5", Strategy::Default);
    let Decision::Placed(third) = s.place(&mut c, &half, &mut rng(0)) else { panic!() };
    assert_eq!(third.instance_ids(ResourceId::GPU), [0]);
}

#[test]
fn spread_round_robins_over_nodes_that_fit_now() {
    let mut c = cluster(&[("a", "CPU=2"), ("b", "CPU=1"), ("c", "CPU=2")]);
    let mut s = Scheduler::new(SchedulerConfig::default());
    let req = request(&mut c, "CPU=1", Strategy::Spread);
    let mut order = Vec::new();
    for seed in 0..5 {
        let decision = s.place(&mut c, &req, &mut rng(seed));
        order.push(placed_on(&c, &decision).unwrap_or_else(|| "pending".into()));
    }
    // b is full after one: the round skips it.
    assert_eq!(order, ["a", "b", "c", "a", "c"]);
    assert!(matches!(s.place(&mut c, &req, &mut rng(0)), Decision::Pending(_)));
}

#[test]
fn random_only_picks_nodes_that_fit_now_and_reaches_all() {
    let base = cluster(&[("a", "CPU=2"), ("b", "CPU=2"), ("c", "CPU=2"), ("full", "CPU=2")]);
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..64 {
        let mut c = base.clone();
        occupy(&mut c, "full", "CPU=2");
        let req = request(&mut c, "CPU=1", Strategy::Random);
        let decision =
            Scheduler::new(SchedulerConfig::default()).place(&mut c, &req, &mut rng(seed));
        seen.insert(placed_on(&c, &decision).unwrap());
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["a", "b", "c"]);
}

#[test]
fn hard_node_affinity() {
    // (occupy target, request, strategy, expected outcome)
    let cases = [
        ("", "CPU=1", affinity("b", false, false, false), "placed:b"),
        ("CPU=4", "CPU=1", affinity("b", false, false, false), "pending"),
        ("CPU=4", "CPU=1", affinity("b", false, false, true), "infeasible"),
        ("", "CPU=8", affinity("b", false, false, false), "infeasible"),
        ("", "CPU=1", affinity("nope", false, false, false), "infeasible"),
        ("", "CPU=1", affinity("d", false, false, false), "infeasible"),
    ];
    for (busy, ask, strategy, expected) in cases {
        let mut c = cluster(&[("a", "CPU=4"), ("b", "CPU=4"), ("d", "CPU=4")]);
        c.set_state(index(&c, "d"), NodeState::Draining).unwrap();
        let decision = place_after_load(&mut c, "b", busy, ask, &strategy);
        if let Decision::Infeasible(d) = &decision {
            assert!(d.totals().iter().any(|(k, _)| *k == ReasonKind::NotAffinityNode), "{d:?}");
        }
        assert_eq!(outcome(&c, &decision), expected, "{strategy:?} busy={busy} ask={ask}");
    }
}

#[test]
fn soft_node_affinity() {
    let cases = [
        ("", "CPU=1", affinity("b", true, false, false), "placed:b"),
        ("", "CPU=1", affinity("gone", true, false, false), "placed:a"), // dead target
        ("CPU=4", "CPU=1", affinity("b", true, false, false), "pending"),
        ("CPU=4", "CPU=1", affinity("b", true, true, false), "placed:a"),
        ("", "CPU=6", affinity("b", true, false, false), "placed:big"),
        ("", "CPU=1", affinity("nope", true, false, false), "placed:a"),
    ];
    for (busy, ask, strategy, expected) in cases {
        let mut c = cluster(&[("a", "CPU=4"), ("b", "CPU=4"), ("big", "CPU=8"), ("gone", "CPU=8")]);
        c.set_state(index(&c, "gone"), NodeState::Dead).unwrap();
        let decision = place_after_load(&mut c, "b", busy, ask, &strategy);
        if let Decision::Pending(d) = &decision {
            assert_eq!(d.attempts.len(), 1, "waits for its node without trying DEFAULT");
        }
        assert_eq!(outcome(&c, &decision), expected, "{strategy:?} busy={busy} ask={ask}");
    }
}

#[test]
fn same_inputs_and_seed_give_the_same_decision() {
    let nodes: Vec<(String, String)> =
        (0..50).map(|i| (format!("n{i}"), format!("CPU={},GPU={}", 4 + i % 5, i % 3))).collect();
    let nodes: Vec<(&str, &str)> = nodes.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    for strategy in [Strategy::Default, Strategy::Spread, Strategy::Random] {
        for seed in 0..8 {
            let run = || {
                let mut c = cluster(&nodes);
                let mut s = Scheduler::new(SchedulerConfig::default());
                let mut r = rng(seed);
                let req = request(&mut c, "CPU=1,GPU=0.5", strategy.clone());
                (0..40)
                    .map(|_| placed_on(&c.clone(), &s.place(&mut c, &req, &mut r)))
                    .collect::<Vec<_>>()
            };
            assert_eq!(run(), run(), "{strategy:?} seed {seed}");
        }
    }
}

#[test]
fn explaining_does_not_change_the_decision() {
    // 20 tied nodes: k = 4, so the RNG picks, and the shortlist matters.
    let nodes: Vec<(String, &str)> = (0..20).map(|i| (format!("n{i}"), "CPU=8")).collect();
    let nodes: Vec<(&str, &str)> = nodes.iter().map(|(id, spec)| (id.as_str(), *spec)).collect();
    let mut chosen = std::collections::BTreeSet::new();
    for seed in 0..32 {
        let mut quiet_cluster = cluster(&nodes);
        let mut loud_cluster = quiet_cluster.clone();
        let mut quiet = Scheduler::new(SchedulerConfig::default());
        let mut loud = Scheduler::new(SchedulerConfig::default());
        let (mut r1, mut r2) = (rng(seed), rng(seed));
        for _ in 0..5 {
            let req = request(&mut quiet_cluster, "CPU=1", Strategy::Default);
            let a = quiet.place(&mut quiet_cluster, &req, &mut r1);
            let (b, explanation) = loud.place_explained(&mut loud_cluster, &req, &mut r2);
            assert_eq!(a, b, "seed {seed}");
            let attempt = &explanation.attempts[0];
            assert_eq!(attempt.shortlist.len(), 4);
            assert!(attempt.shortlist.contains(&attempt.chosen.unwrap()));
            chosen.insert(attempt.chosen.unwrap());
        }
    }
    assert!(chosen.len() > 1, "the RNG is exercised");
}

/// A suspect node (heartbeats late) takes nothing new, keeps what it holds, and makes the
/// work that only it could take wait (pending, not infeasible): it may be back at any moment.
/// Heard from again, it takes work as before.
#[test]
fn a_suspect_node_takes_nothing_new_keeps_its_work_and_is_waited_for() {
    let mut c = cluster(&[("a", "CPU=2"), ("s", "CPU=8")]);
    let held = occupy(&mut c, "s", "CPU=1");
    let s_index = index(&c, "s");
    let before = c.node(s_index).unwrap().available().clone();
    c.set_state(s_index, NodeState::Suspect).unwrap();
    assert_eq!(c.node(s_index).unwrap().available(), &before, "nothing released");
    let mut s = Scheduler::new(SchedulerConfig::default());

    // Fits on both: goes to the alive one, whatever the scores would say.
    let req = request(&mut c, "CPU=1", Strategy::Spread);
    let decision = s.place(&mut c, &req, &mut rng(0));
    assert_eq!(outcome(&c, &decision), "placed:a");
    // Fits only on the suspect node: waits for it.
    let req = request(&mut c, "CPU=4", Strategy::Default);
    let Decision::Pending(diagnosis) = s.place(&mut c, &req, &mut rng(0)) else {
        panic!("pending expected")
    };
    assert_eq!(
        rejected(&diagnosis),
        [(ReasonKind::Suspect, 1), (ReasonKind::InsufficientTotal(ResourceId::CPU), 1)]
    );
    assert_eq!(
        diagnosis.describe(&c),
        "DEFAULT: 0/2 nodes can take it now: 1 suspect (heartbeats late), 1 too little CPU in total"
    );
    // Affinity to it: as to a busy node (it may be back soon): hard or soft, it waits, unless
    // soft and allowed to spill.
    for (soft, spill, expected) in
        [(false, false, "pending"), (true, false, "pending"), (true, true, "placed:a")]
    {
        let req = request(&mut c, "CPU=1", affinity("s", soft, spill, false));
        let decision = s.place(&mut c, &req, &mut rng(0));
        assert_eq!(outcome(&c, &decision), expected, "soft: {soft}, spill: {spill}");
    }
    let one = resources(c.registry_mut(), "CPU=1");
    let eight = resources(c.registry_mut(), "CPU=8");
    let suspect = index(&c, "s");
    assert!(matches!(
        c.reserve(suspect, &one),
        Err(crate::ClusterError::NotAlive { state: NodeState::Suspect, .. })
    ));
    // A release on it is credited (it is not dead): it holds what it held, less what ended.
    c.release(&held);
    assert_eq!(c.node(suspect).unwrap().available(), &eight);

    // Back: it takes the work that waited.
    c.set_state(s_index, NodeState::Alive).unwrap();
    let req = request(&mut c, "CPU=4", Strategy::Default);
    let decision = s.place(&mut c, &req, &mut rng(0));
    assert_eq!(outcome(&c, &decision), "placed:s");
    c.check_invariants().unwrap();
}

#[test]
fn explaining_records_every_filter_for_every_node() {
    let mut c = cluster(&[("a", "CPU=4"), ("b", "CPU=4,GPU=1"), ("d", "CPU=4")]);
    c.set_state(index(&c, "d"), NodeState::Dead).unwrap();
    occupy(&mut c, "a", "CPU=4");
    let req = request(&mut c, "CPU=1", Strategy::Default);
    let (_, explanation) =
        Scheduler::new(SchedulerConfig::default()).place_explained(&mut c, &req, &mut rng(3));
    let attempt = &explanation.attempts[0];
    assert_eq!(attempt.nodes.len(), 3, "every node is listed, excluded ones too");
    let a = &attempt.nodes[0];
    assert!(!a.passed());
    assert_eq!(a.filters.len(), 4, "all filters run when explaining");
    assert_eq!(a.reasons().count(), 1);
    let b = &attempt.nodes[1];
    assert!(b.passed());
    assert_eq!(b.preferences, [("avoid_gpu_nodes", false)]);
    // A cluster with a GPU node: the default profile's fragmentation-aware scorers. The shapes
    // are the task's own, the whole node expected from the start (the largest kind's: 1 GPU, 4
    // CPUs) and a whole GPU, one each. The idle GPU is fragment for the CPU task's shape before
    // and after; after, b can no longer take the whole node: a third of a GPU's excess, so
    // each scores ⌊100 / (1 + 1/3)⌋ = 75 (weights 30 and 6). Half the CPU is taken and no GPU:
    // the CPU runs out first, so the task is also ranked by best fit on CPU (weight 20): 3 of
    // the largest node's 4 CPUs left, 25.
    let scorers: Vec<&str> = b.scores.iter().map(|line| line.scorer).collect();
    assert_eq!(scorers, ["fragmentation", "capacity", "best_fit"]);
    let raw: Vec<u32> = b.scores.iter().map(|line| line.raw.micros() / Score::UNIT).collect();
    assert_eq!(raw, [75, 75, 25]);
    assert_eq!(b.total, Some(3200 * u64::from(Score::UNIT)), "3200 points, in millionths");
    assert_eq!(attempt.nodes[2].excluded, Some(Reason::Dead));
    assert_eq!(attempt.chosen, Some(index(&c, "b")));
}

/// Regression pin: the decisions for a fixed cluster, request stream and seed. A change here
/// means the same inputs now give different placements (a change of RNG use, tie order or
/// scoring), which must be deliberate.
#[test]
fn golden_decisions_for_seed_42() {
    let nodes: Vec<(String, String)> =
        (0..12).map(|i| (format!("n{i}"), format!("CPU={},GPU={}", 4 + i % 3, i % 2))).collect();
    let nodes: Vec<(&str, &str)> = nodes.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let mut c = cluster(&nodes);
    let mut s = Scheduler::new(SchedulerConfig::default());
    let mut r = rng(42);
    let asks = ["CPU=1", "CPU=1,GPU=0.5", "CPU=2", "GPU=1", "CPU=1", "CPU=3,GPU=0.25"];
    let placed: Vec<String> = (0..18)
        .map(|i| {
            let req = request(&mut c, asks[i % asks.len()], Strategy::Default);
            outcome(&c.clone(), &s.place(&mut c, &req, &mut r))
        })
        .collect();
    assert_eq!(placed, GOLDEN_42, "{placed:?}");
}

#[test]
fn config_ranges_are_checked() {
    assert!(SchedulerConfig::default().validate().is_ok());
    let bad = SchedulerConfig { spread_threshold: q("1.5"), ..SchedulerConfig::default() };
    assert!(bad.validate().unwrap_err().to_string().contains("scheduler.spread_threshold"));
    let bad = SchedulerConfig { top_k_fraction: Quantity::ZERO, ..SchedulerConfig::default() };
    assert!(bad.validate().unwrap_err().to_string().contains("scheduler.top_k_fraction"));
}

const GOLDEN_42: [&str; 18] = [
    "placed:n2",
    "placed:n9",
    "placed:n0",
    "placed:n3",
    "placed:n8",
    "placed:n9",
    "placed:n4",
    "placed:n7",
    "placed:n8",
    "placed:n1",
    "placed:n6",
    "placed:n7",
    "placed:n2",
    "placed:n5",
    "placed:n0",
    "placed:n11",
    "placed:n8",
    "placed:n5",
];

#[test]
fn large_clusters_stop_early_but_stay_exact() {
    // 600 nodes: above the 512 at which DEFAULT may stop after 64 feasible nodes.
    let nodes: Vec<(String, &str)> = (0..600).map(|i| (format!("n{i}"), "CPU=4")).collect();
    let nodes: Vec<(&str, &str)> = nodes.iter().map(|(id, spec)| (id.as_str(), *spec)).collect();
    let mut c = cluster(&nodes);
    let mut s = Scheduler::new(SchedulerConfig::default());
    let mut r = rng(5);
    let req = request(&mut c, "CPU=1", Strategy::Default);
    // Visits move on: 200 decisions land on many different nodes, all of which fit.
    let mut used = std::collections::BTreeSet::new();
    for _ in 0..200 {
        let Decision::Placed(a) = s.place(&mut c, &req, &mut r) else { panic!("placed") };
        used.insert(a.node());
    }
    assert!(used.len() > 64, "the visit window rotates: {} nodes used", used.len());
    c.check_invariants().unwrap();

    // Only the last node can take a big request: every node is visited and it is found.
    let mut c = cluster(&nodes);
    let last = index(&c, "n599");
    let total = resources(c.registry_mut(), "CPU=8");
    c.set_capacity(last, ResourceId::CPU, total.get(ResourceId::CPU)).unwrap();
    let big = request(&mut c, "CPU=6", Strategy::Default);
    let Decision::Placed(a) = s.place(&mut c, &big, &mut r) else { panic!("placed") };
    assert_eq!(a.node(), last);
    // Now nothing can take it: pending, and the diagnosis counts every node.
    let Decision::Pending(d) = s.place(&mut c, &big, &mut r) else { panic!("pending") };
    let counted: u64 = d.totals().iter().map(|(_, n)| n).sum();
    assert_eq!(counted, 600);

    // SPREAD visits from its cursor and stops at the first node that fits: the same
    // round-robin as a full scan.
    let mut c = cluster(&nodes);
    let spread = request(&mut c, "CPU=1", Strategy::Spread);
    let order: Vec<u32> = (0..5)
        .map(|_| match s.place(&mut c, &spread, &mut r) {
            Decision::Placed(a) => a.node().0,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(order.windows(2).filter(|w| w[1] == w[0] + 1).count(), 4, "{order:?}");

    // Without early stopping the same requests visit every node.
    let all = SchedulerConfig { nodes_to_score: NodesToScore::All, ..SchedulerConfig::default() };
    let mut c = cluster(&nodes);
    let mut s = Scheduler::new(all);
    let (_, explanation) = s.place_explained(&mut c, &req, &mut r);
    assert_eq!(explanation.attempts[0].nodes.len(), 600);
}

#[test]
fn a_preview_decides_as_placing_does_and_reserves_nothing() {
    let mut c = cluster(&[("a", "CPU=4,GPU=2"), ("b", "CPU=8"), ("c", "CPU=2")]);
    occupy(&mut c, "a", "GPU=1");
    occupy(&mut c, "a", "GPU=0.5");
    occupy(&mut c, "b", "CPU=7");
    let strategies =
        [Strategy::Default, Strategy::Spread, Strategy::Random, affinity("c", true, true, false)];
    for spec in ["CPU=1", "CPU=2,GPU=0.5", "GPU=1", "CPU=3", "CPU=100"] {
        for strategy in &strategies {
            let req = request(&mut c, spec, strategy.clone());
            let before = format!("{c:?}");
            let previewed =
                Scheduler::new(SchedulerConfig::default()).preview(&c, &req, &mut rng(3));
            assert_eq!(format!("{c:?}"), before, "{spec} {strategy:?}: a preview changes nothing");
            let placed =
                Scheduler::new(SchedulerConfig::default()).place(&mut c.clone(), &req, &mut rng(3));
            assert_eq!(previewed, placed, "{spec} {strategy:?}");
        }
    }
}

/// The built-in filters run as one call find what running them stage by stage finds: the
/// first failure in the runner's order, or none.
#[test]
fn builtin_filters_in_one_call_fail_as_stage_by_stage() {
    let mut c = cluster(&[
        ("fits", "CPU=8,GPU=2"),
        ("tainted", "CPU=8,GPU=2"),
        ("small", "CPU=2"),
        ("busy", "CPU=8,GPU=2"),
        ("split", "CPU=8,GPU=2"),
    ]);
    c.add_taint(index(&c, "tainted"), "dedicated", "team-a").unwrap();
    // Too small in total for the GPU asks, and for CPU=4 as well.
    occupy(&mut c, "busy", "CPU=7");
    // 0.8 GPU free in sum, as 0.4 on each GPU: half a GPU does not fit.
    occupy(&mut c, "split", "GPU=0.6");
    occupy(&mut c, "split", "GPU=0.6");
    let filters = FilterStage::builtin();
    assert!(FilterStage::are_builtin(&filters));
    let mut failed = [false; 4];
    for ask in ["CPU=1", "CPU=4", "CPU=1,GPU=1", "CPU=1,GPU=0.5", "GPU=2", "CPU=16"] {
        let req = request(&mut c, ask, Strategy::Default);
        let prepared = Prepared::default();
        let cx = DecisionContext { cluster: &c, request: &req, prepared: &prepared };
        for (_, node) in c.nodes() {
            let one_call = FilterStage::builtin_failure(&cx, node);
            let by_stage = run_filters(&filters, &cx, node, None, false);
            assert_eq!(one_call, by_stage, "{ask} on {}", node.id().as_str());
            match one_call.map(|reason| reason.kind()) {
                Some(ReasonKind::UntoleratedTaint(_)) => failed[0] = true,
                Some(ReasonKind::InsufficientTotal(_)) => failed[1] = true,
                Some(ReasonKind::InsufficientAvailable(_)) => failed[2] = true,
                Some(ReasonKind::Fragmented(_)) => failed[3] = true,
                _ => {}
            }
        }
    }
    // Each built-in filter (taints, total, free, instances) was the first to fail somewhere.
    assert_eq!(failed, [true; 4]);
    // Any other list (here a fifth filter, as a profile would add) runs stage by stage.
    let mut five = Vec::from(FilterStage::builtin());
    five.push(FilterStage::Instances);
    assert!(!FilterStage::are_builtin(&five));
    assert!(!FilterStage::are_builtin(&filters[1..]));
}
