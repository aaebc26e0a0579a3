//! ResourceStrategyFit (seed 001): pack some resources, spread others, in one score.
//!
//! Assumptions: one strategy for every resource does not fit mixed clusters. GPU work should
//! pack, so that whole GPU nodes stay free and GPUs do not fragment; CPU work should spread,
//! so that no node becomes a hot spot.
//!
//! Rules: the profile gives each resource (or `prefix/*` family, see [`ResourceRules`]) a
//! strategy and a weight. For each resource the request asks for and the profile lists, with
//! `requested = allocated on the node + asked` and `allocatable` the node's total:
//!
//! - `MostAllocated`: `requested / allocatable` (pack);
//! - `LeastAllocated`: `(allocatable − requested) / allocatable` (spread);
//! - `allocatable` 0: 0, and the resource's weight still counts;
//! - `requested > allocatable`: the whole node scores 0.
//!
//! The node's score is `100 × Σ weightᵣ × shareᵣ / Σ weightᵣ` points, 0 when no listed
//! resource is asked for: the seed's formula, exactly. Nothing is rounded per resource; the
//! shares are summed exactly to 10⁻¹⁸ and the mean is rounded once, to the nearest millionth
//! of a point (see [`Score`]), so the total is the seed's number to within 10⁻⁶ × the plugin
//! weight. A resource of weight 0 is left out (it could neither raise nor lower the mean).
//! The plugin weight, `resourceStrategyFitWeight`, is the runner's weight, so the total is
//! `score × resourceStrategyFitWeight`, the seed's `× MaxNodeScore × weight`.
//!
//! Behaviour: with `nvidia.com/gpu` MostAllocated and `CPU` LeastAllocated, GPU work lands
//! on the GPU node that is already fullest and CPU work on the emptiest node, each by the
//! resources it asks for; resources a request does not ask for do not move its score.

use super::super::stage::{DecisionContext, Score, Scorer};
use super::ResourceRules;
use crate::node::Node;
use crate::quantity::Quantity;

/// How [`ResourceStrategyFit`] scores one resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceStrategy {
    /// Pack or spread.
    pub kind: StrategyKind,
    /// The resource's weight in the node's weighted mean.
    pub weight: u32,
}

/// Pack or spread, the plugin's `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrategyKind {
    /// `requested / allocatable`: the fuller node scores higher (pack).
    MostAllocated,
    /// `(allocatable − requested) / allocatable`: the emptier node scores higher (spread).
    LeastAllocated,
}

/// The ResourceStrategyFit scorer. See the module documentation.
#[derive(Clone, Debug)]
pub struct ResourceStrategyFit {
    /// The strategy and weight per resource name or `prefix/*` family.
    pub resources: ResourceRules<ResourceStrategy>,
}

impl Scorer for ResourceStrategyFit {
    fn name(&self) -> &'static str {
        "resource_strategy_fit"
    }

    fn score(&self, cx: &DecisionContext<'_>, node: &Node) -> Score {
        let registry = cx.cluster.registry();
        let mut weighted: u128 = 0;
        let mut weights: u128 = 0;
        for (resource, asked) in cx.request.resources().iter() {
            let Some(strategy) = self.resources.get(registry.name(resource)) else {
                continue;
            };
            if strategy.weight == 0 {
                continue;
            }
            let allocatable = node.total().get(resource);
            // Allocated = total − free; `saturating_sub` only guards the ledger invariant.
            let allocated = allocatable.saturating_sub(node.available().get(resource));
            let Some(share) = share(strategy.kind, allocatable, allocated, asked) else {
                return Score::MIN;
            };
            weighted = weighted.saturating_add(u128::from(strategy.weight) * share);
            weights += u128::from(strategy.weight);
        }
        Score::from_ratio(weighted, weights * SHARE_ONE)
    }
}

/// A share of 1 in [`share`]'s units: 10¹⁸, so a share of any two quantities is exact to
/// 10⁻¹⁸ and a weight (< 2³²) times a share still fits in `u128` many times over.
const SHARE_ONE: u128 = 1_000_000_000_000_000_000;

/// One resource's share, 0..=1 in units of 10⁻¹⁸ (rounded down), or `None` when `allocated +
/// asked` exceeds `allocatable` (the node then scores 0 whatever its other resources).
fn share(
    kind: StrategyKind,
    allocatable: Quantity,
    allocated: Quantity,
    asked: Quantity,
) -> Option<u128> {
    let allocatable = i128::from(allocatable.units());
    if allocatable <= 0 {
        return Some(0);
    }
    let requested = i128::from(allocated.units()) + i128::from(asked.units());
    if requested > allocatable {
        return None;
    }
    let numerator = match kind {
        StrategyKind::MostAllocated => requested,
        StrategyKind::LeastAllocated => allocatable - requested,
    };
    // Both are below 2⁶³ and numerator ≤ allocatable, so numerator × 10¹⁸ < 2¹²⁴.
    Some(numerator.max(0) as u128 * SHARE_ONE / allocatable as u128)
}

/// One resource's score on its own, `100 × share` points, or `None` when the request does not
/// fit (see the module documentation).
pub fn resource_score(
    kind: StrategyKind,
    allocatable: Quantity,
    allocated: Quantity,
    asked: Quantity,
) -> Option<Score> {
    share(kind, allocatable, allocated, asked).map(|share| Score::from_ratio(share, SHARE_ONE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::profile::{Pick, Profile, ScorerSpec};
    use crate::pipeline::stage::{points_text, Prepared};
    use crate::pipeline::{Decision, Scheduler, SchedulerConfig};
    use crate::request::Strategy;
    use crate::testutil::{cluster, index, request, resources};
    use crate::Cluster;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use StrategyKind::{LeastAllocated, MostAllocated};

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).unwrap()
    }

    #[test]
    fn per_resource_scores_are_exact_shares() {
        // (strategy, allocatable, allocated, asked, points)
        let cases = [
            (MostAllocated, "16", "4", "4", Some("50")),
            (LeastAllocated, "16", "4", "4", Some("50")),
            (MostAllocated, "8", "6", "1", Some("87.5")), // 7/8
            (LeastAllocated, "8", "6", "1", Some("12.5")), // 1/8
            (MostAllocated, "3", "0", "1", Some("33.333333")), // 1/3, to the nearest millionth
            (LeastAllocated, "3", "0", "1", Some("66.666667")),
            (MostAllocated, "4", "0", "4", Some("100")),
            (LeastAllocated, "4", "0", "4", Some("0")),
            (MostAllocated, "4", "3", "1.5", None), // would exceed: the node scores 0
            (LeastAllocated, "0", "0", "1", Some("0")), // nothing allocatable: 0, weight counts
            (MostAllocated, "1", "0", "0.3333", Some("33.33")),
            (MostAllocated, "7", "0", "0.0001", Some("0.001429")), // 1/70000 of 100
        ];
        for (kind, allocatable, allocated, asked, expected) in cases {
            let got = resource_score(kind, q(allocatable), q(allocated), q(asked));
            let got = got.map(|score| score.to_string());
            assert_eq!(got.as_deref(), expected, "{kind:?} {allocatable} {allocated} {asked}");
        }
    }

    fn gpu_pack_cpu_spread(gpu_weight: u32, cpu_weight: u32) -> ResourceRules<ResourceStrategy> {
        ResourceRules::new([
            (
                "nvidia.com/gpu".to_string(),
                ResourceStrategy { kind: MostAllocated, weight: gpu_weight },
            ),
            ("CPU".to_string(), ResourceStrategy { kind: LeastAllocated, weight: cpu_weight }),
        ])
    }

    fn score_on(
        cluster: &mut Cluster,
        rules: &ResourceRules<ResourceStrategy>,
        ask: &str,
    ) -> Vec<String> {
        let req = request(cluster, ask, Strategy::Default);
        let scorer = ResourceStrategyFit { resources: rules.clone() };
        let cx = DecisionContext { cluster, request: &req, prepared: &Prepared::default() };
        cluster.nodes().map(|(_, node)| scorer.score(&cx, node).to_string()).collect()
    }

    #[test]
    fn weighted_mean_of_the_listed_resources_asked_for() {
        // gpu-a: 6 of 8 GPUs and 8 of 32 CPUs allocated; gpu-b: 2 of 8 GPUs, 24 of 32 CPUs.
        let mut c =
            cluster(&[("gpu-a", "CPU=32,nvidia.com/gpu=8"), ("gpu-b", "CPU=32,nvidia.com/gpu=8")]);
        for (node, used) in
            [("gpu-a", "CPU=8,nvidia.com/gpu=6"), ("gpu-b", "CPU=24,nvidia.com/gpu=2")]
        {
            let set = resources(c.registry_mut(), used);
            c.reserve(index(&c, node), &set).unwrap();
        }
        let rules = gpu_pack_cpu_spread(2, 1);
        // 1 GPU + 4 CPU. gpu-a: GPU 7/8 = 87.5, CPU (32−12)/32 = 62.5;
        //   (2 × 87.5 + 62.5) / 3 = 237.5 / 3 = 79.1666…
        // gpu-b: GPU 3/8 = 37.5, CPU (32−28)/32 = 12.5; (2 × 37.5 + 12.5) / 3 = 29.1666…
        assert_eq!(score_on(&mut c, &rules, "nvidia.com/gpu=1,CPU=4"), ["79.166667", "29.166667"]);
        // Memory is asked for but not listed: it does not count.
        assert_eq!(
            score_on(&mut c, &rules, "nvidia.com/gpu=1,CPU=4,memory=1"),
            ["79.166667", "29.166667"]
        );
        // CPU alone: only CPU counts.
        assert_eq!(score_on(&mut c, &rules, "CPU=4"), ["62.5", "12.5"]);
        // Nothing listed is asked for: 0 everywhere.
        assert_eq!(score_on(&mut c, &rules, "memory=1"), ["0", "0"]);
        // 3 GPUs exceed gpu-a's 2 free: gpu-a scores 0 whatever its CPU. gpu-b: GPU 5/8 = 62.5,
        // CPU (32−25)/32 = 21.875; (2 × 62.5 + 21.875) / 3 = 146.875 / 3 = 48.9583…
        assert_eq!(score_on(&mut c, &rules, "nvidia.com/gpu=3,CPU=1"), ["0", "48.958333"]);
        // A weight-0 resource is left out of the mean.
        assert_eq!(
            score_on(&mut c, &gpu_pack_cpu_spread(0, 1), "nvidia.com/gpu=1,CPU=4"),
            ["62.5", "12.5"]
        );
    }

    #[test]
    fn the_issue_example_is_the_seed_formula_not_whole_points() {
        // CPU LeastAllocated weight 2, memory MostAllocated weight 1; 500 of each, 200 used,
        // 100 of each asked. CPU (500 − 300)/500 = 0.4, memory 300/500 = 0.6:
        // 100 × (2 × 0.4 + 1 × 0.6) / 3 = 46.6666… points, × 10 = 466.666… (whole points per
        // resource gave 460).
        let mut c = cluster(&[("n", "CPU=500,memory=500")]);
        let used = resources(c.registry_mut(), "CPU=200,memory=200");
        c.reserve(index(&c, "n"), &used).unwrap();
        let rules = ResourceRules::new([
            ("CPU".to_string(), ResourceStrategy { kind: LeastAllocated, weight: 2 }),
            ("memory".to_string(), ResourceStrategy { kind: MostAllocated, weight: 1 }),
        ]);
        assert_eq!(score_on(&mut c, &rules, "CPU=100,memory=100"), ["46.666667"]);
        let req = request(&mut c, "CPU=100,memory=100", Strategy::Default);
        let cx = DecisionContext { cluster: &c, request: &req, prepared: &Prepared::default() };
        let score =
            ResourceStrategyFit { resources: rules }.score(&cx, c.node(index(&c, "n")).unwrap());
        let total = u64::from(score.micros()) * 10;
        let seed = 100.0 * (2.0 * 0.4 + 0.6) / 3.0 * 10.0;
        assert!((total as f64 / 1e6 - seed).abs() < 1e-4, "{total} vs {seed}");
    }

    #[test]
    fn a_resource_the_node_lacks_scores_0_but_its_weight_counts() {
        // The pipeline's resources_total filter rejects such a node first; the scorer alone
        // still follows the rule: GPU (allocatable 0) scores 0 with weight 1, CPU 5/10 = 50.
        let mut c = cluster(&[("n", "CPU=10")]);
        let rules = ResourceRules::new([
            ("nvidia.com/gpu".to_string(), ResourceStrategy { kind: MostAllocated, weight: 1 }),
            ("CPU".to_string(), ResourceStrategy { kind: MostAllocated, weight: 1 }),
        ]);
        assert_eq!(score_on(&mut c, &rules, "CPU=5,nvidia.com/gpu=1"), ["25"]);
        assert_eq!(score_on(&mut c, &rules, "CPU=5"), ["50"]);
    }

    #[test]
    fn wildcards_resolve_per_resource_name() {
        let mut c = cluster(&[("n", "CPU=10,nvidia.com/t4=4,nvidia.com/a10=4")]);
        let set = resources(c.registry_mut(), "nvidia.com/t4=2,nvidia.com/a10=1");
        c.reserve(index(&c, "n"), &set).unwrap();
        let rules = ResourceRules::new([
            ("nvidia.com/*".to_string(), ResourceStrategy { kind: MostAllocated, weight: 1 }),
            ("nvidia.com/a10".to_string(), ResourceStrategy { kind: LeastAllocated, weight: 1 }),
        ]);
        // t4 by the wildcard, MostAllocated: 3/4 = 75. a10 exactly, LeastAllocated: 2/4 = 50.
        assert_eq!(score_on(&mut c, &rules, "nvidia.com/t4=1"), ["75"]);
        assert_eq!(score_on(&mut c, &rules, "nvidia.com/a10=1"), ["50"]);
        assert_eq!(score_on(&mut c, &rules, "nvidia.com/t4=1,nvidia.com/a10=1"), ["62.5"]);
    }

    /// Places `ask` with a profile of ResourceStrategyFit alone (weight 10) and returns where.
    fn place(c: &mut Cluster, ask: &str) -> String {
        let profile = Profile {
            scorers: vec![ScorerSpec::ResourceStrategyFit {
                weight: 10,
                resources: gpu_pack_cpu_spread(2, 1),
            }],
            filters: Vec::new(),
            preferences: Vec::new(),
            pick: Pick::TopK,
        };
        let config = SchedulerConfig { profile, ..SchedulerConfig::default() };
        let req = request(c, ask, Strategy::Default);
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        match Scheduler::new(config).place(c, &req, &mut rng) {
            Decision::Placed(a) => {
                let id = c.node(a.node()).unwrap().id().to_string();
                c.release(&a);
                id
            }
            other => panic!("{ask}: {other:?}"),
        }
    }

    #[test]
    fn gpu_work_packs_onto_the_fuller_gpu_node_and_cpu_work_spreads() {
        // Two GPU nodes, two CPU nodes; the fuller GPU node is listed second and the emptier
        // CPU node last, so node order alone would pick neither.
        let mut c = cluster(&[
            ("gpu-empty", "CPU=64,nvidia.com/gpu=8"),
            ("gpu-full", "CPU=64,nvidia.com/gpu=8"),
            ("cpu-busy", "CPU=32"),
            ("cpu-idle", "CPU=32"),
        ]);
        for (node, used) in [
            ("gpu-empty", "CPU=48,nvidia.com/gpu=1"),
            ("gpu-full", "CPU=48,nvidia.com/gpu=6"),
            ("cpu-busy", "CPU=24"),
            ("cpu-idle", "CPU=4"),
        ] {
            let set = resources(c.registry_mut(), used);
            c.reserve(index(&c, node), &set).unwrap();
        }
        // GPU work: gpu-full GPU 7/8 = 87.5, CPU (64−50)/64 = 21.875: (175 + 21.875)/3 = 65.625.
        //           gpu-empty GPU 2/8 = 25, CPU 21.875: (50 + 21.875)/3 = 23.958333.
        assert_eq!(place(&mut c, "nvidia.com/gpu=1,CPU=2"), "gpu-full");
        // CPU work: cpu-idle (32−6)/32 = 81.25 beats cpu-busy 18.75 and the GPU nodes' 21.875.
        assert_eq!(place(&mut c, "CPU=2"), "cpu-idle");
        // The explained totals are raw × 10.
        let profile = Profile {
            scorers: vec![ScorerSpec::ResourceStrategyFit {
                weight: 10,
                resources: gpu_pack_cpu_spread(2, 1),
            }],
            filters: Vec::new(),
            preferences: Vec::new(),
            pick: Pick::TopK,
        };
        let config = SchedulerConfig { profile, ..SchedulerConfig::default() };
        let req = request(&mut c, "nvidia.com/gpu=1,CPU=2", Strategy::Default);
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let (decision, explanation) =
            Scheduler::new(config).place_explained(&mut c, &req, &mut rng);
        assert!(matches!(decision, Decision::Placed(_)));
        let totals: Vec<Option<String>> =
            explanation.attempts[0].nodes.iter().map(|n| n.total.map(points_text)).collect();
        let expected = [Some("239.58333"), Some("656.25"), None, None];
        assert_eq!(totals, expected.map(|t| t.map(str::to_string)));
    }
}
