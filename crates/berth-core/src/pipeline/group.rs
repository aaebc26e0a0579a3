//! Placement-group planning: every bundle or none.
//!
//! Assumptions: bundles are small relative to nodes, groups are few relative to tasks, and a
//! plan must never leave a trace when it fails.
//!
//! Rules:
//! - A plan is made on an *overlay*: copies of the nodes it touches. Only a complete plan is
//!   committed, with exactly the GPU instances planned ([`Cluster::reserve_group`]).
//! - Each bundle is checked by the scheduler's own filters (taints against the group's
//!   tolerations, with rare-resource tolerations added as for tasks; resources; instances) and
//!   its label selector (through the label index), exactly as a task would be.
//! - Hardest bundles first: more GPU, then more custom resources, then more memory, then more
//!   CPU; bundle order breaks ties.
//! - Least waste: among nodes that can take a bundle, the one whose requested resources are
//!   left with the smallest share free after placing it (Σ free/total over the bundle's
//!   resources), node order on ties.
//! - `PACK` prefers nodes the group already uses and, for a new node, the one that holds the
//!   most of the bundles still to place; `SPREAD` prefers nodes it does not use yet; both fall
//!   back to any node (best effort). `STRICT_PACK` tries each node with all bundles at once and takes
//!   the one that fits them all with the least waste. `STRICT_SPREAD` is a bipartite matching of
//!   bundles to distinct nodes (exact: a bundle on one node cannot affect another node), each
//!   bundle trying its least-waste nodes first.
//! - Alternatives (`fallback_strategy`) are tried in order; the first that can be reserved now
//!   wins. The group is pending when some alternative could be reserved once work ends, and
//!   infeasible when none ever could.

mod matching;
pub mod ranking;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::attempts::Scope;
use super::candidates::candidates;
use super::explain::AttemptExplanation;
use super::stage::{
    DecisionContext, GroupContext, Preference, Prepared, RestBundles, Scorer, Weighted,
};
use super::visit::{run_filters, NodeSource, Ranking, Visit};
use super::Scheduler;
use crate::cluster::{Cluster, ClusterError, NamedInstances};
use crate::diagnosis::{AttemptDiagnosis, AttemptKind, Names, ReasonKind};
use crate::node::{Node, NodeIndex};
use crate::nodeset::NodeSet;
use crate::placement_group::{BundleSet, BundleState, GroupSpec, GroupStrategy};
use crate::request::{Request, Strategy};
use crate::resource::{ResourceId, ResourceSet};

/// Where each bundle goes and which instances it takes.
pub type GroupPlan = Vec<(usize, NodeIndex, NamedInstances)>;

/// The outcome of placing (or re-planning) a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupDecision {
    /// Every bundle is reserved.
    Created {
        /// The alternative reserved (0: the bundles asked for).
        alternative: usize,
        /// The node of each bundle, in bundle order.
        nodes: Vec<NodeIndex>,
        /// Why each alternative before it could not be reserved (empty when the bundles asked
        /// for were): recorded as they were tried, so an explanation never plans them again.
        tried: GroupDiagnosis,
    },
    /// Nothing was reserved; some alternative could be once work ends.
    Pending(GroupDiagnosis),
    /// Nothing was reserved; no alternative ever could be.
    Infeasible(GroupDiagnosis),
}

/// Every bundle attempt of every alternative tried, as the stages recorded them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupExplanation {
    /// The alternatives, in the order they were tried.
    pub alternatives: Vec<AlternativeExplanation>,
}

/// The bundle attempts of one alternative.
#[derive(Clone, Debug, PartialEq)]
pub struct AlternativeExplanation {
    /// Which alternative (0: the bundles asked for; `i`: `fallback_strategy[i − 1]`).
    pub alternative: usize,
    /// Each bundle attempt, in planning order (hardest bundle first), with the node the plan
    /// chose for it, if any (given back when the alternative failed at a later bundle).
    pub bundles: Vec<AttemptExplanation>,
}

/// Why a group was not reserved: one entry per alternative tried.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupDiagnosis {
    /// The alternatives, in order.
    pub alternatives: Vec<AlternativeDiagnosis>,
}

/// Why one alternative could not be reserved now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlternativeDiagnosis {
    /// Which alternative (0: the bundles asked for; `i`: `fallback_strategy[i − 1]`).
    pub alternative: usize,
    /// Bundles that found a node in the plan before it failed, with the node.
    pub planned: Vec<(usize, NodeIndex)>,
    /// The bundles that found no node, with why (per node, as for tasks).
    pub failed: Vec<(usize, AttemptDiagnosis)>,
    /// True when this alternative could be reserved once work ends.
    pub could_fit_later: bool,
    /// A remark when the counts do not say it all.
    pub note: Option<String>,
}

impl GroupDiagnosis {
    /// One line per alternative and failing bundle.
    pub fn describe<'n>(&self, names: impl Into<Names<'n>>) -> String {
        let names = names.into();
        let mut lines = Vec::new();
        for alternative in &self.alternatives {
            let name = match alternative.alternative {
                0 => "bundles".to_string(),
                i => format!("fallback_strategy[{}]", i - 1),
            };
            let mut line = format!("{name}:");
            if let Some(note) = &alternative.note {
                line.push_str(&format!(" {note};"));
            }
            for (_, diagnosis) in &alternative.failed {
                line.push_str(&format!(" {};", diagnosis.describe(names)));
            }
            lines.push(line.trim_end_matches(';').to_string());
        }
        lines.join("\n")
    }
}

/// Nodes copied for planning, so that a failed plan leaves the cluster untouched; and, when
/// explaining, every bundle attempt as its stages recorded it.
struct Overlay<'c> {
    cluster: &'c Cluster,
    nodes: FxHashMap<NodeIndex, Node>,
    /// At most this many nodes are collected per bundle (a large cluster need not be visited
    /// whole when a few dozen nodes fit); `None`: every node.
    limit: Option<usize>,
    /// Where visits start, so that groups spread over the cluster.
    start: u32,
    /// The bundle attempts, in the order they ran, when explaining.
    record: Option<Vec<AttemptExplanation>>,
}

impl<'c> Overlay<'c> {
    fn new(cluster: &'c Cluster, explaining: bool) -> Overlay<'c> {
        Overlay {
            cluster,
            nodes: FxHashMap::default(),
            limit: None,
            start: 0,
            record: explaining.then(Vec::new),
        }
    }

    fn node(&self, index: NodeIndex) -> Option<&Node> {
        self.nodes.get(&index).or_else(|| self.cluster.node(index))
    }

    /// Reserves `bundle` on the overlay copy of `index`; returns the instances taken.
    fn reserve(&mut self, index: NodeIndex, bundle: &ResourceSet) -> Option<NamedInstances> {
        if !self.nodes.contains_key(&index) {
            self.nodes.insert(index, self.cluster.node(index)?.clone());
        }
        let node = self.nodes.get_mut(&index)?;
        let shares = node.reserve(bundle, self.cluster.registry()).ok()?;
        Some(shares.iter().map(|(r, s)| (*r, s.iter().map(|x| x.instance).collect())).collect())
    }
}

impl NodeSource for Overlay<'_> {
    #[inline]
    fn node_at(&self, index: NodeIndex) -> Option<&Node> {
        self.node(index)
    }
}

/// The request bundle `i` of `set` is checked as: its resources, its selector, the group's
/// tolerations. `None` when the bundle is not a valid request (the group was not validated).
pub fn bundle_request(
    cluster: &Cluster,
    spec: &GroupSpec,
    set: &BundleSet,
    i: usize,
) -> Option<Request> {
    let bundle = set.bundles.get(i)?.clone();
    let mut request = Request::new(bundle, Strategy::Default, cluster.registry())
        .ok()?
        .with_tolerations(spec.tolerations.clone());
    if let Some(selector) = set.selector(i) {
        request = request.with_label_selector(selector.clone());
    }
    Some(request)
}

/// Hardest first: GPU, then custom resources, then memory, then CPU, descending.
fn hardness(bundle: &ResourceSet) -> (i64, i64, i64, i64) {
    let custom: i64 = bundle
        .iter()
        .filter(|(r, _)| r.index() > ResourceId::OBJECT_STORE_MEMORY.index())
        .fold(0i64, |sum, (_, q)| sum.saturating_add(q.units()));
    (
        bundle.get(ResourceId::GPU).units(),
        custom,
        bundle.get(ResourceId::MEMORY).units(),
        bundle.get(ResourceId::CPU).units(),
    )
}

/// A complete plan of one alternative.
struct AlternativePlan {
    /// Each bundle's node, in bundle order.
    nodes: Vec<NodeIndex>,
    /// What to reserve: (node, instances) in bundle order.
    reservations: Vec<(NodeIndex, NamedInstances)>,
}

/// A group refused before any planning: it breaks [`GroupSpec::validate`] or its ID is taken.
fn refusal(cluster: &Cluster, spec: &GroupSpec) -> Option<GroupDecision> {
    let note = match spec.validate(cluster.registry()) {
        Err(err) => err.to_string(),
        Ok(()) if cluster.group(spec.id.as_str()).is_some() => {
            format!("placement group {} exists already", spec.id)
        }
        Ok(()) => return None,
    };
    let refused = AlternativeDiagnosis {
        alternative: 0,
        planned: Vec::new(),
        failed: Vec::new(),
        could_fit_later: false,
        note: Some(note),
    };
    Some(GroupDecision::Infeasible(GroupDiagnosis { alternatives: vec![refused] }))
}

/// Pending when some alternative could fit later, else infeasible.
fn waiting(diagnosis: GroupDiagnosis) -> GroupDecision {
    if diagnosis.alternatives.iter().any(|a| a.could_fit_later) {
        GroupDecision::Pending(diagnosis)
    } else {
        GroupDecision::Infeasible(diagnosis)
    }
}

impl Scheduler {
    /// Plans and reserves a group, all or nothing, trying its alternatives in order.
    /// A group that breaks [`GroupSpec::validate`] is infeasible with the rule as its note; the
    /// edges validate first, so this only guards callers that did not.
    pub fn place_group(&mut self, cluster: &mut Cluster, spec: &GroupSpec) -> GroupDecision {
        self.place_group_recorded(cluster, spec, None)
    }

    /// [`Scheduler::place_group`], recording every bundle attempt of every alternative tried:
    /// each node's filter verdicts and the group's ranking, as for any request.
    pub fn place_group_explained(
        &mut self,
        cluster: &mut Cluster,
        spec: &GroupSpec,
    ) -> (GroupDecision, GroupExplanation) {
        let mut explanation = GroupExplanation::default();
        let decision = self.place_group_recorded(cluster, spec, Some(&mut explanation));
        (decision, explanation)
    }

    fn place_group_recorded(
        &mut self,
        cluster: &mut Cluster,
        spec: &GroupSpec,
        mut explanation: Option<&mut GroupExplanation>,
    ) -> GroupDecision {
        if let Some(refused) = refusal(cluster, spec) {
            return refused;
        }
        let mut tried = GroupDiagnosis::default();
        let mut from = 0;
        while let Some((alternative, plan)) =
            self.first_plan(cluster, spec, from, &mut tried, explanation.as_deref_mut())
        {
            match cluster.reserve_group(spec.clone(), alternative, &plan.reservations) {
                Ok(()) => return GroupDecision::Created { alternative, nodes: plan.nodes, tried },
                Err(err) => tried.alternatives.push(internal(alternative, &err)),
            }
            from = alternative + 1;
        }
        waiting(tried)
    }

    /// What [`Scheduler::place_group`] would decide on `cluster` as it is, reserving nothing:
    /// plans are made on an overlay anyway, so a dry run simply does not commit the first
    /// complete one.
    pub fn preview_group(&mut self, cluster: &Cluster, spec: &GroupSpec) -> GroupDecision {
        if let Some(refused) = refusal(cluster, spec) {
            return refused;
        }
        let mut tried = GroupDiagnosis::default();
        match self.first_plan(cluster, spec, 0, &mut tried, None) {
            Some((alternative, plan)) => {
                GroupDecision::Created { alternative, nodes: plan.nodes, tried }
            }
            None => waiting(tried),
        }
    }

    /// The group plan as a sequence of attempts: alternatives `from…` in order, each planned
    /// on an overlay, until one is complete; why each one before it was not is pushed onto
    /// `tried`, and every bundle attempt onto `explanation` when explaining.
    fn first_plan(
        &self,
        cluster: &Cluster,
        spec: &GroupSpec,
        from: usize,
        tried: &mut GroupDiagnosis,
        mut explanation: Option<&mut GroupExplanation>,
    ) -> Option<(usize, AlternativePlan)> {
        for alternative in from..spec.alternatives.len() {
            let set = &spec.alternatives[alternative];
            let planned = match set.unknown_reason() {
                Some(note) => Err(AlternativeDiagnosis {
                    alternative,
                    planned: Vec::new(),
                    failed: Vec::new(),
                    could_fit_later: false,
                    note: Some(note),
                }),
                None => {
                    let todo: Vec<usize> = (0..set.bundles.len()).collect();
                    let explaining = explanation.is_some();
                    let (planned, bundles) = self.plan(cluster, spec, set, &[], &todo, explaining);
                    if let Some(explanation) = explanation.as_deref_mut() {
                        explanation
                            .alternatives
                            .push(AlternativeExplanation { alternative, bundles });
                    }
                    planned
                }
            };
            match planned {
                Ok(mut plan) => {
                    plan.sort_by_key(|(i, _, _)| *i);
                    let nodes = plan.iter().map(|(_, n, _)| *n).collect();
                    let reservations = plan.into_iter().map(|(_, n, inst)| (n, inst)).collect();
                    return Some((alternative, AlternativePlan { nodes, reservations }));
                }
                Err(mut found) => {
                    found.alternative = alternative;
                    tried.alternatives.push(found);
                }
            }
        }
        None
    }

    /// Plans the bundles of group `id` that were lost with their nodes, keeping the others
    /// where they are, and reserves them; all or nothing.
    pub fn replan_group(&mut self, cluster: &mut Cluster, id: &str) -> GroupDecision {
        let Some(group) = cluster.group(id) else {
            let found = AlternativeDiagnosis {
                alternative: 0,
                planned: Vec::new(),
                failed: Vec::new(),
                could_fit_later: false,
                note: Some(format!("no placement group {id}")),
            };
            return GroupDecision::Infeasible(GroupDiagnosis { alternatives: vec![found] });
        };
        let (spec, alternative) = (group.spec.clone(), group.alternative);
        let fixed: Vec<(usize, NodeIndex)> = group
            .bundles
            .iter()
            .enumerate()
            .filter_map(|(i, b)| match b {
                BundleState::Reserved(ledger) => Some((i, ledger.node)),
                BundleState::Lost => None,
            })
            .collect();
        let lost = group.lost();
        let set = spec.alternatives[alternative].clone();
        match self.plan(cluster, &spec, &set, &fixed, &lost, false).0 {
            Ok(plan) => match cluster.restore_bundles(id, &plan) {
                Ok(()) => {
                    let group = cluster.group(id).expect("restored");
                    let nodes = (0..group.bundles.len())
                        .filter_map(|i| group.bundle(i).map(|b| b.node))
                        .collect();
                    GroupDecision::Created { alternative, nodes, tried: GroupDiagnosis::default() }
                }
                Err(err) => GroupDecision::Pending(GroupDiagnosis {
                    alternatives: vec![internal(alternative, &err)],
                }),
            },
            Err(mut found) => {
                found.alternative = alternative;
                let pending = found.could_fit_later;
                let diagnosis = GroupDiagnosis { alternatives: vec![found] };
                if pending {
                    GroupDecision::Pending(diagnosis)
                } else {
                    GroupDecision::Infeasible(diagnosis)
                }
            }
        }
    }

    /// Plans bundles `todo` of `set`, the bundles `fixed` staying on their nodes; with the
    /// bundle attempts as recorded when `explaining`.
    fn plan(
        &self,
        cluster: &Cluster,
        spec: &GroupSpec,
        set: &BundleSet,
        fixed: &[(usize, NodeIndex)],
        todo: &[usize],
        explaining: bool,
    ) -> (Result<GroupPlan, AlternativeDiagnosis>, Vec<AttemptExplanation>) {
        let mut order = todo.to_vec();
        order.sort_by_key(|&i| std::cmp::Reverse(hardness(&set.bundles[i])));
        let requests: Vec<Request> = (0..set.bundles.len())
            .map(|i| bundle_request(cluster, spec, set, i))
            .collect::<Option<_>>()
            .expect("place_group validates every bundle first");
        // First visit a bounded number of nodes per bundle (from a position that depends on
        // the group, so groups spread); only if that plan fails, visit every node, so that a
        // group is never pending while a full plan exists and the diagnosis counts every node.
        // An explanation visits every node, as for any request.
        // A plan needs at least the bundles' sum free on the alive nodes together: when that
        // is missing, no plan is tried (a waiting group of many bundles is retried after
        // every release that may help it, and planning it costs a ranking per bundle). An explanation still
        // visits every node for each bundle, and decides the same.
        // Below [`PLANNED_WHATEVER_IS_FREE`] bundles a plan costs little, and its diagnosis
        // says more (which bundle found no node, and why, node by node).
        let demand = total_of(&requests, &order);
        let short_of_free = (order.len() > PLANNED_WHATEVER_IS_FREE)
            .then(|| demand.first_shortfall(&alive_sum(cluster, Node::available)))
            .flatten();
        let short_of_free = short_of_free.map(|short| AlternativeDiagnosis {
            alternative: 0,
            planned: Vec::new(),
            failed: Vec::new(),
            could_fit_later: self.could_ever_fit(cluster, spec.strategy, &requests, fixed, &order),
            note: Some(format!(
                "the bundles to place ask for {} {} in all; the alive nodes have {} free together",
                short.requested,
                cluster.registry().name(short.resource),
                short.have
            )),
        });
        if let (Some(found), false) = (&short_of_free, explaining) {
            return (Err(found.clone()), Vec::new());
        }
        let bounded = cluster.alive().len() > 512
            && spec.strategy != GroupStrategy::StrictPack
            && !explaining;
        if bounded {
            let mut overlay = Overlay::new(cluster, false);
            overlay.limit = Some(order.len() + 32);
            overlay.start = spec
                .id
                .as_str()
                .bytes()
                .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
                % (cluster.index_bound().max(1) as u32);
            if let Ok(plan) = self.plan_with(&mut overlay, spec, &requests, fixed, &order) {
                return (Ok(plan), Vec::new());
            }
        }
        let mut overlay = Overlay::new(cluster, explaining);
        let result = self.plan_with(&mut overlay, spec, &requests, fixed, &order);
        let mut attempts = overlay.record.take().unwrap_or_default();
        // The strategy's selection, recorded on each bundle's attempt (given back when the
        // plan failed later).
        let placed: Vec<(usize, NodeIndex)> = match &result {
            Ok(plan) => plan.iter().map(|(i, n, _)| (*i, *n)).collect(),
            Err(found) => found.planned.clone(),
        };
        for attempt in &mut attempts {
            if let AttemptKind::Bundle { index } = attempt.kind {
                attempt.chosen = placed.iter().find(|(i, _)| *i == index).map(|(_, n)| *n);
            }
        }
        let result = match short_of_free {
            Some(found) => Err(found),
            None => result.map_err(|mut found| {
                found.could_fit_later =
                    self.could_ever_fit(cluster, spec.strategy, &requests, fixed, &order);
                found
            }),
        };
        (result, attempts)
    }

    /// Plans `order` on `overlay` by the group's strategy.
    fn plan_with(
        &self,
        overlay: &mut Overlay<'_>,
        spec: &GroupSpec,
        requests: &[Request],
        fixed: &[(usize, NodeIndex)],
        order: &[usize],
    ) -> Result<GroupPlan, AlternativeDiagnosis> {
        match spec.strategy {
            GroupStrategy::StrictPack => self.plan_strict_pack(overlay, requests, fixed, order),
            GroupStrategy::StrictSpread => self.plan_strict_spread(overlay, requests, fixed, order),
            GroupStrategy::Pack | GroupStrategy::Spread => {
                let pack = spec.strategy == GroupStrategy::Pack;
                self.plan_greedy(overlay, requests, fixed, order, pack)
            }
        }
    }

    /// Stages 1 to 3 for bundle `index` on the overlay: the candidates by index and every
    /// filter, through the same functions as for any request (the bundle is checked as a task
    /// with its resources, its selector and the group's tolerations), then the group
    /// strategy's ranking ([`ranking`]). Returns the nodes that passed, best first (tier, then
    /// score, then node order), and why the others did not; the strategy selects among them.
    fn rank_bundle(
        &self,
        overlay: &mut Overlay<'_>,
        index: usize,
        request: &Request,
        group: GroupContext,
    ) -> (Vec<NodeIndex>, AttemptDiagnosis) {
        self.bundles_ranked.set(self.bundles_ranked.get() + 1);
        let cluster = overlay.cluster;
        let kind = AttemptKind::Bundle { index };
        let mut found = AttemptDiagnosis::new(kind.clone(), None);
        // Recorded with its selector in force (alternative 0), so that an explanation shows it.
        let selector = (!request.label_selector().is_empty()).then_some(0);
        let mut record = overlay.record.is_some().then(|| AttemptExplanation {
            kind,
            alternative: selector,
            nodes: Vec::new(),
            shortlist: Vec::new(),
            chosen: None,
            bundles: Vec::new(),
        });

        // 1. Candidates: the bundle's selector is its label selector (alternative 0).
        let candidates = candidates(cluster, request, Scope::Alive, Some(0), record.is_some());
        candidates.count(&mut found, record.as_mut());
        let prepared = Prepared { group: Some(group), ..Prepared::default() };
        let cx = DecisionContext { cluster, request, prepared: &prepared };

        // 2. Filters and 3. the group's ranking, node by node, on the overlay's nodes.
        let preferences: SmallVec<[&dyn Preference; 2]> =
            self.group_ranking.0.iter().filter(|p| p.applies(&cx)).map(|p| p.as_ref()).collect();
        let scorers: SmallVec<[(&dyn Scorer, u32); 2]> = self
            .group_ranking
            .1
            .iter()
            .filter(|w| w.scorer.applies(&cx))
            .map(Weighted::per_node)
            .collect();
        let ranking =
            Ranking { cx: &cx, preferences: &preferences, scorers: &scorers, ranks: true };
        let bounds = match record {
            Some(_) => (None, 0),
            None => (overlay.limit, overlay.start),
        };
        let visit = Visit {
            filters: &self.filters,
            builtin_filters: self.builtin_filters,
            ranking: &ranking,
            bounds,
        };
        let mut ranked = Vec::new();
        visit.run(&*overlay, &candidates.include, (&mut ranked, &mut found), None, record.as_mut());
        ranked.sort_unstable_by(|a, b| {
            b.tier.cmp(&a.tier).then(b.score.cmp(&a.score)).then(a.node.cmp(&b.node))
        });
        if let (Some(mut record), Some(attempts)) = (record, overlay.record.as_mut()) {
            // The shortlist: the nodes tied for the best rank (the strategy takes the first,
            // or, for STRICT_SPREAD, what the matching leaves).
            let best = ranked.first().map(|r| (r.tier, r.score));
            let tied = ranked.iter().take_while(|r| Some((r.tier, r.score)) == best);
            record.shortlist = tied.map(|r| r.node).collect();
            record.nodes.sort_by_key(|n| n.node);
            attempts.push(record);
        }
        let ranked: Vec<NodeIndex> = ranked.into_iter().map(|r| r.node).collect();
        (ranked, found)
    }

    /// PACK and SPREAD: each bundle, hardest first, on the best node of its ranking.
    fn plan_greedy(
        &self,
        overlay: &mut Overlay<'_>,
        requests: &[Request],
        fixed: &[(usize, NodeIndex)],
        order: &[usize],
        pack: bool,
    ) -> Result<GroupPlan, AlternativeDiagnosis> {
        let mut used: NodeSet = fixed.iter().map(|(_, n)| *n).collect();
        let mut plan = GroupPlan::new();
        let all = match pack {
            true => RestBundles::new(
                order.iter().map(|&b| requests[b].resources().clone()).collect(),
                overlay.cluster.registry(),
            ),
            false => RestBundles::default(),
        };
        for (position, &i) in order.iter().enumerate() {
            let request = &requests[i];
            let rest = all.starting_at(position);
            let group = GroupContext { used: used.clone(), prefer_used: Some(pack), rest };
            let (ranked, found) = self.rank_bundle(overlay, i, request, group);
            let Some(&node) = ranked.first() else {
                return Err(failed(plan, i, found));
            };
            let instances = overlay.reserve(node, request.resources()).expect("the filters passed");
            used.insert(node);
            plan.push((i, node, instances));
        }
        Ok(plan)
    }

    /// STRICT_PACK: the nodes every bundle passes on, each tried with all the bundles at once;
    /// the one left with the least waste (the least-waste rule on all bundles together) wins.
    fn plan_strict_pack(
        &self,
        overlay: &mut Overlay<'_>,
        requests: &[Request],
        fixed: &[(usize, NodeIndex)],
        order: &[usize],
    ) -> Result<GroupPlan, AlternativeDiagnosis> {
        let cluster = overlay.cluster;
        let mut candidates: Option<NodeSet> =
            fixed.first().map(|(_, n)| [*n].into_iter().collect());
        let mut first_failure = None;
        for &i in order {
            let (ranked, found) = self.rank_bundle(overlay, i, &requests[i], strict());
            let fits: NodeSet = ranked.into_iter().collect();
            let common = match candidates {
                None => fits,
                Some(c) => c.intersection(&fits),
            };
            if common.is_empty() && first_failure.is_none() {
                first_failure = Some((i, found));
            }
            candidates = Some(common);
        }
        let total = total_of(requests, order);
        let mut best: Option<(u64, NodeIndex, GroupPlan)> = None;
        for node in candidates.unwrap_or_default().iter() {
            let Some(left) = overlay.node(node).map(|n| ranking::left_after(n, &total)) else {
                continue;
            };
            if best.as_ref().is_some_and(|(w, n, _)| (left, node) >= (*w, *n)) {
                continue;
            }
            let mut trial = Overlay::new(cluster, false);
            let plan: Option<GroupPlan> = order
                .iter()
                .map(|&i| trial.reserve(node, requests[i].resources()).map(|inst| (i, node, inst)))
                .collect();
            if let Some(plan) = plan {
                best = Some((left, node, plan));
            }
        }
        match best {
            Some((_, _, plan)) => Ok(plan),
            None => {
                let (i, found) = first_failure.unwrap_or_else(|| {
                    let mut found =
                        AttemptDiagnosis::new(AttemptKind::Bundle { index: order[0] }, None);
                    found.note = Some("no single node can hold every bundle together now".into());
                    (order[0], found)
                });
                let mut diagnosis = failed(GroupPlan::new(), i, found);
                diagnosis.note = Some("STRICT_PACK needs one node that holds every bundle".into());
                Err(diagnosis)
            }
        }
    }

    /// STRICT_SPREAD: each bundle's ranking, without the nodes of kept bundles, then a
    /// matching of bundles to distinct nodes, each bundle trying its best nodes first.
    fn plan_strict_spread(
        &self,
        overlay: &mut Overlay<'_>,
        requests: &[Request],
        fixed: &[(usize, NodeIndex)],
        order: &[usize],
    ) -> Result<GroupPlan, AlternativeDiagnosis> {
        let taken: NodeSet = fixed.iter().map(|(_, n)| *n).collect();
        let mut options: Vec<Vec<NodeIndex>> = Vec::with_capacity(order.len());
        let mut diagnoses = Vec::new();
        for &i in order {
            let (mut fits, mut found) = self.rank_bundle(overlay, i, &requests[i], strict());
            let used = fits.iter().filter(|&&n| taken.contains(n)).count() as u64;
            found.count(ReasonKind::SameGroup, used);
            fits.retain(|&n| !taken.contains(n));
            if fits.is_empty() {
                diagnoses.push((i, found));
            }
            options.push(fits);
        }
        if !diagnoses.is_empty() {
            let (i, found) = diagnoses.remove(0);
            let mut diagnosis = failed(GroupPlan::new(), i, found);
            diagnosis.failed.extend(diagnoses);
            return Err(diagnosis);
        }
        let Some(matching) = matching::match_bundles(&options) else {
            let distinct: NodeSet = options.iter().flatten().copied().collect();
            // Each bundle alone has nodes; together they do not: no per-bundle counts to show.
            let mut diagnosis = failed(
                GroupPlan::new(),
                order[0],
                AttemptDiagnosis::new(AttemptKind::Default, None),
            );
            diagnosis.failed.clear();
            diagnosis.note = Some(format!(
                "STRICT_SPREAD needs {} distinct nodes; only {} can take these bundles now",
                order.len(),
                distinct.len()
            ));
            return Err(diagnosis);
        };
        let mut plan = GroupPlan::new();
        for (slot, &i) in order.iter().enumerate() {
            let node = matching[slot];
            let instances =
                overlay.reserve(node, requests[i].resources()).expect("the filters passed");
            plan.push((i, node, instances));
        }
        Ok(plan)
    }

    /// True when the bundles could be reserved once work ends: each bundle's candidates (by
    /// index, as for any request) that pass the static filters (taints, totals), then the
    /// strategy's rule on them.
    fn could_ever_fit(
        &self,
        cluster: &Cluster,
        strategy: GroupStrategy,
        requests: &[Request],
        fixed: &[(usize, NodeIndex)],
        order: &[usize],
    ) -> bool {
        let prepared = Prepared::default();
        // The nodes bundle `i` passes the static filters on; with `first`, only the first.
        let eligible = |i: usize, first: bool| -> Vec<NodeIndex> {
            let request = &requests[i];
            let cx = DecisionContext { cluster, request, prepared: &prepared };
            let candidates = candidates(cluster, request, Scope::Alive, Some(0), false);
            let passes = |n: &NodeIndex| {
                cluster
                    .node(*n)
                    .is_some_and(|node| run_filters(&self.filters, &cx, node, None, true).is_none())
            };
            let passing = candidates.include.iter().filter(passes);
            passing.take(if first { 1 } else { usize::MAX }).collect()
        };
        // However work ends, the alive nodes cannot hold more than their totals together.
        let demand = total_of(requests, order);
        if demand.first_shortfall(&alive_sum(cluster, Node::total)).is_some() {
            return false;
        }
        match strategy {
            GroupStrategy::Pack | GroupStrategy::Spread => {
                // Each bundle needs one eligible node; a bundle like the one before it
                // (bundles are ordered by hardness, so equal ones are neighbours) has the same
                // answer.
                let mut previous: Option<&Request> = None;
                order.iter().all(|&i| {
                    let request = &requests[i];
                    if previous.is_some_and(|p| same_bundle(p, request)) {
                        return true;
                    }
                    previous = Some(request);
                    !eligible(i, true).is_empty()
                })
            }
            GroupStrategy::StrictPack => {
                let options = order.iter().map(|&i| eligible(i, false));
                let total = demand;
                let mut common: Option<NodeSet> =
                    fixed.first().map(|(_, n)| [*n].into_iter().collect());
                for o in options {
                    let o: NodeSet = o.into_iter().collect();
                    common = Some(match common {
                        None => o,
                        Some(c) => c.intersection(&o),
                    });
                }
                common.unwrap_or_default().iter().any(|n| {
                    cluster.node(n).is_some_and(|node| node.total_shortfall(&total).is_none())
                })
            }
            GroupStrategy::StrictSpread => {
                let taken: NodeSet = fixed.iter().map(|(_, n)| *n).collect();
                let options: Vec<Vec<NodeIndex>> = order
                    .iter()
                    .map(|&i| {
                        eligible(i, false).into_iter().filter(|&n| !taken.contains(n)).collect()
                    })
                    .collect();
                matching::match_bundles(&options).is_some()
            }
        }
    }
}

/// The ranking context of a bundle of a strict strategy: no preference, least waste only.
fn strict() -> GroupContext {
    GroupContext::default()
}

/// Groups of more bundles to place than this are not planned while the alive nodes have less
/// free in all than they ask for.
pub const PLANNED_WHATEVER_IS_FREE: usize = 64;

/// The sum over the alive nodes of `quantities` (their totals, or what they have free).
fn alive_sum(cluster: &Cluster, quantities: fn(&Node) -> &ResourceSet) -> ResourceSet {
    let mut sum = ResourceSet::new();
    for index in cluster.alive().iter() {
        if let Some(node) = cluster.node(index) {
            sum.add(quantities(node));
        }
    }
    sum
}

/// True when two bundle requests ask for the same resources on the same nodes.
fn same_bundle(a: &Request, b: &Request) -> bool {
    a.resources() == b.resources()
        && a.label_selector() == b.label_selector()
        && a.tolerations() == b.tolerations()
}

/// The sum of the bundles in `order`.
fn total_of(requests: &[Request], order: &[usize]) -> ResourceSet {
    let mut total = ResourceSet::new();
    for &i in order {
        total.add(requests[i].resources());
    }
    total
}

/// A diagnosis for a plan that failed at bundle `i`.
fn failed(plan: GroupPlan, i: usize, found: AttemptDiagnosis) -> AlternativeDiagnosis {
    let mut found = found;
    found.finish();
    AlternativeDiagnosis {
        alternative: 0,
        planned: plan.into_iter().map(|(b, n, _)| (b, n)).collect(),
        failed: vec![(i, found)],
        could_fit_later: false,
        note: None,
    }
}

fn internal(alternative: usize, err: &ClusterError) -> AlternativeDiagnosis {
    debug_assert!(false, "committing a complete plan failed: {err}");
    AlternativeDiagnosis {
        alternative,
        planned: Vec::new(),
        failed: Vec::new(),
        could_fit_later: true,
        note: Some(format!("internal: {err}")),
    }
}
