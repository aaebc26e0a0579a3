//! The measure and the scorer on hand-computed cases.

use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::cluster::{Cluster, NodeSpec};
use crate::labels::NodeFacts;
use crate::node::NodeId;
use crate::pipeline::profile::{Pick, Profile, ScorerSpec, Shapes};
use crate::pipeline::stage::Prepared;
use crate::pipeline::{Decision, Scheduler, SchedulerConfig};
use crate::request::Strategy;
use crate::resource::ResourceRegistry;
use crate::selector::LabelSelector;
use crate::testutil::{index, request, resources};

fn q(text: &str) -> Quantity {
    Quantity::parse(text).unwrap()
}

fn shape(cpu: &str, gpu: &str, accelerators: &[&str], weight: u32) -> Shape {
    Shape {
        cpu: q(cpu),
        gpu: q(gpu),
        accelerators: accelerators.iter().map(|a| a.to_string()).collect(),
        weight,
    }
}

/// A cluster of `(id, resources, accelerator type)`.
fn typed_cluster(nodes: &[(&str, &str, &str)]) -> Cluster {
    let mut c = Cluster::new(ResourceRegistry::default());
    for (id, spec, model) in nodes {
        let total = resources(c.registry_mut(), spec);
        let mut node = NodeSpec::new(NodeId::new(id).unwrap(), total);
        node.facts =
            NodeFacts { accelerator_type: Some(model.to_string()), ..NodeFacts::default() };
        c.add_node_with(node).unwrap();
    }
    c
}

fn reserve(c: &mut Cluster, node: &str, used: &str) {
    let set = resources(c.registry_mut(), used);
    c.reserve(index(c, node), &set).unwrap();
}

/// The five shapes of the hand-computed cases, 9 in weight.
fn five_shapes() -> Vec<Shape> {
    vec![
        shape("4", "0.5", &[], 2),     // A: fits on a split GPU
        shape("12", "0.5", &[], 1),    // B: asks more CPU than the node has free
        shape("2", "1", &["V100"], 1), // C: another accelerator type
        shape("2", "2", &[], 3),       // D: two whole GPUs
        shape("1", "0", &[], 2),       // E: no GPU
    ]
}

/// A T4 node with 16 CPU and 4 GPUs: GPU 0 half used, GPU 1 used, 6 CPU used.
/// Free GPUs: [0.5, 0, 1, 1] (2.5 idle); free CPU 10.
fn t4_node() -> Cluster {
    let mut c = typed_cluster(&[("t4", "CPU=16,GPU=4", "T4")]);
    reserve(&mut c, "t4", "GPU=0.5");
    reserve(&mut c, "t4", "GPU=1");
    reserve(&mut c, "t4", "CPU=6");
    c
}

#[test]
fn the_measure_by_hand() {
    let c = t4_node();
    let table = ShapeTable::new(&five_shapes());
    assert_eq!(table.total_weight(), 9);
    let node = c.node(index(&c, "t4")).unwrap();
    // A: GPUs with less than 0.5 free: GPU 1 (0) → 0.        × 2 = 0
    // B: 12 CPU > 10 free: all idle, 2.5.                   × 1 = 2.5
    // C: V100 only: all idle, 2.5.                          × 1 = 2.5
    // D: two whole GPUs free (2, 3); partial GPUs 0.5 + 0.  × 3 = 1.5
    // E: no GPU: all idle, 2.5.                             × 2 = 5
    // Σ = 11.5 GPU × weight, in units of 0.0001.
    assert_eq!(table.node_fragment(node), 115_000);
    assert!((table.node_fragment_gpus(node) - 11.5 / 9.0).abs() < 1e-12);
}

#[test]
fn the_balance_measure_by_hand() {
    let mut c = t4_node();
    let table = ShapeTable::new(&five_shapes());
    // The shapes with GPUs (E has none), GPU and CPU times weight: A 0.5 × 2 and 4 × 2, B 0.5
    // and 12, C 1 and 2, D 2 × 3 and 2 × 3: 8.5 GPUs for 28 CPUs.
    let (gpu, cpu) = (q("8.5").units() as u128, q("28").units() as u128);
    assert_eq!(table.gpu_per_cpu, (gpu, cpu));
    let balance = |c: &Cluster| {
        let node = c.node(index(c, "t4")).unwrap();
        let free = SortedFree::new(&gpu_free(node));
        table.measure(Measure::Balance, node.available().get(ResourceId::CPU).units(), None, &free)
    };
    // 10 CPUs free serve 10 × 8.5 / 28 = 3.04 GPUs, more than the 2.5 idle: nothing stranded.
    assert_eq!(balance(&c), 0);
    // 2 CPUs free serve ⌊20000 × 85000 / 280000⌋ = 6071 units (0.607 GPU): 25000 − 6071
    // stranded, times the weight sum 9.
    reserve(&mut c, "t4", "CPU=8");
    assert_eq!(balance(&c), (25_000 - 6_071) * 9);
    // Weighing by supply leaves the mix as the shapes come.
    let total = resources(c.registry_mut(), "CPU=16,GPU=4");
    let mut v100 = NodeSpec::new(NodeId::new("v100").unwrap(), total);
    v100.facts = NodeFacts { accelerator_type: Some("V100".into()), ..NodeFacts::default() };
    c.add_node_with(v100).unwrap();
    let weighed = table.weighed_by_supply(&c);
    assert_ne!(weighed.total_weight(), table.total_weight());
    assert_eq!(weighed.gpu_per_cpu, (gpu, cpu));
}

#[test]
fn the_cpu_fragment_measure_by_hand() {
    let mut c = t4_node();
    let table = ShapeTable::new(&five_shapes());
    let cpu_fragment = |c: &Cluster| {
        let node = c.node(index(c, "t4")).unwrap();
        let free = SortedFree::new(&gpu_free(node));
        let cpu_free = node.available().get(ResourceId::CPU).units();
        table.measure(Measure::CpuFragment, cpu_free, table.model_of(node), &free)
    };
    // 10 CPUs free. A fits, B asks 12 CPUs (weight 1), C wants a V100 (1), D has its two
    // whole GPUs, E (1 CPU, no GPU) fits: 10 CPUs × weight 2, in units.
    assert_eq!(cpu_fragment(&c), q("10").units() as u128 * 2);
    // 2 CPUs free: A (4 CPUs, weight 2) no longer fits; D (2) and E (1) still do.
    reserve(&mut c, "t4", "CPU=8");
    assert_eq!(cpu_fragment(&c), q("2").units() as u128 * 4);
    // No CPU free: every shape that asks CPU is unserved, but nothing is left to strand.
    reserve(&mut c, "t4", "CPU=2");
    assert_eq!(cpu_fragment(&c), 0);
    // CPU-only shapes are kept with their CPU quantities, weighed and cut like the others.
    let cpu_only = ShapeTable::new(&[shape("32", "0", &[], 3), shape("8", "0", &[], 1)]);
    assert_eq!(cpu_only.no_gpu_steps, [(q("8").units(), 1), (q("32").units(), 4)]);
    let weighed = cpu_only.weighed_by_supply(&c);
    assert_eq!(weighed.no_gpu_steps, [(q("8").units(), 1000), (q("32").units(), 4000)]);
    assert_eq!(weighed.covering(95).no_gpu_steps, weighed.no_gpu_steps);
}

/// The CPU fragment sends GPU work where it leaves the CPU holes the shapes need.
#[test]
fn the_cpu_fragment_keeps_cpu_holes_that_shapes_need() {
    let mut c = typed_cluster(&[("a", "CPU=48,GPU=2", "T4"), ("b", "CPU=48,GPU=2", "T4")]);
    reserve(&mut c, "a", "CPU=8");
    reserve(&mut c, "b", "CPU=12");
    // Pods of 32 CPUs without GPUs, and of 4 CPUs and 1 GPU: weight 2 in all.
    let shapes = [shape("32", "0", &[], 1), shape("4", "1", &[], 1)];
    let scorer =
        Fragmentation::new(std::sync::Arc::new(ShapeTable::new(&shapes)), Measure::CpuFragment);
    assert_eq!(scorer.name(), "cpu-fragmentation");
    let req = request(&mut c, "CPU=6,GPU=1", Strategy::Default);
    let cx = DecisionContext { cluster: &c, request: &req, prepared: &Prepared::default() };
    assert!(scorer.applies(&cx));
    let raw =
        |node: &str| scorer.score(&cx, c.node(index(&c, node)).unwrap()).micros() / Score::UNIT;
    // On "a", 40 → 34 CPUs free: both shapes still fit; the excess is the 6 CPUs taken, 6 / 16
    // of a GPU: ⌊100 / 1.375⌋.
    assert_eq!(raw("a"), 72);
    // On "b", 36 → 30: the 32-CPU shape (weight 1 of 2) strands the 30 left, an excess of 6 +
    // 30 / 2 = 21 CPUs, 21 / 16 of a GPU: ⌊100 / 2.3125⌋.
    assert_eq!(raw("b"), 43);
}

/// Balance sends work that asks little CPU for its GPUs where CPU ran short, and does not rank
/// work without GPUs.
#[test]
fn balance_puts_gpu_work_where_cpu_ran_short_and_skips_cpu_work() {
    let mut c = typed_cluster(&[("short", "CPU=16,GPU=4", "T4"), ("fresh", "CPU=16,GPU=4", "T4")]);
    reserve(&mut c, "short", "CPU=14");
    // A mix of 4 CPUs per GPU: "short" serves 0.5 of its 4 idle GPUs, "fresh" all.
    let table = std::sync::Arc::new(ShapeTable::new(&[shape("4", "1", &[], 1)]));
    let scorer = Fragmentation::new(table, Measure::Balance);
    let raw = |c: &mut Cluster, ask: &str, node: &str| {
        let req = request(c, ask, Strategy::Default);
        let cx = DecisionContext { cluster: c, request: &req, prepared: &Prepared::default() };
        if !scorer.applies(&cx) {
            return None;
        }
        Some(scorer.score(&cx, c.node(index(c, node)).unwrap()).micros() / Score::UNIT)
    };
    // One GPU alone: on "short" it was stranded (3.5 → 2.5, excess 0); on "fresh" nothing was
    // (excess 1 GPU: 100 / 2).
    assert_eq!(raw(&mut c, "GPU=1", "short"), Some(100));
    assert_eq!(raw(&mut c, "GPU=1", "fresh"), Some(50));
    // With 1 CPU, which would have served 0.25 GPU: 3.5 → 2.75, excess 0.25: 100 / 1.25.
    assert_eq!(raw(&mut c, "CPU=1,GPU=1", "short"), Some(80));
    assert_eq!(raw(&mut c, "CPU=1,GPU=1", "fresh"), Some(50));
    assert_eq!(raw(&mut c, "CPU=1", "fresh"), None);
}

#[test]
fn shapes_of_weight_zero_and_duplicates_group() {
    let table = ShapeTable::new(&[
        shape("4", "0.5", &["T4", "P100"], 1),
        shape("2", "0.5", &["P100", "T4"], 2),
        shape("8", "0.5", &["P100", "T4"], 0),
        shape("4", "0.5", &["T4", "P100"], 3),
    ]);
    assert_eq!(table.total_weight(), 6);
    assert_eq!(table.groups.len(), 1);
    // CPU 2 → 2, CPU 4 → 2 + 1 + 3.
    assert_eq!(table.groups[0].cpu_steps, [(q("2").units(), 2), (q("4").units(), 6)]);
    assert!(ShapeTable::new(&[shape("1", "0", &[], 0)]).is_empty());
}

/// The scorer's raw score for `ask` on node "t4" of `c`.
fn score(c: &mut Cluster, shapes: &[Shape], ask: &str) -> u32 {
    let req = request(c, ask, Strategy::Default);
    let scorer =
        Fragmentation::new(std::sync::Arc::new(ShapeTable::new(shapes)), Measure::Fragment);
    let cx = DecisionContext { cluster: c, request: &req, prepared: &Prepared::default() };
    assert!(scorer.applies(&cx));
    let node = c.node(index(c, "t4")).unwrap();
    scorer.score(&cx, node).micros() / Score::UNIT
}

#[test]
fn the_score_by_hand() {
    let shapes = five_shapes();
    // The T4 node of `t4_node`, beside an idle V100 node of 4 GPUs: V100s are half the
    // cluster's 8 GPUs, so the V100 shape C weighs 8 / 4 = 2 times its weight, and the weight
    // sum is 2 + 1 + 2 + 3 + 2 = 10. Before: A 0, B 2.5, C 2.5 × 2, D 1.5, E 2.5 × 2 = 14.
    // (request, after, excess = after + g × 10 − 14, score = ⌊100 × 10 / (10 + excess)⌋)
    let cases = [
        // The share goes on GPU 0 (0.5 free, tightest): free [0, 0, 1, 1], CPU 9, idle 2.
        // A 0, B 2, C 2 × 2, D 0 (partial GPUs hold nothing), E 2 × 2: after 10; excess 10 + 5
        // − 14 = 1: 100 × 10 / 11 = 90.9.
        ("CPU=1,GPU=0.5", 90),
        // One whole GPU (GPU 2): free [0.5, 0, 0, 1], idle 1.5. A 0, B 1.5, C 1.5 × 2, D cannot
        // (one whole GPU left) 3 × 1.5, E 2 × 1.5: after 12; excess 12 + 10 − 14 = 8:
        // 100 × 10 / 18 = 55.6.
        ("CPU=1,GPU=1", 55),
        // CPU only, 8 of the 10 free: A now lacks CPU (2 × 2.5), B 2.5, C 5, D 1.5, E 5:
        // after 19; excess 5: 100 × 10 / 15 = 66.7.
        ("CPU=8", 66),
        // CPU only, 1: nothing changes: excess 0.
        ("CPU=1", 100),
    ];
    for (ask, expected) in cases {
        let mut c = t4_node();
        let total = resources(c.registry_mut(), "CPU=16,GPU=4");
        let mut v100 = NodeSpec::new(NodeId::new("v100").unwrap(), total);
        v100.facts = NodeFacts { accelerator_type: Some("V100".into()), ..NodeFacts::default() };
        c.add_node_with(v100).unwrap();
        assert_eq!(score(&mut c, &shapes, ask), expected, "{ask}");
    }
}

#[test]
fn shares_go_to_split_gpus_and_unconstrained_work_keeps_off_rare_types() {
    let profile = |shapes: Vec<Shape>| Profile {
        pick: Pick::Best,
        ..Profile::of_scorers(vec![ScorerSpec::Fragmentation {
            weight: 1,
            shapes: Shapes::Given(shapes),
            measure: Measure::Fragment,
        }])
    };
    let place = |c: &mut Cluster, profile: &Profile, ask: &str| -> String {
        let config = SchedulerConfig { profile: profile.clone(), ..Default::default() };
        let req = request(c, ask, Strategy::Default);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        match Scheduler::new(config).place(c, &req, &mut rng) {
            Decision::Placed(a) => c.node(a.node()).unwrap().id().to_string(),
            other => panic!("{ask}: {other:?}"),
        }
    };

    // "split" has GPU 0 half used; "fresh" is empty and listed first.
    // split: [0.5, 1] → [0, 1]. Before: the 1-GPU shape sees 0.5 of fragment; after: none.
    //        Excess 0 + 0.5 × 2 − 0.5 = 0.5 of weight 2 → 100 / 1.25 = 80.
    // fresh: [1, 1] → [0.5, 1]. Before 0; after 0.5. Excess 0.5 + 1 = 1.5 → 100 / 1.75 = 57.
    let shares = profile(vec![shape("1", "0.5", &[], 1), shape("1", "1", &[], 1)]);
    let mut c = typed_cluster(&[("fresh", "CPU=8,GPU=2", "T4"), ("split", "CPU=8,GPU=2", "T4")]);
    reserve(&mut c, "split", "GPU=0.5");
    assert_eq!(place(&mut c, &shares, "CPU=1,GPU=0.5"), "split");

    // Half the work needs V100; unconstrained work should leave the V100 node alone. V100s
    // are half the cluster's GPUs, so the V100 shape weighs 2 and the weight sum is 3.
    // t4: the V100 shape cannot use it, so all its idle is fragment: 2 × 2 before, 1 × 2
    //     after; the any-type shape sees no partial GPU either way. Excess 2 + 1 × 3 − 4 = 1
    //     of weight 3 → 100 / (1 + 1/3) = 75.
    // v100: both shapes can use it, nothing partial before or after: excess 0 + 3 − 0 = 3 →
    //       100 / 2 = 50.
    let rare = profile(vec![shape("1", "1", &["V100"], 1), shape("1", "1", &[], 1)]);
    let mut c = typed_cluster(&[("v100", "CPU=8,GPU=2", "V100"), ("t4", "CPU=8,GPU=2", "T4")]);
    assert_eq!(place(&mut c, &rare, "CPU=1,GPU=1"), "t4");
}

#[test]
fn shapes_weigh_by_the_share_of_the_cluster_they_can_use() {
    // 2 T4 GPUs and 6 G2 GPUs: a T4 shape weighs 8 / 2 = 4 times its weight, a T4|G2 or an
    // any-type shape once, and an A10 shape nothing (no node could take it).
    let c = typed_cluster(&[("t4", "CPU=8,GPU=2", "T4"), ("g2", "CPU=8,GPU=6", "G2")]);
    let table = ShapeTable::new(&[
        shape("1", "1", &["T4"], 1),
        shape("1", "1", &["G2", "T4"], 1),
        shape("1", "0", &[], 1),
        shape("1", "1", &["A10"], 5),
    ]);
    assert_eq!(table.total_weight(), 8);
    let weighed = table.weighed_by_supply(&c);
    assert_eq!(weighed.total_weight(), (4 + 1 + 1) * SCALE_ONE);
    assert_eq!(weighed.groups.len(), 2);
}

/// Ten G2 nodes of 8 GPUs and 96 CPUs, and one G3 node of 8 GPUs and 128 CPUs: only the G3
/// node can take 8 GPUs with 120 CPUs.
fn one_big_node() -> Cluster {
    let mut nodes: Vec<(String, &str, &str)> =
        (0..10).map(|i| (format!("g2-{i}"), "CPU=96,GPU=8", "G2")).collect();
    nodes.push(("g3".to_string(), "CPU=128,GPU=8", "G3"));
    let nodes: Vec<(&str, &str, &str)> =
        nodes.iter().map(|(n, r, t)| (n.as_str(), *r, *t)).collect();
    typed_cluster(&nodes)
}

#[test]
fn shapes_weigh_by_the_share_of_the_cluster_that_could_take_them() {
    // 88 GPUs in all. 8 GPUs with 120 CPUs: only the G3 node's 8 GPUs, 11 times; 8 GPUs with
    // 96 CPUs: every node, once; 200 CPUs: no node, left out.
    let c = one_big_node();
    let table = ShapeTable::new(&[
        shape("120", "8", &[], 1),
        shape("96", "8", &[], 1),
        shape("1", "1", &["G2"], 1),
        shape("200", "1", &[], 1),
    ]);
    let weighed = table.weighed_by_supply(&c);
    // G2 only: 88 / 80 GPUs.
    assert_eq!(weighed.total_weight(), 11 * SCALE_ONE + SCALE_ONE + 1100);
}

/// The cut to 95% comes after the weighing: a rare shape that only the G3 node can take stays,
/// and a rare one that any node can take goes, although it is more frequent.
#[test]
fn a_rare_shape_that_few_nodes_could_take_stays_in_the_typical_shapes() {
    let c = one_big_node();
    let shapes = [
        shape("1", "1", &[], 60),
        shape("8", "1", &[], 36),
        shape("2", "0.5", &[], 4),
        shape("120", "8", &[], 3),
    ];
    // By frequency alone: 60 + 36 + 4 of 103 cover 95%, the 8-GPU shape goes.
    assert_eq!(ShapeTable::new(&shapes).covering(95).total_weight(), 100);
    // Weighed: 60 + 36 + 3 × 11 (thousandths) of 133: the half-GPU shape goes.
    let typical = ShapeTable::new(&shapes).weighed_by_supply(&c).covering(95);
    assert_eq!(typical.total_weight(), (60 + 36 + 33) * SCALE_ONE);
    // And a learning scorer cuts its shapes so: after 256 requests in those proportions (its
    // shapes are rebuilt then), the 8-GPU shape keeps the G3 node whole for a single GPU.
    let mut c = c;
    let learning = Fragmentation::learning(Measure::Fragment);
    let asks =
        [("CPU=1,GPU=1", 60), ("CPU=8,GPU=1", 36), ("CPU=2,GPU=0.5", 4), ("CPU=120,GPU=8", 3)];
    let requests: Vec<crate::Request> = asks
        .iter()
        .flat_map(|&(ask, times)| std::iter::repeat_n(ask, times))
        .map(|ask| request(&mut c, ask, Strategy::Default))
        .collect();
    for req in requests.iter().cycle().take(256) {
        let cx = DecisionContext { cluster: &c, request: req, prepared: &Prepared::default() };
        assert!(learning.applies(&cx));
    }
    let req = request(&mut c, "CPU=1,GPU=1", Strategy::Default);
    let cx = DecisionContext { cluster: &c, request: &req, prepared: &Prepared::default() };
    assert!(learning.applies(&cx));
    let g3 = c.node(index(&c, "g3")).unwrap();
    let g2 = c.node(index(&c, "g2-0")).unwrap();
    assert!(learning.score(&cx, g2) > learning.score(&cx, g3));
}

/// One node each of T4, V100 and G2 GPUs.
fn three_types() -> Cluster {
    typed_cluster(&[
        ("t4", "CPU=16,GPU=4", "T4"),
        ("v100", "CPU=32,GPU=8", "V100"),
        ("g2", "CPU=8,GPU=2", "G2"),
    ])
}

/// Requests of five shapes for [`three_types`], as (resources, accelerator types accepted):
/// the constrained ones weigh by supply.
const FIVE_ASKS: [(&str, &str); 5] = [
    ("CPU=2,GPU=0.5", ""),
    ("CPU=4,GPU=1", "in(T4)"),
    ("CPU=1", ""),
    ("CPU=8,GPU=2", "in(V100,G2)"),
    ("CPU=2,GPU=0.25", ""),
];

/// Asks `learning` and a fresh scorer given its shapes for the score of `ask` (resources,
/// accelerator types accepted) on every alive node, and checks they agree; returns how many
/// scores were compared (none while nothing is learned yet).
fn scores_as_fresh(
    c: &mut Cluster,
    learning: &Fragmentation,
    (ask, types): (&str, &str),
    step: usize,
) -> usize {
    let mut req = request(c, ask, Strategy::Default);
    if !types.is_empty() {
        req = req.with_label_selector(
            LabelSelector::parse([(crate::labels::ACCELERATOR_TYPE, types)]).unwrap(),
        );
    }
    let cx = DecisionContext { cluster: c, request: &req, prepared: &Prepared::default() };
    if !learning.applies(&cx) {
        return 0;
    }
    let Source::Learned(learner) = &learning.source else { unreachable!() };
    let shapes = Arc::new(learned_table(&learner.borrow(), &Supply::of(c)));
    let fresh =
        Fragmentation { cover: learning.cover, ..Fragmentation::new(shapes, learning.measure) };
    assert!(fresh.applies(&cx));
    let mut compared = 0;
    for index in c.alive().iter() {
        let node = c.node(index).unwrap();
        assert_eq!(learning.score(&cx, node), fresh.score(&cx, node), "step {step}");
        compared += 1;
    }
    compared
}

/// A learning scorer keeps its memo and the cluster's supply across decisions; neither may
/// change a score. Every score it gives, through shape rebuilds, reservations and a node that
/// joins, equals that of a fresh scorer given the same learned shapes.
#[test]
fn the_memo_and_the_kept_supply_score_as_a_fresh_scorer() {
    let mut c = three_types();
    let learning = Fragmentation::learning(Measure::Fragment);
    let asks = FIVE_ASKS;
    for step in 0..300usize {
        if step == 150 {
            let total = resources(c.registry_mut(), "CPU=16,GPU=4");
            let mut node = NodeSpec::new(NodeId::new("late").unwrap(), total);
            node.facts = NodeFacts { accelerator_type: Some("T4".into()), ..NodeFacts::default() };
            c.add_node_with(node).unwrap();
        }
        scores_as_fresh(&mut c, &learning, asks[step % asks.len()], step);
        // Something changes between decisions: a share of a GPU or some CPU goes.
        let node = ["t4", "v100", "g2"][step % 3];
        let used = if step % 2 == 0 { "GPU=0.25" } else { "CPU=1" };
        let set = resources(c.registry_mut(), used);
        let _ = c.reserve(index(&c, node), &set);
    }
}

/// Nodes that do not change while the learned shapes are rebuilt keep their state, not their
/// measure or scores: every score still equals that of a fresh scorer given the same shapes.
/// Three request shapes, so that a node's memo still holds a score from before a rebuild.
#[test]
fn an_unchanged_node_is_scored_afresh_under_a_new_table() {
    let mut c = three_types();
    for (node, used) in [("t4", "CPU=3,GPU=0.5"), ("v100", "CPU=20,GPU=1"), ("g2", "GPU=0.75")] {
        let set = resources(c.registry_mut(), used);
        c.reserve(index(&c, node), &set).unwrap();
    }
    let learning = Fragmentation::learning(Measure::Fragment);
    let asks = [("CPU=2,GPU=0.5", ""), ("CPU=4,GPU=1", "in(T4)"), ("CPU=8,GPU=1", "in(V100)")];
    let mut compared = 0;
    for step in 0..600usize {
        compared += scores_as_fresh(&mut c, &learning, asks[step % asks.len()], step);
    }
    assert!(compared > 1_000);
}

/// One step of [`a_memo_that_forgets_scores_as_a_fresh_scorer`]: the request (an index into
/// its asks), then a change to one of the three nodes.
#[derive(Clone, Copy, Debug)]
enum Change {
    /// A quarter of a GPU, or more, up to a whole one.
    Quarters(u32),
    /// One CPU.
    Cpu,
    /// The oldest reservation still held goes.
    Release,
}

fn change() -> impl proptest::strategy::Strategy<Value = Change> {
    use proptest::strategy::Strategy as _;
    prop_oneof![(1u32..=4).prop_map(Change::Quarters), Just(Change::Cpu), Just(Change::Release)]
}

/// Runs `steps` (ask, node, change) with a memo that forgets its states as soon as there are
/// twice as many as nodes, numbers request shapes anew after three and keeps the scores of two,
/// checking every score against a fresh scorer's and the bound on states; true when states
/// were forgotten.
fn forgetting_memo_scores_as_fresh(measure: Measure, steps: &[(usize, usize, Change)]) -> bool {
    let mut c = three_types();
    let learning = Fragmentation {
        memo: RefCell::new(Memos::with_limits(0, 3, Some(2))),
        ..Fragmentation::learning(measure)
    };
    let asks = FIVE_ASKS;
    let mut held = std::collections::VecDeque::new();
    let (mut forgotten, mut interned) = (false, 0);
    for (step, &(ask, node, change)) in steps.iter().enumerate() {
        scores_as_fresh(&mut c, &learning, asks[ask], step);
        let now = learning.memo.borrow().states();
        assert!(now <= 2 * c.index_bound(), "{now} states for {} nodes", c.index_bound());
        forgotten |= now < interned;
        interned = now;
        let node = index(&c, ["t4", "v100", "g2"][node]);
        let used = match change {
            Change::Quarters(q) => format!("GPU={}", f64::from(q) / 4.0),
            Change::Cpu => "CPU=1".to_string(),
            Change::Release => {
                if let Some(allocation) = held.pop_front() {
                    c.release(&allocation);
                }
                continue;
            }
        };
        let set = resources(c.registry_mut(), &used);
        if let Ok(allocation) = c.reserve(node, &set) {
            held.push_back(allocation);
        }
    }
    forgotten
}

/// Forgetting is exercised, not only allowed: a run that changes nodes reaches the bound.
#[test]
fn a_memo_forgets_its_states_beyond_twice_the_nodes() {
    let changes = [Change::Quarters(1), Change::Cpu, Change::Release, Change::Quarters(2)];
    let steps: Vec<_> = (0..200).map(|i| (i % 5, i % 3, changes[i % 4])).collect();
    assert!(forgetting_memo_scores_as_fresh(Measure::Fragment, &steps));
}

proptest! {
    /// The forgetting memo scores exactly as a fresh scorer given the same shapes, for each
    /// measure scored through it, whatever changes between decisions: shares taken from any
    /// GPU (so nodes pass through equal multisets of free quantities on different GPUs),
    /// releases, CPU taken, shapes rebuilt.
    #[test]
    fn a_memo_that_forgets_scores_as_a_fresh_scorer(
        // The measures scored through the memo (balance reads its two numbers directly).
        measure in prop_oneof![Just(0usize), Just(1), Just(3)],
        steps in proptest::collection::vec((0usize..5, 0usize..3, change()), 1..150),
    ) {
        forgetting_memo_scores_as_fresh(MEASURES[measure], &steps);
    }
}

#[test]
fn take_follows_the_ledger() {
    /// Free units per GPU.
    type Free<'a> = &'a [i64];
    // (free, asked, after; None: does not fit)
    let cases: [(Free, i64, Option<Free>); 6] = [
        (&[10_000, 5_000, 7_000], 5_000, Some(&[10_000, 0, 7_000])),
        (&[10_000, 7_000, 7_000], 5_000, Some(&[10_000, 2_000, 7_000])),
        (&[4_000, 3_000], 5_000, None),
        (&[10_000, 5_000, 10_000], 20_000, Some(&[0, 5_000, 0])),
        (&[10_000, 5_000], 20_000, None),
        (&[3_000], 0, Some(&[3_000])),
    ];
    for (free, asked, after) in cases {
        let mut got = free.to_vec();
        let fits = take(&mut got, asked);
        match after {
            Some(after) => assert_eq!((fits, got.as_slice()), (true, after), "{free:?} {asked}"),
            None => assert_eq!((fits, got.as_slice()), (false, free), "{free:?} {asked}"),
        }
    }
}

#[test]
fn without_shapes_the_scorer_does_not_apply() {
    let mut c = t4_node();
    let req = request(&mut c, "CPU=1", Strategy::Default);
    let scorer = Fragmentation::new(std::sync::Arc::new(ShapeTable::default()), Measure::Fragment);
    let cx = DecisionContext { cluster: &c, request: &req, prepared: &Prepared::default() };
    assert!(!scorer.applies(&cx));
}

/// Every measure, for the property tests.
const MEASURES: [Measure; 4] =
    [Measure::Fragment, Measure::LostCapacity, Measure::Balance, Measure::CpuFragment];

proptest! {
    /// Placing g GPUs lowers each measure by at most g (the CPU fragment: placing c CPUs, by at
    /// most c): the excess is never negative, so the score's mapping loses nothing.
    #[test]
    fn excess_is_never_negative(
        measure in 0usize..4,
        used in proptest::collection::vec(0u32..=4, 4),
        cpu_used in 0u32..16,
        ask_gpu in prop_oneof![Just(0u32), 1u32..10, Just(10), Just(20)],
        ask_cpu in 0u32..8,
        shapes in proptest::collection::vec((0u32..16, prop_oneof![Just(0u32), 1u32..10, Just(10), Just(20), Just(40)], any::<bool>(), 0u32..5), 1..8),
    ) {
        let mut c = typed_cluster(&[("n", "CPU=16,GPU=4", "T4")]);
        for quarters in used.iter().filter(|&&u| u > 0) {
            let share = format!("GPU={}", f64::from(*quarters) / 4.0);
            let set = resources(c.registry_mut(), &share);
            let _ = c.reserve(index(&c, "n"), &set);
        }
        if cpu_used > 0 {
            reserve(&mut c, "n", &format!("CPU={cpu_used}"));
        }
        let shapes: Vec<Shape> = shapes
            .iter()
            .map(|&(cpu, tenths, v100, weight)| Shape {
                cpu: Quantity::from_whole(i64::from(cpu)),
                gpu: Quantity::from_units(i64::from(tenths) * 1_000),
                accelerators: if v100 { vec!["V100".to_string()] } else { Vec::new() },
                weight,
            })
            .collect();
        let table = ShapeTable::new(&shapes);
        prop_assume!(!table.is_empty());
        let node = c.node(index(&c, "n")).unwrap();
        let asked = i64::from(ask_gpu) * 1_000;
        let mut free = gpu_free(node);
        let cpu_free = node.available().get(ResourceId::CPU).units();
        let model = table.model_of(node);
        let measure = MEASURES[measure];
        let before = table.measure(measure, cpu_free, model, &SortedFree::new(&free));
        prop_assume!(take(&mut free, asked));
        let cpu_after = cpu_free - Quantity::from_whole(i64::from(ask_cpu)).units();
        prop_assume!(cpu_after >= 0);
        let after = table.measure(measure, cpu_after, model, &SortedFree::new(&free));
        let taken = match measure {
            Measure::CpuFragment => (cpu_free - cpu_after) as u128,
            _ => asked as u128,
        } * u128::from(table.total_weight());
        prop_assert!(after + taken >= before, "before {before}, after {after}, taken {taken}");
    }
}

/// A learning scorer expects a whole node of each of the largest kinds (the most GPUs) and one
/// whole GPU from the first request, each weighing one in `WHOLE_NODE_SHARE` of the requests
/// seen (at least 1); smaller kinds get no whole-node shape.
#[test]
fn a_learning_scorer_expects_whole_nodes_of_the_largest_kind_and_a_whole_gpu() {
    let mut c = three_types();
    let learning = Fragmentation::learning(Measure::Fragment);
    let whole_of_eight = |table: &ShapeTable| {
        table
            .groups
            .iter()
            .filter(|g| g.count == 8 && g.need == UNITS_PER_WHOLE && g.models.is_empty())
            .flat_map(|g| g.cpu_weights.clone())
            .collect::<Vec<_>>()
    };
    let mut seen = 0u64;
    for rebuilds in 1..=12 {
        // Up to 2,048 requests: the doubling phase, then every 256th.
        let asks = if rebuilds <= 8 { 1u64 << (rebuilds - 1) } else { 256 * (rebuilds - 4) };
        while seen < asks {
            let req = request(&mut c, "CPU=1,GPU=1", Strategy::Default);
            let cx = DecisionContext { cluster: &c, request: &req, prepared: &Prepared::default() };
            assert!(learning.applies(&cx));
            seen += 1;
        }
        let Source::Learned(learner) = &learning.source else { unreachable!() };
        let table = learned_table(&learner.borrow(), &Supply::of(&c));
        let weight = (seen / learn::WHOLE_NODE_SHARE).max(1);
        // The V100 kind: 8 GPUs, 32 CPUs; the 4- and 2-GPU kinds have no whole-node shape.
        assert_eq!(whole_of_eight(&table), [(32 * UNITS_PER_WHOLE, weight)], "{seen}");
        // One whole GPU with no CPU, beside the requests' own (1 CPU each).
        let one_gpu: Vec<(i64, u64)> = table
            .groups
            .iter()
            .filter(|g| g.count == 1 && g.need == UNITS_PER_WHOLE && g.models.is_empty())
            .flat_map(|g| g.cpu_weights.clone())
            .collect();
        assert_eq!(one_gpu, [(0, weight), (UNITS_PER_WHOLE, seen)], "{seen}");
        assert_eq!(table.total_weight, seen + 2 * weight, "{seen}");
        assert!(table.groups.iter().all(|g| g.count == 8 || g.count == 1), "{table:?}");
    }
}
