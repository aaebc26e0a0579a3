//! Scorers and preferences: every stage that ranks the nodes that passed the filters, in one
//! place ([`filters`](super::filters) holds the stages that rule nodes out; the traits are in
//! [`stage`](super::stage)).
//!
//! In this file, the stages every DEFAULT decision runs: [`HybridUtilization`] (Ray's hybrid
//! pack-then-spread score), and the preferences [`SoftLabels`], [`AvoidGpuNodes`] and
//! [`SoftActorAffinity`]. In the modules below, the stages a
//! [`Profile`](super::profile::Profile) adds (the default profile's and those a profile file
//! names):
//!
//! - [`strategy_fit::ResourceStrategyFit`], a scorer: per resource, pack (`MostAllocated`) or
//!   spread (`LeastAllocated`), weighted;
//! - [`sra::Retention`], a scorer: requests keep off nodes with scarce resources they do not
//!   ask for; beside it [`sra::Proportional`], a filter of the same plugin: requests that do
//!   not ask for a primary resource (GPUs) must leave enough CPU and memory free for the
//!   node's idle primary resource;
//! - [`best_fit::BestFit`], a scorer: the node left with the least free after placing, over
//!   the listed resources (the bin-packing baseline of the FGD paper);
//! - [`fragmentation::Fragmentation`], a scorer: the node where placing the request grows the
//!   expected GPU fragmentation least, under the workload's typical shapes (FGD, Weng et al.,
//!   USENIX ATC '23), or, measured the other way
//!   ([`Measure::LostCapacity`](fragmentation::Measure::LostCapacity)), loses the least
//!   capacity for those shapes, CPU included, or
//!   ([`Measure::Balance`](fragmentation::Measure::Balance)) strands the least GPU behind
//!   used-up CPU at the shapes' mix of CPU per GPU;
//! - [`packing::SharePacking`], a scorer: shares of one GPU fill the free parts that are
//!   common, after the Sum-of-Squares rule of bin packing;
//! - [`large_hosts::LargeHosts`], a preference: while few nodes could take the largest shapes
//!   seen, other work goes elsewhere.
//!
//! Stages name resources as the profile does, by name, and are built without a cluster: they
//! resolve names against the cluster's [`ResourceRegistry`](crate::ResourceRegistry) as they
//! run, with [`ResourceRules`] (a binary search over exact names, then the wildcards, longest
//! first). That costs a few comparisons of short strings per resource and node, and no
//! allocation or hashing. Caching the answer per `ResourceId` was weighed and not done: a
//! stage may serve several clusters, so a cache inside it would need a lock in the hot path
//! and a check that the registry is still the one it was filled from, and the runner's
//! per-attempt values are not computed for `Scheduler::fits_now`, which runs filters alone.
//! For profiles of a handful of names that costs about what the lookup it saves does.

pub mod best_fit;
pub(super) mod cpu_short;
pub mod fragmentation;
pub mod large_hosts;
pub mod packing;
mod per_node;
mod resource_rules;
pub mod sra;
pub mod strategy_fit;

pub use resource_rules::{wildcard_prefix, ResourceRules};

use super::stage::{DecisionContext, Preference, Score, Scorer};
use crate::cluster::Cluster;
use crate::node::Node;
use crate::quantity::{Quantity, UNITS_PER_WHOLE};
use crate::request::Strategy;
use crate::resource::ResourceId;

/// True when some alive node of `cluster` has GPUs.
pub fn has_gpu_nodes(cluster: &Cluster) -> bool {
    cluster.nodes_having(ResourceId::GPU).is_some_and(|gpus| !gpus.is_disjoint(cluster.alive()))
}

/// The resources whose utilisation the hybrid score looks at: the four built-in ones, which
/// have the four lowest IDs, so a node's set lists them first.
const HYBRID_LAST: ResourceId = ResourceId::OBJECT_STORE_MEMORY;
const _: () = assert!(
    ResourceId::CPU.index() < HYBRID_LAST.index()
        && ResourceId::GPU.index() < HYBRID_LAST.index()
        && ResourceId::MEMORY.index() < HYBRID_LAST.index()
        && HYBRID_LAST.index() == 3
);

/// Ray's hybrid policy, as a score.
///
/// Assumptions: packing keeps whole nodes free for big requests; spreading avoids hot spots.
/// Rules: a node's utilisation is its highest ratio used/total over CPU, memory,
/// object-store memory and GPU *after* placing the request (resources it lacks are ignored);
/// below `spread_threshold` it counts as 0. The score is `100 − utilisation%`.
/// Behaviour: every node under the threshold ties at 100; ties rank the caller's node first,
/// then node order, and the pick is random among the best `top_k` of that ranking, so work packs
/// onto the first few nodes until they pass the threshold; beyond it the emptiest node scores
/// best, which spreads.
pub struct HybridUtilization {
    /// As a fraction of one (0.5 = half full).
    pub spread_threshold: Quantity,
}

impl Scorer for HybridUtilization {
    fn node_and_request_only(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "hybrid_utilization"
    }

    fn score(&self, cx: &DecisionContext<'_>, node: &Node) -> Score {
        let request = cx.request.resources();
        // The highest utilisation as an exact fraction used/total, compared by cross-multiplying.
        // Quantities are never negative, so they are compared as u64 with u128 products: one
        // widening multiply each, where i128 operands take three.
        let mut worst: (u64, u64) = (0, 1);
        // One walk over the node's totals (zero totals are absent: the node lacks them), with
        // the free and asked quantities looked up alongside.
        let (mut free, mut asked) = (node.available().ascending(), request.ascending());
        let totals = node.total().iter().take_while(|(resource, _)| *resource <= HYBRID_LAST);
        for (resource, total) in totals {
            let total = units(total);
            let free = units(free.get(resource));
            // Never more than the total: what is asked beyond the free part counts as full.
            let used = (total - free.min(total)).saturating_add(units(asked.get(resource)));
            let used = used.min(total);
            if wide(used) * wide(worst.1) > wide(worst.0) * wide(total) {
                worst = (used, total);
            }
        }
        let (used, total) = worst;
        let threshold = units(self.spread_threshold);
        if wide(used) * wide(UNITS_PER_WHOLE.unsigned_abs()) < wide(threshold) * wide(total) {
            return Score::MAX;
        }
        // 64-bit division where the product fits (every realistic node): it is far cheaper
        // than 128-bit division on the hot path.
        let percent = match used.checked_mul(100) {
            Some(scaled) => (scaled / total) as u32,
            None => (wide(used) * 100 / wide(total)) as u32,
        };
        Score::new(100 - percent.min(100))
    }
}

/// `quantity` in units; never negative here (quantities, totals and thresholds are not).
#[inline]
fn units(quantity: Quantity) -> u64 {
    u64::try_from(quantity.units()).unwrap_or(0)
}

#[inline]
fn wide(units: u64) -> u128 {
    u128::from(units)
}

/// NODE_LABEL's soft selector: nodes that match it come before those that do not (applies only
/// to NODE_LABEL requests with a soft selector).
pub struct SoftLabels;

impl Preference for SoftLabels {
    fn node_and_request_only(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "soft_labels"
    }

    fn applies(&self, cx: &DecisionContext<'_>) -> bool {
        matches!(cx.request.strategy(), Strategy::NodeLabel(n) if !n.soft.is_empty())
    }

    fn prefers(&self, cx: &DecisionContext<'_>, node: &Node) -> bool {
        match cx.request.strategy() {
            Strategy::NodeLabel(n) => n.soft.matches(|key| node.labels().get(key)),
            _ => true,
        }
    }
}

/// Requests that ask for no GPU prefer nodes without GPUs, so GPU nodes stay free for GPU work
/// (Ray's `scheduler_avoid_gpu_nodes`). A GPU node is still used when no other node can take
/// the request: this is a tier, not a filter.
pub struct AvoidGpuNodes;

impl Preference for AvoidGpuNodes {
    fn node_and_request_only(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "avoid_gpu_nodes"
    }

    fn prefers(&self, cx: &DecisionContext<'_>, node: &Node) -> bool {
        !cx.request.resources().get(ResourceId::GPU).is_zero()
            || !node.has_resource(ResourceId::GPU)
    }
}

/// Soft actor affinity (seed 000): the share of the request's soft expressions a node
/// satisfies, as a score. Its weight (10, against the hybrid score's 1) makes satisfying one
/// more soft expression outweigh any difference in utilisation for up to ten expressions; the
/// request is placed even where none holds.
pub struct SoftActorAffinity;

/// The weight of [`SoftActorAffinity`].
pub const SOFT_AFFINITY_WEIGHT: u32 = 10;

impl Scorer for SoftActorAffinity {
    fn name(&self) -> &'static str {
        "soft_actor_affinity"
    }

    fn applies(&self, cx: &DecisionContext<'_>) -> bool {
        !cx.prepared.soft_affinity.is_empty()
    }

    fn score(&self, cx: &DecisionContext<'_>, node: &Node) -> Score {
        let sets = &cx.prepared.soft_affinity;
        let held = sets.iter().filter(|set| set.contains(node.index())).count();
        Score::new((held * 100 / sets.len().max(1)) as u32)
    }
}
