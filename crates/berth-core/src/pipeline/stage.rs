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
    /// reads it ([`best_fit`](super::profile::best_fit) scales leftovers by it); `None` when
    /// none does, or outside a ranking attempt.
    pub largest_total: Option<ResourceSet>,
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
}

/// A lexicographic preference: nodes it prefers come before any node it does not, whatever
/// their scores (for example, CPU-only requests avoid GPU nodes when others can take them).
pub trait Preference: Send + Sync {
    /// A short stable name, shown by `berth explain`.
    fn name(&self) -> &'static str;
    /// False when the preference has nothing to say about this request (it then sorts no
    /// node and is not listed). Called once per decision.
    fn applies(&self, _cx: &DecisionContext<'_>) -> bool {
        true
    }
    /// True when `node` is in the preferred tier for this request.
    fn prefers(&self, cx: &DecisionContext<'_>, node: &Node) -> bool;
}

/// A node score, 0 (worst) to 100 (best), before its weight is applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Score(u8);

impl Score {
    /// The best score.
    pub const MAX: Score = Score(100);
    /// The worst score.
    pub const MIN: Score = Score(0);

    /// A score from `value`, clamped to 0..=100.
    pub fn new(value: u32) -> Score {
        Score(value.min(100) as u8)
    }

    /// The score as a number.
    pub fn get(self) -> u32 {
        u32::from(self.0)
    }
}

/// Ranks nodes that passed every filter.
///
/// Contract: 0..=100, higher is better; no allocation or hashing per call.
pub trait Scorer: Send + Sync {
    /// A short stable name, shown by `berth explain`.
    fn name(&self) -> &'static str;
    /// False when the scorer has nothing to say about this request (it is then skipped and not
    /// listed). Called once per attempt.
    fn applies(&self, _cx: &DecisionContext<'_>) -> bool {
        true
    }
    /// The raw score of `node`.
    fn score(&self, cx: &DecisionContext<'_>, node: &Node) -> Score;
}

/// A scorer and the weight the runner multiplies its score by.
pub struct Weighted {
    /// The scorer.
    pub scorer: Box<dyn Scorer>,
    /// Its weight.
    pub weight: u32,
}
