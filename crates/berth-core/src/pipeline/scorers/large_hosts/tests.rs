//! The preference on small hand-computed cases, and its counts against a full recount.

use proptest::prelude::{prop_assert_eq, prop_oneof, proptest, Just, ProptestConfig};
use proptest::strategy::Strategy as _;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::cluster::{Allocation, Cluster};
use crate::node::NodeIndex;
use crate::pipeline::profile::{Pick, PreferenceSpec, Profile, ScorerSpec};
use crate::pipeline::scorers::strategy_fit::{ResourceStrategy, StrategyKind};
use crate::pipeline::scorers::ResourceRules;
use crate::pipeline::stage::Prepared;
use crate::pipeline::{Decision, Scheduler, SchedulerConfig};
use crate::request::Strategy;
use crate::testutil::{cluster, index, request, resources};

/// Two nodes that can take a request of 8 GPUs and 32 CPUs, and a small one.
fn three_nodes() -> Cluster {
    cluster(&[("big-a", "CPU=64,GPU=8"), ("big-b", "CPU=64,GPU=8"), ("small", "CPU=16,GPU=2")])
}

/// Spreading GPU work (the emptiest node first), with or without the preference: spreading
/// alone sends small work to the big nodes.
fn scheduler(keep: bool) -> Scheduler {
    let spread = ResourceRules::new([(
        "GPU".to_string(),
        ResourceStrategy { kind: StrategyKind::LeastAllocated, weight: 1 },
    )]);
    let profile = Profile {
        preferences: if keep { vec![PreferenceSpec::LargeHosts] } else { Vec::new() },
        pick: Pick::Best,
        ..Profile::of_scorers(vec![ScorerSpec::ResourceStrategyFit {
            weight: 1,
            resources: spread,
        }])
    };
    Scheduler::new(SchedulerConfig { profile, ..Default::default() })
}

fn place(s: &mut Scheduler, c: &mut Cluster, ask: &str) -> (String, Allocation) {
    let req = request(c, ask, Strategy::Default);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    match s.place(c, &req, &mut rng) {
        Decision::Placed(a) => (c.node(a.node()).unwrap().id().to_string(), a),
        other => panic!("{ask}: {other:?}"),
    }
}

#[test]
fn small_work_keeps_off_the_large_hosts_while_they_are_few_but_is_not_refused() {
    for keep in [true, false] {
        let (mut s, mut c) = (scheduler(keep), three_nodes());
        // Seen: one request of 8 GPUs (placed and gone), then requests of 1 GPU.
        let (_, large) = place(&mut s, &mut c, "CPU=32,GPU=8");
        c.release(&large);
        // Learned after the 2nd request: (8 GPUs, 32 CPUs) once, (1, 4) once; 9 GPUs asked.
        // Hosts 2; expected 1 × 18 idle / 9 = 2, times the margin 4: kept.
        let (first, _) = place(&mut s, &mut c, "CPU=4,GPU=1");
        let (second, _) = place(&mut s, &mut c, "CPU=4,GPU=1");
        if keep {
            assert_eq!((first.as_str(), second.as_str()), ("small", "small"));
        } else {
            assert!(first.starts_with("big") && second.starts_with("big"), "{first} {second}");
            continue;
        }
        // "small" is full: a host takes the third (a tier, not a filter).
        let (third, _) = place(&mut s, &mut c, "CPU=4,GPU=1");
        assert!(third.starts_with("big"), "{third}");
        // The host left still takes a request of the kept shape (that the preference does not
        // apply to its own requests is checked in the next test).
        let (large, _) = place(&mut s, &mut c, "CPU=32,GPU=8");
        assert!(large.starts_with("big") && large != third, "{large} after {third}");
    }
}

/// The preference's own view of `ask` on `c`: whether it applies, and the nodes it prefers.
fn view(keep: &LargeHosts, c: &mut Cluster, ask: &str) -> (bool, Vec<String>) {
    let req = request(c, ask, Strategy::Default);
    let prepared = Prepared::default();
    let cx = DecisionContext { cluster: c, request: &req, prepared: &prepared };
    let applies = keep.applies(&cx);
    let preferred = c
        .nodes()
        .filter(|(_, node)| keep.prefers(&cx, node))
        .map(|(_, node)| node.id().to_string())
        .collect();
    (applies, preferred)
}

#[test]
fn hosts_are_kept_only_while_they_are_no_more_than_the_pods_expected_times_the_margin() {
    let keep = LargeHosts::default();
    let mut c = three_nodes();
    assert!(!view(&keep, &mut c, "CPU=32,GPU=8").0, "its own pods are not kept off");
    // After 2 requests: 9 GPUs asked, 18 idle, 1 large request: 2 hosts ≤ 2 × 1 × 18 / 9.
    let (applies, preferred) = view(&keep, &mut c, "CPU=4,GPU=1");
    assert!(applies);
    assert_eq!(preferred, ["small"]);
    // A request of 8 GPUs and less CPU than the shape is not one of its requests.
    assert!(view(&keep, &mut c, "CPU=16,GPU=8").0);
    // A node with 8 GPUs idle but not all wholly free is no host: one GPU of "big-a" half
    // used leaves it 7.
    let share = resources(c.registry_mut(), "GPU=0.5");
    c.reserve(index(&c, "big-a"), &share).unwrap();
    // Rebuilt at the 4th request: (8, 32) once, (8, 16) once, (1, 4) twice, 18 GPUs asked,
    // 17.5 idle. (8, 16) counts the requests of both: 1 host ≤ 2 × 2 × 17.5 / 18; (8, 32): 1 ≤
    // 2 × 1 × 17.5 / 18. Both kept, and "big-b" is the only host of either.
    let (applies, preferred) = view(&keep, &mut c, "CPU=4,GPU=1");
    assert!(applies);
    assert_eq!(preferred, ["big-a", "small"]);
    // Sixty small requests later (78 GPUs asked at the rebuild of the 64th request), the host is
    // more than twice the large requests expected (2 × 2 × 17.5 / 78 < 1): nothing is kept.
    for _ in 0..60 {
        view(&keep, &mut c, "CPU=1,GPU=1");
    }
    assert!(!view(&keep, &mut c, "CPU=1,GPU=1").0);
}

/// While the cluster's CPU runs out before its GPUs, hosts are kept up to three times the requests
/// expected, not two.
#[test]
fn while_the_cpu_runs_short_the_margin_is_three() {
    let keep = LargeHosts::default();
    let mut c = cluster(&[
        ("big-a", "CPU=64,GPU=8"),
        ("big-b", "CPU=64,GPU=8"),
        ("big-c", "CPU=64,GPU=8"),
        ("small", "CPU=16,GPU=2"),
    ]);
    // Rebuilt at the 16th request: one request of 8 GPUs and 32 CPUs, fifteen of 1 GPU: 23 GPUs
    // asked, 26 idle, 3 hosts. 3 × 23 = 69 is above 2 × 1 × 26 = 52 and not above 3 × 26 = 78.
    view(&keep, &mut c, "CPU=32,GPU=8");
    for _ in 0..14 {
        view(&keep, &mut c, "CPU=4,GPU=1");
    }
    assert!(!view(&keep, &mut c, "CPU=4,GPU=1").0, "the CPU does not run short: margin 2");
    // 32 of the 208 CPUs taken, no GPU: 85 % of the CPU free against all the GPU. "big-c"
    // keeps 48 CPUs free and stays a host.
    reserve(&mut c, "small", "CPU=16");
    reserve(&mut c, "big-c", "CPU=16");
    let (applies, preferred) = view(&keep, &mut c, "CPU=4,GPU=1");
    assert!(applies, "the CPU runs short: margin 3");
    assert_eq!(preferred, ["small"]);
    assert!(!view(&keep, &mut c, "CPU=32,GPU=8").0, "its own pods are not kept off");
}

fn reserve(c: &mut Cluster, node: &str, used: &str) {
    let set = resources(c.registry_mut(), used);
    c.reserve(index(c, node), &set).unwrap();
}

/// One change to a small GPU cluster.
#[derive(Clone, Debug)]
enum Op {
    Reserve {
        node: usize,
        cpu: u8,
        gpu: u8,
    },
    Release(usize),
    Drain(usize),
    Add {
        gpus: u8,
    },
    Remove(usize),
    /// Read the changes now (the counts are compared with a full count after each read).
    Follow,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    prop_oneof![
        4 => (0..6usize, 0..40u8, 0..9u8).prop_map(|(node, cpu, gpu)| Op::Reserve { node, cpu, gpu }),
        3 => (0..64usize).prop_map(Op::Release),
        1 => (0..6usize).prop_map(Op::Drain),
        1 => (1..9u8).prop_map(|gpus| Op::Add { gpus }),
        1 => (0..6usize).prop_map(Op::Remove),
        3 => Just(Op::Follow),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        rng_seed: crate::testutil::model_seed("large_hosts", 0x686f_7374)
            .map_or(ProptestConfig::default().rng_seed, proptest::test_runner::RngSeed::Fixed),
        ..ProptestConfig::default()
    })]

    /// Kept up to date from the change feed, the hosts and idle GPU always equal a count over
    /// every node.
    #[test]
    fn counts_kept_from_the_feed_equal_a_full_count(ops in proptest::collection::vec(op(), 1..80)) {
        let mut c = cluster(&[
            ("n0", "CPU=64,GPU=8"),
            ("n1", "CPU=32,GPU=8"),
            ("n2", "CPU=16,GPU=4"),
            ("n3", "CPU=8,GPU=2"),
        ]);
        let mut state = State::default();
        for cpu in [8, 24, 40] {
            state.shapes.push(LargeShape { gpus: 4, cpu: cpu * UNITS_PER_WHOLE, pods: 1, hosts: 0 });
        }
        let (mut held, mut added) = (Vec::new(), 0);
        for op in ops {
            let slots = c.index_bound().max(1);
            match op {
                Op::Reserve { node, cpu, gpu } => {
                    let ask = format!("CPU={cpu},GPU={}", f64::from(gpu) / 4.0);
                    let set = resources(c.registry_mut(), &ask);
                    if let Ok(a) = c.reserve(NodeIndex((node % slots) as u32), &set) {
                        held.push(a);
                    }
                }
                Op::Release(i) if !held.is_empty() => {
                    let a = held.swap_remove(i % held.len());
                    c.release(&a);
                }
                Op::Release(_) => {}
                Op::Drain(node) => {
                    let _ = c.set_state(NodeIndex((node % slots) as u32), NodeState::Draining);
                }
                Op::Add { gpus } => {
                    added += 1;
                    let spec = resources(c.registry_mut(), &format!("CPU=48,GPU={gpus}"));
                    c.add_node(crate::node::NodeId::new(&format!("added-{added}")).unwrap(), spec).unwrap();
                }
                Op::Remove(node) => {
                    let _ = c.remove_node(NodeIndex((node % slots) as u32));
                }
                Op::Follow => {
                    state.follow(&c);
                    let alive: Vec<&Node> = c.alive().iter().filter_map(|i| c.node(i)).collect();
                    let idle: i64 = alive.iter().map(|n| n.available().get(ResourceId::GPU).units()).sum();
                    prop_assert_eq!(state.idle, idle);
                    for shape in &state.shapes {
                        let hosts = alive.iter().filter(|n| Counted::of(Some(n)).hosts(shape)).count();
                        prop_assert_eq!(shape.hosts, hosts as u64, "shape {:?}", shape);
                    }
                }
            }
        }
    }
}
