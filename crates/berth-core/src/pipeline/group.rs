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

use std::borrow::Cow;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::stage::{DecisionContext, FilterKind, Prepared};
use super::{run_filters, Scheduler};
use crate::cluster::{Cluster, ClusterError, NamedInstances};
use crate::diagnosis::{AttemptDiagnosis, AttemptKind, Reason};
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
    pub fn describe(&self, cluster: &Cluster) -> String {
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
                line.push_str(&format!(" {};", diagnosis.describe(cluster)));
            }
            lines.push(line.trim_end_matches(';').to_string());
        }
        lines.join("\n")
    }
}

/// Nodes copied for planning, so that a failed plan leaves the cluster untouched.
struct Overlay<'c> {
    cluster: &'c Cluster,
    nodes: FxHashMap<NodeIndex, Node>,
    /// At most this many nodes are collected per bundle (a large cluster need not be visited
    /// whole when a few dozen nodes fit); `None`: every node.
    limit: Option<usize>,
    /// Where visits start, so that groups spread over the cluster.
    start: u32,
}

impl<'c> Overlay<'c> {
    fn new(cluster: &'c Cluster) -> Overlay<'c> {
        Overlay { cluster, nodes: FxHashMap::default(), limit: None, start: 0 }
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

/// The request a bundle is checked as: its resources, its selector, the group's tolerations.
fn bundle_request(cluster: &Cluster, spec: &GroupSpec, set: &BundleSet, i: usize) -> Request {
    // The spec was validated by `place_group`, so the bundle is a valid request.
    let mut request = Request::new(set.bundles[i].clone(), Strategy::Default, cluster.registry())
        .expect("place_group validates every bundle first")
        .with_tolerations(spec.tolerations.clone());
    if let Some(selector) = set.selector(i) {
        request = request.with_label_selector(selector.clone());
    }
    request
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

/// Σ over the bundle's resources of the share left free on `node` (after placing it), in
/// millionths: smaller is a tighter fit.
fn waste(node: &Node, bundle: &ResourceSet) -> u64 {
    bundle
        .iter()
        .map(|(r, _)| {
            let total = node.total().get(r).units().max(1) as u128;
            (node.available().get(r).units().max(0) as u128 * 1_000_000 / total) as u64
        })
        .sum()
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
        if let Some(refused) = refusal(cluster, spec) {
            return refused;
        }
        let mut diagnosis = GroupDiagnosis::default();
        for alternative in 0..spec.alternatives.len() {
            match self.plan_alternative(cluster, spec, alternative) {
                Ok(plan) => {
                    match cluster.reserve_group(spec.clone(), alternative, &plan.reservations) {
                        Ok(()) => {
                            return GroupDecision::Created {
                                alternative,
                                nodes: plan.nodes,
                                tried: diagnosis,
                            }
                        }
                        Err(err) => diagnosis.alternatives.push(internal(alternative, &err)),
                    }
                }
                Err(found) => diagnosis.alternatives.push(found),
            }
        }
        waiting(diagnosis)
    }

    /// What [`Scheduler::place_group`] would decide on `cluster` as it is, reserving nothing:
    /// plans are made on an overlay anyway, so a dry run simply does not commit the first
    /// complete one.
    pub fn preview_group(&mut self, cluster: &Cluster, spec: &GroupSpec) -> GroupDecision {
        if let Some(refused) = refusal(cluster, spec) {
            return refused;
        }
        let mut diagnosis = GroupDiagnosis::default();
        for alternative in 0..spec.alternatives.len() {
            match self.plan_alternative(cluster, spec, alternative) {
                Ok(plan) => {
                    return GroupDecision::Created {
                        alternative,
                        nodes: plan.nodes,
                        tried: diagnosis,
                    }
                }
                Err(found) => diagnosis.alternatives.push(found),
            }
        }
        waiting(diagnosis)
    }

    /// A complete plan of alternative `alternative`, or why there is none.
    fn plan_alternative(
        &mut self,
        cluster: &Cluster,
        spec: &GroupSpec,
        alternative: usize,
    ) -> Result<AlternativePlan, AlternativeDiagnosis> {
        let set = &spec.alternatives[alternative];
        if let Some(note) = set.unknown_reason() {
            return Err(AlternativeDiagnosis {
                alternative,
                planned: Vec::new(),
                failed: Vec::new(),
                could_fit_later: false,
                note: Some(note),
            });
        }
        let todo: Vec<usize> = (0..set.bundles.len()).collect();
        match self.plan(cluster, spec, set, &[], &todo) {
            Ok(mut plan) => {
                plan.sort_by_key(|(i, _, _)| *i);
                let nodes = plan.iter().map(|(_, n, _)| *n).collect();
                let reservations = plan.into_iter().map(|(_, n, inst)| (n, inst)).collect();
                Ok(AlternativePlan { nodes, reservations })
            }
            Err(mut found) => {
                found.alternative = alternative;
                Err(found)
            }
        }
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
        match self.plan(cluster, &spec, &set, &fixed, &lost) {
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

    /// Plans bundles `todo` of `set`, the bundles `fixed` staying on their nodes.
    fn plan(
        &self,
        cluster: &Cluster,
        spec: &GroupSpec,
        set: &BundleSet,
        fixed: &[(usize, NodeIndex)],
        todo: &[usize],
    ) -> Result<GroupPlan, AlternativeDiagnosis> {
        let mut order = todo.to_vec();
        order.sort_by_key(|&i| std::cmp::Reverse(hardness(&set.bundles[i])));
        let requests: Vec<Request> =
            (0..set.bundles.len()).map(|i| bundle_request(cluster, spec, set, i)).collect();
        // First visit a bounded number of nodes per bundle (from a position that depends on
        // the group, so groups spread); only if that plan fails, visit every node, so that a
        // group is never pending while a full plan exists and the diagnosis counts every node.
        let bounded = cluster.alive().len() > 512 && spec.strategy != GroupStrategy::StrictPack;
        if bounded {
            let mut overlay = Overlay::new(cluster);
            overlay.limit = Some(order.len() + 32);
            overlay.start = spec
                .id
                .as_str()
                .bytes()
                .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
                % (cluster.index_bound().max(1) as u32);
            if let Ok(plan) = self.plan_with(&mut overlay, spec, &requests, fixed, &order) {
                return Ok(plan);
            }
        }
        let mut overlay = Overlay::new(cluster);
        let result = self.plan_with(&mut overlay, spec, &requests, fixed, &order);
        result.map_err(|mut found| {
            found.could_fit_later =
                self.could_ever_fit(cluster, spec.strategy, &requests, fixed, &order);
            found
        })
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

    /// The nodes that can take bundle request `request` now on the overlay, with the reasons
    /// the others cannot (counted into `found`).
    fn fitting(
        &self,
        overlay: &Overlay<'_>,
        request: &Request,
        found: &mut AttemptDiagnosis,
    ) -> Vec<NodeIndex> {
        let cluster = overlay.cluster;
        let prepared = Prepared::default();
        let cx = DecisionContext { cluster, request, prepared: &prepared };
        let mut include: Cow<'_, NodeSet> = Cow::Borrowed(cluster.alive());
        found.count(Reason::Draining.kind(), cluster.draining().len());
        found.count(Reason::Dead.kind(), cluster.dead().len());
        if !request.label_selector().is_empty() {
            let matched = cluster.label_index().select(request.label_selector(), &include);
            found.count(Reason::LabelMismatch.kind(), include.len() - matched.len());
            include = Cow::Owned(matched);
        }
        found.nodes = cluster.len() as u64;
        let mut fits = Vec::new();
        for index in include.iter_from(overlay.start) {
            if overlay.limit.is_some_and(|limit| fits.len() >= limit) {
                break;
            }
            let Some(node) = overlay.node(index) else { continue };
            match run_filters(&self.filters, &cx, node, None, false) {
                Some(reason) => found.count(reason.kind(), 1),
                None => fits.push(index),
            }
        }
        fits
    }

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
        for &i in order {
            let request = &requests[i];
            let mut found = AttemptDiagnosis::new(AttemptKind::Bundle { index: i }, None);
            let fits = self.fitting(overlay, request, &mut found);
            // Preferred tier first (used nodes for PACK, unused for SPREAD). A new node for
            // PACK is the one that holds the most of the bundles still to place (fewest nodes
            // in the end); then least waste, then node order.
            let rest = &order[order.iter().position(|&b| b == i).expect("in order")..];
            let best = fits.into_iter().min_by_key(|&n| {
                let preferred = used.contains(n) == pack;
                let holds = if pack && !used.contains(n) {
                    holds_how_many(overlay, n, requests, rest)
                } else {
                    0
                };
                let after = after_reserving(overlay, n, request.resources());
                (!preferred, std::cmp::Reverse(holds), after, n)
            });
            let Some(node) = best else {
                return Err(failed(plan, i, found));
            };
            let instances = overlay.reserve(node, request.resources()).expect("the filters passed");
            used.insert(node);
            plan.push((i, node, instances));
        }
        Ok(plan)
    }

    fn plan_strict_pack(
        &self,
        overlay: &mut Overlay<'_>,
        requests: &[Request],
        fixed: &[(usize, NodeIndex)],
        order: &[usize],
    ) -> Result<GroupPlan, AlternativeDiagnosis> {
        let cluster = overlay.cluster;
        // Every node that passes every bundle's filters, tried with all the bundles at once.
        let mut candidates: Option<Vec<NodeIndex>> = fixed.first().map(|(_, n)| vec![*n]);
        let mut first_failure = None;
        for &i in order {
            let mut found = AttemptDiagnosis::new(AttemptKind::Bundle { index: i }, None);
            let fits = self.fitting(overlay, &requests[i], &mut found);
            candidates = Some(match candidates {
                None => fits,
                Some(c) => c.into_iter().filter(|n| fits.contains(n)).collect(),
            });
            if candidates.as_ref().is_some_and(Vec::is_empty) && first_failure.is_none() {
                first_failure = Some((i, found));
            }
        }
        let mut best: Option<(u64, NodeIndex, GroupPlan)> = None;
        for node in candidates.unwrap_or_default() {
            let mut trial = Overlay::new(cluster);
            let plan: Option<GroupPlan> = order
                .iter()
                .map(|&i| trial.reserve(node, requests[i].resources()).map(|inst| (i, node, inst)))
                .collect();
            if let Some(plan) = plan {
                let left =
                    waste(trial.node(node).expect("reserved on it"), &total_of(requests, order));
                if best.as_ref().is_none_or(|(w, n, _)| (left, node) < (*w, *n)) {
                    best = Some((left, node, plan));
                }
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

    fn plan_strict_spread(
        &self,
        overlay: &mut Overlay<'_>,
        requests: &[Request],
        fixed: &[(usize, NodeIndex)],
        order: &[usize],
    ) -> Result<GroupPlan, AlternativeDiagnosis> {
        let taken: Vec<NodeIndex> = fixed.iter().map(|(_, n)| *n).collect();
        // Each bundle's candidate nodes, least waste first; nodes of fixed bundles are taken.
        let mut options: Vec<Vec<NodeIndex>> = Vec::with_capacity(order.len());
        let mut diagnoses = Vec::new();
        for &i in order {
            let mut found = AttemptDiagnosis::new(AttemptKind::Bundle { index: i }, None);
            let mut fits = self.fitting(overlay, &requests[i], &mut found);
            let used = fits.iter().filter(|n| taken.contains(n)).count() as u64;
            found.count(crate::diagnosis::ReasonKind::SameGroup, used);
            fits.retain(|n| !taken.contains(n));
            fits.sort_by_key(|&n| (after_reserving(overlay, n, requests[i].resources()), n));
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
        let Some(matching) = match_bundles(&options) else {
            let distinct: std::collections::BTreeSet<NodeIndex> =
                options.iter().flatten().copied().collect();
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

    /// True when the bundles could be reserved once work ends: judged by the static filters
    /// (taints, totals, selectors) only.
    fn could_ever_fit(
        &self,
        cluster: &Cluster,
        strategy: GroupStrategy,
        requests: &[Request],
        fixed: &[(usize, NodeIndex)],
        order: &[usize],
    ) -> bool {
        let prepared = Prepared::default();
        let eligible = |i: usize| -> Vec<NodeIndex> {
            let request = &requests[i];
            let cx = DecisionContext { cluster, request, prepared: &prepared };
            let include = cluster.label_index().select(request.label_selector(), cluster.alive());
            include
                .iter()
                .filter(|&n| {
                    let node = cluster.node(n).expect("alive nodes exist");
                    self.filters
                        .iter()
                        .filter(|f| f.kind() == FilterKind::Static)
                        .all(|f| f.check(&cx, node) == super::stage::Verdict::Fit)
                })
                .collect()
        };
        let options: Vec<Vec<NodeIndex>> = order.iter().map(|&i| eligible(i)).collect();
        match strategy {
            GroupStrategy::Pack | GroupStrategy::Spread => options.iter().all(|o| !o.is_empty()),
            GroupStrategy::StrictPack => {
                let total = total_of(requests, order);
                let mut common: Option<Vec<NodeIndex>> = fixed.first().map(|(_, n)| vec![*n]);
                for o in &options {
                    common = Some(match common {
                        None => o.clone(),
                        Some(c) => c.into_iter().filter(|n| o.contains(n)).collect(),
                    });
                }
                common.unwrap_or_default().iter().any(|&n| {
                    cluster.node(n).is_some_and(|node| node.total_shortfall(&total).is_none())
                })
            }
            GroupStrategy::StrictSpread => {
                let taken: Vec<NodeIndex> = fixed.iter().map(|(_, n)| *n).collect();
                let options: Vec<Vec<NodeIndex>> = options
                    .into_iter()
                    .map(|o| o.into_iter().filter(|n| !taken.contains(n)).collect())
                    .collect();
                match_bundles(&options).is_some()
            }
        }
    }
}

/// The sum of the bundles in `order`.
fn total_of(requests: &[Request], order: &[usize]) -> ResourceSet {
    let mut total = ResourceSet::new();
    for &i in order {
        total.add(requests[i].resources());
    }
    total
}

/// The waste left on `node` of the overlay if `bundle` were placed there.
/// Computed from the free amounts, without a copy: the filters already said it fits.
fn after_reserving(overlay: &Overlay<'_>, node: NodeIndex, bundle: &ResourceSet) -> u64 {
    let node = overlay.node(node).expect("a candidate node exists");
    bundle
        .iter()
        .map(|(r, amount)| {
            let total = node.total().get(r).units().max(1) as u128;
            let left =
                node.available().get(r).units().saturating_sub(amount.units()).max(0) as u128;
            (left * 1_000_000 / total) as u64
        })
        .sum()
}

/// How many of the bundles `rest` (in order) fit on `node` one after the other.
fn holds_how_many(
    overlay: &Overlay<'_>,
    node: NodeIndex,
    requests: &[Request],
    rest: &[usize],
) -> usize {
    let mut copy = overlay.node(node).expect("a candidate node exists").clone();
    rest.iter()
        .take_while(|&&i| copy.reserve(requests[i].resources(), overlay.cluster.registry()).is_ok())
        .count()
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

/// A perfect matching of slots (bundles) to distinct nodes, `options[slot]` in preference
/// order, by augmenting paths (Kuhn). Returns the node of each slot.
fn match_bundles(options: &[Vec<NodeIndex>]) -> Option<Vec<NodeIndex>> {
    let mut owner: FxHashMap<NodeIndex, usize> = FxHashMap::default();
    for slot in 0..options.len() {
        let mut seen = SmallVec::<[NodeIndex; 16]>::new();
        if !augment(slot, options, &mut owner, &mut seen) {
            return None;
        }
    }
    let mut result = vec![NodeIndex(0); options.len()];
    for (node, slot) in owner {
        result[slot] = node;
    }
    Some(result)
}

fn augment(
    slot: usize,
    options: &[Vec<NodeIndex>],
    owner: &mut FxHashMap<NodeIndex, usize>,
    seen: &mut SmallVec<[NodeIndex; 16]>,
) -> bool {
    for &node in &options[slot] {
        if seen.contains(&node) {
            continue;
        }
        seen.push(node);
        let free = match owner.get(&node) {
            None => true,
            Some(&other) => augment(other, options, owner, seen),
        };
        if free {
            owner.insert(node, slot);
            return true;
        }
    }
    false
}
