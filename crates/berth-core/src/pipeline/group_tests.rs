//! Placement groups: each strategy, atomicity, bundle selectors, tolerations, the seed's
//! three-level fallback, tasks into bundles with GPU instance IDs, removal and node death.

use std::collections::BTreeSet;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::group::GroupDecision;
use super::*;
use crate::diagnosis::{Reason, ReasonKind};
use crate::labels::Labels;
use crate::node::NodeState;
use crate::placement_group::{BundleSet, GroupId, GroupSpec, GroupStrategy};
use crate::quantity::Quantity;
use crate::request::GroupPlacement;
use crate::resource::{ResourceId, ResourceSet};
use crate::selector::{LabelSelector, Tolerations};
use crate::testutil::{index, labelled_cluster, request, resources, selector, tolerations};

fn group(c: &mut Cluster, id: &str, strategy: GroupStrategy, bundles: &[&str]) -> GroupSpec {
    let bundles = bundles.iter().map(|b| resources(c.registry_mut(), b)).collect();
    GroupSpec {
        id: GroupId::new(id).unwrap(),
        name: String::new(),
        namespace: "default".into(),
        strategy,
        alternatives: vec![BundleSet { bundles, selectors: Vec::new(), unknown: Vec::new() }],
        tolerations: Tolerations::default(),
    }
}

fn place(c: &mut Cluster, spec: &GroupSpec) -> GroupDecision {
    spec.validate(c.registry()).unwrap();
    Scheduler::new(SchedulerConfig::default()).place_group(c, spec)
}

fn names(c: &Cluster, decision: &GroupDecision) -> Vec<String> {
    match decision {
        GroupDecision::Created { nodes, .. } => {
            nodes.iter().map(|&n| c.node(n).unwrap().id().to_string()).collect()
        }
        GroupDecision::Pending(_) => vec!["pending".into()],
        GroupDecision::Infeasible(_) => vec!["infeasible".into()],
    }
}

fn distinct(nodes: &[String]) -> usize {
    nodes.iter().collect::<BTreeSet<_>>().len()
}

fn four_nodes() -> Cluster {
    labelled_cluster(&[
        ("n1", "CPU=4", "zone=a", ""),
        ("n2", "CPU=4", "zone=a", ""),
        ("n3", "CPU=4", "zone=b", ""),
        ("n4", "CPU=8", "zone=b", ""),
    ])
}

#[test]
fn pack_uses_as_few_nodes_as_it_can() {
    let mut c = four_nodes();
    let spec = group(&mut c, "g", GroupStrategy::Pack, &["CPU=2", "CPU=2", "CPU=2", "CPU=2"]);
    let placed = names(&c.clone(), &place(&mut c, &spec));
    assert_eq!(distinct(&placed), 1, "{placed:?}: all fit on n4");
    // Best effort: more than any node holds still goes through, on few nodes.
    let spec = group(&mut c, "h", GroupStrategy::Pack, &["CPU=3", "CPU=3", "CPU=3"]);
    let placed = names(&c.clone(), &place(&mut c, &spec));
    assert_eq!(placed.len(), 3, "{placed:?}");
}

#[test]
fn spread_uses_distinct_nodes_where_possible() {
    let mut c = four_nodes();
    let spec =
        group(&mut c, "g", GroupStrategy::Spread, &["CPU=1", "CPU=1", "CPU=1", "CPU=1", "CPU=1"]);
    let placed = names(&c.clone(), &place(&mut c, &spec));
    assert_eq!(distinct(&placed), 4, "{placed:?}: five bundles, four nodes");
}

#[test]
fn strict_pack_needs_one_node_for_everything() {
    let mut c = four_nodes();
    let spec = group(&mut c, "g", GroupStrategy::StrictPack, &["CPU=3", "CPU=3"]);
    assert_eq!(names(&c.clone(), &place(&mut c, &spec)), ["n4", "n4"]);
    let spec = group(&mut c, "h", GroupStrategy::StrictPack, &["CPU=4", "CPU=4", "CPU=4"]);
    let decision = place(&mut c, &spec);
    let GroupDecision::Infeasible(d) = &decision else { panic!("{decision:?}") };
    assert!(d.describe(&c).contains("STRICT_PACK"), "{}", d.describe(&c));
    // Selectors that only one node meets.
    let mut c = four_nodes();
    let mut spec = group(&mut c, "s", GroupStrategy::StrictPack, &["CPU=1", "CPU=1"]);
    spec.alternatives[0].selectors =
        vec![selector(&[("zone", "b")]), selector(&[("berth.io/node-id", "n3")])];
    assert_eq!(names(&c.clone(), &place(&mut c, &spec)), ["n3", "n3"]);
}

#[test]
fn strict_spread_needs_enough_nodes() {
    let mut c = four_nodes();
    let spec = group(&mut c, "g", GroupStrategy::StrictSpread, &["CPU=1"; 4]);
    let placed = names(&c.clone(), &place(&mut c, &spec));
    assert_eq!(distinct(&placed), 4);
    let spec = group(&mut c, "h", GroupStrategy::StrictSpread, &["CPU=1"; 5]);
    let GroupDecision::Infeasible(d) = place(&mut c, &spec) else { panic!("too few nodes") };
    assert!(
        d.describe(&c).contains("STRICT_SPREAD needs 5 distinct nodes; only 4"),
        "{}",
        d.describe(&c)
    );
    // Enough nodes, but busy: pending.
    let mut c = four_nodes();
    let full = resources(c.registry_mut(), "CPU=4");
    c.reserve(index(&c, "n1"), &full).unwrap();
    let spec = group(&mut c, "p", GroupStrategy::StrictSpread, &["CPU=1"; 4]);
    assert!(matches!(place(&mut c, &spec), GroupDecision::Pending(_)));
}

#[test]
fn strict_spread_finds_a_matching_greedy_would_miss() {
    // Bundle 0 (hardest) fits n1 or n2; bundle 1 fits only n1. Least waste would give n1 to
    // bundle 0; the matching moves it to n2.
    let mut c = labelled_cluster(&[("n1", "CPU=8,GPU=1", "", ""), ("n2", "CPU=2,GPU=1", "", "")]);
    let spec = group(&mut c, "g", GroupStrategy::StrictSpread, &["CPU=1,GPU=1", "CPU=6"]);
    assert_eq!(names(&c.clone(), &place(&mut c, &spec)), ["n2", "n1"]);
}

#[test]
fn a_group_that_fits_partially_reserves_nothing() {
    let mut c = four_nodes();
    let before: Vec<ResourceSet> = c.nodes().map(|(_, n)| n.available().clone()).collect();
    // 18 CPUs of 20 in all, but the nodes hold five bundles of 3, not six.
    let spec = group(&mut c, "g", GroupStrategy::Spread, &["CPU=3"; 6]);
    let decision = place(&mut c, &spec);
    let (GroupDecision::Pending(d) | GroupDecision::Infeasible(d)) = &decision else {
        panic!("{decision:?}")
    };
    assert!(
        !d.alternatives[0].planned.is_empty(),
        "some bundles found a node before the plan failed"
    );
    let after: Vec<ResourceSet> = c.nodes().map(|(_, n)| n.available().clone()).collect();
    assert_eq!(before, after, "a failed plan leaves no trace");
    assert!(c.group("g").is_none());
}

#[test]
fn bundle_selectors_and_tolerations_apply_per_bundle() {
    let mut c = labelled_cluster(&[
        ("a", "CPU=4", "zone=a", ""),
        ("b", "CPU=4", "zone=b", "team=ml"),
        ("c", "CPU=4", "zone=b", ""),
    ]);
    let mut spec = group(&mut c, "g", GroupStrategy::Pack, &["CPU=1", "CPU=1"]);
    spec.alternatives[0].selectors = vec![selector(&[("zone", "a")]), selector(&[("zone", "b")])];
    assert_eq!(names(&c.clone(), &place(&mut c, &spec)), ["a", "c"], "b is tainted");
    let mut spec = group(&mut c, "t", GroupStrategy::StrictPack, &["CPU=2", "CPU=2"]);
    spec.alternatives[0].selectors = vec![selector(&[("berth.io/node-id", "b")]); 2];
    let GroupDecision::Infeasible(d) = place(&mut c, &spec) else {
        panic!("the taint keeps it off")
    };
    let taint = c.taint_table().lookup("team", "ml").unwrap();
    assert!(d.alternatives[0].failed[0]
        .1
        .rejected
        .iter()
        .any(|(k, _)| *k == ReasonKind::UntoleratedTaint(taint)));
    spec.tolerations = tolerations(&[("team", "ml")]);
    spec.id = GroupId::new("t2").unwrap();
    assert_eq!(names(&c.clone(), &place(&mut c, &spec)), ["b", "b"]);
}

#[test]
fn rare_resource_isolation_applies_to_bundles() {
    let mut c = labelled_cluster(&[("gpu", "CPU=8,GPU=2", "", ""), ("cpu", "CPU=2", "", "")]);
    c.set_rare_resources(&[ResourceId::GPU]);
    let spec = group(&mut c, "g", GroupStrategy::Pack, &["CPU=1,GPU=1", "CPU=1"]);
    assert_eq!(
        names(&c.clone(), &place(&mut c, &spec)),
        ["gpu", "cpu"],
        "the CPU bundle stays off the GPU node"
    );
}

#[test]
fn seed_fallback_prefers_h100_then_a100_then_v100() {
    let mut c = labelled_cluster(&[
        ("a100-1", "CPU=16,GPU=2", "berth.io/accelerator-type=nvidia-a100", ""),
        ("a100-2", "CPU=16,GPU=2", "berth.io/accelerator-type=nvidia-a100", ""),
        ("v100-1", "CPU=16,GPU=8", "berth.io/accelerator-type=nvidia-v100", ""),
    ]);
    let accel = |model: &str| selector(&[("berth.io/accelerator-type", model)]);
    let bundles = |c: &mut Cluster, n: usize| {
        (0..n).map(|_| resources(c.registry_mut(), "GPU=1")).collect::<Vec<_>>()
    };
    let alternatives = vec![
        BundleSet {
            bundles: bundles(&mut c, 2),
            selectors: vec![accel("nvidia-h100"); 2],
            unknown: Vec::new(),
        },
        BundleSet {
            bundles: bundles(&mut c, 4),
            selectors: vec![accel("nvidia-a100"); 4],
            unknown: Vec::new(),
        },
        BundleSet {
            bundles: bundles(&mut c, 8),
            selectors: vec![accel("nvidia-v100"); 8],
            unknown: Vec::new(),
        },
    ];
    let spec = GroupSpec {
        id: GroupId::new("train").unwrap(),
        name: "train".into(),
        namespace: "default".into(),
        strategy: GroupStrategy::Pack,
        alternatives,
        tolerations: Tolerations::default(),
    };
    let decision = place(&mut c, &spec);
    let GroupDecision::Created { alternative, tried, .. } = decision else {
        panic!("{decision:?}")
    };
    assert_eq!(alternative, 1, "no H100s: four A100s");
    // Why the H100s were not taken is recorded with the decision, not planned again later.
    assert_eq!(tried.alternatives.len(), 1, "{tried:?}");
    assert_eq!(tried.alternatives[0].alternative, 0);
    assert!(!tried.alternatives[0].could_fit_later, "no node has H100s: {tried:?}");
    assert_eq!(c.group("train").unwrap().alternative, 1, "the chosen alternative is recorded");
    // The A100s are now taken: the same group again falls back to the V100s.
    let mut again = spec.clone();
    again.id = GroupId::new("train-2").unwrap();
    let GroupDecision::Created { alternative, tried, .. } = place(&mut c, &again) else { panic!() };
    assert_eq!(alternative, 2);
    assert_eq!(tried.alternatives.iter().map(|a| a.alternative).collect::<Vec<_>>(), [0, 1]);
    // Nothing left: pending (every alternative but the H100s could fit later).
    again.id = GroupId::new("train-3").unwrap();
    let GroupDecision::Pending(d) = place(&mut c, &again) else { panic!("pending") };
    assert_eq!(d.alternatives.len(), 3, "each alternative tried");
    assert!(!d.alternatives[0].could_fit_later, "no H100 ever");
}

#[test]
fn tasks_go_into_bundles_and_see_the_bundles_gpus() {
    let mut c = labelled_cluster(&[("g", "CPU=8,GPU=4", "", "")]);
    let node = index(&c, "g");
    let held = resources(c.registry_mut(), "GPU=1");
    c.reserve(node, &held).unwrap(); // GPU 0 is someone else's
    let spec = group(&mut c, "pg", GroupStrategy::Pack, &["CPU=3,GPU=2"]);
    assert!(matches!(place(&mut c, &spec), GroupDecision::Created { .. }));
    assert_eq!(c.group("pg").unwrap().bundle(0).unwrap().instance_ids(ResourceId::GPU), [1, 2]);
    let into = |bundle| {
        Strategy::PlacementGroup(GroupPlacement { group: GroupId::new("pg").unwrap(), bundle })
    };
    let mut s = Scheduler::new(SchedulerConfig::default());
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let task = request(&mut c, "CPU=1,GPU=1", into(Some(0)));
    let Decision::Placed(first) = s.place(&mut c, &task, &mut rng) else { panic!() };
    assert_eq!(first.instance_ids(ResourceId::GPU), [1]);
    let Decision::Placed(second) = s.place(&mut c, &task, &mut rng) else { panic!() };
    assert_eq!(second.instance_ids(ResourceId::GPU), [2]);
    let Decision::Pending(d) = s.place(&mut c, &task, &mut rng) else {
        panic!("the bundle is full")
    };
    assert_eq!(
        d.describe(&c),
        "placement group pg: 0/1 bundles can take it now: 1 too little GPU free"
    );
    // The node's own pool was not touched by the tasks: GPU 3 is still free for others.
    assert_eq!(c.node(node).unwrap().available().get(ResourceId::GPU), Quantity::ONE);
    // Too big for the bundle ever: infeasible; a bundle that does not exist: infeasible.
    let big = request(&mut c, "GPU=3", into(None));
    assert!(matches!(s.place(&mut c, &big, &mut rng), Decision::Infeasible(_)));
    let nowhere = request(&mut c, "GPU=1", into(Some(5)));
    assert!(matches!(s.place(&mut c, &nowhere, &mut rng), Decision::Infeasible(_)));
    // Releasing returns to the bundle, which takes work again.
    c.release(&first);
    let half = request(&mut c, "GPU=0.5", into(None));
    let Decision::Placed(third) = s.place(&mut c, &half, &mut rng) else { panic!() };
    assert_eq!(third.instance_ids(ResourceId::GPU), [1]);
    assert_eq!(c.node(node).unwrap().available().get(ResourceId::GPU), Quantity::ONE);
}

#[test]
fn removal_gives_everything_back_and_reports_actors() {
    let mut c = four_nodes();
    let before: Vec<ResourceSet> = c.nodes().map(|(_, n)| n.available().clone()).collect();
    let spec = group(&mut c, "g", GroupStrategy::Spread, &["CPU=2", "CPU=2"]);
    assert!(matches!(place(&mut c, &spec), GroupDecision::Created { .. }));
    let into = Strategy::PlacementGroup(GroupPlacement {
        group: GroupId::new("g").unwrap(),
        bundle: Some(1),
    });
    let actor =
        crate::actors::ActorSpec::new(crate::actors::ActorId::new("w").unwrap(), "", Labels::new())
            .unwrap();
    let req = request(&mut c, "CPU=1", into).with_actor(actor);
    let Decision::Placed(held) = Scheduler::new(SchedulerConfig::default()).place(
        &mut c,
        &req,
        &mut ChaCha8Rng::seed_from_u64(0),
    ) else {
        panic!()
    };
    let removed = c.remove_group("g").unwrap();
    assert_eq!(removed.actors, [crate::actors::ActorId::new("w").unwrap()]);
    c.release(&held); // after removal: nothing to give back, nothing breaks
    let after: Vec<ResourceSet> = c.nodes().map(|(_, n)| n.available().clone()).collect();
    assert_eq!(before, after);
    c.check_invariants().unwrap();
}

#[test]
fn bundles_on_a_dead_node_are_planned_again() {
    let mut c = four_nodes();
    let spec = group(&mut c, "g", GroupStrategy::StrictSpread, &["CPU=1", "CPU=1"]);
    let GroupDecision::Created { nodes, .. } = place(&mut c, &spec) else { panic!() };
    let dead = nodes[0];
    c.set_state(dead, NodeState::Dead).unwrap();
    let g = c.group("g").unwrap();
    assert_eq!(g.lost(), [0]);
    assert!(!g.is_whole());
    let decision = Scheduler::new(SchedulerConfig::default()).replan_group(&mut c, "g");
    let GroupDecision::Created { nodes: again, .. } = decision else { panic!("{decision:?}") };
    assert_ne!(again[0], dead);
    assert_ne!(again[0], again[1], "still strictly spread");
    assert_eq!(again[1], nodes[1], "the surviving bundle stays");
    assert!(c.group("g").unwrap().is_whole());
}

#[test]
fn invalid_groups_are_rejected_with_the_field() {
    let mut c = four_nodes();
    let mut spec = group(&mut c, "g", GroupStrategy::Pack, &["CPU=1", "CPU=1"]);
    spec.alternatives[0].selectors = vec![LabelSelector::default()];
    let err = spec.validate(c.registry()).unwrap_err().to_string();
    assert_eq!(
        err,
        "bundle_label_selector: 1 selectors for 2 bundles; give one per bundle or none"
    );
    let spec = group(&mut c, "g", GroupStrategy::Pack, &["GPU=1.5"]);
    let err = spec.validate(c.registry()).unwrap_err().to_string();
    assert!(err.starts_with("bundles[0].GPU: 1.5 is not allowed"), "{err}");
    let spec = group(&mut c, "g", GroupStrategy::Pack, &[""]);
    assert_eq!(
        spec.validate(c.registry()).unwrap_err().to_string(),
        "bundles[0]: a bundle must ask for at least one resource"
    );
    let spec = group(&mut c, "g", GroupStrategy::Pack, &[]);
    assert_eq!(
        spec.validate(c.registry()).unwrap_err().to_string(),
        "bundles: a placement group needs at least one bundle"
    );
}

#[test]
fn an_unvalidated_group_is_refused_not_planned() {
    let mut c = four_nodes();
    let spec = group(&mut c, "bad", GroupStrategy::Pack, &["GPU=1.5"]);
    let decision = Scheduler::new(SchedulerConfig::default()).place_group(&mut c, &spec);
    let GroupDecision::Infeasible(d) = decision else { panic!("{decision:?}") };
    assert!(d.describe(&c).contains("bundles[0].GPU: 1.5 is not allowed"), "{}", d.describe(&c));
    assert!(c.group("bad").is_none());
    let spec = group(&mut c, "twice", GroupStrategy::Pack, &["CPU=1"]);
    assert!(matches!(place(&mut c, &spec), GroupDecision::Created { .. }));
    let GroupDecision::Infeasible(d) = place(&mut c, &spec) else {
        panic!("a second group with the same ID")
    };
    assert!(d.describe(&c).contains("exists already"), "{}", d.describe(&c));
}

#[test]
fn previews_decide_as_placing_does_and_reserve_nothing() {
    let mut c = labelled_cluster(&[("g", "CPU=8,GPU=4", "", ""), ("h", "CPU=4", "", "")]);
    let spec = group(&mut c, "pg", GroupStrategy::StrictSpread, &["CPU=2,GPU=1", "CPU=2"]);
    let too_big = group(&mut c, "big", GroupStrategy::StrictPack, &["CPU=8", "CPU=8"]);
    for spec in [&spec, &too_big] {
        let before = format!("{c:?}");
        let previewed = Scheduler::new(SchedulerConfig::default()).preview_group(&c, spec);
        assert_eq!(format!("{c:?}"), before, "a preview changes nothing");
        let placed = place(&mut c.clone(), spec);
        assert_eq!(previewed, placed);
    }
    assert!(matches!(place(&mut c, &spec), GroupDecision::Created { .. }));
    let again = Scheduler::new(SchedulerConfig::default()).preview_group(&c, &spec);
    assert!(matches!(again, GroupDecision::Infeasible(_)), "the ID is taken: {again:?}");

    // Into a bundle: the same instance IDs `place` takes, and the bundle keeps them free.
    let into = Strategy::PlacementGroup(GroupPlacement {
        group: GroupId::new("pg").unwrap(),
        bundle: Some(0),
    });
    let task = request(&mut c, "GPU=1", into);
    let mut s = Scheduler::new(SchedulerConfig::default());
    for _ in 0..2 {
        let before = format!("{c:?}");
        let previewed = s.preview(&c, &task, &mut ChaCha8Rng::seed_from_u64(0));
        assert_eq!(format!("{c:?}"), before);
        let Decision::Placed(allocation) = &previewed else { panic!("{previewed:?}") };
        assert_eq!(allocation.instance_ids(ResourceId::GPU), [0]);
    }
    let Decision::Placed(_) = s.place(&mut c, &task, &mut ChaCha8Rng::seed_from_u64(0)) else {
        panic!()
    };
    let full = s.preview(&c, &task, &mut ChaCha8Rng::seed_from_u64(0));
    assert!(matches!(full, Decision::Pending(_)), "{full:?}");
}

#[test]
fn a_strict_pack_group_summing_past_i64_is_infeasible_not_pending() {
    // Ten bundles at the largest accepted quantity: their sum is past i64. It once wrapped
    // (release) or panicked (debug) in `could_ever_fit`; now it saturates and fits nowhere.
    let mut c = labelled_cluster(&[("a", "CPU=100000000000000", "", ""), ("b", "CPU=8", "", "")]);
    let max = format!("CPU={}", Quantity::MAX);
    let bundles: Vec<&str> = std::iter::repeat_n(max.as_str(), 10).collect();
    let spec = group(&mut c, "huge", GroupStrategy::StrictPack, &bundles);
    let custom: Vec<String> = (0..10).map(|i| format!("r{i}={}", Quantity::MAX)).collect();
    let wide = group(&mut c, "wide", GroupStrategy::StrictPack, &[&custom.join(",")]);
    for spec in [&spec, &wide] {
        match place(&mut c, spec) {
            GroupDecision::Infeasible(d) => {
                assert!(d.alternatives.iter().all(|a| !a.could_fit_later), "{d:?}")
            }
            other => panic!("{}: expected infeasible, got {other:?}", spec.id),
        }
    }
}

#[test]
fn a_bundle_naming_a_resource_no_node_has_is_infeasible_until_a_node_brings_it() {
    let mut c = labelled_cluster(&[("a", "CPU=8", "", "")]);
    let mut spec = group(&mut c, "pg", GroupStrategy::Pack, &["CPU=1", "CPU=1"]);
    let mut tpu = crate::resource::UnknownResources::default();
    tpu.push("TPU", Quantity::ONE);
    spec.alternatives[0].unknown = vec![Default::default(), tpu];
    let GroupDecision::Infeasible(d) = place(&mut c, &spec) else { panic!("infeasible") };
    assert_eq!(
        d.alternatives[0].note.as_deref(),
        Some("bundle 1: no node has the resource \"TPU\" (asked 1)")
    );
    let total = resources(c.registry_mut(), "CPU=8,TPU=2");
    c.add_node(crate::node::NodeId::new("t").unwrap(), total).unwrap();
    assert!(spec.resolve_unknown(c.registry()));
    let GroupDecision::Created { nodes, .. } = place(&mut c, &spec) else { panic!("created") };
    assert_eq!(nodes[1], index(&c, "t"), "the TPU bundle is on the TPU node");
}

#[test]
fn a_request_into_a_group_records_each_bundles_verdict_when_explained() {
    let mut c = labelled_cluster(&[("a", "CPU=8", "", ""), ("b", "CPU=8", "", "")]);
    let spec = group(&mut c, "pg", GroupStrategy::Spread, &["CPU=1", "CPU=4", "CPU=4"]);
    assert!(matches!(place(&mut c, &spec), GroupDecision::Created { .. }));
    let into = |bundle| {
        Strategy::PlacementGroup(GroupPlacement { group: GroupId::new("pg").unwrap(), bundle })
    };
    let mut s = Scheduler::new(SchedulerConfig::default());
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    // Too big for bundle 0, taken by bundle 1; bundle 2 is never looked at.
    let task = request(&mut c, "CPU=2", into(None));
    let (decision, explanation) = s.place_explained(&mut c, &task, &mut rng);
    assert!(matches!(decision, Decision::Placed(_)), "{decision:?}");
    let [attempt] = &explanation.attempts[..] else { panic!("{explanation:?}") };
    let kinds: Vec<String> = attempt
        .bundles
        .iter()
        .map(|v| match v {
            explain::BundleVerdict::Unfit(reason) => format!("unfit: {}", reason.describe(&c)),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["unfit: needs 2 CPU, has 1 in total", "Chosen", "NotTried"]);
    // Naming a bundle: the others are not targeted.
    let named = request(&mut c, "CPU=1", into(Some(2)));
    let (_, explanation) = s.place_explained(&mut c, &named, &mut rng);
    assert_eq!(
        explanation.attempts[0].bundles,
        [
            explain::BundleVerdict::NotTargeted,
            explain::BundleVerdict::NotTargeted,
            explain::BundleVerdict::Chosen
        ]
    );
}

#[test]
fn a_group_explanation_records_every_bundle_attempt_as_the_stages_ran_it() {
    let mut c = labelled_cluster(&[
        ("a", "CPU=4", "zone=a", ""),
        ("b", "CPU=4", "zone=b", "team=ml"),
        ("c", "CPU=8", "zone=b", ""),
        ("d", "CPU=1", "zone=a", ""),
    ]);
    let mut spec = group(&mut c, "g", GroupStrategy::Pack, &["CPU=2", "CPU=3"]);
    spec.alternatives.push(spec.alternatives[0].clone());
    // The first alternative asks for zone a twice: `a` holds one bundle, `d` none, so it fails.
    spec.alternatives[0].selectors = vec![selector(&[("zone", "a")]); 2];
    spec.validate(c.registry()).unwrap();
    let (decision, explanation) =
        Scheduler::new(SchedulerConfig::default()).place_group_explained(&mut c, &spec);
    let GroupDecision::Created { alternative: 1, nodes, tried } = &decision else {
        panic!("{decision:?}")
    };
    assert_eq!(tried.alternatives.len(), 1, "the first alternative's diagnosis is kept");
    assert_eq!(explanation.alternatives.len(), 2);

    // Alternative 0: bundle 1 (CPU=3, hardest) on `a`, then bundle 0 finds no node.
    let first = &explanation.alternatives[0];
    assert_eq!(first.alternative, 0);
    let kinds: Vec<_> = first.bundles.iter().map(|b| b.kind.clone()).collect();
    assert_eq!(kinds, [AttemptKind::Bundle { index: 1 }, AttemptKind::Bundle { index: 0 }]);
    let chosen: Vec<_> = first.bundles.iter().map(|b| b.chosen).collect();
    assert_eq!(chosen, [Some(index(&c, "a")), None], "planned on a, then given back");
    let second_bundle = &first.bundles[1];
    assert_eq!(second_bundle.nodes.len(), 4, "every node has a line");
    let line = |attempt: &AttemptExplanation, name: &str| {
        attempt.nodes.iter().find(|n| n.node == index(&c, name)).unwrap().clone()
    };
    assert_eq!(line(second_bundle, "b").excluded, Some(Reason::LabelMismatch));
    let on_a = line(second_bundle, "a");
    assert!(!on_a.passed(), "the overlay holds bundle 1 on a: {on_a:?}");
    assert!(on_a.reasons().any(|r| r.kind() == ReasonKind::InsufficientAvailable(ResourceId::CPU)));

    // Alternative 1: the taint is the filter's verdict, and the ranking is the group's.
    let second = &explanation.alternatives[1];
    let hardest = &second.bundles[0];
    let tainted = line(hardest, "b");
    let taint = c.taint_table().lookup("team", "ml").unwrap();
    assert!(tainted.reasons().any(|r| r.kind() == ReasonKind::UntoleratedTaint(taint)));
    let chosen = line(hardest, "c");
    let scorers: Vec<_> = chosen.scores.iter().map(|s| s.scorer).collect();
    assert_eq!(scorers, ["holds-rest", "least-waste"]);
    assert_eq!(chosen.preferences, [("group-nodes", false)]);
    assert_eq!(hardest.shortlist.first(), Some(&index(&c, "c")), "c holds both bundles");
    // The recorded choice is the decision's, bundle by bundle.
    for attempt in &second.bundles {
        let AttemptKind::Bundle { index: bundle } = attempt.kind else { panic!() };
        assert_eq!(attempt.chosen, Some(nodes[bundle]));
    }
    assert_eq!(names(&c, &decision), ["c", "c"]);
}

#[test]
fn a_group_asking_more_than_the_cluster_has_free_is_not_planned() {
    // 20 CPUs in all, 8 of them busy: 16 asked is more than is free (pending, no bundle
    // ranked), 24 more than there is (infeasible, for the autoscaler).
    let mut c = four_nodes();
    let busy = resources(c.registry_mut(), "CPU=8");
    c.reserve(index(&c, "n4"), &busy).unwrap();
    let spec = group(&mut c, "g", GroupStrategy::Pack, &["CPU=0.16"; 100]);
    let GroupDecision::Pending(d) = place(&mut c, &spec) else { panic!("busy, not too big") };
    assert!(d.alternatives[0].planned.is_empty() && d.alternatives[0].failed.is_empty());
    let text = d.describe(&c);
    assert!(
        text.contains("ask for 16 CPU in all; the alive nodes have 12 free together"),
        "{text}"
    );
    for strategy in [GroupStrategy::Pack, GroupStrategy::Spread, GroupStrategy::StrictSpread] {
        let spec = group(&mut c, "h", strategy, &["CPU=0.24"; 100]);
        assert!(matches!(place(&mut c, &spec), GroupDecision::Infeasible(_)), "{strategy:?}");
    }
    // A small group is planned all the same, for its diagnosis bundle by bundle.
    let spec = group(&mut c, "s", GroupStrategy::Pack, &["CPU=1"; 16]);
    let GroupDecision::Pending(d) = place(&mut c, &spec) else { panic!("busy, not too big") };
    assert!(!d.alternatives[0].failed.is_empty(), "{d:?}");
    assert!(c.group("g").is_none() && c.group("h").is_none() && c.group("s").is_none());
}

#[test]
fn a_waiting_group_is_retried_only_by_changes_that_may_help_it() {
    use crate::pending::{group_may_help, Trigger, Waiting};
    let mut c = labelled_cluster(&[("cpu", "CPU=4", "", ""), ("gpu", "CPU=4,GPU=1", "", "")]);
    let scheduler = Scheduler::new(SchedulerConfig::default());
    let spec = group(&mut c, "g", GroupStrategy::Pack, &["CPU=1,GPU=1"]);
    let (cpu, gpu) = (index(&c, "cpu"), index(&c, "gpu"));
    let helps = |spec: &GroupSpec, t: Trigger, w: Waiting, c: &Cluster| {
        group_may_help(t, w, (spec, None), &scheduler, c, &mut None)
    };
    // A release where no bundle fits (no GPU there) cannot help; one where a bundle fits can.
    assert!(!helps(&spec, Trigger::Released(cpu), Waiting::Pending, &c));
    assert!(helps(&spec, Trigger::Released(gpu), Waiting::Pending, &c));
    let busy = resources(c.registry_mut(), "GPU=1");
    c.reserve(gpu, &busy).unwrap();
    assert!(!helps(&spec, Trigger::Released(gpu), Waiting::Pending, &c), "still busy");
    // A bundle fits, but the three together ask more than is free in all: no plan exists.
    let big = group(&mut c, "big", GroupStrategy::Pack, &["CPU=3", "CPU=3", "CPU=3"]);
    assert!(!helps(&big, Trigger::Released(cpu), Waiting::Pending, &c), "9 CPUs asked, 8 free");
    let fits = group(&mut c, "fits", GroupStrategy::Pack, &["CPU=3", "CPU=3"]);
    assert!(helps(&fits, Trigger::Released(cpu), Waiting::Pending, &c));
    // Actors and other groups never help; releases never help what can never fit; a node's
    // change, a new node and a lost one (which can make it infeasible) always may.
    for t in [Trigger::ActorsChanged, Trigger::GroupReserved] {
        assert!(
            !helps(&spec, t, Waiting::Pending, &c) && !helps(&spec, t, Waiting::Infeasible, &c)
        );
    }
    assert!(!helps(&spec, Trigger::Released(gpu), Waiting::Infeasible, &c));
    assert!(helps(&spec, Trigger::NodeJoined(cpu), Waiting::Infeasible, &c));
    assert!(helps(&spec, Trigger::NodeChanged(cpu), Waiting::Pending, &c));
    assert!(helps(&spec, Trigger::NodeLost(cpu), Waiting::Pending, &c));
    assert!(!helps(&spec, Trigger::NodeLost(cpu), Waiting::Infeasible, &c));
}
