//! Many replays at once: every (trace, policy, seed), in parallel where cores allow. Each
//! replay is single-threaded and deterministic, so the results do not depend on how many
//! threads run them or in which order they finish.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::metrics::{aggregate, Point, RunMetrics};
use crate::policy::Policy;
use crate::replay::{replay, Scenario};

/// A policy's results on one trace, over seeds.
#[derive(Clone, Debug, PartialEq)]
pub struct Curve {
    /// The trace's name.
    pub trace: String,
    /// The policy's name.
    pub policy: String,
    /// The seeds, in order.
    pub seeds: Vec<u64>,
    /// The metrics per bucket of arrived workload, ascending.
    pub points: Vec<Point>,
    /// Pods per run, mean over seeds.
    pub pods: f64,
    /// Pods that could not be placed, mean over seeds.
    pub failed: f64,
}

impl Curve {
    /// The point of bucket `k`, if any seed reached it.
    pub fn at(&self, k: usize) -> Option<&Point> {
        self.points.iter().find(|p| p.k == k)
    }
}

/// The replays to run, with each (trace, seed)'s arrival order drawn up front (policies share
/// it).
pub struct Plan<'a> {
    scenarios: &'a [Scenario],
    policies: &'a [Policy],
    seeds: &'a [u64],
    /// `[scenario][seed]`.
    orders: Vec<Vec<Vec<u32>>>,
}

impl<'a> Plan<'a> {
    /// Every policy on every scenario with every seed.
    pub fn new(scenarios: &'a [Scenario], policies: &'a [Policy], seeds: &'a [u64]) -> Plan<'a> {
        let orders = scenarios
            .iter()
            .map(|s| seeds.iter().map(|&seed| s.arrival_order(seed)).collect())
            .collect();
        Plan { scenarios, policies, seeds, orders }
    }

    /// Pods to place over all replays (for a progress bar).
    pub fn total_pods(&self) -> u64 {
        let per_policy: usize = self.orders.iter().flatten().map(Vec::len).sum();
        per_policy as u64 * self.policies.len() as u64
    }

    /// Runs every replay on up to `threads` threads; `progress` hears of pods placed or
    /// dropped as they go. Curves come scenario by scenario, policies in the order given.
    pub fn run(
        &self,
        threads: usize,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<Vec<Curve>, String> {
        let (n_scenarios, n_policies, n_seeds) =
            (self.scenarios.len(), self.policies.len(), self.seeds.len());
        let jobs = n_scenarios * n_policies * n_seeds;
        let next = AtomicUsize::new(0);
        let results: Mutex<Vec<Option<Result<RunMetrics, String>>>> = Mutex::new(vec![None; jobs]);
        std::thread::scope(|scope| {
            for _ in 0..threads.clamp(1, jobs.max(1)) {
                scope.spawn(|| loop {
                    let job = next.fetch_add(1, Ordering::Relaxed);
                    if job >= jobs {
                        break;
                    }
                    let (s, rest) = (job / (n_policies * n_seeds), job % (n_policies * n_seeds));
                    let (p, i) = (rest / n_seeds, rest % n_seeds);
                    let outcome = replay(
                        &self.scenarios[s],
                        &self.policies[p],
                        self.seeds[i],
                        &self.orders[s][i],
                        &mut |done| progress(done),
                    );
                    let failed = outcome.is_err();
                    results.lock().expect("a replay panicked")[job] = Some(outcome);
                    if failed {
                        // Stop handing out work: the whole run fails anyway.
                        next.store(jobs, Ordering::Relaxed);
                    }
                });
            }
        });
        let results = results.into_inner().expect("a replay panicked");
        let mut runs = results.into_iter();
        let mut curves = Vec::with_capacity(n_scenarios * n_policies);
        for scenario in self.scenarios {
            for policy in self.policies {
                let mut metrics = Vec::with_capacity(n_seeds);
                for _ in 0..n_seeds {
                    match runs.next().flatten() {
                        Some(Ok(run)) => metrics.push(run),
                        Some(Err(err)) => return Err(err),
                        None => return Err("a replay did not run".to_string()),
                    }
                }
                let mean = |f: fn(&RunMetrics) -> u64| {
                    metrics.iter().map(|m| f(m) as f64).sum::<f64>() / n_seeds.max(1) as f64
                };
                curves.push(Curve {
                    trace: scenario.name.clone(),
                    policy: policy.name.clone(),
                    seeds: self.seeds.to_vec(),
                    points: aggregate(&metrics),
                    pods: mean(|m| m.pods),
                    failed: mean(|m| m.failed),
                });
            }
        }
        Ok(curves)
    }
}
