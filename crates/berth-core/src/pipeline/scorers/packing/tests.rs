//! The counts and the scorer on small hand-computed cases.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::cluster::Cluster;
use crate::pipeline::profile::{Pick, Profile, ScorerSpec};
use crate::pipeline::{Decision, Scheduler, SchedulerConfig};
use crate::request::Strategy;
use crate::testutil::{cluster, index, request, resources};

fn reserve(c: &mut Cluster, node: &str, used: &str) -> crate::cluster::Allocation {
    let set = resources(c.registry_mut(), used);
    c.reserve(index(c, node), &set).unwrap()
}

/// The node a request for `ask` goes to with share packing alone, the best node every time.
fn place(c: &mut Cluster, ask: &str) -> String {
    let profile = Profile {
        pick: Pick::Best,
        ..Profile::of_scorers(vec![ScorerSpec::Packing { weight: 1 }])
    };
    let config = SchedulerConfig { profile, ..Default::default() };
    let req = request(c, ask, Strategy::Default);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    match Scheduler::new(config).place(c, &req, &mut rng) {
        Decision::Placed(a) => c.node(a.node()).unwrap().id().to_string(),
        other => panic!("{ask}: {other:?}"),
    }
}

#[test]
fn a_share_fills_the_free_part_many_gpus_have_before_a_rare_one() {
    // Three GPUs have 0.5 free (on "common-1", "common-2", "common-3"), one has 0.7 ("rare").
    // A share of 0.3 on "rare" leaves 0.4 free: N(0.4) − N(0.7) + 1 = 0 − 1 + 1 = 0. On a
    // "common" node it leaves 0.2: N(0.2) − N(0.5) + 1 = 0 − 3 + 1 = −2, the sum of squares
    // falls: a common free part is the one to use.
    let mut c = cluster(&[
        ("rare", "CPU=8,GPU=1"),
        ("common-1", "CPU=8,GPU=1"),
        ("common-2", "CPU=8,GPU=1"),
        ("common-3", "CPU=8,GPU=1"),
    ]);
    reserve(&mut c, "rare", "GPU=0.3");
    for node in ["common-1", "common-2", "common-3"] {
        reserve(&mut c, node, "GPU=0.5");
    }
    assert!(place(&mut c, "CPU=1,GPU=0.3").starts_with("common"));
}

#[test]
fn a_share_keeps_its_remainder_off_a_free_part_many_gpus_have() {
    // "a" has 0.6 free and "b" 0.8; three more GPUs have 0.2 free. A share of 0.4 leaves 0.2
    // on "a" (N(0.2) − N(0.6) + 1 = 3) and 0.4 on "b" (0 − 1 + 1 = 0): "b" scores higher,
    // although "a" is the tighter fit.
    let mut c = cluster(&[("a", "CPU=8,GPU=1"), ("b", "CPU=8,GPU=1"), ("c", "CPU=8,GPU=3")]);
    reserve(&mut c, "a", "GPU=0.4");
    reserve(&mut c, "b", "GPU=0.2");
    for _ in 0..3 {
        reserve(&mut c, "c", "GPU=0.8");
    }
    let scorer = SharePacking::default();
    let small = request(&mut c, "CPU=1,GPU=0.1", Strategy::Default);
    let ask = request(&mut c, "CPU=1,GPU=0.4", Strategy::Default);
    let prepared = Default::default();
    let cx = |req| DecisionContext { cluster: &c, request: req, prepared: &prepared };
    let on = |node: &str| scorer.score(&cx(&ask), c.node(index(&c, node)).unwrap());
    // Until a share of 0.2 or less is ranked, free parts of 0.2 fit nothing seen: they do
    // not count, and both moves keep the sum.
    assert!(scorer.applies(&cx(&ask)));
    assert_eq!(on("a"), on("b"));
    assert!(scorer.applies(&cx(&small)));
    assert!(scorer.applies(&cx(&ask)));
    assert!(on("b") > on("a"), "{:?} > {:?}", on("b"), on("a"));
}

#[test]
fn it_applies_to_shares_only_and_counts_what_changed_since() {
    let mut c = cluster(&[("n", "CPU=8,GPU=2")]);
    let scorer = SharePacking::default();
    let prepared = Default::default();
    for ask in ["CPU=1", "CPU=1,GPU=1", "CPU=1,GPU=2"] {
        let req = request(&mut c, ask, Strategy::Default);
        let cx = DecisionContext { cluster: &c, request: &req, prepared: &prepared };
        assert!(!scorer.applies(&cx), "{ask}");
    }
    let share = request(&mut c, "CPU=1,GPU=0.25", Strategy::Default);
    let counted = |scorer: &SharePacking, c: &Cluster| {
        let cx = DecisionContext { cluster: c, request: &share, prepared: &prepared };
        assert!(scorer.applies(&cx));
        let counts = scorer.counts.borrow();
        (counts.live, counts.at(7500), counts.at(5000))
    };
    assert_eq!(counted(&scorer, &c), (0, 0, 0));
    let first = reserve(&mut c, "n", "GPU=0.25");
    assert_eq!(counted(&scorer, &c), (1, 1, 0));
    let second = reserve(&mut c, "n", "GPU=0.25");
    assert_eq!(counted(&scorer, &c), (1, 0, 1), "the same GPU, now half free");
    c.release(&second);
    c.release(&first);
    assert_eq!(counted(&scorer, &c), (0, 0, 0), "released: nothing partly used");
}

#[test]
fn nodes_removed_added_or_read_through_a_clone_are_counted_at_once() {
    let mut c = cluster(&[("n", "CPU=8,GPU=1"), ("m", "CPU=8,GPU=1")]);
    let scorer = SharePacking::default();
    let prepared = Default::default();
    let share = request(&mut c, "CPU=1,GPU=0.25", Strategy::Default);
    let live = |scorer: &SharePacking, c: &Cluster| {
        let cx = DecisionContext { cluster: c, request: &share, prepared: &prepared };
        assert!(scorer.applies(&cx));
        let counts = scorer.counts.borrow();
        counts.live
    };
    reserve(&mut c, "n", "GPU=0.25");
    reserve(&mut c, "m", "GPU=0.5");
    assert_eq!(live(&scorer, &c), 2);
    c.remove_node(index(&c, "n")).unwrap();
    assert_eq!(live(&scorer, &c), 1, "removed");
    // The removed node's slot taken by another, with a GPU partly used, between two decisions.
    let total = resources(c.registry_mut(), "CPU=8,GPU=2");
    c.add_node(crate::node::NodeId::new("o").unwrap(), total).unwrap();
    reserve(&mut c, "o", "GPU=0.5");
    assert_eq!(live(&scorer, &c), 2, "added in the free slot");
    // A clone that diverged, then the original again: each counted as it is.
    let mut copy = c.clone();
    reserve(&mut copy, "o", "GPU=1");
    assert_eq!(live(&scorer, &copy), 2);
    reserve(&mut copy, "m", "GPU=0.5");
    assert_eq!(live(&scorer, &copy), 1);
    assert_eq!(live(&scorer, &c), 2);
}
