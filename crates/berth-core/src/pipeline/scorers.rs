//! The DEFAULT strategy's ranking: the hybrid utilisation score and the GPU-avoidance tier.

use super::stage::{DecisionContext, Preference, Score, Scorer};
use crate::node::Node;
use crate::quantity::{Quantity, UNITS_PER_WHOLE};
use crate::request::Strategy;
use crate::resource::ResourceId;

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
        // Amounts are never negative, so they are compared as u64 with u128 products: one
        // widening multiply each, where i128 operands take three.
        let mut worst: (u64, u64) = (0, 1);
        // One walk over the node's totals (zero totals are absent: the node lacks them), with
        // the free and asked amounts looked up alongside.
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

/// `quantity` in units; never negative here (amounts, totals and thresholds are not).
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
