//! Scheduler profiles: which scorers rank nodes (with which weights), which extra filters and
//! preferences run, and how the best-ranked nodes are picked, on top of the stages every
//! strategy needs. The stages themselves are in [`scorers`](super::scorers) (and the extra
//! filter in [`sra`](super::scorers::sra)); a profile says which of them a scheduler runs.
//!
//! The default profile is the hybrid pack-then-spread policy with weight 1 on clusters without
//! GPUs ([`Profile::default`] says what it does with GPUs). A profile file (read by
//! `berth-api`'s `spec::profile`; the format is in `docs/file-formats.md`) replaces it with its
//! own stages, each a [`ScorerSpec`], [`FilterSpec`] or [`PreferenceSpec`].
//!
//! A profile also says how the best-ranked nodes are picked among ([`Pick`]): at random among
//! the top k (the default, Ray's hybrid policy), or the best one with ties broken at random
//! (Kubernetes' choice, and what bin packing needs).
//!
//! Scorers rank nodes only in attempts that pick by score (DEFAULT and the strategies that
//! rank like it; not SPREAD, RANDOM or the one node of node affinity); filters run in every
//! attempt. A scorer's *plugin weight* (Volcano's
//! `resourceStrategyFitWeight`, `sra.retention.weight`) is its [`Weighted::weight`]: `berth
//! explain` then shows the raw score (0..=100), the weight and their product, and the product
//! is the plugin's number.

use std::sync::Arc;

use super::scorers::best_fit::BestFit;
use super::scorers::cpu_short::CpuShort;
pub use super::scorers::fragmentation::Measure;
use super::scorers::fragmentation::{Fragmentation, Shape, ShapeTable};
use super::scorers::large_hosts::LargeHosts;
use super::scorers::packing::SharePacking;
use super::scorers::sra::{Proportion, Proportional, Retention};
use super::scorers::strategy_fit::{ResourceStrategy, ResourceStrategyFit};
use super::scorers::{has_gpu_nodes, HybridUtilization, ResourceRules};
use super::stage::{DecisionContext, Filter, Preference, Score, Scorer, Weighted};
use super::SchedulerConfig;
use crate::cluster::Cluster;
use crate::node::Node;
use crate::quantity::Quantity;
use crate::resource::ResourceId;

/// A scheduler profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    /// The scorers, in the order `berth explain` lists them.
    pub scorers: Vec<ScorerSpec>,
    /// Filters added to the standard ones.
    pub filters: Vec<FilterSpec>,
    /// Preferences added after the standard ones (each a tier below those before it).
    pub preferences: Vec<PreferenceSpec>,
    /// How the best-ranked nodes are picked among.
    pub pick: Pick,
}

/// One extra preference of a profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreferenceSpec {
    /// [`LargeHosts`]: while few nodes could take the largest learned shapes, other work
    /// prefers the rest (`keepLargeHosts`).
    LargeHosts,
}

/// How an attempt that ranks nodes (DEFAULT and the strategies that rank like it) picks among
/// the nodes of the best tier.
///
/// Assumptions: picking at random among several good nodes spreads concurrent decisions and
/// hides small differences in score; packing, by contrast, needs the best node every time.
/// Rules: `TopK` and `TopKFraction` rank by total (ties: the caller's node, then node order)
/// and pick uniformly among the first `k = max(1, ⌊alive × fraction⌋)`; `Best` picks uniformly among the nodes
/// whose total equals the best total. Both draw from the seeded RNG, so the same inputs give
/// the same pick, and the caller's node wins when it ties for best.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pick {
    /// Random among the best `k`, with the scheduler's `top_k_fraction`.
    #[default]
    TopK,
    /// Random among the best `k`, with the profile's own fraction of alive nodes, (0, 1].
    TopKFraction(Quantity),
    /// A node with the best total; ties at random.
    Best,
    /// `Best` on a cluster with GPU nodes, `TopK` on one without: the default profile's (see
    /// [`Profile::default`]).
    Auto,
}

impl Pick {
    /// The pick on `cluster`: [`Pick::Auto`] resolved, the others as they are.
    pub fn on(self, cluster: &Cluster) -> Pick {
        match self {
            Pick::Auto if has_gpu_nodes(cluster) => Pick::Best,
            Pick::Auto => Pick::TopK,
            pick => pick,
        }
    }
}

/// One scorer of a profile and its weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScorerSpec {
    /// [`HybridUtilization`] with the config's `spread_threshold`.
    Hybrid {
        /// The scorer's weight.
        weight: u32,
    },
    /// [`ResourceStrategyFit`]: pack or spread per resource.
    ResourceStrategyFit {
        /// The plugin weight, `resourceStrategyFitWeight`.
        weight: u32,
        /// The strategy and weight of each resource (or `prefix/*` family) that counts.
        resources: ResourceRules<ResourceStrategy>,
    },
    /// [`Retention`]: keep off nodes with scarce resources the request does not ask for.
    Retention {
        /// The policy weight, `sra.retention.weight`.
        weight: u32,
        /// Each scarce resource (exact names) and its weight, `sra.retention.<name>`.
        scarce: ResourceRules<u32>,
    },
    /// [`BestFit`]: the least free left after placing, over the listed resources.
    BestFit {
        /// The scorer's weight, `bestFit.weight`.
        weight: u32,
        /// Each resource counted (exact names) and its weight, `bestFit.resources`.
        resources: ResourceRules<u32>,
    },
    /// Another scorer, on clusters of one kind only (the default profile's; see
    /// [`Profile::default`]).
    Only {
        /// The clusters it applies on.
        clusters: Clusters,
        /// The scorer.
        scorer: Box<ScorerSpec>,
    },
    /// [`Fragmentation`]: the least growth of expected GPU fragmentation (`fragmentation`) or
    /// of lost capacity (`capacity`).
    Fragmentation {
        /// The scorer's weight, `fragmentation.weight` or `capacity.weight`.
        weight: u32,
        /// The workload's typical shapes, `….shapes`.
        shapes: Shapes,
        /// What grows.
        measure: Measure,
    },
    /// [`SharePacking`]: shares of one GPU where the partly used GPUs' free parts stay most
    /// varied (`packing`).
    Packing {
        /// The scorer's weight, `packing.weight`.
        weight: u32,
    },
}

/// Which clusters a [`ScorerSpec::Only`] scorer applies on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clusters {
    /// Clusters where some alive node has GPUs.
    WithGpus,
    /// Clusters where no alive node has GPUs.
    WithoutGpus,
    /// Requests with GPUs (`gpu_work`) or without, on clusters with GPUs whose free CPU is a
    /// smaller share of their CPU than nine tenths of the share their free GPU is of their
    /// GPUs (the CPU runs out first; see `cpu_short`). While that holds, the scorer sees the
    /// requests of both kinds (a learning one learns their shapes) and ranks those of its own.
    CpuShort {
        /// True: requests with GPUs; false: requests without.
        gpu_work: bool,
    },
}

/// Where the fragmentation scorer's typical shapes come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shapes {
    /// Supplied by whoever runs the scheduler, from the demand it observes
    /// ([`Profile::set_observed_shapes`]); until then the scorer has none and ranks every node
    /// alike.
    Observed,
    /// Given in the profile.
    Given(Vec<Shape>),
    /// Learned by the scorer from the requests it ranks nodes for
    /// ([`fragmentation::learn`](super::scorers::fragmentation::learn)): the default profile's.
    Learned,
}

/// One extra filter of a profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FilterSpec {
    /// [`Proportional`]: keep CPU and memory free for idle primary resources.
    Proportional {
        /// Each primary resource (exact names) and what to keep per idle unit.
        primaries: ResourceRules<Proportion>,
    },
}

/// The weight of the fragmentation scorer in the default profile on clusters with GPUs.
pub const DEFAULT_FRAGMENTATION_WEIGHT: u32 = 30;

/// The weight of the capacity scorer beside it: a fifth, so that GPUs stranded behind used-up
/// CPU count without outweighing the FGD measure. Measurements: `docs/placement-log.md`.
pub const DEFAULT_CAPACITY_WEIGHT: u32 = 6;

/// The weight of the share packing scorer in the default profile on clusters with GPUs: the
/// fragmentation scorer's, which gained most where shares are many. Measurements: `docs/placement-log.md`.
pub const DEFAULT_PACKING_WEIGHT: u32 = 30;

/// The weight of the balance scorer in the default profile on clusters with GPUs: high enough
/// to lift the multi-GPU workloads above FGD, low enough to stay at or above best fit early on.
/// Measurements: `docs/placement-log.md`.
pub const DEFAULT_BALANCE_WEIGHT: u32 = 50;

/// The weight of best fit on CPU in the default profile, for requests without GPUs while the
/// cluster's CPU runs out before its GPUs ([`Clusters::CpuShort`]): packing CPU-only work by CPU
/// keeps the large CPU holes that CPU-heavy GPU requests need. Measurements: `docs/placement-log.md`.
pub const DEFAULT_CPU_FIT_WEIGHT: u32 = 20;

/// The weight of the CPU-fragment scorer in the default profile, for requests with GPUs while
/// the cluster's CPU runs out before its GPUs ([`Clusters::CpuShort`]): the lowest weight that
/// kept the default at or above best fit on the CPU-heavy workloads. Measurements: `docs/placement-log.md`.
pub const DEFAULT_CPU_FRAGMENT_WEIGHT: u32 = 100;

impl Default for Profile {
    /// Berth's default placement (described for users in `docs/profiles.md`).
    ///
    /// Assumptions: on a cluster without GPUs, spreading after a pack threshold is what
    /// services want (Ray's hybrid policy); on a cluster with GPUs, the costly failure is a
    /// GPU request that finds the free GPUs scattered in pieces no node can serve, and work
    /// arrives in a handful of typical shapes. Rules: without GPU nodes, the hybrid score alone,
    /// random among the best 20%; with GPU nodes, `fragmentation` (weight 30) and `capacity`
    /// (weight 6) with shapes learned from the requests ranked so far, `balance` (weight 50,
    /// same shapes) for requests with GPUs, `packing` (weight 30) for shares of one GPU, and
    /// the best node every time, ties at random ([`Pick::Auto`]); above the scores, the
    /// preference [`LargeHosts`]: while few nodes are left that could take the largest shapes
    /// seen, other requests go elsewhere; and while the cluster's CPU runs out before its GPUs
    /// ([`Clusters::CpuShort`]), best fit on CPU (weight 20) for requests without GPUs and
    /// `cpu-fragmentation` (weight 100, same shapes) for requests with GPUs. No best fit
    /// between nodes they rank alike: it cost placement quality. Behaviour: more GPUs allocated
    /// than FGD on the published traces, without describing the workload
    /// (`docs/placement-quality.md`; why each weight: `docs/placement-log.md`); a cluster that gains
    /// its first GPU node switches.
    fn default() -> Self {
        let on_gpus =
            |scorer| ScorerSpec::Only { clusters: Clusters::WithGpus, scorer: Box::new(scorer) };
        Profile {
            scorers: vec![
                ScorerSpec::Only {
                    clusters: Clusters::WithoutGpus,
                    scorer: Box::new(ScorerSpec::Hybrid { weight: 1 }),
                },
                on_gpus(ScorerSpec::Fragmentation {
                    weight: DEFAULT_FRAGMENTATION_WEIGHT,
                    shapes: Shapes::Learned,
                    measure: Measure::Fragment,
                }),
                on_gpus(ScorerSpec::Fragmentation {
                    weight: DEFAULT_CAPACITY_WEIGHT,
                    shapes: Shapes::Learned,
                    measure: Measure::LostCapacity,
                }),
                on_gpus(ScorerSpec::Fragmentation {
                    weight: DEFAULT_BALANCE_WEIGHT,
                    shapes: Shapes::Learned,
                    measure: Measure::Balance,
                }),
                on_gpus(ScorerSpec::Packing { weight: DEFAULT_PACKING_WEIGHT }),
                ScorerSpec::Only {
                    clusters: Clusters::CpuShort { gpu_work: true },
                    scorer: Box::new(ScorerSpec::Fragmentation {
                        weight: DEFAULT_CPU_FRAGMENT_WEIGHT,
                        shapes: Shapes::Learned,
                        measure: Measure::CpuFragment,
                    }),
                },
                ScorerSpec::Only {
                    clusters: Clusters::CpuShort { gpu_work: false },
                    scorer: Box::new(ScorerSpec::BestFit {
                        weight: DEFAULT_CPU_FIT_WEIGHT,
                        resources: ResourceRules::new([("CPU".to_string(), 1)]),
                    }),
                },
            ],
            filters: Vec::new(),
            preferences: vec![PreferenceSpec::LargeHosts],
            pick: Pick::Auto,
        }
    }
}

impl Profile {
    /// A profile of `scorers` alone: no extra filter, the default pick.
    pub fn of_scorers(scorers: Vec<ScorerSpec>) -> Profile {
        Profile { scorers, filters: Vec::new(), preferences: Vec::new(), pick: Pick::TopK }
    }

    /// Gives every fragmentation scorer whose shapes are [`Shapes::Observed`] these shapes
    /// (the simulator's from the trace, the head's from the demand it sees).
    pub fn set_observed_shapes(&mut self, observed: &[Shape]) {
        for spec in &mut self.scorers {
            if let ScorerSpec::Fragmentation { shapes: shapes @ Shapes::Observed, .. } = spec {
                *shapes = Shapes::Given(observed.to_vec());
            }
        }
    }

    /// True when some scorer reads [`Prepared::largest_total`](super::stage::Prepared).
    pub fn needs_largest_total(&self) -> bool {
        fn reads(spec: &ScorerSpec) -> bool {
            match spec {
                ScorerSpec::BestFit { .. } => true,
                ScorerSpec::Only { scorer, .. } => reads(scorer),
                _ => false,
            }
        }
        self.scorers.iter().any(reads)
    }

    /// Filters the profile adds to the standard ones (the runner orders static before dynamic).
    pub fn filters(&self) -> Vec<Box<dyn Filter>> {
        self.filters
            .iter()
            .map(|spec| -> Box<dyn Filter> {
                match spec {
                    FilterSpec::Proportional { primaries } => {
                        Box::new(Proportional { primaries: primaries.clone() })
                    }
                }
            })
            .collect()
    }

    /// Preferences the profile adds to the standard ones, in order.
    pub fn preferences(&self) -> Vec<Box<dyn Preference>> {
        self.preferences
            .iter()
            .map(|spec| -> Box<dyn Preference> {
                match spec {
                    PreferenceSpec::LargeHosts => Box::new(LargeHosts::default()),
                }
            })
            .collect()
    }

    /// The weighted scorers the DEFAULT strategy ranks nodes by.
    pub fn scorers(&self, config: &SchedulerConfig) -> Vec<Weighted> {
        self.scorers.iter().map(|spec| spec.weighted(config)).collect()
    }
}

impl ScorerSpec {
    /// The scorer and its weight.
    fn weighted(&self, config: &SchedulerConfig) -> Weighted {
        match self {
            ScorerSpec::Only { clusters, scorer } => {
                let inner = scorer.weighted(config);
                let short = matches!(clusters, Clusters::CpuShort { .. }).then(CpuShort::default);
                Weighted {
                    scorer: Box::new(OnClusters {
                        clusters: *clusters,
                        short,
                        scorer: inner.scorer,
                    }),
                    weight: inner.weight,
                }
            }
            ScorerSpec::Hybrid { weight } => Weighted {
                scorer: Box::new(HybridUtilization { spread_threshold: config.spread_threshold }),
                weight: *weight,
            },
            ScorerSpec::ResourceStrategyFit { weight, resources } => Weighted {
                scorer: Box::new(ResourceStrategyFit { resources: resources.clone() }),
                weight: *weight,
            },
            ScorerSpec::Retention { weight, scarce } => {
                Weighted { scorer: Box::new(Retention::new(scarce.clone())), weight: *weight }
            }
            ScorerSpec::BestFit { weight, resources } => {
                Weighted { scorer: Box::new(BestFit::new(resources.clone())), weight: *weight }
            }
            ScorerSpec::Fragmentation { weight, shapes, measure } => {
                let scorer = match shapes {
                    Shapes::Observed => Fragmentation::new(Arc::default(), *measure),
                    Shapes::Given(shapes) => {
                        Fragmentation::new(Arc::new(ShapeTable::new(shapes)), *measure)
                    }
                    Shapes::Learned => Fragmentation::learning(*measure),
                };
                Weighted { scorer: Box::new(scorer), weight: *weight }
            }
            ScorerSpec::Packing { weight } => {
                Weighted { scorer: Box::new(SharePacking::default()), weight: *weight }
            }
        }
    }
}

/// A scorer that applies on clusters of one kind only ([`ScorerSpec::Only`]); `berth explain`
/// lists it under the scorer's own name.
struct OnClusters {
    clusters: Clusters,
    /// For [`Clusters::CpuShort`]: the cluster's free and total CPU and GPU, kept.
    short: Option<CpuShort>,
    scorer: Box<dyn Scorer>,
}

impl Scorer for OnClusters {
    fn name(&self) -> &'static str {
        self.scorer.name()
    }

    fn applies(&self, cx: &DecisionContext<'_>) -> bool {
        let holds = match (self.clusters, &self.short) {
            (Clusters::WithGpus, _) => has_gpu_nodes(cx.cluster),
            (Clusters::WithoutGpus, _) => !has_gpu_nodes(cx.cluster),
            (Clusters::CpuShort { gpu_work }, Some(short)) => {
                // The scorer sees every request while the CPU runs short, of either kind, and
                // ranks those of its own: a learning one counts the other kind's shapes too
                // (the CPU fragment is mostly about the holes CPU-only shapes need).
                return short.holds(cx.cluster)
                    && self.scorer.applies(cx)
                    && cx.request.resources().get(ResourceId::GPU).is_zero() != gpu_work;
            }
            (Clusters::CpuShort { .. }, None) => false,
        };
        holds && self.scorer.applies(cx)
    }

    fn score(&self, cx: &DecisionContext<'_>, node: &Node) -> Score {
        self.scorer.score(cx, node)
    }

    // Which clusters it applies on is decided once per decision, not per node.
    fn node_and_request_only(&self) -> bool {
        self.scorer.node_and_request_only()
    }

    fn wrapped(&self) -> Option<&dyn Scorer> {
        Some(self.scorer.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scorers of `profile` that apply to `ask` on `cluster`, by name.
    fn applying(profile: &Profile, cluster: &mut Cluster, ask: &str) -> Vec<&'static str> {
        let req = crate::testutil::request(cluster, ask, crate::request::Strategy::Default);
        let prepared = super::super::stage::Prepared::default();
        let cx = DecisionContext { cluster, request: &req, prepared: &prepared };
        let scorers = profile.scorers(&SchedulerConfig::default());
        scorers.iter().filter(|w| w.scorer.applies(&cx)).map(|w| w.scorer.name()).collect()
    }

    fn cluster_of(nodes: &[(&str, &str)]) -> Cluster {
        let mut c = Cluster::new(crate::resource::ResourceRegistry::default());
        for (id, spec) in nodes {
            let total = crate::testutil::resources(c.registry_mut(), spec);
            c.add_node(crate::node::NodeId::new(id).unwrap(), total).unwrap();
        }
        c
    }

    #[test]
    fn the_default_profile_is_hybrid_without_gpus_and_fragmentation_aware_with() {
        let profile = Profile::default();
        assert!(profile.filters().is_empty());
        assert_eq!(profile.pick, Pick::Auto);
        assert!(profile.needs_largest_total(), "best fit on CPU, while the CPU runs short");

        // CPU only: the hybrid score alone, random among the top k, as before GPU clusters
        // had a default of their own.
        let mut cpu_only = cluster_of(&[("a", "CPU=8"), ("b", "CPU=16")]);
        assert_eq!(applying(&profile, &mut cpu_only, "CPU=1"), ["hybrid_utilization"]);
        assert_eq!(profile.pick.on(&cpu_only), Pick::TopK);

        // One GPU node: the fragmentation-aware scorers (their shapes learned from this very
        // request on), the best node every time; also for CPU-only requests. Balance for
        // requests with GPUs, share packing for shares of one GPU only.
        let mut gpus = cluster_of(&[("a", "CPU=8"), ("g", "CPU=16,GPU=4")]);
        let share = applying(&profile, &mut gpus, "CPU=1,GPU=0.5");
        assert_eq!(share, ["fragmentation", "capacity", "balance", "packing"]);
        let whole = applying(&profile, &mut gpus, "CPU=1,GPU=2");
        assert_eq!(whole, ["fragmentation", "capacity", "balance"]);
        assert_eq!(applying(&profile, &mut gpus, "CPU=1"), ["fragmentation", "capacity"]);
        assert_eq!(profile.pick.on(&gpus), Pick::Best);

        // Once the CPU runs out before the GPUs (half the CPU taken, no GPU), work without
        // GPUs is also packed by CPU, and GPU work ranked by the CPU fragment too.
        let half = crate::testutil::resources(gpus.registry_mut(), "CPU=12");
        gpus.reserve(crate::testutil::index(&gpus, "g"), &half).unwrap();
        let cpu = applying(&profile, &mut gpus, "CPU=1");
        assert_eq!(cpu, ["fragmentation", "capacity", "best_fit"]);
        let whole = applying(&profile, &mut gpus, "CPU=1,GPU=1");
        assert_eq!(whole, ["fragmentation", "capacity", "balance", "cpu-fragmentation"]);

        // And a preference keeping whole the nodes that can take the largest shapes (none on a CPU-only cluster).
        assert_eq!(profile.preferences, [PreferenceSpec::LargeHosts]);
        let names: Vec<_> = profile.preferences().iter().map(|p| p.name()).collect();
        assert_eq!(names, ["keep_large_hosts"]);

        // A profile of one's own keeps its pick whatever the cluster.
        assert_eq!(Pick::TopK.on(&gpus), Pick::TopK);
        assert_eq!(Pick::Best.on(&cpu_only), Pick::Best);
    }
}
