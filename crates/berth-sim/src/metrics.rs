//! The placement-quality metrics, after every pod, and their means per bucket of arrived
//! workload and over seeds.
//!
//! - Arrived workload: the GPU demand of every pod so far, placed or not, in percent of the
//!   cluster's GPUs, rounded to the nearest whole percent (half up): the bucket `k`.
//! - GPU allocation ratio: the GPUs allocated (shares count by their size) over the cluster's
//!   GPUs, in percent.
//! - Fragmentation (the FGD paper's): the sum over nodes of each node's fragment under the
//!   typical shapes (see `berth_core::pipeline::scorers::fragmentation`), in GPUs; the
//!   fragmentation rate is that over the idle GPUs, in percent (0 when no GPU is idle), as the
//!   paper's simulator reports it.
//!
//! A run's value for bucket `k` is the mean over the events in it; a policy's is the mean over
//! seeds of those, with the sample standard deviation (0 for one seed). A bucket some seeds
//! never reach (the last one) is averaged over the seeds that do.

use berth_core::pipeline::scorers::fragmentation::ShapeTable;
use berth_core::{Cluster, NodeIndex};

/// The cluster's fragment under the typical shapes, kept up to date node by node.
pub struct FragMeter<'t> {
    table: &'t ShapeTable,
    /// Each node's fragment, exact (see [`ShapeTable::node_fragment`]).
    per_node: Vec<u128>,
    total: u128,
}

impl<'t> FragMeter<'t> {
    /// The meter of `cluster` as it is.
    pub fn new(table: &'t ShapeTable, cluster: &Cluster) -> FragMeter<'t> {
        let mut per_node = vec![0; cluster.index_bound()];
        for (index, node) in cluster.nodes() {
            per_node[index.0 as usize] = table.node_fragment(node);
        }
        let total = per_node.iter().sum();
        FragMeter { table, per_node, total }
    }

    /// Recomputes one node's fragment after it changed.
    pub fn update(&mut self, cluster: &Cluster, index: NodeIndex) {
        let Some(node) = cluster.node(index) else { return };
        let slot = &mut self.per_node[index.0 as usize];
        self.total -= *slot;
        *slot = self.table.node_fragment(node);
        self.total += *slot;
    }

    /// The cluster's fragment in GPUs.
    pub fn gpus(&self) -> f64 {
        if self.table.is_empty() {
            return 0.0;
        }
        self.total as f64 / (self.table.total_weight() as f64 * 10_000.0)
    }
}

/// The bucket of an arrived demand: `round(100 × arrived / cluster)`, half up.
pub fn bucket(arrived_milli: u64, cluster_milli: u64) -> usize {
    let (a, c) = (u128::from(arrived_milli), u128::from(cluster_milli.max(1)));
    ((200 * a + c) / (2 * c)) as usize
}

/// Sums of one bucket of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bucket {
    /// Events (pods) in the bucket.
    pub events: u64,
    /// Σ allocation ratio (%).
    pub alloc: f64,
    /// Σ fragmentation rate (% of idle GPUs).
    pub frag_rate: f64,
    /// Σ fragmentation (GPUs).
    pub frag_gpus: f64,
}

/// The metrics of one run, by bucket.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunMetrics {
    /// Index `k`: the bucket of arrived workload `k`%.
    pub buckets: Vec<Bucket>,
    /// Pods that arrived.
    pub pods: u64,
    /// Pods that could not be placed.
    pub failed: u64,
}

impl RunMetrics {
    /// Records one event.
    pub fn record(&mut self, k: usize, alloc: f64, frag_rate: f64, frag_gpus: f64) {
        if self.buckets.len() <= k {
            self.buckets.resize(k + 1, Bucket::default());
        }
        let bucket = &mut self.buckets[k];
        bucket.events += 1;
        bucket.alloc += alloc;
        bucket.frag_rate += frag_rate;
        bucket.frag_gpus += frag_gpus;
    }

    /// The run's mean per bucket: `(k, alloc, frag_rate, frag_gpus)` for buckets with events.
    pub fn means(&self) -> impl Iterator<Item = (usize, [f64; 3])> + '_ {
        self.buckets.iter().enumerate().filter(|(_, b)| b.events > 0).map(|(k, b)| {
            let n = b.events as f64;
            (k, [b.alloc / n, b.frag_rate / n, b.frag_gpus / n])
        })
    }
}

/// A mean and a sample standard deviation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stat {
    /// The mean.
    pub mean: f64,
    /// The sample standard deviation (0 for one value).
    pub sd: f64,
}

impl Stat {
    /// Of `values` (at least one).
    pub fn of(values: &[f64]) -> Stat {
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let sd = if values.len() < 2 {
            0.0
        } else {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        };
        Stat { mean, sd }
    }
}

/// One bucket of a policy's curve, over seeds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// The bucket.
    pub k: usize,
    /// Seeds with events in it.
    pub seeds: usize,
    /// GPU allocation ratio (%).
    pub alloc: Stat,
    /// Fragmentation rate (% of idle GPUs).
    pub frag_rate: Stat,
    /// Fragmentation (GPUs).
    pub frag_gpus: Stat,
}

/// Means over runs (one per seed), bucket by bucket.
pub fn aggregate(runs: &[RunMetrics]) -> Vec<Point> {
    let buckets = runs.iter().map(|r| r.buckets.len()).max().unwrap_or(0);
    let mut per_k: Vec<[Vec<f64>; 3]> = vec![Default::default(); buckets];
    for run in runs {
        for (k, values) in run.means() {
            for (i, value) in values.into_iter().enumerate() {
                per_k[k][i].push(value);
            }
        }
    }
    per_k
        .iter()
        .enumerate()
        .filter(|(_, v)| !v[0].is_empty())
        .map(|(k, [alloc, frag_rate, frag_gpus])| Point {
            k,
            seeds: alloc.len(),
            alloc: Stat::of(alloc),
            frag_rate: Stat::of(frag_rate),
            frag_gpus: Stat::of(frag_gpus),
        })
        .collect()
}
