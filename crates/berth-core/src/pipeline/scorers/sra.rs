//! Scarce Resource Avoidance (seed 001): keep work that does not need a scarce resource (GPUs)
//! off the nodes that have it, by score ([`Retention`]) or by rule ([`Proportional`]).
//!
//! ## Retention (a scorer)
//!
//! Assumptions: some resources are scarce, some more than others; a CPU task on a GPU node
//! takes CPU and memory that a GPU task there will need, so GPU work ends up pending beside
//! idle GPUs.
//!
//! Rules: the profile lists scarce resources with weights (`sra.retention.<name>`, the higher
//! the scarcer) and a policy weight (`sra.retention.weight`). A node that cannot hold the
//! request even when empty scores 0. Otherwise the node scores
//! `100 × (Σ weights of the scarce resources the node does NOT have) / (Σ all scarce weights)`
//! points, exactly (to a millionth of a point, see [`Score::from_ratio`]), and the runner
//! multiplies that by the policy weight: the seed's `MaxNodeScore × retentionWeight × missing
//! / weightSum`. A node "has" a resource when its total is above 0, whether the request asks
//! for that resource or not.
//!
//! Behaviour: nodes without scarce resources score highest, nodes with the scarcest lowest;
//! it is a score, so a request still lands on a GPU node when no other node can take it.
//!
//! ## Proportional (a filter)
//!
//! Assumptions: a GPU is useless without CPU and memory beside it; a node should keep enough
//! free for the GPUs that are idle on it.
//!
//! Rules: the profile names primary resources and, for each, the CPUs (`<name>.cpu`) and GB
//! of memory (`<name>.memory`, GB = 10^9 bytes, as Volcano counts it and as the `G` suffix
//! writes it) to keep free per idle unit. A request that asks for any primary resource always
//! passes. Any other request fails on a node when, for some primary resource idle on the
//! node, placing it would leave `free CPU − asked CPU < idle × cpu` or `free memory − asked
//! memory < idle × memory`. Each primary resource is checked on its own (as Volcano does),
//! CPU before memory, primaries in resource order; the first shortfall is the reason. The
//! comparison is exact; the kept and short quantities in the reason are rounded up to 0.0001.
//!
//! Behaviour: the filter is dynamic (it reads free resources): failing it makes the node busy,
//! not unfit, and the request pending while it fails everywhere. A request that would fail
//! it even on an empty node is reported pending too; that is the price of one kind per filter.

use super::super::stage::{DecisionContext, Filter, FilterKind, Score, Scorer, Verdict};
use super::ResourceRules;
use crate::diagnosis::Reason;
use crate::node::Node;
use crate::quantity::{Quantity, UNITS_PER_WHOLE};
use crate::resource::ResourceId;

/// What [`Proportional`] keeps free per idle unit of a primary resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proportion {
    /// CPUs per idle unit, `<primary>.cpu`.
    pub cpu: Quantity,
    /// Memory per idle unit in GB of 10^9 bytes (the `G` suffix, as Volcano counts it),
    /// `<primary>.memory`.
    pub memory_gb: Quantity,
}

/// Bytes in the GB of [`Proportion::memory_gb`].
pub const BYTES_PER_GB: i64 = 1_000_000_000;

/// The retention scorer. See the module documentation.
#[derive(Clone, Debug)]
pub struct Retention {
    scarce: ResourceRules<u32>,
    /// Σ of the scarce weights, computed once.
    weight_sum: u64,
}

impl Retention {
    /// A scorer for these scarce resources and weights (exact names).
    pub fn new(scarce: ResourceRules<u32>) -> Retention {
        let weight_sum = scarce.iter().map(|(_, weight)| u64::from(*weight)).sum();
        Retention { scarce, weight_sum }
    }
}

impl Scorer for Retention {
    fn name(&self) -> &'static str {
        "sra_retention"
    }

    fn score(&self, cx: &DecisionContext<'_>, node: &Node) -> Score {
        if node.total_shortfall(cx.request.resources()).is_some() {
            return Score::MIN;
        }
        let registry = cx.cluster.registry();
        // Names are unique per registry, so each scarce resource is counted at most once.
        let present: u64 = node
            .total()
            .iter()
            .filter_map(|(resource, _)| self.scarce.get(registry.name(resource)))
            .map(|weight| u64::from(*weight))
            .sum();
        retention_score(self.weight_sum, present)
    }
}

/// `100 × (weight_sum − present) / weight_sum` points; 100 when nothing is scarce (every node
/// is then equally free of scarce resources).
pub fn retention_score(weight_sum: u64, present: u64) -> Score {
    if weight_sum == 0 {
        return Score::MAX;
    }
    let missing = weight_sum.saturating_sub(present);
    Score::from_ratio(u128::from(missing), u128::from(weight_sum))
}

/// The proportional filter. See the module documentation.
#[derive(Clone, Debug)]
pub struct Proportional {
    /// What to keep free per idle unit of each primary resource (exact names).
    pub primaries: ResourceRules<Proportion>,
}

impl Filter for Proportional {
    fn name(&self) -> &'static str {
        "sra_proportional"
    }

    fn kind(&self) -> FilterKind {
        FilterKind::Dynamic
    }

    fn check(&self, cx: &DecisionContext<'_>, node: &Node) -> Verdict {
        let registry = cx.cluster.registry();
        let request = cx.request.resources();
        if request.iter().any(|(resource, _)| self.primaries.get(registry.name(resource)).is_some())
        {
            return Verdict::Fit;
        }
        let free = node.available();
        for (primary, idle) in free.iter() {
            let Some(proportion) = self.primaries.get(registry.name(primary)) else {
                continue;
            };
            let secondaries = [
                (ResourceId::CPU, proportion.cpu, 1),
                (ResourceId::MEMORY, proportion.memory_gb, i128::from(BYTES_PER_GB)),
            ];
            for (resource, per_unit, scale) in secondaries {
                let asked = request.get(resource);
                if let Some((keep, short)) =
                    kept_short(free.get(resource), asked, idle, per_unit, scale)
                {
                    return Verdict::Unfit(Reason::KeptForPrimary {
                        primary,
                        idle,
                        resource,
                        keep,
                        short,
                    });
                }
            }
        }
        Verdict::Fit
    }
}

/// Whether `free − asked < idle × per_unit × scale`, exactly; if so, the quantity kept and the
/// shortfall, each rounded up to the resolution (0.0001) and capped at [`Quantity::MAX`].
///
/// `idle × per_unit` is a product of two fixed-point numbers, so it is compared in units of
/// 10^-8 (`free − asked` times 10^4), where it is exact; products that overflow `i128`
/// saturate, which can only make the kept quantity larger than any free quantity, as it is.
pub fn kept_short(
    free: Quantity,
    asked: Quantity,
    idle: Quantity,
    per_unit: Quantity,
    scale: i128,
) -> Option<(Quantity, Quantity)> {
    let resolution = i128::from(UNITS_PER_WHOLE);
    let left = (i128::from(free.units()) - i128::from(asked.units())) * resolution;
    let keep =
        i128::from(idle.units()).saturating_mul(i128::from(per_unit.units())).saturating_mul(scale);
    if left >= keep {
        return None;
    }
    let short = keep.saturating_sub(left);
    let to_quantity = |scaled: i128| {
        let units = scaled / resolution + i128::from(scaled % resolution != 0);
        Quantity::from_units(units.min(i128::from(Quantity::MAX.units())) as i64)
    };
    Some((to_quantity(keep), to_quantity(short)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnosis::ReasonKind;
    use crate::pipeline::profile::{FilterSpec, Pick, Profile, ScorerSpec};
    use crate::pipeline::stage::{points_text, DecisionContext, Prepared};
    use crate::pipeline::{Decision, Scheduler, SchedulerConfig};
    use crate::request::Strategy;
    use crate::testutil::{cluster, request, resources};
    use crate::Cluster;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).unwrap()
    }

    fn rules<T: Copy>(entries: &[(&str, T)]) -> ResourceRules<T> {
        ResourceRules::new(entries.iter().map(|(name, value)| (name.to_string(), *value)))
    }

    /// The seed's three nodes.
    fn seed_retention_cluster() -> Cluster {
        cluster(&[
            ("node1", "CPU=32,memory=64Gi"),
            ("node2", "CPU=16,memory=32Gi,nvidia.com/t4=10"),
            ("node3", "CPU=16,memory=32Gi,nvidia.com/t4=5,nvidia.com/a10=10"),
        ])
    }

    /// The seed's tasks.
    const CPU_TASK_0: &str = "CPU=2,memory=4Gi";
    const GPU_TASK_0: &str = "CPU=2,memory=4Gi,nvidia.com/t4=2";
    const GPU_TASK_1: &str = "CPU=2,memory=4Gi,nvidia.com/t4=1,nvidia.com/a10=2";

    /// `sra.retention.weight: 2`, `nvidia.com/t4: 1`, `nvidia.com/a10: 1`.
    fn seed_retention_profile() -> Profile {
        Profile {
            scorers: vec![ScorerSpec::Retention {
                weight: 2,
                scarce: rules(&[("nvidia.com/t4", 1), ("nvidia.com/a10", 1)]),
            }],
            filters: Vec::new(),
            preferences: Vec::new(),
            pick: Pick::TopK,
        }
    }

    #[test]
    fn seed_retention_table() {
        // (task, node, score result (retention)): the seed's table, row by row.
        let table = [
            (CPU_TASK_0, "node1", 200),
            (CPU_TASK_0, "node2", 100),
            (CPU_TASK_0, "node3", 0),
            (GPU_TASK_0, "node1", 0),
            (GPU_TASK_0, "node2", 100),
            (GPU_TASK_0, "node3", 0),
            (GPU_TASK_1, "node1", 0),
            (GPU_TASK_1, "node2", 0),
            (GPU_TASK_1, "node3", 0),
        ];
        let mut c = seed_retention_cluster();
        let scorers = seed_retention_profile().scorers(&SchedulerConfig::default());
        let [weighted] = scorers.as_slice() else { panic!("one scorer") };
        assert_eq!(weighted.scorer.name(), "sra_retention");
        for (task, node, expected) in table {
            let req = request(&mut c, task, Strategy::Default);
            let cx = DecisionContext { cluster: &c, request: &req, prepared: &Prepared::default() };
            let node = c.node(c.index_of(node).unwrap()).unwrap();
            let score = weighted.scorer.score(&cx, node);
            let total = u64::from(score.micros()) * u64::from(weighted.weight);
            assert_eq!(total, expected * u64::from(Score::UNIT), "{task} on {}", node.id());
        }
    }

    /// Runs the seed's task through the pipeline with the seed's profile: per node, the total
    /// or the first rejection reason's code.
    fn explained(task: &str) -> (Vec<String>, Option<String>) {
        let mut c = seed_retention_cluster();
        let config = SchedulerConfig { profile: seed_retention_profile(), ..Default::default() };
        let req = request(&mut c, task, Strategy::Default);
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let (decision, explanation) =
            Scheduler::new(config).place_explained(&mut c, &req, &mut rng);
        let rows = explanation.attempts[0]
            .nodes
            .iter()
            .map(|n| match n.total {
                Some(total) => {
                    let s = &n.scores[0];
                    assert_eq!(u64::from(s.raw.micros()) * u64::from(s.weight), total);
                    format!("{}×{}={}", s.raw, s.weight, points_text(total))
                }
                None => n.reasons().next().unwrap().kind().code(&c),
            })
            .collect();
        let placed = match decision {
            Decision::Placed(a) => Some(c.node(a.node()).unwrap().id().to_string()),
            _ => None,
        };
        (rows, placed)
    }

    #[test]
    fn seed_retention_table_through_the_pipeline() {
        // Nodes that "don't meet the task request" (score 0 in the seed) are rejected by the
        // resources_total filter before any scorer runs; explain shows why instead of a 0.
        let cases = [
            (CPU_TASK_0, ["100×2=200", "50×2=100", "0×2=0"], "node1"),
            (GPU_TASK_0, ["insufficient_total:nvidia.com/t4", "50×2=100", "0×2=0"], "node2"),
            (
                GPU_TASK_1,
                ["insufficient_total:nvidia.com/t4", "insufficient_total:nvidia.com/a10", "0×2=0"],
                "node3",
            ),
        ];
        for (task, rows, placed) in cases {
            let (got, chosen) = explained(task);
            assert_eq!(got, rows, "{task}");
            assert_eq!(chosen.as_deref(), Some(placed), "{task}");
        }
    }

    #[test]
    fn retention_formula() {
        // (weight sum, weight of the scarce resources present, raw score)
        let cases = [
            (2, 0, "100"),
            (2, 1, "50"),
            (2, 2, "0"),
            (4, 1, "75"),
            (4, 3, "25"),
            (3, 1, "66.666667"), // 200/3, to the nearest millionth
            (3, 2, "33.333333"),
            (7, 1, "85.714286"), // 600/7 = 85.7142857…
            (0, 0, "100"),
            (1, 5, "0"),
        ];
        for (sum, present, expected) in cases {
            let expected = expected.to_string();
            assert_eq!(retention_score(sum, present).to_string(), expected, "{sum} {present}");
        }
        // Uneven weights: a10 three times as scarce as t4.
        let mut c = seed_retention_cluster();
        let scorer = Retention::new(rules(&[("nvidia.com/t4", 1), ("nvidia.com/a10", 3)]));
        let req = request(&mut c, CPU_TASK_0, Strategy::Default);
        let cx = DecisionContext { cluster: &c, request: &req, prepared: &Prepared::default() };
        let scores: Vec<Score> = c.nodes().map(|(_, n)| scorer.score(&cx, n)).collect();
        assert_eq!(scores, [Score::new(100), Score::new(75), Score::new(0)]);
    }

    fn proportional_profile() -> Profile {
        let gpu = Proportion { cpu: q("8"), memory_gb: q("8") };
        let v100 = Proportion { cpu: q("16"), memory_gb: q("16") };
        Profile {
            scorers: vec![ScorerSpec::Hybrid { weight: 1 }],
            filters: vec![FilterSpec::Proportional {
                primaries: rules(&[("nvidia.com/gpu", gpu), ("nvidia.com/v100-sxm2-16gb", v100)]),
            }],
            preferences: Vec::new(),
            pick: Pick::TopK,
        }
    }

    fn proportional_scheduler() -> Scheduler {
        Scheduler::new(SchedulerConfig { profile: proportional_profile(), ..Default::default() })
    }

    #[test]
    fn seed_proportional_worked_example() {
        // nodeC0-0: cpu 74, memory 128G, nvidia.com/gpu 8, all idle.
        let mut c = cluster(&[("nodeC0-0", "CPU=74,memory=128G,nvidia.com/gpu=8")]);
        let mut scheduler = proportional_scheduler();
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let pod = "CPU=8,memory=8G";
        let idle = |c: &Cluster| {
            let node = c.node(c.index_of("nodeC0-0").unwrap()).unwrap();
            node.available().display(c.registry()).to_string()
        };

        // single-1000-0: 74 − 8 = 66 ≥ 8 × 8 = 64 CPU, 128 − 8 = 120 ≥ 64 GB: placed.
        let req = request(&mut c, pod, Strategy::Default);
        assert!(matches!(scheduler.place(&mut c, &req, &mut rng), Decision::Placed(_)));
        assert_eq!(idle(&c), "{CPU: 66, memory: 120000000000, nvidia.com/gpu: 8}");

        // single-1000-1: 66 − 8 = 58 < 64 CPU: rejected, pending, and nothing changes.
        let (decision, explanation) = scheduler.place_explained(&mut c, &req, &mut rng);
        let Decision::Pending(diagnosis) = decision else { panic!("pending: {decision:?}") };
        let gpu = c.registry().lookup("nvidia.com/gpu").unwrap();
        assert_eq!(
            diagnosis.totals(),
            [(ReasonKind::KeptForPrimary { primary: gpu, resource: ResourceId::CPU }, 1)]
        );
        assert_eq!(
            diagnosis.describe(&c),
            "DEFAULT: 0/1 nodes can take it now: 1 would leave too little CPU for idle \
             nvidia.com/gpu"
        );
        let reason = explanation.attempts[0].nodes[0].reasons().next().unwrap();
        assert_eq!(
            reason,
            Reason::KeptForPrimary {
                primary: gpu,
                idle: q("8"),
                resource: ResourceId::CPU,
                keep: q("64"),
                short: q("6"),
            }
        );
        assert_eq!(
            reason.describe(&c),
            "leaves 58 CPU free, below the 64 CPU kept for 8 idle nvidia.com/gpu: 6 CPU short"
        );
        assert_eq!(reason.kind().code(&c), "kept_for_primary:CPU:nvidia.com/gpu");
        assert_eq!(idle(&c), "{CPU: 66, memory: 120000000000, nvidia.com/gpu: 8}");
    }

    /// The proportional filter's verdict on a fresh node `node` with `used` allocated.
    fn verdict(node: &str, used: &str, ask: &str) -> Option<String> {
        let mut c = cluster(&[("n", node)]);
        if !used.is_empty() {
            let set = resources(c.registry_mut(), used);
            c.reserve(c.index_of("n").unwrap(), &set).unwrap();
        }
        let req = request(&mut c, ask, Strategy::Default);
        let filters = proportional_profile().filters();
        let cx = DecisionContext { cluster: &c, request: &req, prepared: &Prepared::default() };
        assert_eq!(filters[0].kind(), FilterKind::Dynamic);
        match filters[0].check(&cx, c.node(c.index_of("n").unwrap()).unwrap()) {
            Verdict::Fit => None,
            Verdict::Unfit(reason) => Some(reason.describe(&c)),
        }
    }

    #[test]
    fn proportional_rules() {
        let node = "CPU=74,memory=128G,nvidia.com/gpu=8";
        // (node, allocated, request, rejection or None)
        let cases: [(&str, &str, &str, Option<&str>); 9] = [
            // Asks for the primary resource: always passes, whatever it leaves.
            (node, "", "CPU=70,memory=100G,nvidia.com/gpu=1", None),
            // Exactly the kept quantity is left: passes (the rule is "below").
            (node, "", "CPU=10,memory=64G", None),
            (
                node,
                "",
                "CPU=10.5",
                Some("leaves 63.5 CPU free, below the 64 CPU kept for 8 idle nvidia.com/gpu: 0.5 CPU short"),
            ),
            // CPU passes, memory does not: 128 − 65 = 63 GB left, 64 GB kept.
            (
                node,
                "",
                "CPU=1,memory=65G",
                Some("leaves 63000000000 memory free, below the 64000000000 memory kept for 8 idle nvidia.com/gpu: 1000000000 memory short"),
            ),
            // Fewer idle GPUs keep less: 6 GPUs allocated leave 2 idle, 16 CPU kept.
            (node, "nvidia.com/gpu=6", "CPU=58", None),
            (node, "nvidia.com/gpu=8", "CPU=74,memory=128G", None),
            // More than is free at all.
            (
                "CPU=4,nvidia.com/gpu=1",
                "",
                "CPU=5",
                Some("asks more CPU than is free, below the 8 CPU kept for 1 idle nvidia.com/gpu: 9 CPU short"),
            ),
            // Another primary with its own proportion: 2 idle v100 keep 32 CPU.
            (
                "CPU=40,memory=64G,nvidia.com/v100-sxm2-16gb=2",
                "",
                "CPU=9",
                Some("leaves 31 CPU free, below the 32 CPU kept for 2 idle nvidia.com/v100-sxm2-16gb: 1 CPU short"),
            ),
            // No primary resource on the node: nothing is kept.
            ("CPU=8,memory=8G", "", "CPU=8,memory=8G", None),
        ];
        for (node, used, ask, expected) in cases {
            assert_eq!(verdict(node, used, ask).as_deref(), expected, "{node} / {used} / {ask}");
        }
    }

    #[test]
    fn kept_quantities_are_exact_and_rounded_up_for_display() {
        // 0.5 idle × 0.0003 per unit = 0.00015 kept: 0.0001 free fails, short 0.00005 → 0.0001.
        assert_eq!(
            kept_short(q("0.0001"), Quantity::ZERO, q("0.5"), q("0.0003"), 1),
            Some((q("0.0002"), q("0.0001")))
        );
        assert_eq!(kept_short(q("0.0002"), Quantity::ZERO, q("0.5"), q("0.0003"), 1), None);
        // Huge proportions saturate rather than overflow, and still fail.
        let (keep, _) = kept_short(
            Quantity::MAX,
            Quantity::ZERO,
            Quantity::MAX,
            Quantity::MAX,
            i128::from(BYTES_PER_GB),
        )
        .unwrap();
        assert_eq!(keep, Quantity::MAX);
    }

    #[test]
    fn proportional_failure_is_pending_not_infeasible() {
        // Even a node that could never keep enough is reported busy: the filter is dynamic.
        let mut c = cluster(&[("n", "CPU=10,nvidia.com/gpu=8")]);
        let req = request(&mut c, "CPU=1", Strategy::Default);
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let decision = proportional_scheduler().place(&mut c, &req, &mut rng);
        assert!(matches!(decision, Decision::Pending(_)), "{decision:?}");
    }
}
