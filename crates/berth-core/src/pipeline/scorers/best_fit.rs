//! BestFit: the node that is left with the least free after placing, the bin-packing baseline
//! of the FGD paper (Weng et al., USENIX ATC '23) and its simulator.
//!
//! Assumptions: filling nodes as tightly as possible keeps large holes free elsewhere for
//! large requests. Leftovers are compared in absolute quantities, so that one free GPU counts the
//! same on a 2-GPU node and on an 8-GPU node.
//!
//! Rules: the profile lists resources (exact names) with weights (`bestFit.resources`). For
//! each listed resource `r` with weight `wᵣ`, the leftover is `free − asked` on the node (0 on a
//! node without `r`), divided by `scaleᵣ`, the largest total of `r` among the alive nodes (the
//! runner computes it once per attempt; a scorer run on its own uses the node's total). The raw
//! score is `⌊100 × (1 − Σ wᵣ × leftoverᵣ / scaleᵣ / Σ wᵣ)⌋`, with `Σ wᵣ` over every listed
//! resource: a resource the node lacks counts as nothing left over. Each quotient is truncated
//! to a millionth before it is weighted, so the score is an exact function of the ledger.
//! Resources the request asks for but the profile does not list do not count, and neither do
//! listed resources the request does not ask for (those still count their leftover: a CPU-only
//! request prefers the node with fewer free GPUs, as the simulator's does).
//!
//! Behaviour: the fullest node that can take the request wins; an empty cluster ties everywhere
//! and the pick decides.

use super::super::stage::{DecisionContext, Score, Scorer};
use super::ResourceRules;
use crate::cluster::Cluster;
use crate::node::Node;
use crate::resource::{ResourceId, ResourceRegistry, ResourceSet};
use std::cell::RefCell;

/// Resolution of each scaled leftover: a millionth.
const PARTS: i128 = 1_000_000;

/// The BestFit scorer. See the module documentation.
#[derive(Debug)]
pub struct BestFit {
    resources: ResourceRules<u32>,
    /// `Σ wᵣ` over every listed resource.
    weight_sum: u64,
    /// Each resource's weight by [`ResourceId`] index, resolved from `resources` by
    /// [`Scorer::applies`] for the registry of the decision's cluster, instead of by name
    /// per node and resource.
    by_id: RefCell<Resolved>,
}

/// Weights by resource ID, and the registry's names they were resolved for (a scorer may serve
/// clusters whose registries differ: their custom resources can have other IDs).
#[derive(Debug, Default)]
struct Resolved {
    names: Vec<Box<str>>,
    weights: Vec<Option<u32>>,
}

impl Clone for BestFit {
    fn clone(&self) -> BestFit {
        BestFit::new(self.resources.clone())
    }
}

/// The resources best fit counts when a profile names none: CPU and GPU, weight 1 each.
pub fn default_resources() -> ResourceRules<u32> {
    ResourceRules::new([("CPU".to_string(), 1), ("GPU".to_string(), 1)])
}

impl BestFit {
    /// A scorer of the listed resources and their weights (exact names).
    pub fn new(resources: ResourceRules<u32>) -> BestFit {
        let weight_sum = resources.iter().map(|(_, w)| u64::from(*w)).sum();
        BestFit { resources, weight_sum, by_id: RefCell::default() }
    }

    /// The weight of `resource`: by ID as [`Scorer::applies`] resolved it, else by name.
    fn weight(
        &self,
        by_id: &[Option<u32>],
        registry: &ResourceRegistry,
        resource: ResourceId,
    ) -> Option<u32> {
        match by_id.get(resource.index()) {
            Some(weight) => *weight,
            None => self.resources.get(registry.name(resource)).copied(),
        }
    }
}

/// `a * b / c` for non-negative `a` and `b` and positive `c`, exactly: in 64 bits when the
/// product fits (a 128-bit division was a fifth of a score), else in 128.
fn mul_div(a: i128, b: i128, c: i128) -> i128 {
    match (i64::try_from(a), i64::try_from(b), i64::try_from(c)) {
        (Ok(a), Ok(b), Ok(c)) => match a.checked_mul(b) {
            Some(product) => i128::from(product / c),
            None => a as i128 * b as i128 / c as i128,
        },
        _ => a * b / c,
    }
}

impl Scorer for BestFit {
    fn name(&self) -> &'static str {
        "best_fit"
    }

    fn applies(&self, cx: &DecisionContext<'_>) -> bool {
        let registry = cx.cluster.registry();
        let names = || (0..registry.len()).filter_map(ResourceId::from_index);
        let mut resolved = self.by_id.borrow_mut();
        let current = resolved.names.len() == registry.len()
            && names().zip(&resolved.names).all(|(id, name)| registry.name(id) == &**name);
        if !current {
            resolved.names = names().map(|id| registry.name(id).into()).collect();
            resolved.weights =
                names().map(|id| self.resources.get(registry.name(id)).copied()).collect();
        }
        true
    }

    fn score(&self, cx: &DecisionContext<'_>, node: &Node) -> Score {
        if self.weight_sum == 0 {
            return Score::MAX;
        }
        let registry = cx.cluster.registry();
        let resolved = self.by_id.borrow();
        let by_id = resolved.weights.as_slice();
        // One forward walk through each set: `total` lists resources in ascending order.
        let mut largest = cx.prepared.largest_total.as_ref().map(ResourceSet::ascending);
        let mut available = node.available().ascending();
        let mut asked_set = cx.request.resources().ascending();
        let mut weighted: i128 = 0;
        for (resource, total) in node.total().iter() {
            let Some(weight) = self.weight(by_id, registry, resource) else {
                continue;
            };
            let free = i128::from(available.get(resource).units());
            let asked = i128::from(asked_set.get(resource).units());
            let scale = largest.as_mut().map_or(total, |l| l.get(resource).max(total));
            let leftover = (free - asked).max(0);
            weighted += i128::from(weight) * mul_div(leftover, PARTS, i128::from(scale.units()));
        }
        let whole = i128::from(self.weight_sum) * PARTS;
        let kept = (whole - weighted).max(0);
        Score::new(mul_div(kept, 100, whole) as u32)
    }
}

/// The largest total of each resource among the alive nodes.
pub fn largest_totals(cluster: &Cluster) -> ResourceSet {
    cluster.largest_totals().clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::profile::{Pick, Profile, ScorerSpec};
    use crate::pipeline::stage::Prepared;
    use crate::pipeline::{Decision, Scheduler, SchedulerConfig};
    use crate::request::Strategy;
    use crate::testutil::{cluster, index, request, resources};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn cpu_gpu() -> ResourceRules<u32> {
        ResourceRules::new([("CPU".to_string(), 1), ("GPU".to_string(), 1)])
    }

    /// Three nodes: big (64 CPU, 8 GPU) with 48 CPU and 6 GPU used, small (16 CPU, 2 GPU)
    /// empty, cpu (32 CPU) with 8 used.
    fn three_nodes() -> Cluster {
        let mut c =
            cluster(&[("big", "CPU=64,GPU=8"), ("small", "CPU=16,GPU=2"), ("cpu", "CPU=32")]);
        for (node, used) in [("big", "CPU=48,GPU=6"), ("cpu", "CPU=8")] {
            let set = resources(c.registry_mut(), used);
            c.reserve(index(&c, node), &set).unwrap();
        }
        c
    }

    fn scores(c: &mut Cluster, ask: &str, prepared: &Prepared) -> Vec<u32> {
        let req = request(c, ask, Strategy::Default);
        let scorer = BestFit::new(cpu_gpu());
        let cx = DecisionContext { cluster: c, request: &req, prepared };
        c.nodes().map(|(_, node)| scorer.score(&cx, node).micros() / Score::UNIT).collect()
    }

    #[test]
    fn leftovers_are_scaled_by_the_largest_totals() {
        let mut c = three_nodes();
        let largest = largest_totals(&c);
        assert_eq!(largest.display(c.registry()).to_string(), "{CPU: 64, GPU: 8}");
        let prepared = Prepared { largest_total: Some(largest), ..Prepared::default() };
        // 4 CPU + 1 GPU. big: CPU (16−4)/64 = 0.1875, GPU (2−1)/8 = 0.125; mean 0.15625 → 84.
        // small: CPU (16−4)/64 = 0.1875, GPU (2−1)/8 = 0.125 → 84: the same leftovers.
        // cpu: CPU (24−4)/64 = 0.3125, no GPU (leftover 0): mean 0.15625 → 84.
        assert_eq!(scores(&mut c, "CPU=4,GPU=1", &prepared), [84, 84, 84]);
        // 8 CPU + 2 GPU. big: CPU 8/64 = 0.125, GPU 0 → 0.0625 → 93; small: CPU 8/64, GPU 0
        // → 93; cpu: CPU 16/64 = 0.25 → 0.125 → 87.
        assert_eq!(scores(&mut c, "CPU=8,GPU=2", &prepared), [93, 93, 87]);
        // CPU only: free GPUs still count. big: CPU 14/64 = 0.21875, GPU 2/8 = 0.25 → 0.234375
        // → 76; small: CPU 14/64, GPU 2/8 → 76; cpu: CPU 22/64 = 0.34375 → 0.171875 → 82.
        assert_eq!(scores(&mut c, "CPU=2", &prepared), [76, 76, 82]);
    }

    #[test]
    fn alone_it_scales_by_the_nodes_own_totals() {
        let mut c = three_nodes();
        // big: CPU 12/64 = 0.1875, GPU 1/8 = 0.125 → 84. small: CPU 12/16 = 0.75, GPU 1/2 =
        // 0.5 → 0.625 → 37. cpu: CPU 20/32 = 0.625 → 0.3125 → 68.
        assert_eq!(scores(&mut c, "CPU=4,GPU=1", &Prepared::default()), [84, 37, 68]);
    }

    #[test]
    fn no_weight_scores_every_node_alike() {
        let mut c = three_nodes();
        let req = request(&mut c, "CPU=1", Strategy::Default);
        let scorer = BestFit::new(ResourceRules::new([("CPU".to_string(), 0)]));
        let cx = DecisionContext { cluster: &c, request: &req, prepared: &Prepared::default() };
        let got: Vec<u32> =
            c.nodes().map(|(_, n)| scorer.score(&cx, n).micros() / Score::UNIT).collect();
        assert_eq!(got, [100, 100, 100]);
    }

    #[test]
    fn the_pipeline_packs_onto_the_fullest_node_with_pick_best() {
        // Four equal GPU nodes; one is half full. BestFit with `pick: best` puts every GPU
        // request on the fullest node that can take it, whatever the seed.
        let profile = Profile {
            preferences: Vec::new(),
            pick: Pick::Best,
            ..Profile::of_scorers(vec![ScorerSpec::BestFit { weight: 1, resources: cpu_gpu() }])
        };
        assert!(profile.needs_largest_total());
        for seed in 0..8 {
            let mut c = cluster(&[
                ("a", "CPU=16,GPU=4"),
                ("b", "CPU=16,GPU=4"),
                ("c", "CPU=16,GPU=4"),
                ("d", "CPU=16,GPU=4"),
            ]);
            let set = resources(c.registry_mut(), "CPU=8,GPU=2");
            c.reserve(index(&c, "c"), &set).unwrap();
            let config = SchedulerConfig { profile: profile.clone(), ..Default::default() };
            let mut scheduler = Scheduler::new(config);
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut placed = Vec::new();
            for _ in 0..3 {
                let req = request(&mut c, "CPU=2,GPU=1", Strategy::Default);
                match scheduler.place(&mut c, &req, &mut rng) {
                    Decision::Placed(a) => placed.push(c.node(a.node()).unwrap().id().to_string()),
                    other => panic!("{other:?}"),
                }
            }
            // c fills up (2 GPUs left), then the third goes to one of the empty nodes.
            assert_eq!(placed[..2], ["c", "c"], "seed {seed}");
            assert_ne!(placed[2], "c", "seed {seed}");
        }
    }

    /// Weights resolved by ID for one cluster's registry are resolved again for another whose
    /// custom resources have other IDs: every score equals that of a fresh scorer resolving by
    /// name.
    #[test]
    fn weights_by_id_follow_the_registry_of_the_decision() {
        let rules = ResourceRules::new([("CPU".to_string(), 1), ("TPU".to_string(), 3)]);
        let scorer = BestFit::new(rules.clone());
        // TPU is the fifth name in one registry, the sixth in the other.
        let mut clusters = [
            cluster(&[("a", "CPU=8,TPU=4"), ("b", "CPU=8,FPGA=2,TPU=2")]),
            cluster(&[("a", "CPU=8,FPGA=2"), ("b", "CPU=8,TPU=4")]),
        ];
        for c in &mut clusters {
            let req = request(c, "CPU=1", Strategy::Default);
            let prepared = Prepared::default();
            let cx = DecisionContext { cluster: c, request: &req, prepared: &prepared };
            assert!(scorer.applies(&cx));
            for (_, node) in c.nodes() {
                let fresh = BestFit::new(rules.clone());
                assert_eq!(scorer.score(&cx, node), fresh.score(&cx, node));
            }
        }
    }

    proptest::proptest! {
        /// The 64-bit fast path divides exactly as 128 bits do.
        #[test]
        fn mul_div_is_exact(a in 0i128..i128::from(i64::MAX), b in 0i128..=1_000_000, c in 1i128..i128::from(i64::MAX)) {
            proptest::prop_assert_eq!(mul_div(a, b, c), a * b / c);
        }
    }
}
