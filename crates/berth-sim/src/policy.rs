//! The policies a replay compares: Berth's scheduler with a strategy and a profile.
//!
//! Built in: `random` (the RANDOM strategy: uniform among the nodes that can take the pod),
//! `best-fit`, `most-allocated-gpu` and `fragmentation` (profiles in `examples/`, read by the
//! same reader as any profile file), and `default` (Berth's default: the hybrid score, random
//! among the best 20%). Any profile file is a policy too, named after the file.

use berth_core::pipeline::scorers::fragmentation::Shape;
use berth_core::pipeline::NodesToScore;
use berth_core::{Profile, SchedulerConfig, Strategy};

/// A policy: how the scheduler is set up, and the strategy of every pod's request.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Its name in reports.
    pub name: String,
    /// The scheduler's settings, with the profile.
    pub config: SchedulerConfig,
    /// The strategy of each request.
    pub strategy: Strategy,
}

/// The profile of `best-fit`.
pub const BEST_FIT_PROFILE: &str = include_str!("../../../examples/profile-best-fit.yaml");
/// The profile of `most-allocated-gpu`.
pub const MOST_ALLOCATED_GPU_PROFILE: &str =
    include_str!("../../../examples/profile-most-allocated-gpu.yaml");
/// The profile of `fragmentation`, Berth's best on the openb traces.
pub const FRAGMENTATION_PROFILE: &str =
    include_str!("../../../examples/profile-fragmentation.yaml");

/// The built-in policies, in report order.
pub const BUILT_IN: [&str; 5] =
    ["random", "best-fit", "most-allocated-gpu", "default", "fragmentation"];

impl Policy {
    /// A built-in policy by name.
    pub fn built_in(name: &str) -> Option<Policy> {
        let with_profile = |text: &str| {
            let profile = berth_api::spec::profile::parse_profile(text)
                .expect("the built-in profiles are valid");
            Policy::from_profile(name, profile)
        };
        Some(match name {
            "random" => Policy {
                name: name.to_string(),
                config: SchedulerConfig {
                    nodes_to_score: NodesToScore::All,
                    ..SchedulerConfig::default()
                },
                strategy: Strategy::Random,
            },
            "default" => Policy::from_profile(name, Profile::default()),
            "best-fit" => with_profile(BEST_FIT_PROFILE),
            "most-allocated-gpu" => with_profile(MOST_ALLOCATED_GPU_PROFILE),
            "fragmentation" => with_profile(FRAGMENTATION_PROFILE),
            _ => return None,
        })
    }

    /// The DEFAULT strategy ranked by `profile`.
    pub fn from_profile(name: &str, profile: Profile) -> Policy {
        Policy {
            name: name.to_string(),
            // Placement quality is studied over every node: no early stop (see `NodesToScore`).
            config: SchedulerConfig {
                profile,
                nodes_to_score: NodesToScore::All,
                ..SchedulerConfig::default()
            },
            strategy: Strategy::Default,
        }
    }

    /// The settings for a trace whose typical shapes are `shapes`: fragmentation scorers
    /// with `shapes: observed` get them.
    pub fn config_for(&self, shapes: &[Shape]) -> SchedulerConfig {
        let mut config = self.config.clone();
        config.profile.set_observed_shapes(shapes);
        config
    }
}
