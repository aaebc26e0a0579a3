//! Table-driven tests of label selectors, fallbacks, NODE_LABEL, taints and rare-resource
//! isolation under every strategy.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::diagnosis::ReasonKind;
use crate::node::NodeState;
use crate::pending::{PendingQueue, Trigger, Waiting};
use crate::request::{NodeAffinity, NodeLabel};
use crate::resource::ResourceId;
use crate::testutil::{index, labelled_cluster, request, selector, tolerations};

fn place(c: &mut Cluster, req: &Request, seed: u64) -> Decision {
    Scheduler::new(SchedulerConfig::default()).place(c, req, &mut ChaCha8Rng::seed_from_u64(seed))
}

fn node_of(c: &Cluster, decision: &Decision) -> String {
    match decision {
        Decision::Placed(a) => c.node(a.node()).unwrap().id().to_string(),
        Decision::Pending(_) => "pending".into(),
        Decision::Infeasible(_) => "infeasible".into(),
    }
}

fn zones() -> Cluster {
    labelled_cluster(&[
        ("a1", "CPU=4", "zone=a,disk=ssd", ""),
        ("b1", "CPU=4", "zone=b", ""),
        ("c1", "CPU=4", "zone=c,disk=hdd", ""),
        ("n1", "CPU=4", "", ""),
    ])
}

#[test]
fn label_selectors_narrow_the_candidates() {
    // (selector, request CPU, nodes it may land on)
    type Case = (&'static [(&'static str, &'static str)], &'static str, &'static [&'static str]);
    let cases: [Case; 9] = [
        (&[("zone", "a")], "CPU=1", &["a1"]),
        (&[("zone", "!a")], "CPU=1", &["b1", "c1", "n1"]),
        (&[("zone", "in(a,b)")], "CPU=1", &["a1", "b1"]),
        (&[("zone", "!in(a,b)")], "CPU=1", &["c1", "n1"]),
        (&[("disk", "exists()")], "CPU=1", &["a1", "c1"]),
        (&[("disk", "!exists()")], "CPU=1", &["b1", "n1"]),
        (&[("zone", "exists(),!in(a)"), ("disk", "hdd")], "CPU=1", &["c1"]),
        (&[("berth.io/node-id", "b1")], "CPU=1", &["b1"]),
        (&[("zone", "z")], "CPU=1", &["infeasible"]),
    ];
    for (pairs, ask, allowed) in cases {
        for seed in 0..8 {
            let mut c = zones();
            let req = request(&mut c, ask, Strategy::Random).with_label_selector(selector(pairs));
            let got = {
                let d = place(&mut c, &req, seed);
                node_of(&c, &d)
            };
            assert!(allowed.contains(&got.as_str()), "{pairs:?} seed {seed}: {got}");
        }
    }
}

#[test]
fn a_selector_whose_nodes_are_busy_is_pending_and_mismatches_are_counted() {
    let mut c = zones();
    let a1 = index(&c, "a1");
    let full = crate::testutil::resources(c.registry_mut(), "CPU=4");
    c.reserve(a1, &full).unwrap();
    let req =
        request(&mut c, "CPU=1", Strategy::Default).with_label_selector(selector(&[("zone", "a")]));
    let Decision::Pending(d) = place(&mut c, &req, 0) else { panic!("pending expected") };
    assert_eq!(
        d.totals(),
        [(ReasonKind::LabelMismatch, 3), (ReasonKind::InsufficientAvailable(ResourceId::CPU), 1)]
    );
    assert_eq!(
        d.describe(&c),
        "DEFAULT with label_selector: 0/4 nodes can take it now: 3 labels do not match, 1 too little CPU free"
    );
}

#[test]
fn fallbacks_are_tried_in_order() {
    // (busy nodes, label_selector zone, fallback zones, expected)
    let cases: [(&[&str], &str, &[&str], &str); 6] = [
        (&[], "a", &["b"], "a1"),
        (&["a1"], "a", &["b"], "b1"),
        (&["a1"], "a", &["z", "c"], "c1"),
        (&["a1", "b1"], "a", &["b"], "pending"),
        (&[], "z", &["y"], "infeasible"),
        (&["a1"], "a", &["z"], "pending"),
    ];
    for (busy, primary, fallbacks, expected) in cases {
        let mut c = zones();
        for node in busy {
            let full = crate::testutil::resources(c.registry_mut(), "CPU=4");
            c.reserve(index(&c, node), &full).unwrap();
        }
        let fallback = fallbacks.iter().map(|zone| selector(&[("zone", zone)])).collect();
        let req = request(&mut c, "CPU=1", Strategy::Default)
            .with_label_selector(selector(&[("zone", primary)]))
            .with_fallback(fallback);
        let decision = place(&mut c, &req, 0);
        assert_eq!(node_of(&c, &decision), expected, "busy {busy:?} {primary} then {fallbacks:?}");
        if let Decision::Pending(d) | Decision::Infeasible(d) = &decision {
            assert_eq!(
                d.attempts.len(),
                1 + fallbacks.len(),
                "every alternative is in the diagnosis"
            );
            let text = d.describe(&c);
            assert!(
                text.contains("with label_selector") && text.contains("with fallback_strategy[0]"),
                "{text}"
            );
        }
    }
}

#[test]
fn an_empty_fallback_selector_is_a_soft_constraint() {
    // Seed 003: fall back to an empty set of labels = "prefer m5.16xlarge".
    let mut c = labelled_cluster(&[
        ("big", "CPU=2", "instance_type=m5.16xlarge", ""),
        ("small", "CPU=2", "", ""),
    ]);
    let req = request(&mut c, "CPU=2", Strategy::Default)
        .with_label_selector(selector(&[("instance_type", "m5.16xlarge")]))
        .with_fallback(vec![selector(&[])]);
    assert_eq!(
        {
            let d = place(&mut c, &req, 0);
            node_of(&c, &d)
        },
        "big"
    );
    assert_eq!(
        {
            let d = place(&mut c, &req, 0);
            node_of(&c, &d)
        },
        "small"
    );
    assert_eq!(
        {
            let d = place(&mut c, &req, 0);
            node_of(&c, &d)
        },
        "pending"
    );
}

#[test]
fn node_label_hard_must_hold_and_soft_is_preferred() {
    let strategy = |hard: &[(&str, &str)], soft: &[(&str, &str)]| {
        Strategy::NodeLabel(NodeLabel { hard: selector(hard), soft: selector(soft) })
    };
    // (busy nodes, strategy, allowed outcomes)
    let cases: [(&[&str], Strategy, &[&str]); 5] = [
        (&[], strategy(&[("disk", "exists()")], &[("disk", "hdd")]), &["c1"]),
        (&["c1"], strategy(&[("disk", "exists()")], &[("disk", "hdd")]), &["a1"]),
        (&["c1", "a1"], strategy(&[("disk", "exists()")], &[("disk", "hdd")]), &["pending"]),
        (&[], strategy(&[], &[("zone", "b")]), &["b1"]),
        (&[], strategy(&[("zone", "q")], &[]), &["infeasible"]),
    ];
    for (busy, strategy, allowed) in cases {
        for seed in 0..8 {
            let mut c = zones();
            for node in busy {
                let full = crate::testutil::resources(c.registry_mut(), "CPU=4");
                c.reserve(index(&c, node), &full).unwrap();
            }
            let req = request(&mut c, "CPU=1", strategy.clone());
            let got = {
                let d = place(&mut c, &req, seed);
                node_of(&c, &d)
            };
            assert!(allowed.contains(&got.as_str()), "{strategy:?} busy {busy:?}: {got}");
        }
    }
    let mut c = zones();
    let req = request(&mut c, "CPU=1", strategy(&[], &[("zone", "b")]));
    let (_, explanation) = Scheduler::new(SchedulerConfig::default()).place_explained(
        &mut c,
        &req,
        &mut ChaCha8Rng::seed_from_u64(0),
    );
    let b1 = &explanation.attempts[0].nodes[1];
    assert_eq!(b1.preferences[0], ("soft_labels", true));
}

/// A tainted empty node listed first, so every strategy would pick it if the taint were ignored.
fn tainted_first() -> Cluster {
    labelled_cluster(&[("t", "CPU=8", "zone=a", "gpu_node=true"), ("u", "CPU=8", "zone=b", "")])
}

#[test]
fn taints_hold_under_every_strategy() {
    let affinity = |node: &str, soft| {
        Strategy::NodeAffinity(NodeAffinity {
            node: node.into(),
            soft,
            spill_on_unavailable: false,
            fail_on_unavailable: false,
        })
    };
    let on_t =
        Strategy::NodeLabel(NodeLabel { hard: selector(&[("zone", "a")]), soft: selector(&[]) });
    // (strategy, expected without toleration, expected with `gpu_node: exists()`)
    let cases = [
        (Strategy::Default, "u", "t"),
        (Strategy::Spread, "u", "t"),
        (affinity("t", false), "infeasible", "t"),
        (affinity("t", true), "u", "t"),
        (on_t, "infeasible", "t"),
    ];
    for (strategy, without, with) in cases {
        let mut c = tainted_first();
        let req = request(&mut c, "CPU=1", strategy.clone());
        let decision = place(&mut c, &req, 0);
        assert_eq!(node_of(&c, &decision), without, "{strategy:?} without toleration");
        if let Decision::Infeasible(d) = &decision {
            let taint = c.taint_table().lookup("gpu_node", "true").unwrap();
            assert!(d.totals().contains(&(ReasonKind::UntoleratedTaint(taint), 1)), "{d:?}");
            assert!(
                d.describe(&c).contains("1 untolerated taint gpu_node=true"),
                "{}",
                d.describe(&c)
            );
        }
        let mut c = tainted_first();
        let req = request(&mut c, "CPU=1", strategy.clone())
            .with_tolerations(tolerations(&[("gpu_node", "exists()")]));
        assert_eq!(
            {
                let d = place(&mut c, &req, 0);
                node_of(&c, &d)
            },
            with,
            "{strategy:?} with toleration"
        );
    }
    for seed in 0..16 {
        let mut c = tainted_first();
        let req = request(&mut c, "CPU=1", Strategy::Random);
        assert_eq!(
            {
                let d = place(&mut c, &req, seed);
                node_of(&c, &d)
            },
            "u",
            "RANDOM seed {seed}"
        );
    }
    // A toleration for another value of the key does not tolerate the taint.
    let mut c = tainted_first();
    let req = request(&mut c, "CPU=1", affinity("t", false))
        .with_tolerations(tolerations(&[("gpu_node", "false")]));
    assert_eq!(
        {
            let d = place(&mut c, &req, 0);
            node_of(&c, &d)
        },
        "infeasible"
    );
}

#[test]
fn removing_a_taint_wakes_the_requests_it_kept_away() {
    let mut c = labelled_cluster(&[("t", "CPU=8", "", "team=ml"), ("u", "CPU=2", "", "")]);
    let mut scheduler = Scheduler::new(SchedulerConfig::default());
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let mut queue = PendingQueue::new();
    let req = request(&mut c, "CPU=4", Strategy::Default);
    assert!(queue.submit("big", req, &mut scheduler, &mut c, &mut rng).is_none());
    assert_eq!(queue.iter().next().unwrap().waiting, Waiting::Infeasible);
    let t = index(&c, "t");
    c.remove_taint(t, "team", "ml").unwrap();
    let placed = queue.retry(Trigger::NodeChanged(t), &mut scheduler, &mut c, &mut rng);
    assert_eq!(placed.len(), 1);
    assert_eq!(placed[0].1.node(), t);
}

#[test]
fn rare_resource_isolation_taints_gpu_nodes_and_tolerates_gpu_requests() {
    let build = || {
        let mut c = labelled_cluster(&[("gpu", "CPU=8,GPU=2", "", ""), ("cpu", "CPU=2", "", "")]);
        c.set_rare_resources(&[ResourceId::GPU]);
        // No preference for CPU nodes: isolation alone must keep CPU work off the GPU node.
        c
    };
    let scheduler =
        || Scheduler::new(SchedulerConfig { avoid_gpu_nodes: false, ..SchedulerConfig::default() });
    let mut c = build();
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let cpu_req = request(&mut c, "CPU=1", Strategy::Default);
    let gpu_req = request(&mut c, "CPU=1,GPU=1", Strategy::Default);
    let mut s = scheduler();
    assert_eq!(
        {
            let d = s.place(&mut c, &cpu_req, &mut rng);
            node_of(&c, &d)
        },
        "cpu"
    );
    assert_eq!(
        {
            let d = s.place(&mut c, &cpu_req, &mut rng);
            node_of(&c, &d)
        },
        "cpu"
    );
    // The CPU node is full: pending on it, because the GPU node is off limits to CPU work.
    let Decision::Pending(d) = s.place(&mut c, &cpu_req, &mut rng) else {
        panic!("pending on the CPU node expected")
    };
    assert!(
        d.describe(&c).contains("untolerated taint berth.io/rare-GPU=true"),
        "{}",
        d.describe(&c)
    );
    assert_eq!(
        {
            let d = s.place(&mut c, &gpu_req, &mut rng);
            node_of(&c, &d)
        },
        "gpu",
        "tolerated automatically"
    );
    let tolerant = request(&mut c, "CPU=1", Strategy::Default)
        .with_tolerations(tolerations(&[("berth.io/rare-GPU", "exists()")]));
    assert_eq!(
        {
            let d = s.place(&mut c, &tolerant, &mut rng);
            node_of(&c, &d)
        },
        "gpu"
    );

    // Custom rare resources work the same way.
    let mut c =
        labelled_cluster(&[("t4", "CPU=8,nvidia.com/t4=1", "", ""), ("cpu", "CPU=8", "", "")]);
    let t4 = c.registry().lookup("nvidia.com/t4").unwrap();
    c.set_rare_resources(&[t4]);
    let req = request(&mut c, "CPU=1,nvidia.com/t4=1", Strategy::Default);
    assert_eq!(
        {
            let d = scheduler().place(&mut c, &req, &mut rng);
            node_of(&c, &d)
        },
        "t4"
    );
    let cpu_only = request(&mut c, "CPU=1", Strategy::Default);
    assert_eq!(
        {
            let d = scheduler().place(&mut c, &cpu_only, &mut rng);
            node_of(&c, &d)
        },
        "cpu"
    );
    c.set_state(index(&c, "cpu"), NodeState::Dead).unwrap();
    let d = scheduler().place(&mut c, &cpu_only, &mut rng);
    assert_eq!(node_of(&c, &d), "infeasible", "only the isolated T4 node is left");
}
