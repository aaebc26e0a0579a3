//! The benchmark's workloads, each driven through Berth's scheduler at steady state.
//!
//! Steady state: a workload keeps a bounded number of placements alive (about one per node),
//! releasing the oldest as it places a new one, so the cluster stays partly full and every
//! decision sees a realistic mix of busy and idle nodes. Only the scheduler call is timed.

use std::collections::VecDeque;
use std::time::Instant;

use berth_core::actors::{ActorAffinity, ActorId, ActorSpec, AffinityExpression, AffinityOperator};
use berth_core::cluster::Allocation;
use berth_core::labels::Labels;
use berth_core::pipeline::group::GroupDecision;
use berth_core::pipeline::profile::ScorerSpec;
use berth_core::placement_group::{BundleSet, GroupId, GroupSpec, GroupStrategy};
use berth_core::selector::{LabelSelector, Tolerations};
use berth_core::{
    Cluster, Decision, NodeIndex, Profile, Quantity, Request, ResourceId, ResourceRegistry,
    ResourceSet, Scheduler, SchedulerConfig, Strategy,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::cluster::{build, ZONES};

/// Actors placed before the anti-affinity workload starts.
pub const PLACED_ACTORS: usize = 100_000;
/// Services those actors belong to (five replicas each, in five zones).
pub const SERVICES: usize = PLACED_ACTORS / 5;

/// A benchmark workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// DEFAULT strategy, plain requests: 4 in 5 ask for 1 CPU and 2 GiB, 1 in 5 for 4 CPUs and
    /// a GPU.
    Default,
    /// Label selectors (zones and market type, accelerator models) with tolerations.
    Selector,
    /// Hard actor anti-affinity per zone, with 100,000 actors placed.
    AntiAffinity,
    /// Placement groups of 4 one-CPU bundles, STRICT_SPREAD.
    Groups,
    /// The default of a GPU cluster (fragmentation-aware, the placement-quality policy, with
    /// shapes learned from the requests) on a GPU mix: shares of a GPU, one and two GPUs, and
    /// CPU-only work, in turn.
    Fragmentation,
    /// Soft actor affinity to the replicas of a service (node level), with 100,000 actors
    /// placed.
    SoftAffinity,
}

impl Workload {
    /// Every workload, in report order.
    pub const ALL: [Workload; 6] = [
        Workload::Default,
        Workload::Selector,
        Workload::AntiAffinity,
        Workload::Groups,
        Workload::Fragmentation,
        Workload::SoftAffinity,
    ];

    /// The name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Default => "default",
            Workload::Selector => "selector-tolerations",
            Workload::AntiAffinity => "actor-anti-affinity",
            Workload::Groups => "strict-spread-groups",
            Workload::Fragmentation => "fragmentation-gpu",
            Workload::SoftAffinity => "soft-actor-affinity",
        }
    }

    /// The workload with this name.
    pub fn parse(name: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == name)
    }

    /// True when the workload starts with [`PLACED_ACTORS`] actors placed.
    pub fn places_actors(self) -> bool {
        matches!(self, Workload::AntiAffinity | Workload::SoftAffinity)
    }
}

/// Timings of one run.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    /// Nanoseconds of each timed decision.
    pub latencies_ns: Vec<u64>,
    /// How many decisions placed (the rest were pending or infeasible).
    pub placed: usize,
}

impl Timings {
    /// Decisions per second over the timed decisions.
    pub fn decisions_per_s(&self) -> f64 {
        let total: u64 = self.latencies_ns.iter().sum();
        if total == 0 {
            return 0.0;
        }
        self.latencies_ns.len() as f64 / (total as f64 / 1e9)
    }

    /// The `q` quantile (0..=1) of the latencies, in microseconds.
    pub fn quantile_us(&self, q: f64) -> f64 {
        let mut sorted = self.latencies_ns.clone();
        sorted.sort_unstable();
        if sorted.is_empty() {
            return 0.0;
        }
        let i = ((sorted.len() - 1) as f64 * q).round() as usize;
        sorted[i] as f64 / 1e3
    }
}

fn q(text: &str) -> Quantity {
    Quantity::parse(text).expect("benchmark amounts are valid")
}

fn set(pairs: &[(ResourceId, &str)]) -> ResourceSet {
    pairs.iter().map(|&(r, amount)| (r, q(amount))).collect()
}

/// The `d`-th plain request of the default and selector workloads.
pub fn resources_for(d: usize) -> ResourceSet {
    if d.is_multiple_of(5) {
        set(&[(ResourceId::CPU, "4"), (ResourceId::GPU, "1")])
    } else {
        set(&[(ResourceId::CPU, "1"), (ResourceId::MEMORY, "2Gi")])
    }
}

/// The `d`-th request of the fragmentation workload: half a GPU, one GPU, two GPUs, no GPU.
pub fn gpu_mix_for(d: usize) -> ResourceSet {
    match d % 4 {
        0 => set(&[(ResourceId::CPU, "1"), (ResourceId::GPU, "0.5")]),
        1 => set(&[(ResourceId::CPU, "4"), (ResourceId::GPU, "1")]),
        2 => set(&[(ResourceId::CPU, "8"), (ResourceId::GPU, "2")]),
        _ => set(&[(ResourceId::CPU, "1"), (ResourceId::MEMORY, "2Gi")]),
    }
}

/// The scheduler settings of `workload`. The fragmentation workload runs the default a GPU
/// cluster gets (fragmentation-aware, shapes learned from the requests); the others run the
/// hybrid score alone, the default of clusters without GPUs, so that they measure the
/// pipeline's mechanics (candidates, filters, indexes) the way they always have, although
/// the synthetic cluster has GPU nodes.
pub fn config_for(workload: Workload) -> SchedulerConfig {
    let profile = match workload {
        Workload::Fragmentation => Profile::default(),
        _ => Profile::of_scorers(vec![ScorerSpec::Hybrid { weight: 1 }]),
    };
    SchedulerConfig { profile, ..SchedulerConfig::default() }
}

/// The `d`-th request's label selector and tolerations in the selector workload.
pub fn selector_for(d: usize) -> (LabelSelector, Tolerations) {
    if d.is_multiple_of(5) {
        let selector =
            LabelSelector::parse([("berth.io/accelerator-type", "in(nvidia-a100,nvidia-h100)")]);
        let tolerations = Tolerations::parse([("reserved", "exists()")]);
        (selector.expect("valid"), tolerations.expect("valid"))
    } else {
        let zones = format!("in(z{},z{},z{})", d % ZONES, (d + 3) % ZONES, (d + 6) % ZONES);
        let selector = LabelSelector::parse([
            ("berth.io/availability-zone", zones.as_str()),
            ("berth.io/market-type", "spot"),
        ]);
        (selector.expect("valid"), Tolerations::default())
    }
}

/// The service of the `d`-th anti-affinity request.
pub fn service_for(d: usize) -> String {
    format!("svc-{}", d % SERVICES)
}

/// The zones the five placed replicas of service `k` run in.
pub fn replica_zones(k: usize) -> impl Iterator<Item = usize> {
    (0..5).map(move |j| (k + 2 * j) % ZONES)
}

/// Places the actors the anti-affinity workload starts with, without resources (the index is
/// what the workload measures): five replicas of each service, in five zones.
pub fn place_actors(cluster: &mut Cluster, nodes: usize) {
    let per_zone = (nodes / ZONES).max(1);
    for k in 0..SERVICES {
        for (j, zone) in replica_zones(k).enumerate() {
            let node = NodeIndex((zone + ZONES * ((k + j) % per_zone)) as u32);
            let labels = Labels::from_pairs([("app", format!("svc-{k}"))]).expect("valid");
            let spec = ActorSpec::new(
                ActorId::new(&format!("a-{k}-{j}")).expect("valid"),
                "default",
                labels,
            )
            .expect("valid");
            let affinity = ActorAffinity {
                expressions: vec![anti(&format!("svc-{k}"))],
                ..ActorAffinity::default()
            };
            cluster.place_actor(&spec, node, affinity).expect("the node exists");
        }
    }
}

/// Soft affinity to the replicas of `service`, per node.
pub fn soft(service: &str) -> AffinityExpression {
    AffinityExpression::new("app", AffinityOperator::In, vec![service.to_string()], true, None)
        .expect("valid")
}

/// Hard anti-affinity to the replicas of `service`, per zone.
pub fn anti(service: &str) -> AffinityExpression {
    AffinityExpression::new(
        "app",
        AffinityOperator::NotIn,
        vec![service.to_string()],
        false,
        Some("berth.io/availability-zone".to_string()),
    )
    .expect("valid")
}

/// Runs `warmup + decisions` decisions of `workload` on a fresh cluster of `nodes`, timing
/// the last `decisions`.
pub fn run(
    workload: Workload,
    nodes: usize,
    warmup: usize,
    decisions: usize,
    seed: u64,
) -> Timings {
    let mut state = State::new(workload, nodes, seed);
    let mut timings = Timings::default();
    for d in 0..warmup + decisions {
        let (nanos, placed) = state.step(d);
        record(&mut timings, d >= warmup, nanos, placed);
    }
    timings
}

/// A workload's cluster, scheduler and the placements it keeps alive.
struct State {
    workload: Workload,
    cluster: Cluster,
    scheduler: Scheduler,
    rng: ChaCha8Rng,
    registry: ResourceRegistry,
    live: VecDeque<Allocation>,
    groups: VecDeque<String>,
    /// Placements (groups: bundles) kept alive: one per node.
    keep: usize,
}

impl State {
    fn new(workload: Workload, nodes: usize, seed: u64) -> State {
        let mut cluster = build(nodes);
        if workload.places_actors() {
            place_actors(&mut cluster, nodes);
        }
        State {
            workload,
            registry: cluster.registry().clone(),
            cluster,
            scheduler: Scheduler::new(config_for(workload)),
            rng: ChaCha8Rng::seed_from_u64(seed),
            live: VecDeque::new(),
            groups: VecDeque::new(),
            keep: nodes,
        }
    }

    /// The `d`-th decision: its time in nanoseconds (the scheduler call only) and whether it
    /// placed.
    fn step(&mut self, d: usize) -> (u64, bool) {
        match self.workload {
            Workload::Default | Workload::Selector | Workload::Fragmentation => self.request(d),
            Workload::AntiAffinity | Workload::SoftAffinity => self.actor(d),
            Workload::Groups => self.group(d),
        }
    }

    /// A plain request, kept until `keep` newer ones are placed.
    fn request(&mut self, d: usize) -> (u64, bool) {
        let resources = match self.workload {
            Workload::Fragmentation => gpu_mix_for(d),
            _ => resources_for(d),
        };
        let mut request =
            Request::new(resources, Strategy::Default, &self.registry).expect("valid");
        if self.workload == Workload::Selector {
            let (selector, tolerations) = selector_for(d);
            request = request.with_label_selector(selector).with_tolerations(tolerations);
        }
        let started = Instant::now();
        let decision = self.scheduler.place(&mut self.cluster, &request, &mut self.rng);
        let nanos = started.elapsed().as_nanos() as u64;
        let Decision::Placed(allocation) = decision else { return (nanos, false) };
        self.live.push_back(allocation);
        if self.live.len() > self.keep {
            self.cluster.release(&self.live.pop_front().expect("not empty"));
        }
        (nanos, true)
    }

    /// An actor of a service, with hard anti-affinity (per zone) or soft affinity (per node)
    /// to its replicas; it leaves again, so the placed actors stay the same.
    fn actor(&mut self, d: usize) -> (u64, bool) {
        let service = service_for(d);
        let labels = Labels::from_pairs([("app", service.as_str())]).expect("valid");
        let id = ActorId::new(&format!("new-{d}")).expect("valid");
        let spec = ActorSpec::new(id, "default", labels).expect("valid");
        let expression = match self.workload {
            Workload::SoftAffinity => soft(&service),
            _ => anti(&service),
        };
        let strategy = Strategy::ActorAffinity(ActorAffinity {
            expressions: vec![expression],
            ..ActorAffinity::default()
        });
        let request = Request::new(set(&[(ResourceId::CPU, "0.1")]), strategy, &self.registry)
            .expect("valid")
            .with_actor(spec);
        let started = Instant::now();
        let decision = self.scheduler.place(&mut self.cluster, &request, &mut self.rng);
        let nanos = started.elapsed().as_nanos() as u64;
        let Decision::Placed(allocation) = decision else { return (nanos, false) };
        self.cluster.remove_actor(&format!("new-{d}"));
        self.cluster.release(&allocation);
        (nanos, true)
    }

    /// A STRICT_SPREAD group of four one-CPU bundles, kept until `keep` bundles are newer.
    fn group(&mut self, d: usize) -> (u64, bool) {
        let bundles = (0..4).map(|_| set(&[(ResourceId::CPU, "1")])).collect();
        let spec = GroupSpec {
            id: GroupId::new(&format!("pg-{d}")).expect("valid"),
            name: String::new(),
            namespace: "default".into(),
            strategy: GroupStrategy::StrictSpread,
            alternatives: vec![BundleSet { bundles, selectors: Vec::new(), unknown: Vec::new() }],
            tolerations: Tolerations::default(),
        };
        let started = Instant::now();
        let decision = self.scheduler.place_group(&mut self.cluster, &spec);
        let nanos = started.elapsed().as_nanos() as u64;
        if !matches!(decision, GroupDecision::Created { .. }) {
            return (nanos, false);
        }
        self.groups.push_back(spec.id.to_string());
        if self.groups.len() > self.keep / 4 {
            self.cluster.remove_group(&self.groups.pop_front().expect("not empty"));
        }
        (nanos, true)
    }
}

fn record(timings: &mut Timings, timed: bool, nanos: u64, placed: bool) {
    if timed {
        timings.latencies_ns.push(nanos);
        timings.placed += usize::from(placed);
    }
}
