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
//!
//! The runner is this file ([`Scheduler`]), read top to bottom; each concept it calls is in a
//! file of its own: `config` ([`SchedulerConfig`]), `attempts` (a strategy's attempts),
//! `candidates` (stage 1), `visit` (stages 2 and 3, node by node), `select` (stage 4),
//! `reserve` (stage 5) and `bundles` (a request into a placement group). The stages
//! themselves are in [`filters`] and [`scorers`] (their traits in [`stage`]); a [`profile`]
//! chooses which scorers and extra filters run; [`group`] plans placement groups.

#[cfg(test)]
mod actor_tests;
mod attempts;
mod bundles;
mod candidates;
mod config;
pub mod explain;
pub mod filters;
pub mod group;
#[cfg(test)]
mod group_tests;
#[cfg(test)]
mod label_tests;
mod memo;
pub mod profile;
mod reserve;
pub mod scorers;
mod select;
pub mod stage;
#[cfg(test)]
mod tests;
mod visit;

use rand::Rng;
use smallvec::SmallVec;

pub use config::{ConfigError, NodesToScore, SchedulerConfig};

use crate::cluster::{Allocation, Cluster};
use crate::diagnosis::{AttemptDiagnosis, AttemptKind, Diagnosis};
use crate::node::NodeIndex;
use crate::request::{Request, Strategy};
use attempts::{attempts, prepare, Attempt, OnBusy, Scope};
use bundles::{bundle_unfit, choose_bundle};
use candidates::{candidates, Candidates};
use explain::{AttemptExplanation, Explanation};
use filters::FilterStage;
use memo::VisitMemo;
use reserve::{internal_pending, reserve_in_bundle, reserve_on_node};
use scorers::{AvoidGpuNodes, SoftActorAffinity, SoftLabels, SOFT_AFFINITY_WEIGHT};
use select::Select;
use stage::{DecisionContext, Filter, Preference, Prepared, Verdict, Weighted};
use visit::{Ranked, Ranking, Visit};

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

/// What stages 1 to 4 chose, before anything is reserved.
enum Choice<'r> {
    /// Reserve on this node.
    Node(NodeIndex),
    /// Reserve in this bundle of this group.
    Bundle { group: &'r str, bundle: usize },
    /// Nothing to reserve: pending or infeasible.
    Decided(Decision),
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
}
