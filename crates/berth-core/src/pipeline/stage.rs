//! The stage traits of the decision pipeline and the values they pass.
//!
//! Each stage is a small type behind one trait, as in the Kubernetes scheduling framework:
//! a [`Filter`] answers whether a node can take the request (and why not), a [`Preference`]
//! sorts nodes into tiers that dominate any score, a [`Scorer`] ranks nodes within a tier.
//! Stages are pure functions of the cluster snapshot and the request; the runner
//! ([`super::Scheduler`]) applies weights, records reasons and chooses.

use crate::cluster::Cluster;
use crate::diagnosis::Reason;
use crate::node::Node;
use crate::nodeset::NodeSet;
use crate::request::Request;
use crate::resource::ResourceSet;

/// What every stage may read during one decision.
#[derive(Clone, Copy)]
pub struct DecisionContext<'a> {
    /// The cluster, read-only for the whole decision.
    pub cluster: &'a Cluster,
    /// The request being placed.
    pub request: &'a Request,
    /// Values computed once per attempt for the stages, so that per-node work stays cheap.
    pub prepared: &'a Prepared,
}

/// Per-attempt values that depend on the request and the cluster but not on the node.
#[derive(Clone, Debug, Default)]
pub struct Prepared {
    /// For each soft actor affinity expression, in order, the nodes that satisfy it.
    pub soft_affinity: Vec<NodeSet>,
    /// The largest total of each resource among the alive nodes, when a scorer of the profile
    /// reads it ([`best_fit`](super::scorers::best_fit) scales leftovers by it); `None` when
    /// none does, or outside a ranking attempt.
    pub largest_total: Option<ResourceSet>,
    /// For a bundle of a placement group being planned, what the group's ranking reads;
    /// `None` for every other request.
    pub group: Option<GroupContext>,
}

/// What the ranking of a placement group's bundle reads (see
/// [`group::ranking`](super::group::ranking)).
#[derive(Clone, Debug, Default)]
pub struct GroupContext {
    /// The nodes the plan has put bundles on so far, kept bundles included.
    pub used: NodeSet,
    /// PACK: `Some(true)`, the used nodes are preferred; SPREAD: `Some(false)`, the others
    /// are; the strict strategies: `None`.
    pub prefer_used: Option<bool>,
    /// PACK: the bundles still to place, this one first, in planning order; else empty.
    pub rest: RestBundles,
}

/// The bundles of a PACK plan still to place, this one first: a window on the plan's whole
/// order, shared between its steps so that a step costs nothing per bundle left.
#[derive(Clone, Debug, Default)]
pub struct RestBundles {
    /// Every bundle of the plan, in planning order.
    order: std::sync::Arc<[ResourceSet]>,
    /// `sums[i]`: the sum of `order[..i]`; `None` when some bundle names a unit-instance
    /// resource (which instances are free decides what fits, not quantities alone) or a sum
    /// reaches the largest quantity any node can have.
    sums: Option<std::sync::Arc<[ResourceSet]>>,
    /// Where the rest starts in `order`.
    from: usize,
}

impl RestBundles {
    /// The plan's bundles in planning order; the rest starts at the first.
    pub fn new(
        order: Vec<ResourceSet>,
        registry: &crate::resource::ResourceRegistry,
    ) -> RestBundles {
        let unit_instance =
            order.iter().any(|b| b.iter().any(|(r, _)| registry.is_unit_instance(r)));
        let sums = (!unit_instance).then(|| {
            let mut sums = Vec::with_capacity(order.len() + 1);
            let mut sum = ResourceSet::new();
            sums.push(sum.clone());
            for bundle in &order {
                sum.add(bundle);
                sums.push(sum.clone());
            }
            sums
        });
        let sums = sums.filter(|s| {
            s.last().is_none_or(|total| total.iter().all(|(_, q)| q <= crate::Quantity::MAX))
        });
        RestBundles { order: order.into(), sums: sums.map(Into::into), from: 0 }
    }

    /// The same bundles, starting `position` bundles into the order.
    pub fn starting_at(&self, position: usize) -> RestBundles {
        RestBundles { from: position.min(self.order.len()), ..self.clone() }
    }

    /// How many bundles are left.
    pub fn len(&self) -> usize {
        self.order.len() - self.from
    }

    /// True when none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many of the rest, in order, fit on `node` one after another: by the quantities'
    /// running sums against what the node has free (a binary search, since sums only grow),
    /// or, when instances decide, by reserving them on a copy of the node.
    pub fn held_by(&self, node: &Node, registry: &crate::resource::ResourceRegistry) -> usize {
        let Some(sums) = &self.sums else {
            let mut copy = node.clone();
            let rest = &self.order[self.from..];
            return rest.iter().take_while(|b| copy.reserve(b, registry).is_ok()).count();
        };
        // `sums[from + k] − sums[from] ≤ available` ⇔ `sums[from + k] ≤ sums[from] + available`.
        let mut room = sums[self.from].clone();
        room.add(node.available());
        let window = &sums[self.from + 1..];
        window.partition_point(|sum| sum.is_subset_of(&room))
    }
}

/// A filter's answer for one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The node passes.
    Fit,
    /// The node fails, and why.
    Unfit(Reason),
}

/// Whether a filter's answer can change while the cluster's nodes and their totals stay the
/// same. The runner relies on every static filter running before every dynamic one: then a
/// node's first failure says whether it could ever take the request (pending vs infeasible).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FilterKind {
    /// Depends on what the node *is* (its totals): failing makes the node infeasible.
    Static,
    /// Depends on what the node is *doing* (its free resources): failing makes it busy.
    Dynamic,
}

/// Decides whether one node can take the request.
///
/// Contract: no allocation and no hashing per call (this runs once per candidate node);
/// `Unfit` carries the reason users will read; the answer depends only on the context and node.
pub trait Filter: Send + Sync {
    /// A short stable name, shown by `berth explain`.
    fn name(&self) -> &'static str;
    /// Static or dynamic; see [`FilterKind`].
    fn kind(&self) -> FilterKind;
    /// The verdict for `node`.
    fn check(&self, cx: &DecisionContext<'_>, node: &Node) -> Verdict;

    /// True when the answer is a function of the node as it is (what [`Node::version`]
    /// identifies; the definitions of the taints it carries count as part of it), of the
    /// request's resources, tolerations and, under NODE_LABEL, node-label selectors, and of
    /// the stage's own settings, and of nothing else: not the rest of the request or the
    /// cluster, not [`Prepared`]. The scheduler then reuses
    /// the answer while the node is unchanged and an equal request comes (see
    /// `pipeline::memo`). False unless the stage says so.
    fn node_and_request_only(&self) -> bool {
        false
    }
}

/// A lexicographic preference: nodes it prefers come before any node it does not, whatever
/// their scores (for example, CPU-only requests avoid GPU nodes when others can take them).
///
/// `Send` but not `Sync`, as [`Scorer`]: a preference may keep counts between decisions in
/// plain cells.
pub trait Preference: Send {
    /// A short stable name, shown by `berth explain`.
    fn name(&self) -> &'static str;
    /// False when the preference has nothing to say about this request (it then sorts no
    /// node and is not listed). Called once per decision.
    fn applies(&self, _cx: &DecisionContext<'_>) -> bool {
        true
    }
    /// True when `node` is in the preferred tier for this request.
    fn prefers(&self, cx: &DecisionContext<'_>, node: &Node) -> bool;

    /// See [`Filter::node_and_request_only`]; false unless the preference says so.
    fn node_and_request_only(&self) -> bool {
        false
    }
}

/// A node score, 0 (worst) to 100 (best) points, before its weight is applied.
///
/// Kept in millionths of a point: a score defined as a ratio (seed 001's ResourceStrategyFit
/// and retention) keeps six decimals instead of being cut to a whole point, so nodes that
/// differ by a fraction of a point rank as the formula says. Scorers defined in whole points
/// ([`Score::new`]) are unchanged by the scale: every score is multiplied by the same factor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Score(u32);

impl Score {
    /// Millionths of a point per point.
    pub const UNIT: u32 = 1_000_000;
    /// The best score.
    pub const MAX: Score = Score(100 * Score::UNIT);
    /// The worst score.
    pub const MIN: Score = Score(0);

    /// A score of `points` whole points, clamped to 0..=100.
    pub fn new(points: u32) -> Score {
        Score(points.min(100) * Score::UNIT)
    }

    /// `100 × numerator / denominator` points, to the nearest millionth of a point (halves
    /// round up), clamped to 0..=100; 0 when `denominator` is 0. Exact to 5·10⁻⁷ of a point
    /// for any operands; never overflows.
    pub fn from_ratio(numerator: u128, denominator: u128) -> Score {
        if denominator == 0 {
            return Score::MIN;
        }
        // 100 points or more: clamped, whatever the operands.
        if numerator >= denominator {
            return Score::MAX;
        }
        let scale = 100 * u128::from(Score::UNIT);
        // numerator × 10⁸ overflows u128 only past 3.4·10³⁰: halve both until it fits (a
        // relative change below 10⁻²⁰, far under the millionth kept).
        let (mut numerator, mut denominator) = (numerator, denominator);
        while numerator.checked_mul(scale).is_none() {
            numerator >>= 1;
            denominator >>= 1;
        }
        let scaled = numerator * scale;
        // Round to nearest, halves up, without adding to `scaled` (it may be near u128::MAX).
        let (quotient, rest) = (scaled / denominator, scaled % denominator);
        let micros = quotient + u128::from(rest >= denominator - rest);
        Score(micros.min(u128::from(Score::MAX.0)) as u32)
    }

    /// The score in millionths of a point, 0..=100,000,000.
    pub const fn micros(self) -> u32 {
        self.0
    }

    /// The score of [`Score::micros`] `micros`, clamped to 0..=100 points.
    pub(crate) fn from_micros(micros: u32) -> Score {
        Score(micros.min(Score::MAX.0))
    }
}

impl std::fmt::Display for Score {
    /// Points with up to six decimals, trailing zeros dropped: `50`, `46.666667`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&points_text(u64::from(self.0)))
    }
}

/// `micros` millionths of a point as text: `466.666667`, `200` (trailing zeros dropped). For
/// scores and for totals (Σ weight × score, also in millionths).
pub fn points_text(micros: u64) -> String {
    let unit = u64::from(Score::UNIT);
    let (whole, fraction) = (micros / unit, micros % unit);
    if fraction == 0 {
        return whole.to_string();
    }
    let decimals = format!("{fraction:06}");
    format!("{whole}.{}", decimals.trim_end_matches('0'))
}

/// Ranks nodes that passed every filter.
///
/// Contract: 0..=100, higher is better; no allocation or hashing per call.
///
/// `Send` but not `Sync`: a scheduler decides one request at a time (`&mut`), and scorers
/// that keep what they learned or computed between calls (shapes, memos, counts) keep it in
/// plain cells. Locks there cost the trace replay (`berth sim`) about 7% of its time: an
/// uncontended lock and unlock per scorer and node, a dozen million times per replay.
pub trait Scorer: Send {
    /// A short stable name, shown by `berth explain`.
    fn name(&self) -> &'static str;
    /// False when the scorer has nothing to say about this request (it is then skipped and not
    /// listed). Called once per attempt.
    fn applies(&self, _cx: &DecisionContext<'_>) -> bool {
        true
    }
    /// The raw score of `node`.
    fn score(&self, cx: &DecisionContext<'_>, node: &Node) -> Score;

    /// See [`Filter::node_and_request_only`]; false unless the scorer says so.
    fn node_and_request_only(&self) -> bool {
        false
    }

    /// The scorer this one wraps and whose scores it gives unchanged, if it only adds when it
    /// applies: the runner then scores nodes with that one, one virtual call per node, not two.
    fn wrapped(&self) -> Option<&dyn Scorer> {
        None
    }
}

/// A scorer and the weight the runner multiplies its score by.
pub struct Weighted {
    /// The scorer.
    pub scorer: Box<dyn Scorer>,
    /// Its weight.
    pub weight: u32,
}

impl Weighted {
    /// The scorer to call per node once this one applies (see [`Scorer::wrapped`]), and the
    /// weight.
    pub(crate) fn per_node(&self) -> (&dyn Scorer, u32) {
        (self.scorer.wrapped().unwrap_or(self.scorer.as_ref()), self.weight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_round_to_the_nearest_millionth_and_never_overflow() {
        let cases: [(u128, u128, &str); 8] = [
            (1, 3, "33.333333"),
            (2, 3, "66.666667"),
            (1, 8, "12.5"),
            (1, 200_000_000, "0.000001"), // exactly half a millionth: rounds up
            (0, 0, "0"),
            (5, 4, "100"), // above 100 points: clamped
            (u128::MAX - 1, u128::MAX, "100"),
            (u128::MAX / 3, u128::MAX, "33.333333"),
        ];
        for (numerator, denominator, points) in cases {
            let score = Score::from_ratio(numerator, denominator);
            assert_eq!(score.to_string(), points, "{numerator}/{denominator}");
        }
        assert_eq!(points_text(466_666_670), "466.66667");
        assert_eq!(points_text(200_000_000), "200");
    }
}
