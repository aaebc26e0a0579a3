//! `berth bench`: how fast Berth decides, on synthetic clusters of 1k to 100k nodes.
//!
//! Method (fixed by the design): each workload runs on one core at steady state; decisions/s
//! is the median over several runs, latencies are the p50 and p99 of the median run, and a
//! naive linear-scan baseline runs in the same process on the same cluster and requests, so
//! that the ratio stays meaningful on a noisy machine. Memory is the growth of the resident set
//! while the cluster (and, for the actor workloads, its 100,000 actors) is built, read from
//! `/proc/self/status` after the allocator returned its free pages; the CLI runs each case in
//! its own process so peaks do not mix.
//!
//! What is timed is the decision: candidates, filters, scores, selection and the reservation,
//! as `Scheduler::place` and `Scheduler::place_group` do them. Not the head's API, store or
//! network (`berth bench api`, with the head, measures those).

pub mod baseline;
pub mod cluster;
pub mod workloads;

use serde::{Deserialize, Serialize};

pub use workloads::Workload;

/// How much to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Cluster sizes.
    pub sizes: Vec<usize>,
    /// Workloads.
    pub workloads: Vec<Workload>,
    /// Runs per case; the median is reported.
    pub runs: usize,
    /// Untimed decisions before each run.
    pub warmup: usize,
    /// Timed decisions per run.
    pub decisions: usize,
    /// Timed decisions of the (slow) baseline.
    pub baseline_decisions: usize,
    /// Returns the pages the process's allocator holds free to the system. Called before each
    /// read of the resident set, so that the memory figures count what the cluster holds, not
    /// what the allocator keeps for reuse (a hash table's old buckets after it grew, say). A
    /// no-op by default; the CLI passes its allocator's.
    pub release_free_memory: fn(),
}

impl BenchOptions {
    /// The full benchmark: 1k, 10k and 100k nodes, every workload.
    pub fn full() -> BenchOptions {
        BenchOptions {
            sizes: vec![1_000, 10_000, 100_000],
            workloads: Workload::ALL.to_vec(),
            runs: 5,
            warmup: 2_000,
            decisions: 20_000,
            baseline_decisions: 200,
            release_free_memory: || {},
        }
    }

    /// A smoke run for CI: 1k nodes, few decisions; it must only run, not be fast.
    pub fn quick() -> BenchOptions {
        BenchOptions {
            sizes: vec![1_000],
            workloads: Workload::ALL.to_vec(),
            runs: 1,
            warmup: 100,
            decisions: 1_000,
            baseline_decisions: 20,
            release_free_memory: || {},
        }
    }
}

/// One workload at one size: what `--output json` prints, one object per line.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchResult {
    /// The workload's name.
    pub workload: String,
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Decisions per second, median over runs.
    pub decisions_per_s: f64,
    /// Median decision latency, µs.
    pub p50_us: f64,
    /// 99th-percentile decision latency, µs.
    pub p99_us: f64,
    /// Peak resident set of the process, bytes (per case when run in its own process).
    pub peak_rss_bytes: u64,
    /// Resident set grown while building the cluster (and placing the workload's actors).
    pub cluster_bytes: u64,
    /// The naive baseline's decisions per second.
    pub baseline_decisions_per_s: f64,
    /// Share of timed decisions that placed.
    pub placed_share: f64,
}

impl BenchResult {
    /// Berth's speed over the baseline's.
    pub fn speedup(&self) -> f64 {
        if self.baseline_decisions_per_s > 0.0 {
            self.decisions_per_s / self.baseline_decisions_per_s
        } else {
            0.0
        }
    }
}

/// Runs one case in this process.
pub fn run_case(workload: Workload, nodes: usize, options: &BenchOptions) -> BenchResult {
    (options.release_free_memory)();
    let before = resident_bytes();
    let mut probe = cluster::build(nodes);
    if workload.places_actors() {
        workloads::place_actors(&mut probe, nodes);
    }
    (options.release_free_memory)();
    let cluster_bytes = resident_bytes().saturating_sub(before);
    drop(probe);

    let mut runs: Vec<workloads::Timings> = (0..options.runs.max(1))
        .map(|r| workloads::run(workload, nodes, options.warmup, options.decisions, 42 + r as u64))
        .collect();
    runs.sort_by(|a, b| a.decisions_per_s().total_cmp(&b.decisions_per_s()));
    let median = &runs[runs.len() / 2];
    let baseline = baseline::run(
        workload,
        nodes,
        options.baseline_decisions.min(options.warmup),
        options.baseline_decisions,
    );
    BenchResult {
        workload: workload.name().to_string(),
        nodes,
        decisions_per_s: median.decisions_per_s(),
        p50_us: median.quantile_us(0.5),
        p99_us: median.quantile_us(0.99),
        peak_rss_bytes: peak_resident_bytes(),
        cluster_bytes,
        baseline_decisions_per_s: baseline.decisions_per_s(),
        placed_share: median.placed as f64 / median.latencies_ns.len().max(1) as f64,
    }
}

fn status_field(name: &str) -> u64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return 0 };
    status
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// The process's resident set now, bytes (0 where `/proc` is not available).
pub fn resident_bytes() -> u64 {
    status_field("VmRSS:")
}

/// The process's peak resident set, bytes (0 where `/proc` is not available).
pub fn peak_resident_bytes() -> u64 {
    status_field("VmHWM:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_runs_and_places_most_of_the_time() {
        let options = BenchOptions {
            sizes: vec![200],
            workloads: Workload::ALL.to_vec(),
            runs: 1,
            warmup: 10,
            decisions: 100,
            baseline_decisions: 10,
            release_free_memory: || {},
        };
        for workload in Workload::ALL {
            let result = run_case(workload, 200, &options);
            assert!(result.decisions_per_s > 0.0, "{result:?}");
            assert!(result.baseline_decisions_per_s > 0.0, "{result:?}");
            assert!(result.placed_share > 0.5, "{result:?}");
            assert!(result.p99_us >= result.p50_us);
        }
    }

    #[test]
    fn names_round_trip() {
        for workload in Workload::ALL {
            assert_eq!(Workload::parse(workload.name()), Some(workload));
        }
        assert_eq!(Workload::parse("nope"), None);
    }
}
