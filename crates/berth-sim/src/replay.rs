//! One replay: a policy, a seed, a scenario; pods arrive once, are placed or dropped, and
//! never leave.

use berth_core::pipeline::scorers::fragmentation::{Shape, ShapeTable};
use berth_core::{Cluster, Decision, Request, ResourceId, Scheduler};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::convert;
use crate::metrics::{bucket, FragMeter, RunMetrics};
use crate::policy::Policy;
use crate::trace::{NodeRow, PodRow};
use crate::workload::{arrival_order, TARGET_PERCENT};

/// A trace on a cluster: everything a replay reads, shared by every run.
pub struct Scenario {
    /// The trace's name in reports (`default`, or the file's stem).
    pub name: String,
    /// The pods, in file order.
    pub pods: Vec<PodRow>,
    /// The cluster, empty: each run works on a copy.
    pub cluster: Cluster,
    /// The cluster's GPUs in milli-GPU.
    pub cluster_gpu_milli: u64,
    /// The typical shapes of the trace.
    pub shapes: Vec<Shape>,
    /// The same, grouped for the fragmentation metric.
    pub table: ShapeTable,
}

impl Scenario {
    /// The scenario of `pods` on the cluster of `nodes`.
    pub fn new(name: &str, nodes: &[NodeRow], pods: Vec<PodRow>) -> Result<Scenario, String> {
        let cluster = convert::cluster(nodes)?;
        let cluster_gpu_milli = nodes.iter().map(|n| u64::from(n.gpus) * 1000).sum();
        let shapes = crate::shapes::typical_shapes(&pods);
        let table = ShapeTable::new(&shapes);
        Ok(Scenario { name: name.to_string(), pods, cluster, cluster_gpu_milli, shapes, table })
    }

    /// The arrival order of the run with `seed` (the same for every policy).
    pub fn arrival_order(&self, seed: u64) -> Vec<u32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        arrival_order(&self.pods, self.cluster_gpu_milli, TARGET_PERCENT, &mut rng)
    }
}

/// How often a replay reports progress, in pods.
pub const PROGRESS_EVERY: u64 = 256;

/// Replays `order` (from [`Scenario::arrival_order`]) with `policy`; the scheduler's random
/// choices come from their own stream of `seed`. Calls `progress` with the pods done since
/// the last call, every [`PROGRESS_EVERY`] pods and at the end.
pub fn replay(
    scenario: &Scenario,
    policy: &Policy,
    seed: u64,
    order: &[u32],
    progress: &mut dyn FnMut(u64),
) -> Result<RunMetrics, String> {
    let mut cluster = scenario.cluster.clone();
    let requests: Vec<Request> = scenario
        .pods
        .iter()
        .map(|pod| convert::request(pod, policy.strategy.clone(), &cluster))
        .collect::<Result<_, _>>()?;
    let mut scheduler = Scheduler::new(policy.config_for(&scenario.shapes));
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(1);
    let mut meter = FragMeter::new(&scenario.table, &cluster);
    let total = scenario.cluster_gpu_milli;
    let (mut arrived, mut allocated) = (0u64, 0u64);
    let mut metrics = RunMetrics::default();
    let mut unreported = 0;
    for &pod in order {
        let demand = scenario.pods[pod as usize].gpu_demand_milli();
        match scheduler.place(&mut cluster, &requests[pod as usize], &mut rng) {
            Decision::Placed(allocation) => {
                allocated += demand;
                debug_assert_eq!(
                    allocation.resources().get(ResourceId::GPU).units() as u64,
                    demand * 10
                );
                meter.update(&cluster, allocation.node());
            }
            Decision::Pending(_) | Decision::Infeasible(_) => metrics.failed += 1,
        }
        arrived += demand;
        metrics.pods += 1;
        let alloc = 100.0 * allocated as f64 / total as f64;
        let idle = (total - allocated) as f64 / 1000.0;
        let frag = meter.gpus();
        let frag_rate = if idle > 0.0 { 100.0 * frag / idle } else { 0.0 };
        metrics.record(bucket(arrived, total), alloc, frag_rate, frag);
        unreported += 1;
        if unreported == PROGRESS_EVERY {
            progress(unreported);
            unreported = 0;
        }
    }
    progress(unreported);
    Ok(metrics)
}
