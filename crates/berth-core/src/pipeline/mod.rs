//! The decision pipeline: candidates → filters → preferences and scorers → select → reserve,
//! written out once: `Scheduler::choose` runs the first four stages reading the cluster only,
//! and `Scheduler::run` reserves what it chose ([`Scheduler::preview`] previews it instead,
//! for dry runs).
//!
//! A strategy is a short list of *attempts*. Each attempt narrows the candidates, runs every
//! filter, ranks what passed and selects one node; if it cannot, the strategy says whether to
//! wait (pending), fail (infeasible) or try the next attempt. DEFAULT, SPREAD and RANDOM are one
//! attempt each; soft node affinity is "the node, then DEFAULT". The same mechanism carries
//! label-selector fallbacks: the request's `label_selector`, then each `fallback_strategy`
//! selector, one attempt per alternative, in order.

#[cfg(test)]
mod actor_tests;
pub mod explain;
pub mod filters;
pub mod group;
#[cfg(test)]
mod group_tests;
#[cfg(test)]
mod label_tests;
mod memo;
pub mod profile;
pub mod scorers;
pub mod stage;
#[cfg(test)]
mod tests;

use std::borrow::Cow;

use rand::Rng;
use smallvec::{smallvec, SmallVec};
use thiserror::Error;

use crate::actors::{ActorAffinity, AffinityExpression, MatchMode};
use crate::cluster::{Allocation, Cluster};
use crate::diagnosis::{AttemptDiagnosis, AttemptKind, Diagnosis, Reason, ANY_EXPRESSION};
use crate::node::{Node, NodeIndex};
use crate::nodeset::NodeSet;
use crate::placement_group::BundleLedger;
use crate::quantity::{Quantity, UNITS_PER_WHOLE};
use crate::request::{GroupPlacement, Request, Strategy};
use crate::resource::Shortfall;
use explain::{AttemptExplanation, BundleVerdict, Explanation, NodeExplanation, ScoreLine};
use filters::FilterStage;
use memo::{Outcome, VisitMemo};
use profile::{Pick, Profile};
use scorers::{AvoidGpuNodes, SoftActorAffinity, SoftLabels, SOFT_AFFINITY_WEIGHT};
use stage::{DecisionContext, Filter, FilterKind, Preference, Prepared, Scorer, Verdict, Weighted};

/// The outcome of placing one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Reserved on a node; the allocation names the node and the instance IDs taken.
    Placed(Allocation),
    /// Some node could hold the request by its totals, but none can take it now.
    Pending(Diagnosis),
    /// No node could ever hold it (or the strategy forbids every node that could).
    Infeasible(Diagnosis),
}

/// Settings of the DEFAULT strategy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Utilisation below which a node counts as empty (pack until then, spread after); 0..=1.
    pub spread_threshold: Quantity,
    /// Share of alive nodes the DEFAULT strategy picks at random among; (0, 1].
    pub top_k_fraction: Quantity,
    /// Whether requests without GPUs prefer nodes without GPUs.
    pub avoid_gpu_nodes: bool,
    /// Scorers and extra filters.
    pub profile: Profile,
    /// How many nodes a decision looks at on a large cluster.
    pub nodes_to_score: NodesToScore,
}

/// How many nodes a decision looks at, after the candidate stage.
///
/// Assumptions: on a large cluster many nodes can take a typical request, and the best of a
/// few dozen of them is as good a choice as the best of all, while looking at all costs time
/// in proportion to the cluster. Rules (Kubernetes' `percentageOfNodesToScore`, simplified):
/// with more than `from_nodes` candidates, nodes are visited from a position that moves on
/// with every decision, and the visit stops once `feasible` of them have passed every filter;
/// SPREAD stops at the first, which is exactly its round-robin rule. Behaviour: the cost of a
/// decision stops growing with the cluster; DEFAULT's top k is taken among the nodes visited;
/// a request that no visited node can take visits every node, so pending and infeasible and
/// their diagnoses are exact, and `berth explain` always visits every node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodesToScore {
    /// Every candidate, always (placement-quality studies).
    All,
    /// Stop early on large clusters.
    Adaptive {
        /// Candidates above which the visit may stop early.
        from_nodes: u32,
        /// Feasible nodes to find before stopping.
        feasible: u32,
    },
}

impl Default for NodesToScore {
    fn default() -> Self {
        NodesToScore::Adaptive { from_nodes: 512, feasible: 64 }
    }
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            spread_threshold: Quantity::from_units(UNITS_PER_WHOLE / 2),
            top_k_fraction: Quantity::from_units(UNITS_PER_WHOLE / 5),
            avoid_gpu_nodes: true,
            profile: Profile::default(),
            nodes_to_score: NodesToScore::default(),
        }
    }
}

/// A scheduler setting out of range. Displays as `field: rule`.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    /// `spread_threshold` above 1.
    SpreadThreshold(Quantity),
    /// `top_k_fraction` zero or above 1.
    TopKFraction(Quantity),
}

impl ConfigError {
    /// The setting's path (`scheduler.spread_threshold`).
    pub fn field(&self) -> &'static str {
        match self {
            ConfigError::SpreadThreshold(_) => "scheduler.spread_threshold",
            ConfigError::TopKFraction(_) => "scheduler.top_k_fraction",
        }
    }

    /// The rule broken, without the field.
    pub fn rule(&self) -> String {
        match self {
            ConfigError::SpreadThreshold(v) => {
                format!("{v} is out of range; use a fraction from 0 to 1")
            }
            ConfigError::TopKFraction(v) => {
                format!("{v} is out of range; use a fraction above 0, at most 1")
            }
        }
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field(), self.rule())
    }
}

impl SchedulerConfig {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.spread_threshold > Quantity::ONE {
            return Err(ConfigError::SpreadThreshold(self.spread_threshold));
        }
        if self.top_k_fraction.is_zero() || self.top_k_fraction > Quantity::ONE {
            return Err(ConfigError::TopKFraction(self.top_k_fraction));
        }
        Ok(())
    }
}

/// How an attempt picks among the nodes that passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Select {
    /// Best tier, then random among the `top_k` best scores; the caller's node wins ties.
    TopK,
    /// The first node at or after the round-robin cursor.
    RoundRobin,
    /// Uniformly random.
    Random,
    /// The only candidate.
    Only,
}

/// What a strategy does when an attempt finds nodes that could take the request later but
/// none now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnBusy {
    /// Stop: the request is pending.
    Wait,
    /// Stop: the request is infeasible (`fail_on_unavailable`).
    Fail,
    /// Try the next attempt.
    Next,
}

/// Which nodes an attempt looks at one by one.
#[derive(Clone, Copy, Debug)]
enum Scope {
    /// Every alive node.
    Alive,
    /// One node (`None`: the named node does not exist).
    Only(Option<NodeIndex>),
}

struct Attempt {
    kind: AttemptKind,
    scope: Scope,
    select: Select,
    on_busy: OnBusy,
    /// The label selector alternative in force (see [`AttemptDiagnosis::alternative`]).
    alternative: Option<usize>,
}

/// A node that passed every filter, with its rank.
#[derive(Clone, Copy, Debug)]
struct Ranked {
    node: NodeIndex,
    tier: u32,
    score: u64,
}

/// What stages 1 to 4 chose, before anything is reserved.
enum Choice<'r> {
    /// Reserve on this node.
    Node(NodeIndex),
    /// Reserve in this bundle of this group.
    Bundle { group: &'r str, bundle: usize },
    /// Nothing to reserve: pending or infeasible.
    Decided(Decision),
}

/// Stage 5 on a node: reserve, and place the actor (if it is one) with its affinity.
fn reserve_on_node(cluster: &mut Cluster, request: &Request, node: NodeIndex) -> Decision {
    match cluster.reserve(node, request.resources()) {
        Ok(allocation) => {
            if let Some(actor) = request.actor() {
                let affinity = match request.strategy() {
                    Strategy::ActorAffinity(affinity) => affinity.clone(),
                    _ => ActorAffinity::default(),
                };
                cluster.place_actor(actor, node, affinity).expect("the node is alive: reserved");
            }
            Decision::Placed(allocation)
        }
        // Filters passed, so this is a bug; keep the request rather than lose it.
        Err(err) => internal_pending(&err),
    }
}

/// Stage 5 in a bundle: take from its ledger, and place the actor (if it is one) there.
fn reserve_in_bundle(
    cluster: &mut Cluster,
    request: &Request,
    group: &str,
    bundle: usize,
) -> Decision {
    match cluster.reserve_in_bundle(group, bundle, request.resources()) {
        Ok(allocation) => {
            if let Some(actor) = request.actor() {
                let node = allocation.node();
                cluster
                    .place_actor(actor, node, ActorAffinity::default())
                    .expect("the bundle's node is alive");
                cluster.note_bundle_actor(group, bundle, actor.id.clone());
            }
            Decision::Placed(allocation)
        }
        Err(err) => internal_pending(&err),
    }
}

/// A reservation that failed after its checks passed: a bug, reported and kept pending so
/// the request is not lost.
fn internal_pending(err: &crate::cluster::ClusterError) -> Decision {
    debug_assert!(false, "reserving what the checks passed failed: {err}");
    let mut found = AttemptDiagnosis::new(AttemptKind::Default, None);
    found.note = Some(format!("internal: {err}"));
    found.could_fit_later = true;
    Decision::Pending(Diagnosis { attempts: vec![found] })
}

/// Places requests on a cluster. Holds the stage lists, the settings and the little state
/// strategies keep between decisions (the SPREAD cursor); the cluster is passed in.
pub struct Scheduler {
    config: SchedulerConfig,
    /// Static filters first, then dynamic ones (checked in `new`).
    filters: Vec<FilterStage>,
    preferences: Vec<Box<dyn Preference>>,
    scorers: Vec<Weighted>,
    /// The ranking of a placement group's bundles ([`group::ranking`]).
    group_ranking: (Vec<Box<dyn Preference>>, Vec<Weighted>),
    spread_cursor: u32,
    /// Where the next early-stopping visit starts (see [`NodesToScore`]).
    scan_cursor: u32,
    /// Reused between decisions so the hot path does not allocate.
    ranked: Vec<Ranked>,
    /// What the last visit of each node said ([`memo`]), for attempts whose stages read only
    /// the node and the request.
    memo: VisitMemo,
    /// True when every filter reads only the node and the request.
    filters_memoized: bool,
    /// True when the filters are the built-in ones alone ([`FilterStage::are_builtin`]).
    builtin_filters: bool,
    /// How many bundle attempts (one bundle ranked on the nodes) planning groups has made: the
    /// unit of a group plan's cost ([`Scheduler::bundles_ranked`]).
    bundles_ranked: std::cell::Cell<u64>,
}

impl Scheduler {
    /// A scheduler with the standard stages. `config` must be valid ([`SchedulerConfig::validate`]).
    pub fn new(config: SchedulerConfig) -> Scheduler {
        let mut filters = Vec::from(FilterStage::builtin());
        filters.extend(config.profile.filters().into_iter().map(FilterStage::Profile));
        // Static before dynamic (a stable sort keeps each group's order): a node's first
        // failure then tells pending from infeasible.
        filters.sort_by_key(|f| f.kind());
        let mut preferences: Vec<Box<dyn Preference>> = vec![Box::new(SoftLabels)];
        if config.avoid_gpu_nodes {
            preferences.push(Box::new(AvoidGpuNodes));
        }
        preferences.extend(config.profile.preferences());
        let mut scorers = config.profile.scorers(&config);
        scorers
            .push(Weighted { scorer: Box::new(SoftActorAffinity), weight: SOFT_AFFINITY_WEIGHT });
        let filters_memoized = filters.iter().all(|f| f.node_and_request_only());
        Scheduler {
            config,
            filters_memoized,
            builtin_filters: FilterStage::are_builtin(&filters),
            memo: VisitMemo::default(),
            filters,
            preferences,
            scorers,
            group_ranking: group::ranking::stages(),
            spread_cursor: 0,
            scan_cursor: 0,
            bundles_ranked: std::cell::Cell::new(0),
            ranked: Vec::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Decides and reserves.
    pub fn place<R: Rng + ?Sized>(
        &mut self,
        cluster: &mut Cluster,
        request: &Request,
        rng: &mut R,
    ) -> Decision {
        self.run(cluster, request, rng, None)
    }

    /// Decides and reserves, recording every stage's answer for every node.
    pub fn place_explained<R: Rng + ?Sized>(
        &mut self,
        cluster: &mut Cluster,
        request: &Request,
        rng: &mut R,
    ) -> (Decision, Explanation) {
        let mut explanation = Explanation::default();
        let decision = self.run(cluster, request, rng, Some(&mut explanation));
        (decision, explanation)
    }

    /// How many bundles the group plans of this scheduler have ranked on the nodes so far:
    /// what planning placement groups has cost, counted in operations rather than time.
    pub fn bundles_ranked(&self) -> u64 {
        self.bundles_ranked.get()
    }

    /// True when `request` may be placed on `node` now, by the checks that place it: every
    /// filter (the candidate stage only narrows further), or for a request into a placement
    /// group, the ledger of one of its target bundles on `node`. Cheap: one node. The pending
    /// queue retries by it after `node` changed, so it must never say no where the decision
    /// would say yes.
    pub fn fits_now(&self, cluster: &Cluster, request: &Request, node: NodeIndex) -> bool {
        if let Strategy::PlacementGroup(target) = request.strategy() {
            let Some(group) = cluster.group(target.group.as_str()) else { return false };
            let targets = match target.bundle {
                Some(i) => i..i.saturating_add(1),
                None => 0..group.bundles.len(),
            };
            return targets
                .filter_map(|i| group.bundle(i))
                .any(|ledger| ledger.node == node && bundle_unfit(ledger, request).is_none());
        }
        let prepared = Prepared::default();
        let cx = DecisionContext { cluster, request, prepared: &prepared };
        cluster.alive().contains(node)
            && cluster
                .node(node)
                .is_some_and(|n| self.filters.iter().all(|f| f.check(&cx, n) == Verdict::Fit))
    }

    /// What [`Scheduler::place`] would decide on `cluster` as it is, reserving nothing: the
    /// same stages, then the reservation taken on a copy of the chosen node (or bundle) alone.
    /// For dry runs (`POST /api/v1/explain`), which must not copy a 100k-node cluster.
    pub fn preview<R: Rng + ?Sized>(
        &mut self,
        cluster: &Cluster,
        request: &Request,
        rng: &mut R,
    ) -> Decision {
        let reserved = match self.choose(cluster, request, rng, None) {
            Choice::Decided(decision) => return decision,
            Choice::Node(node) => cluster.preview_reserve(node, request.resources()),
            Choice::Bundle { group, bundle } => {
                cluster.preview_in_bundle(group, bundle, request.resources())
            }
        };
        reserved.map_or_else(|err| internal_pending(&err), Decision::Placed)
    }

    /// The pipeline: the choice (stages 1 to 4), then stage 5, reserve.
    fn run<R: Rng + ?Sized>(
        &mut self,
        cluster: &mut Cluster,
        request: &Request,
        rng: &mut R,
        explanation: Option<&mut Explanation>,
    ) -> Decision {
        match self.choose(cluster, request, rng, explanation) {
            Choice::Decided(decision) => decision,
            Choice::Node(node) => reserve_on_node(cluster, request, node),
            Choice::Bundle { group, bundle } => {
                let group = group.to_string();
                reserve_in_bundle(cluster, request, &group, bundle)
            }
        }
    }

    /// Stages 1 to 4, reading the cluster only. Each attempt: candidates → filters → rank →
    /// select; the first attempt that selects a node wins.
    fn choose<'r, R: Rng + ?Sized>(
        &mut self,
        cluster: &Cluster,
        request: &'r Request,
        rng: &mut R,
        mut explanation: Option<&mut Explanation>,
    ) -> Choice<'r> {
        if let Some(reason) = request.unknown_resources().reason() {
            // No node has the resource, so none could ever hold it: infeasible (autoscaler
            // demand), until a node that has it joins and the queue resolves the name.
            let mut found = AttemptDiagnosis::new(AttemptKind::Default, None);
            found.nodes = cluster.len() as u64;
            found.note = Some(reason);
            if let Some(explanation) = explanation {
                explanation.attempts.push(AttemptExplanation {
                    kind: AttemptKind::Default,
                    alternative: None,
                    nodes: Vec::new(),
                    shortlist: Vec::new(),
                    chosen: None,
                    bundles: Vec::new(),
                });
            }
            return Choice::Decided(Decision::Infeasible(Diagnosis { attempts: vec![found] }));
        }
        if let Strategy::PlacementGroup(target) = request.strategy() {
            return choose_bundle(cluster, request, target, explanation);
        }
        let mut diagnosis = Diagnosis::default();
        let mut infeasible_by_strategy = false;
        for attempt in attempts(cluster, request) {
            let record = explanation.as_deref_mut().map(|e| {
                e.attempts.push(AttemptExplanation {
                    kind: attempt.kind.clone(),
                    alternative: attempt.alternative,
                    nodes: Vec::new(),
                    shortlist: Vec::new(),
                    chosen: None,
                    bundles: Vec::new(),
                });
                e.attempts.last_mut().expect("just pushed")
            });
            let (node, mut found) = self.attempt(cluster, request, &attempt, rng, record);
            if let Some(node) = node {
                return Choice::Node(node);
            }
            let stop = found.could_fit_later && attempt.on_busy != OnBusy::Next;
            if stop && attempt.on_busy == OnBusy::Fail {
                found.note = Some("the node is busy and fail_on_unavailable is set".to_string());
                infeasible_by_strategy = true;
            }
            diagnosis.attempts.push(found);
            if stop {
                break;
            }
        }
        let pending =
            !infeasible_by_strategy && diagnosis.attempts.iter().any(|a| a.could_fit_later);
        Choice::Decided(if pending {
            Decision::Pending(diagnosis)
        } else {
            Decision::Infeasible(diagnosis)
        })
    }

    /// One attempt: returns the chosen node, or the diagnosis of why there is none.
    fn attempt<R: Rng + ?Sized>(
        &mut self,
        cluster: &Cluster,
        request: &Request,
        attempt: &Attempt,
        rng: &mut R,
        mut record: Option<&mut AttemptExplanation>,
    ) -> (Option<NodeIndex>, AttemptDiagnosis) {
        let mut found = AttemptDiagnosis::new(attempt.kind.clone(), attempt.alternative);
        let ranks = attempt.select == Select::TopK;

        // 1. Candidates: rule out whole sets by index before looking at nodes.
        let explaining = record.is_some();
        let candidates =
            candidates(cluster, request, attempt.scope, attempt.alternative, explaining);
        candidates.count(&mut found, record.as_deref_mut());
        let Candidates { include, waiting, .. } = candidates;
        let prepared = prepare(cluster, request, attempt, &self.config.profile);
        let cx = DecisionContext { cluster, request, prepared: &prepared };

        // 2. Filters, then 3. preferences and scores, node by node. For the memo, `stages` has
        // a bit per preference (low half) and scorer (high half) that applies; past 32 of
        // either, an attempt is not memoized.
        let (mut preferences, mut scorers) = (SmallVec::<[_; 4]>::new(), SmallVec::<[_; 4]>::new());
        let (mut stages, mut memoized) = (0u64, self.filters_memoized && !explaining);
        for (i, preference) in self.preferences.iter().enumerate().filter(|_| ranks) {
            if preference.applies(&cx) {
                preferences.push(preference.as_ref());
                stages |= 1u64.checked_shl(i as u32).unwrap_or(0);
                memoized &= preference.node_and_request_only() && i < 32;
            }
        }
        for (i, weighted) in self.scorers.iter().enumerate().filter(|_| ranks) {
            if weighted.scorer.applies(&cx) {
                scorers.push(weighted.per_node());
                stages |= 1u64.checked_shl(32 + i as u32).unwrap_or(0);
                memoized &= weighted.scorer.node_and_request_only() && i < 32;
            }
        }
        let ranking = Ranking { cx: &cx, preferences: &preferences, scorers: &scorers, ranks };
        self.ranked.clear();
        let bounds = self.scan_bounds(attempt.select, include.len(), record.is_some());
        let visit = Visit {
            filters: &self.filters,
            builtin_filters: self.builtin_filters,
            ranking: &ranking,
            bounds,
        };
        let memo = memoized.then(|| {
            let shape = self.memo.shape(request, stages);
            (&mut self.memo, shape)
        });
        let visited = visit.run(
            cluster,
            &include,
            (&mut self.ranked, &mut found),
            memo,
            record.as_deref_mut(),
        );
        drop((preferences, scorers));

        // 4. Select. After an early stop, top k is a share of the nodes visited.
        let population = match visited.stopped_at {
            Some(stopped_at) => {
                self.scan_cursor = stopped_at;
                visited.nodes
            }
            None => cluster.alive().len(),
        };
        let pick = self.config.profile.pick.on(cluster);
        let shortlist = self.select(attempt.select, pick, request, population, rng);
        let chosen = shortlist.chosen;

        let waited = (&waiting[..], &*include);
        self.count_waiting(&cx, waited, chosen.is_some(), &mut found, record.as_deref_mut());
        if let Scope::Only(None) = attempt.scope {
            found.note = Some("no node with this ID is in the cluster".to_string());
        }
        found.finish();
        if let Some(record) = record {
            record.nodes.sort_by_key(|n| n.node);
            record.shortlist = shortlist.candidates.to_vec();
            record.chosen = chosen;
        }
        (chosen, found)
    }

    /// How many feasible nodes to find before stopping, and the node to start from (see
    /// `NodesToScore`); when explaining, every node from the first.
    fn scan_bounds(
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

    /// Nodes ruled out for now (actor affinity) count by their first static failure, if any,
    /// so that pending and infeasible stay exact. Only needed when nothing was chosen (or when
    /// explaining); otherwise each set counts by its reason.
    fn count_waiting(
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

    /// Picks among `self.ranked` (in node order) by the attempt's rule.
    fn select<R: Rng + ?Sized>(
        &mut self,
        select: Select,
        pick: Pick,
        request: &Request,
        alive: u64,
        rng: &mut R,
    ) -> Shortlist {
        let ranked = &mut self.ranked;
        if ranked.is_empty() {
            return Shortlist::default();
        }
        match select {
            Select::Only => Shortlist::single(ranked[0].node),
            Select::Random => {
                let pick = ranked[rng.random_range(0..ranked.len())].node;
                Shortlist {
                    chosen: Some(pick),
                    candidates: ranked.iter().map(|r| r.node).collect(),
                }
            }
            Select::RoundRobin => {
                let cursor = self.spread_cursor;
                let pick = ranked.iter().find(|r| r.node.0 >= cursor).unwrap_or(&ranked[0]).node;
                self.spread_cursor = pick.0.wrapping_add(1);
                Shortlist::single(pick)
            }
            Select::TopK => {
                let best_tier = ranked.iter().map(|r| r.tier).max().unwrap_or(0);
                if ranked.iter().any(|r| r.tier != best_tier) {
                    ranked.retain(|r| r.tier == best_tier);
                }
                let k = match pick {
                    Pick::TopK => top_k(alive, self.config.top_k_fraction).min(ranked.len()),
                    Pick::TopKFraction(fraction) => top_k(alive, fraction).min(ranked.len()),
                    // Every node tied for the best total.
                    Pick::Best | Pick::Auto => {
                        let best = ranked.iter().map(|r| r.score).max().unwrap_or(0);
                        ranked.iter().filter(|r| r.score == best).count()
                    }
                };
                // Best score first; on ties the caller's node, then node order: the same inputs
                // give the same list, and a preferred node that ties for best is always in it.
                let preferred = request.preferred_node();
                let is_preferred = |r: &Ranked| Some(r.node) == preferred;
                let by_rank = |a: &Ranked, b: &Ranked| {
                    b.score
                        .cmp(&a.score)
                        .then(is_preferred(b).cmp(&is_preferred(a)))
                        .then(a.node.cmp(&b.node))
                };
                if k < ranked.len() {
                    ranked.select_nth_unstable_by(k - 1, by_rank);
                }
                let top = &mut ranked[..k];
                top.sort_unstable_by(by_rank);
                let preferred = preferred.filter(|p| top[0].node == *p);
                let pick = preferred.unwrap_or_else(|| top[rng.random_range(0..k)].node);
                Shortlist { chosen: Some(pick), candidates: top.iter().map(|r| r.node).collect() }
            }
        }
    }
}

/// The nodes a selection picked among, and the pick.
#[derive(Default)]
struct Shortlist {
    chosen: Option<NodeIndex>,
    /// Inline up to 16: the top 20% of the 64-odd nodes an early-stopping visit finds.
    candidates: SmallVec<[NodeIndex; 16]>,
}

impl Shortlist {
    fn single(node: NodeIndex) -> Shortlist {
        Shortlist { chosen: Some(node), candidates: smallvec![node] }
    }
}

/// `max(1, ⌊alive × fraction⌋)`.
fn top_k(alive: u64, fraction: Quantity) -> usize {
    let k = u128::from(alive) * fraction.units() as u128 / UNITS_PER_WHOLE as u128;
    (k as usize).max(1)
}

/// The attempts a request's strategy makes, in order: the strategy's own attempts under
/// `label_selector`, then again under each `fallback_strategy` selector. While another
/// alternative remains, "wait" means "try the next one": the first alternative with a node that
/// can take the request now wins, and the request is pending only after all were tried.
fn attempts(cluster: &Cluster, request: &Request) -> SmallVec<[Attempt; 2]> {
    let alternatives = 1 + request.fallback().len();
    let has_selectors = !request.label_selector().is_empty() || alternatives > 1;
    let mut all = SmallVec::new();
    for alternative in 0..alternatives {
        let last = alternative + 1 == alternatives;
        for mut attempt in strategy_attempts(cluster, request) {
            attempt.alternative = has_selectors.then_some(alternative);
            if !last && attempt.on_busy == OnBusy::Wait {
                attempt.on_busy = OnBusy::Next;
            }
            all.push(attempt);
        }
    }
    all
}

/// The attempts of the request's strategy alone.
fn strategy_attempts(cluster: &Cluster, request: &Request) -> SmallVec<[Attempt; 2]> {
    let attempt =
        |kind, scope, select, on_busy| Attempt { kind, scope, select, on_busy, alternative: None };
    let default = || attempt(AttemptKind::Default, Scope::Alive, Select::TopK, OnBusy::Wait);
    match request.strategy() {
        Strategy::Default => smallvec![default()],
        Strategy::Spread => {
            smallvec![attempt(AttemptKind::Spread, Scope::Alive, Select::RoundRobin, OnBusy::Wait)]
        }
        Strategy::Random => {
            smallvec![attempt(AttemptKind::Random, Scope::Alive, Select::Random, OnBusy::Wait)]
        }
        Strategy::NodeLabel(_) => {
            smallvec![attempt(AttemptKind::NodeLabel, Scope::Alive, Select::TopK, OnBusy::Wait)]
        }
        Strategy::ActorAffinity(_) => {
            smallvec![attempt(AttemptKind::ActorAffinity, Scope::Alive, Select::TopK, OnBusy::Wait)]
        }
        // Chosen by `choose_bundle`, before any attempt.
        Strategy::PlacementGroup(_) => SmallVec::new(),
        Strategy::NodeAffinity(affinity) => {
            let on_busy = match (
                affinity.soft,
                affinity.spill_on_unavailable,
                affinity.fail_on_unavailable,
            ) {
                (true, true, _) => OnBusy::Next,
                (false, _, true) => OnBusy::Fail,
                _ => OnBusy::Wait,
            };
            let target = attempt(
                AttemptKind::AffinityNode { node: affinity.node.clone(), soft: affinity.soft },
                Scope::Only(cluster.index_of(&affinity.node)),
                Select::Only,
                on_busy,
            );
            if affinity.soft {
                smallvec![target, default()]
            } else {
                smallvec![target]
            }
        }
    }
}

/// Stage 1's answer: the nodes to look at one by one, and the sets ruled out whole: for good
/// (`excluded`) or for now (`waiting`: actor affinity, which placements elsewhere can change).
struct Candidates<'c> {
    include: Cow<'c, NodeSet>,
    excluded: SmallVec<[Excluded<'c>; 4]>,
    /// Nodes actor affinity rules out for now, rule by rule: each entry's set minus the next
    /// entry's set (minus `include` after the last) waits for its reason. Kept as the sets the
    /// rules narrowed (no copy), so the nodes a rule ruled out are built only when listed
    /// ([`Scheduler::count_waiting`]); counted, they are a difference of sizes.
    waiting: SmallVec<[(Cow<'c, NodeSet>, Reason); 2]>,
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
    fn count(&self, found: &mut AttemptDiagnosis, record: Option<&mut AttemptExplanation>) {
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
fn candidates<'c>(
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
                Excluded::listed(Cow::Borrowed(cluster.dead()), Reason::Dead),
            ],
            waiting: SmallVec::new(),
        },
        Scope::Only(target) => {
            let only: NodeSet = target.into_iter().collect();
            let all = cluster.alive().union(cluster.draining()).union(cluster.dead());
            Candidates {
                include: Cow::Owned(cluster.alive().intersection(&only)),
                excluded: smallvec![
                    Excluded::listed(
                        Cow::Owned(cluster.draining().intersection(&only)),
                        Reason::Draining
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

/// Why bundle `ledger` cannot take `request` now (too small ever, or too full now), if so.
/// The one bundle check: [`choose_bundle`] places by it and [`Scheduler::fits_now`] retries by
/// it, so a retry never skips a request the decision would place.
fn bundle_unfit(ledger: &BundleLedger, request: &Request) -> Option<Reason> {
    if let Some(shortfall) = ledger.total_shortfall(request.resources()) {
        Some(Reason::InsufficientTotal(shortfall))
    } else {
        ledger.unfit(request.resources()).map(Reason::InsufficientAvailable)
    }
}

/// Stages 1 to 4 for a request into a placement group: the first of its target bundles whose
/// free reservation can take it. Pending while the group is not reserved (yet) or a target
/// bundle is lost or busy; infeasible when no target bundle could ever hold it.
fn choose_bundle<'r>(
    cluster: &Cluster,
    request: &Request,
    target: &'r GroupPlacement,
    mut explanation: Option<&mut Explanation>,
) -> Choice<'r> {
    let kind = AttemptKind::PlacementGroup { group: target.group.to_string() };
    if let Some(explanation) = explanation.as_deref_mut() {
        explanation.attempts.push(AttemptExplanation {
            kind: kind.clone(),
            alternative: None,
            nodes: Vec::new(),
            shortlist: Vec::new(),
            chosen: None,
            bundles: Vec::new(),
        });
    }
    let mut found = AttemptDiagnosis::new(kind, None);
    let Some(group) = cluster.group(target.group.as_str()) else {
        found.note = Some("the placement group is not reserved (yet)".to_string());
        found.could_fit_later = true;
        return Choice::Decided(Decision::Pending(Diagnosis { attempts: vec![found] }));
    };
    let bundles = group.bundles.len();
    let targets: SmallVec<[usize; 8]> = match target.bundle {
        Some(i) if i >= bundles => {
            found.note = Some(format!("bundle {i} does not exist: the group has {bundles}"));
            return Choice::Decided(Decision::Infeasible(Diagnosis { attempts: vec![found] }));
        }
        Some(i) => smallvec![i],
        None => (0..bundles).collect(),
    };
    found.nodes = targets.len() as u64;
    let mut chosen = None;
    // Every bundle's verdict, when explaining: the ones not named, then the targets as tried.
    let mut verdicts =
        if explanation.is_some() { vec![BundleVerdict::NotTargeted; bundles] } else { Vec::new() };
    for &i in &targets {
        let verdict = match group.bundle(i) {
            None => {
                found.could_fit_later = true;
                found.note =
                    Some(format!("bundle {i} was lost with its node and waits to be re-planned"));
                BundleVerdict::Lost
            }
            Some(ledger) => match bundle_unfit(ledger, request) {
                Some(reason) => {
                    found.count(reason.kind(), 1);
                    BundleVerdict::Unfit(reason)
                }
                None => BundleVerdict::Chosen,
            },
        };
        if let Some(slot) = verdicts.get_mut(i) {
            *slot = verdict;
        }
        if verdict == BundleVerdict::Chosen {
            chosen = Some(i);
            for &later in targets.iter().filter(|&&t| t > i) {
                if let Some(slot) = verdicts.get_mut(later) {
                    *slot = BundleVerdict::NotTried;
                }
            }
            break;
        }
    }
    if let Some(attempt) = explanation.and_then(|e| e.attempts.last_mut()) {
        attempt.bundles = verdicts;
    }
    found.finish();
    let Some(bundle) = chosen else {
        let diagnosis = Diagnosis { attempts: vec![found] };
        return Choice::Decided(if diagnosis.attempts[0].could_fit_later {
            Decision::Pending(diagnosis)
        } else {
            Decision::Infeasible(diagnosis)
        });
    };
    Choice::Bundle { group: target.group.as_str(), bundle }
}

/// Stage 3 for one node that passed the filters: its preference tier (one bit per preference,
/// the first most significant) and its weighted score, recorded in `line` when explaining.
struct Ranking<'a, 'c> {
    cx: &'a DecisionContext<'c>,
    preferences: &'a [&'a dyn Preference],
    /// Each scorer that applies as called per node ([`Weighted::per_node`]), and its weight.
    scorers: &'a [(&'a dyn Scorer, u32)],
    /// False when the attempt selects without ranking (SPREAD, RANDOM, one node): no total
    /// is recorded.
    ranks: bool,
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
trait NodeSource {
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
struct Visit<'a, 'c> {
    filters: &'a [FilterStage],
    /// `filters` are the built-in ones alone: outside explanations, they run as one call.
    builtin_filters: bool,
    ranking: &'a Ranking<'a, 'c>,
    bounds: (Option<usize>, u32),
}

/// What a visit looked at.
struct Visited {
    /// Nodes visited.
    nodes: u64,
    /// Where the visit stopped early, if it did: the next visit starts there.
    stopped_at: Option<u32>,
}

impl Visit<'_, '_> {
    /// Pushes the nodes that pass onto `ranked` (in visit order) and counts the reasons of
    /// those that do not into `found`; records every node's line when explaining.
    /// With `memo` (the memo and the request's shape), a node whose last visit was for an
    /// equal request and that has not changed since is not looked at again.
    fn run<S: NodeSource + ?Sized>(
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
fn run_filters(
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

/// What the stages of one attempt read that depends on the request but not on the node,
/// computed once: the nodes satisfying each soft actor affinity expression, and the largest
/// totals when the profile's scorers read them.
fn prepare(cluster: &Cluster, request: &Request, attempt: &Attempt, profile: &Profile) -> Prepared {
    let mut prepared = Prepared::default();
    if attempt.select != Select::TopK {
        return prepared;
    }
    if profile.needs_largest_total() {
        prepared.largest_total = Some(profile::best_fit::largest_totals(cluster));
    }
    if let Strategy::ActorAffinity(affinity) = request.strategy() {
        for expression in affinity.expressions.iter().filter(|e| e.soft) {
            prepared.soft_affinity.push(cluster.actors().satisfying(
                request.namespace(),
                expression,
                cluster.label_index(),
                cluster.alive(),
            ));
        }
    }
    prepared
}

fn node_line(node: NodeIndex, excluded: Option<Reason>) -> NodeExplanation {
    NodeExplanation {
        node,
        excluded,
        filters: Vec::new(),
        preferences: Vec::new(),
        scores: Vec::new(),
        total: None,
    }
}
