//! The scheduler's settings: [`SchedulerConfig`] (the DEFAULT strategy's thresholds, the
//! profile, how many nodes a decision looks at) and the [`ConfigError`] of one out of range.

use thiserror::Error;

use super::profile::Profile;
use crate::quantity::{Quantity, UNITS_PER_WHOLE};

/// Settings of the DEFAULT strategy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Utilisation below which a node counts as empty (pack until then, spread after); 0..=1.
    pub spread_threshold: Quantity,
    /// Share of alive nodes the DEFAULT strategy picks at random among; (0, 1].
    pub top_k_fraction: Quantity,
    /// Whether requests without GPUs prefer nodes without GPUs.
    pub avoid_gpu_nodes: bool,
    /// Scorers and extra filters.
    pub profile: Profile,
    /// How many nodes a decision looks at on a large cluster.
    pub nodes_to_score: NodesToScore,
}

/// How many nodes a decision looks at, after the candidate stage.
///
/// Assumptions: on a large cluster many nodes can take a typical request, and the best of a
/// few dozen of them is as good a choice as the best of all, while looking at all costs time
/// in proportion to the cluster. Rules (Kubernetes' `percentageOfNodesToScore`, simplified):
/// with more than `from_nodes` candidates, nodes are visited from a position that moves on
/// with every decision, and the visit stops once `feasible` of them have passed every filter;
/// SPREAD stops at the first, which is exactly its round-robin rule. Behaviour: the cost of a
/// decision stops growing with the cluster; DEFAULT's top k is taken among the nodes visited;
/// a request that no visited node can take visits every node, so pending and infeasible and
/// their diagnoses are exact, and `berth explain` always visits every node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodesToScore {
    /// Every candidate, always (placement-quality studies).
    All,
    /// Stop early on large clusters.
    Adaptive {
        /// Candidates above which the visit may stop early.
        from_nodes: u32,
        /// Feasible nodes to find before stopping.
        feasible: u32,
    },
}

impl Default for NodesToScore {
    fn default() -> Self {
        NodesToScore::Adaptive { from_nodes: 512, feasible: 64 }
    }
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            spread_threshold: Quantity::from_units(UNITS_PER_WHOLE / 2),
            top_k_fraction: Quantity::from_units(UNITS_PER_WHOLE / 5),
            avoid_gpu_nodes: true,
            profile: Profile::default(),
            nodes_to_score: NodesToScore::default(),
        }
    }
}

/// A scheduler setting out of range. Displays as `field: rule`.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    /// `spread_threshold` above 1.
    SpreadThreshold(Quantity),
    /// `top_k_fraction` zero or above 1.
    TopKFraction(Quantity),
}

impl ConfigError {
    /// The setting's path (`scheduler.spread_threshold`).
    pub fn field(&self) -> &'static str {
        match self {
            ConfigError::SpreadThreshold(_) => "scheduler.spread_threshold",
            ConfigError::TopKFraction(_) => "scheduler.top_k_fraction",
        }
    }

    /// The rule broken, without the field.
    pub fn rule(&self) -> String {
        match self {
            ConfigError::SpreadThreshold(v) => {
                format!("{v} is out of range; use a fraction from 0 to 1")
            }
            ConfigError::TopKFraction(v) => {
                format!("{v} is out of range; use a fraction above 0, at most 1")
            }
        }
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field(), self.rule())
    }
}

impl SchedulerConfig {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.spread_threshold > Quantity::ONE {
            return Err(ConfigError::SpreadThreshold(self.spread_threshold));
        }
        if self.top_k_fraction.is_zero() || self.top_k_fraction > Quantity::ONE {
            return Err(ConfigError::TopKFraction(self.top_k_fraction));
        }
        Ok(())
    }
}
