//! Whether a cluster's CPU runs out before its GPUs: its free CPU is less than nine tenths as
//! large a share of its CPU as its free GPU is of its GPUs (alive nodes). While that holds,
//! the default profile packs work without GPUs by CPU, ranks work with GPUs by the CPU
//! fragment ([`Clusters::CpuShort`](crate::pipeline::profile::Clusters::CpuShort)), and keeps nodes whole for the
//! largest requests with a wider margin (`large_hosts`).
//!
//! Why: where the requests ask much CPU per GPU, the cluster's CPU is used up first, and GPU
//! requests with much CPU then fail for want of a node with that CPU left beside free GPUs;
//! packing by CPU keeps such holes. Only while CPU is the scarcer, at nine tenths rather than
//! equal shares, so that clusters whose CPU and GPU run out together are left as they were
//! (measurements: `docs/placement-log.md`).
//!
//! Cost: the sums are kept from the cluster's change feed ([`crate::feed`]): per decision, the
//! nodes changed since the last one.

use std::cell::RefCell;

use super::per_node::PerNode;
use crate::cluster::Cluster;
use crate::node::{Node, NodeState};
use crate::resource::ResourceId;

/// The sums, kept between decisions.
#[derive(Debug, Default)]
pub(in crate::pipeline) struct CpuShort {
    counts: RefCell<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    /// Per node slot, what it added to `sums`.
    nodes: PerNode<Quantities>,
    sums: Quantities,
}

/// The free CPU share must be below this many tenths of the free GPU share.
const TENTHS: i128 = 9;

/// Free and total CPU, free and total GPU, in units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Quantities {
    cpu_free: i128,
    cpu_total: i128,
    gpu_free: i128,
    gpu_total: i128,
}

impl Quantities {
    /// An alive node's; any other slot's are zero.
    fn of(node: &Node) -> Quantities {
        if node.state() != NodeState::Alive {
            return Quantities::default();
        }
        let (free, total) = (node.available(), node.total());
        Quantities {
            cpu_free: i128::from(free.get(ResourceId::CPU).units()),
            cpu_total: i128::from(total.get(ResourceId::CPU).units()),
            gpu_free: i128::from(free.get(ResourceId::GPU).units()),
            gpu_total: i128::from(total.get(ResourceId::GPU).units()),
        }
    }

    fn add(&mut self, other: Quantities, sign: i128) {
        self.cpu_free += sign * other.cpu_free;
        self.cpu_total += sign * other.cpu_total;
        self.gpu_free += sign * other.gpu_free;
        self.gpu_total += sign * other.gpu_total;
    }
}

impl CpuShort {
    /// True when the cluster has GPUs and its free CPU share is below nine tenths of its free
    /// GPU share.
    pub(in crate::pipeline) fn holds(&self, cluster: &Cluster) -> bool {
        let mut counts = self.counts.borrow_mut();
        counts.follow(cluster);
        let s = counts.sums;
        s.gpu_total > 0 && 10 * s.cpu_free * s.gpu_total < TENTHS * s.gpu_free * s.cpu_total
    }
}

impl Counts {
    fn follow(&mut self, cluster: &Cluster) {
        let sums = &mut self.sums;
        let count = |node: Option<&Node>| node.map(Quantities::of).unwrap_or_default();
        self.nodes.follow(cluster, count, |before, now| {
            sums.add(before, -1);
            sums.add(*now, 1);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{cluster, index, resources};

    #[test]
    fn it_holds_while_free_cpu_is_a_smaller_share_than_free_gpu_and_follows_changes() {
        // 20 CPU and 4 GPUs in all.
        let mut c = cluster(&[("a", "CPU=10,GPU=2"), ("b", "CPU=10,GPU=2")]);
        let short = CpuShort::default();
        assert!(!short.holds(&c), "all free: the shares are equal");
        let cpu = resources(c.registry_mut(), "CPU=12");
        let taken = c.reserve(index(&c, "a"), &cpu);
        assert!(taken.is_err(), "more than a node has");
        let cpu = resources(c.registry_mut(), "CPU=6");
        let a = c.reserve(index(&c, "a"), &cpu).unwrap();
        assert!(short.holds(&c), "70% of the CPU free, all of the GPU");
        let more = resources(c.registry_mut(), "GPU=1");
        let one = c.reserve(index(&c, "b"), &more).unwrap();
        assert!(!short.holds(&c), "70% of the CPU free, 75% of the GPU: not below nine tenths");
        c.release(&one);
        let gpus = resources(c.registry_mut(), "GPU=2");
        let b = c.reserve(index(&c, "b"), &gpus).unwrap();
        assert!(!short.holds(&c), "70% of the CPU free, 50% of the GPU");
        c.release(&b);
        assert!(short.holds(&c));
        c.set_state(index(&c, "a"), NodeState::Dead).unwrap();
        assert!(!short.holds(&c), "only b is alive, all free");
        c.release(&a);
        let cpu_only = cluster(&[("x", "CPU=8")]);
        assert!(!short.holds(&cpu_only), "no GPUs: never");
    }
}
