//! Stages 2 and 3, filters then preferences and scorers, node by node: the hot loop every
//! decision runs, written once for requests and for the bundles of a placement group plan.

use super::explain::{node_line, AttemptExplanation, NodeExplanation, ScoreLine};
use super::filters::FilterStage;
use super::memo::{Outcome, VisitMemo};
use super::select::Select;
use super::stage::{DecisionContext, Filter, FilterKind, Preference, Scorer, Verdict};
use super::{NodesToScore, Scheduler};
use crate::cluster::Cluster;
use crate::diagnosis::{AttemptDiagnosis, Reason};
use crate::node::{Node, NodeIndex};
use crate::nodeset::NodeSet;

/// A node that passed every filter, with its rank.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ranked {
    pub(super) node: NodeIndex,
    pub(super) tier: u32,
    pub(super) score: u64,
}

/// Stage 3 for one node that passed the filters: its preference tier (one bit per preference,
/// the first most significant) and its weighted score, recorded in `line` when explaining.
pub(super) struct Ranking<'a, 'c> {
    pub(super) cx: &'a DecisionContext<'c>,
    pub(super) preferences: &'a [&'a dyn Preference],
    /// Each scorer that applies as called per node ([`Weighted::per_node`](super::stage::Weighted::per_node)), and its weight.
    pub(super) scorers: &'a [(&'a dyn Scorer, u32)],
    /// False when the attempt selects without ranking (SPREAD, RANDOM, one node): no total
    /// is recorded.
    pub(super) ranks: bool,
}

impl Ranking<'_, '_> {
    #[inline(always)]
    fn rank(&self, node: &Node, mut line: Option<&mut NodeExplanation>) -> Ranked {
        let mut ranked = Ranked { node: node.index(), tier: 0, score: 0 };
        for preference in self.preferences {
            let prefers = preference.prefers(self.cx, node);
            ranked.tier = ranked.tier << 1 | u32::from(prefers);
            if let Some(line) = line.as_mut() {
                line.preferences.push((preference.name(), prefers));
            }
        }
        for &(scorer, weight) in self.scorers {
            let raw = scorer.score(self.cx, node);
            let points = u64::from(raw.micros()) * u64::from(weight);
            ranked.score = ranked.score.saturating_add(points);
            if let Some(line) = line.as_mut() {
                line.scores.push(ScoreLine { scorer: scorer.name(), raw, weight });
            }
        }
        ranked
    }
}

/// Where the filters read a node: the cluster, or a group plan's overlay (its copies of the
/// nodes the plan reserved on, the cluster's nodes elsewhere).
pub(super) trait NodeSource {
    fn node_at(&self, index: NodeIndex) -> Option<&Node>;
}

impl NodeSource for Cluster {
    #[inline]
    fn node_at(&self, index: NodeIndex) -> Option<&Node> {
        self.node(index)
    }
}

/// Stages 2 and 3 over the candidates, written once for every request and bundle: each node
/// through the filters, each one that passes ranked; at most `bounds.0` of them (from node
/// `bounds.1` on, see [`NodesToScore`]).
pub(super) struct Visit<'a, 'c> {
    pub(super) filters: &'a [FilterStage],
    /// `filters` are the built-in ones alone: outside explanations, they run as one call.
    pub(super) builtin_filters: bool,
    pub(super) ranking: &'a Ranking<'a, 'c>,
    pub(super) bounds: (Option<usize>, u32),
}

/// What a visit looked at.
pub(super) struct Visited {
    /// Nodes visited.
    pub(super) nodes: u64,
    /// Where the visit stopped early, if it did: the next visit starts there.
    pub(super) stopped_at: Option<u32>,
}

impl Visit<'_, '_> {
    /// Pushes the nodes that pass onto `ranked` (in visit order) and counts the reasons of
    /// those that do not into `found`; records every node's line when explaining.
    /// With `memo` (the memo and the request's shape), a node whose last visit was for an
    /// equal request and that has not changed since is not looked at again.
    pub(super) fn run<S: NodeSource + ?Sized>(
        &self,
        nodes: &S,
        include: &NodeSet,
        found: (&mut Vec<Ranked>, &mut AttemptDiagnosis),
        memo: Option<(&mut VisitMemo, u64)>,
        record: Option<&mut AttemptExplanation>,
    ) -> Visited {
        // Compiled twice: without a record, no line exists, and the per-node bookkeeping of
        // explanations is gone from the loop every decision runs.
        match record {
            None => self.visit::<S, false>(nodes, include, found, memo, None),
            Some(record) => self.visit::<S, true>(nodes, include, found, memo, Some(record)),
        }
    }

    // Always inlined, as are the filters and the ranking: each instance is one loop.
    #[inline(always)]
    fn visit<S: NodeSource + ?Sized, const EXPLAINING: bool>(
        &self,
        nodes: &S,
        include: &NodeSet,
        (ranked, found): (&mut Vec<Ranked>, &mut AttemptDiagnosis),
        mut memo: Option<(&mut VisitMemo, u64)>,
        mut record: Option<&mut AttemptExplanation>,
    ) -> Visited {
        let (limit, start) = self.bounds;
        let mut visited = Visited { nodes: 0, stopped_at: None };
        for index in include.iter_from(start) {
            if limit.is_some_and(|limit| ranked.len() >= limit) {
                visited.stopped_at = Some(index.0);
                break;
            }
            visited.nodes += 1;
            let Some(node) = nodes.node_at(index) else {
                continue;
            };
            let mut line = EXPLAINING.then(|| node_line(index, None));
            let remembered = memo.as_ref().and_then(|(memo, shape)| memo.get(node, *shape));
            let outcome = remembered.unwrap_or_else(|| {
                let failure = if self.builtin_filters && !EXPLAINING {
                    FilterStage::builtin_failure(self.ranking.cx, node)
                } else {
                    run_filters(self.filters, self.ranking.cx, node, line.as_mut(), false)
                };
                let outcome = match failure {
                    Some(reason) => Outcome::Unfit(reason.kind()),
                    None => {
                        let rank = self.ranking.rank(node, line.as_mut());
                        if let Some(line) = line.as_mut() {
                            line.total = self.ranking.ranks.then_some(rank.score);
                        }
                        Outcome::Fit { tier: rank.tier, score: rank.score }
                    }
                };
                if let Some((memo, shape)) = memo.as_mut() {
                    memo.put(node, *shape, outcome);
                }
                outcome
            });
            match outcome {
                Outcome::Unfit(kind) => found.count(kind, 1),
                Outcome::Fit { tier, score } => {
                    found.could_fit_later = true;
                    ranked.push(Ranked { node: index, tier, score });
                }
            }
            if let (Some(record), Some(line)) = (record.as_deref_mut(), line) {
                record.nodes.push(line);
            }
        }
        visited
    }
}

/// Runs the filters (only the static ones when `static_only`) on one node; returns the first
/// failure. When explaining, every filter runs and each verdict is recorded in `line`.
#[inline(always)]
pub(super) fn run_filters(
    filters: &[FilterStage],
    cx: &DecisionContext<'_>,
    node: &Node,
    mut line: Option<&mut NodeExplanation>,
    static_only: bool,
) -> Option<Reason> {
    let mut failure = None;
    for filter in filters {
        if static_only && filter.kind() != FilterKind::Static {
            break;
        }
        let verdict = filter.check(cx, node);
        if let Some(line) = line.as_deref_mut() {
            line.filters.push((filter.name(), verdict));
        }
        if let Verdict::Unfit(reason) = verdict {
            failure.get_or_insert(reason);
            if line.is_none() {
                break;
            }
        }
    }
    failure
}

impl Scheduler {
    /// How many feasible nodes to find before stopping, and the node to start from (see
    /// `NodesToScore`); when explaining, every node from the first.
    pub(super) fn scan_bounds(
        &self,
        select: Select,
        candidates: u64,
        explaining: bool,
    ) -> (Option<usize>, u32) {
        let limit = match (self.config.nodes_to_score, select) {
            _ if explaining => None,
            (_, Select::RoundRobin) => Some(1),
            (NodesToScore::Adaptive { from_nodes, feasible }, Select::TopK | Select::Random)
                if candidates > u64::from(from_nodes) =>
            {
                Some(feasible.max(1) as usize)
            }
            _ => None,
        };
        let start = match (limit, select) {
            (Some(_), Select::RoundRobin) => self.spread_cursor,
            (Some(_), _) => self.scan_cursor,
            (None, _) => 0,
        };
        (limit, start)
    }
}
