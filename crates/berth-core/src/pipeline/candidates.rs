//! Stage 1, candidates: the nodes an attempt looks at one by one, after whole sets are ruled
//! out by index (node state, the affinity node, label selectors, resources some nodes lack,
//! hard actor affinity), each set with its reason.

use std::borrow::Cow;

use smallvec::{smallvec, SmallVec};

use super::attempts::Scope;
use super::explain::{node_line, AttemptExplanation};
use super::stage::DecisionContext;
use super::visit::run_filters;
use super::Scheduler;
use crate::actors::{AffinityExpression, MatchMode};
use crate::cluster::Cluster;
use crate::diagnosis::{AttemptDiagnosis, Reason, ANY_EXPRESSION};
use crate::nodeset::NodeSet;
use crate::quantity::Quantity;
use crate::request::{Request, Strategy};
use crate::resource::Shortfall;

/// Stage 1's answer: the nodes to look at one by one, and the sets ruled out whole: for good
/// (`excluded`) or for now (`waiting`: actor affinity, which placements elsewhere can change).
pub(super) struct Candidates<'c> {
    pub(super) include: Cow<'c, NodeSet>,
    excluded: SmallVec<[Excluded<'c>; 5]>,
    /// Nodes actor affinity rules out for now, rule by rule: each entry's set minus the next
    /// entry's set (minus `include` after the last) waits for its reason. Kept as the sets the
    /// rules narrowed (no copy), so the nodes a rule ruled out are built only when listed
    /// ([`Scheduler::count_waiting`]); counted, they are a difference of sizes.
    pub(super) waiting: SmallVec<[(Cow<'c, NodeSet>, Reason); 2]>,
}

/// Nodes ruled out whole for one reason: always counted, listed only when explaining (a
/// decision need not build a set it only counts: `alive − GPU nodes` is most of a cluster).
struct Excluded<'c> {
    reason: Reason,
    count: u64,
    nodes: Option<Cow<'c, NodeSet>>,
}

impl<'c> Excluded<'c> {
    fn listed(nodes: Cow<'c, NodeSet>, reason: Reason) -> Excluded<'c> {
        Excluded { reason, count: nodes.len(), nodes: Some(nodes) }
    }
}

impl<'c> Candidates<'c> {
    /// Narrows `include` to `kept` (a subset of it) by an actor affinity rule: the nodes it
    /// rules out wait for `reason`.
    fn wait(&mut self, kept: NodeSet, reason: Reason) {
        let before = std::mem::replace(&mut self.include, Cow::Owned(kept));
        if before.len() > self.include.len() {
            self.waiting.push((before, reason));
        }
    }

    /// Counts every node the attempt looks at, and those ruled out by index by their reason
    /// (recorded in `record` when explaining).
    pub(super) fn count(
        &self,
        found: &mut AttemptDiagnosis,
        record: Option<&mut AttemptExplanation>,
    ) {
        found.nodes = self.include.len()
            + self.excluded.iter().map(|e| e.count).sum::<u64>()
            + self.waiting.first().map_or(0, |(set, _)| set.len() - self.include.len());
        for excluded in &self.excluded {
            found.count(excluded.reason.kind(), excluded.count);
        }
        if let Some(record) = record {
            for excluded in &self.excluded {
                let nodes = excluded.nodes.iter().flat_map(|set| set.iter());
                record.nodes.extend(nodes.map(|node| node_line(node, Some(excluded.reason))));
            }
        }
    }
}

/// Stage 1: the nodes to look at one by one, and the sets ruled out whole with their reason:
/// node state, the affinity node, then the label selectors in force (by the label index), and
/// the resources some nodes lack (by the resource index). The sets ruled out are built only
/// when `explaining`; otherwise only counted.
pub(super) fn candidates<'c>(
    cluster: &'c Cluster,
    request: &Request,
    scope: Scope,
    alternative: Option<usize>,
    explaining: bool,
) -> Candidates<'c> {
    let mut candidates = match scope {
        Scope::Alive => Candidates {
            include: Cow::Borrowed(cluster.alive()),
            excluded: smallvec![
                Excluded::listed(Cow::Borrowed(cluster.draining()), Reason::Draining),
                Excluded::listed(Cow::Borrowed(cluster.suspect()), Reason::Suspect),
                Excluded::listed(Cow::Borrowed(cluster.dead()), Reason::Dead),
            ],
            waiting: SmallVec::new(),
        },
        Scope::Only(target) => {
            let only: NodeSet = target.into_iter().collect();
            let all = cluster
                .alive()
                .union(cluster.draining())
                .union(cluster.suspect())
                .union(cluster.dead());
            Candidates {
                include: Cow::Owned(cluster.alive().intersection(&only)),
                excluded: smallvec![
                    Excluded::listed(
                        Cow::Owned(cluster.draining().intersection(&only)),
                        Reason::Draining
                    ),
                    Excluded::listed(
                        Cow::Owned(cluster.suspect().intersection(&only)),
                        Reason::Suspect
                    ),
                    Excluded::listed(Cow::Owned(cluster.dead().intersection(&only)), Reason::Dead),
                    Excluded::listed(Cow::Owned(all.difference(&only)), Reason::NotAffinityNode),
                ],
                waiting: SmallVec::new(),
            }
        }
    };
    // Narrows `include` to `kept` (a subset of it), ruling out the rest for `reason`.
    let narrow = |candidates: &mut Candidates<'c>, kept: Cow<'c, NodeSet>, reason: Reason| {
        let count = candidates.include.len() - kept.len();
        let nodes = explaining.then(|| Cow::Owned(candidates.include.difference(&kept)));
        candidates.include = kept;
        // Several selectors (an alternative and a hard node label) count as one reason.
        match candidates.excluded.last_mut() {
            Some(last) if last.reason == reason && reason == Reason::LabelMismatch => {
                last.count += count;
                if let (Some(Cow::Owned(set)), Some(more)) = (last.nodes.as_mut(), nodes) {
                    set.union_with(&more);
                }
            }
            _ if count > 0 => candidates.excluded.push(Excluded { reason, count, nodes }),
            _ => {}
        }
    };
    let alternative = alternative.and_then(|i| request.alternative(i));
    let hard = match request.strategy() {
        Strategy::NodeLabel(node_label) => Some(&node_label.hard),
        _ => None,
    };
    let selectors = alternative.into_iter().chain(hard).filter(|s| !s.is_empty());
    for selector in selectors {
        let matched = cluster.label_index().select(selector, &candidates.include);
        narrow(&mut candidates, Cow::Owned(matched), Reason::LabelMismatch);
    }
    // A requested resource that some nodes do not have at all rules them out by the resource
    // index (GPU requests start from the GPU nodes). Resources every node has cost nothing.
    for (resource, requested) in request.resources().iter() {
        let having = cluster.nodes_having(resource);
        if having.is_some_and(|h| h.len() == cluster.len() as u64) {
            continue;
        }
        // From all alive nodes (no selector narrowed them): the cluster keeps that set.
        let from_alive = matches!(&candidates.include, Cow::Borrowed(set) if std::ptr::eq(*set, cluster.alive()));
        let kept = match cluster.alive_having(resource) {
            Some(alive_having) if from_alive => Cow::Borrowed(alive_having),
            _ => {
                Cow::Owned(having.map_or_else(NodeSet::new, |h| candidates.include.intersection(h)))
            }
        };
        let shortfall = Shortfall { resource, requested, have: Quantity::ZERO };
        narrow(&mut candidates, kept, Reason::InsufficientTotal(shortfall));
    }
    narrow_by_actors(cluster, request, &mut candidates);
    candidates
}

/// Actor affinity's part of stage 1: hard expressions keep the request on (or off) the nodes
/// of matching actors, and placed actors' hard anti-affinity keeps this actor off their
/// domains. Both can change as actors come and go, so the nodes they rule out are `waiting`.
fn narrow_by_actors(cluster: &Cluster, request: &Request, candidates: &mut Candidates<'_>) {
    let (actors, labels, namespace) =
        (cluster.actors(), cluster.label_index(), request.namespace());
    if let Strategy::ActorAffinity(affinity) = request.strategy() {
        let hard: SmallVec<[(usize, &AffinityExpression); 4]> =
            affinity.expressions.iter().enumerate().filter(|(_, e)| !e.soft).collect();
        match affinity.match_mode {
            MatchMode::All => {
                for (i, expression) in hard {
                    let kept =
                        actors.satisfying(namespace, expression, labels, &candidates.include);
                    candidates.wait(kept, Reason::ActorAffinity(i as u16));
                }
            }
            MatchMode::Any if !hard.is_empty() => {
                let mut kept = NodeSet::new();
                for (_, expression) in hard {
                    kept.union_with(&actors.satisfying(
                        namespace,
                        expression,
                        labels,
                        &candidates.include,
                    ));
                }
                candidates.wait(kept, Reason::ActorAffinity(ANY_EXPRESSION));
            }
            MatchMode::Any => {}
        }
    }
    if let Some(actor) = request.actor() {
        let kept =
            actors.unguarded(&actor.namespace, &actor.placed_labels(), labels, &candidates.include);
        // Borrowed: no guard applies, nothing is ruled out.
        if let Cow::Owned(kept) = kept {
            candidates.wait(kept, Reason::AntiAffinityGuard);
        }
    }
}

impl Scheduler {
    /// Nodes ruled out for now (actor affinity) count by their first static failure, if any,
    /// so that pending and infeasible stay exact. Only needed when nothing was chosen (or when
    /// explaining); otherwise each set counts by its reason.
    pub(super) fn count_waiting(
        &self,
        cx: &DecisionContext<'_>,
        (waiting, include): (&[(Cow<'_, NodeSet>, Reason)], &NodeSet),
        chosen: bool,
        found: &mut AttemptDiagnosis,
        mut record: Option<&mut AttemptExplanation>,
    ) {
        for (i, (before, reason)) in waiting.iter().enumerate() {
            let after: &NodeSet = waiting.get(i + 1).map_or(include, |(next, _)| next);
            if chosen && record.is_none() {
                found.count(reason.kind(), before.len() - after.len());
                continue;
            }
            for index in before.difference(after).iter() {
                let Some(node) = cx.cluster.node(index) else { continue };
                let mut line = record.as_ref().map(|_| node_line(index, Some(*reason)));
                let failure = run_filters(&self.filters, cx, node, line.as_mut(), true);
                found.count(failure.unwrap_or(*reason).kind(), 1);
                if let (Some(record), Some(line)) = (record.as_deref_mut(), line) {
                    record.nodes.push(line);
                }
            }
        }
    }
}
