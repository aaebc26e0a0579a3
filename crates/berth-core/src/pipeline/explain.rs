//! What `berth explain` shows: every node, every stage's answer, every score and weight.
//!
//! The runner fills this in as it decides, from the same values it decides with.

use super::stage::{Score, Verdict};
use crate::diagnosis::{AttemptKind, Reason};
use crate::node::NodeIndex;

/// One decision, attempt by attempt.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Explanation {
    /// In the order the strategy ran them.
    pub attempts: Vec<AttemptExplanation>,
}

/// One attempt over the cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct AttemptExplanation {
    /// Which attempt.
    pub kind: AttemptKind,
    /// Which label selector was in force (see [`crate::AttemptDiagnosis::alternative`]).
    pub alternative: Option<usize>,
    /// Every node of the cluster, in index order.
    pub nodes: Vec<NodeExplanation>,
    /// The nodes the final pick was made among (the top k for DEFAULT).
    pub shortlist: Vec<NodeIndex>,
    /// The node chosen, if any.
    pub chosen: Option<NodeIndex>,
    /// For a request into a placement group, every bundle of the group in index order and
    /// what the bundle stage said of it.
    pub bundles: Vec<BundleVerdict>,
}

/// What the placement-group stage said of one bundle of the group.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BundleVerdict {
    /// The request went into it.
    Chosen,
    /// Its ledger cannot take the request: too small ever, or too full now.
    Unfit(Reason),
    /// Lost with its node; it waits to be re-planned.
    Lost,
    /// The request names another bundle.
    NotTargeted,
    /// An earlier bundle took the request.
    NotTried,
}

/// One node in one attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeExplanation {
    /// The node.
    pub node: NodeIndex,
    /// Set when the candidate stage excluded the node before any filter looked at it.
    pub excluded: Option<Reason>,
    /// Each filter's verdict, in order. All filters run when explaining.
    pub filters: Vec<(&'static str, Verdict)>,
    /// Each preference: whether the node is in its preferred tier.
    pub preferences: Vec<(&'static str, bool)>,
    /// Each scorer's raw score and weight.
    pub scores: Vec<ScoreLine>,
    /// Σ weight × score in millionths of a point (see [`super::stage::points_text`]), when
    /// the node passed and the attempt ranks nodes.
    pub total: Option<u64>,
}

impl NodeExplanation {
    /// True when the node passed the candidate stage and every filter.
    pub fn passed(&self) -> bool {
        self.excluded.is_none() && self.filters.iter().all(|(_, v)| *v == Verdict::Fit)
    }

    /// The reasons the node was rejected, in stage order.
    pub fn reasons(&self) -> impl Iterator<Item = Reason> + '_ {
        self.excluded.into_iter().chain(self.filters.iter().filter_map(|(_, v)| match v {
            Verdict::Fit => None,
            Verdict::Unfit(reason) => Some(*reason),
        }))
    }
}

/// One scorer's contribution to a node's total.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScoreLine {
    /// The scorer's name.
    pub scorer: &'static str,
    /// Its score before the weight.
    pub raw: Score,
    /// The weight.
    pub weight: u32,
}

/// A node's line in an explanation, before its stages run (`excluded`: ruled out whole).
pub(super) fn node_line(node: NodeIndex, excluded: Option<Reason>) -> NodeExplanation {
    NodeExplanation {
        node,
        excluded,
        filters: Vec::new(),
        preferences: Vec::new(),
        scores: Vec::new(),
        total: None,
    }
}
