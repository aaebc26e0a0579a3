//! Scheduler profiles: which scorers rank nodes (with which weights) and which extra filters
//! run, on top of the filters every strategy needs.
//!
//! The default profile is the hybrid pack-then-spread policy with weight 1, the behaviour of
//! the DEFAULT strategy without a profile file.

use super::scorers::HybridUtilization;
use super::stage::{Filter, Weighted};
use super::SchedulerConfig;

/// A scheduler profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    /// The scorers, in the order `berth explain` lists them.
    pub scorers: Vec<ScorerSpec>,
}

/// One scorer of a profile and its weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScorerSpec {
    /// [`HybridUtilization`] with the config's `spread_threshold`.
    Hybrid {
        /// The scorer's weight.
        weight: u32,
    },
}

impl Default for Profile {
    fn default() -> Self {
        Profile { scorers: vec![ScorerSpec::Hybrid { weight: 1 }] }
    }
}

impl Profile {
    /// Filters the profile adds to the standard ones (the runner orders static before dynamic).
    pub fn filters(&self) -> Vec<Box<dyn Filter>> {
        Vec::new()
    }

    /// The weighted scorers the DEFAULT strategy ranks nodes by.
    pub fn scorers(&self, config: &SchedulerConfig) -> Vec<Weighted> {
        self.scorers
            .iter()
            .map(|spec| match spec {
                ScorerSpec::Hybrid { weight } => Weighted {
                    scorer: Box::new(HybridUtilization {
                        spread_threshold: config.spread_threshold,
                    }),
                    weight: *weight,
                },
            })
            .collect()
    }
}
