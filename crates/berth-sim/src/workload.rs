//! The order pods arrive in: the trace shuffled by a seeded RNG, then filled (or cut) to a
//! target GPU demand, as the FGD paper's experiments do.

use rand::seq::SliceRandom;
use rand::Rng;

use crate::trace::PodRow;

/// The arrived GPU demand the replay stops at, in percent of the cluster's GPUs.
pub const TARGET_PERCENT: u64 = 130;

/// The arrival order, as indices into `pods`: the pods shuffled; then, while their total GPU
/// demand is below `target_percent` of `cluster_gpu_milli`, clones drawn uniformly with
/// replacement are appended; when the shuffled trace already exceeds the target, it is cut
/// after the first pod at which the demand reaches it (dropping the rest: random pods, since
/// the order is random). Either way the demand of the order reaches the target at its last
/// pod and not before. A trace without GPU demand is only shuffled.
pub fn arrival_order<R: Rng + ?Sized>(
    pods: &[PodRow],
    cluster_gpu_milli: u64,
    target_percent: u64,
    rng: &mut R,
) -> Vec<u32> {
    let mut order: Vec<u32> = (0..pods.len() as u32).collect();
    order.shuffle(rng);
    let reached = |demand: u64| {
        u128::from(demand) * 100 >= u128::from(cluster_gpu_milli) * u128::from(target_percent)
    };
    let mut demand = 0u64;
    for (i, &pod) in order.iter().enumerate() {
        demand += pods[pod as usize].gpu_demand_milli();
        if reached(demand) {
            order.truncate(i + 1);
            return order;
        }
    }
    if demand == 0 || pods.is_empty() {
        return order;
    }
    while !reached(demand) {
        let pod = rng.random_range(0..pods.len() as u32);
        demand += pods[pod as usize].gpu_demand_milli();
        order.push(pod);
    }
    order
}
