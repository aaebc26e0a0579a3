//! Placement groups: create (reserve now or wait), re-plan after a node dies, remove.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use berth_api::rest::{Bundle, Diagnosis, EventKind, Group, GroupCreate, GroupState};
use berth_api::spec::{At, Source};
use berth_core::cluster::AllocationSource;
use berth_core::pipeline::group::GroupDecision;
use berth_core::placement_group::{GroupId, GroupSpec, PlacedGroup};
use berth_core::{group_may_help, Allocation, Cluster, NodeIndex, Trigger};

use super::convert;
use super::jobs::{owner_of, Owned};
use super::work_table::{push_event, WorkId};
use super::Owner;
use crate::clock::now_ms;
use crate::error::HeadError;
use crate::records::GroupRecord;
use crate::view::PendingRequest;
use berth_api::ObjectKind;

/// The most bundles of waiting groups planned again in one cycle (the first group is planned
/// whatever its size); the other groups a change helped wait for the next cycle.
pub(crate) const MAX_GROUP_WORK: usize = 4096;

/// The placement groups the owner holds, and which of them wait to be reserved.
#[derive(Default)]
pub(crate) struct Groups {
    entries: HashMap<u64, GroupEntry>,
    /// Groups waiting to be reserved (or re-planned), oldest first.
    waiting: BTreeSet<u64>,
    /// Waiting groups a change may have helped, to be planned again: at most
    /// [`MAX_GROUP_WORK`] bundles a cycle, so that what waits never holds up what arrives.
    to_retry: BTreeSet<u64>,
    /// The last group planned from `to_retry`: the next cycle goes on after it.
    cursor: u64,
    /// The scheduler's [`berth_core::Scheduler::bundles_ranked`] as last counted into the metrics.
    bundles_ranked: u64,
}

impl Groups {
    pub(crate) fn get(&self, seq: u64) -> Option<&GroupEntry> {
        self.entries.get(&seq)
    }

    pub(crate) fn get_mut(&mut self, seq: u64) -> Option<&mut GroupEntry> {
        self.entries.get_mut(&seq)
    }

    pub(crate) fn contains(&self, seq: u64) -> bool {
        self.entries.contains_key(&seq)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &GroupEntry)> {
        self.entries.iter().map(|(seq, entry)| (*seq, entry))
    }

    pub(crate) fn insert(&mut self, seq: u64, entry: GroupEntry) {
        self.entries.insert(seq, entry);
    }

    /// Forgets group `seq` (waiting or not).
    pub(crate) fn remove(&mut self, seq: u64) -> Option<GroupEntry> {
        self.waiting.remove(&seq);
        self.to_retry.remove(&seq);
        self.entries.remove(&seq)
    }

    /// Group `seq` waits to be reserved or re-planned.
    pub(crate) fn wait(&mut self, seq: u64) {
        self.waiting.insert(seq);
    }

    /// Group `seq` waits no more (reserved or removed).
    fn stop_waiting(&mut self, seq: u64) {
        self.waiting.remove(&seq);
    }

    /// The waiting groups, oldest first.
    pub(crate) fn waiting(&self) -> impl Iterator<Item = u64> + '_ {
        self.waiting.iter().copied()
    }

    pub(crate) fn any_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Plans group `seq` again in the next cycles' retries, whatever changed (it started
    /// waiting, or was restored waiting).
    pub(crate) fn retry_soon(&mut self, seq: u64) {
        self.to_retry.insert(seq);
    }

    /// Whether groups a change helped are left for a later cycle (the budget ran out).
    pub(crate) fn retries_left(&self) -> bool {
        !self.to_retry.is_empty()
    }

    /// Sets to retry the waiting groups not set yet for which `helped` says yes.
    fn choose_helped(&mut self, mut helped: impl FnMut(&GroupEntry) -> bool) {
        for &seq in &self.waiting {
            let Some(entry) = self.entries.get(&seq) else { continue };
            if !self.to_retry.contains(&seq) && helped(entry) {
                self.to_retry.insert(seq);
            }
        }
    }

    /// The next group to plan within a budget of [`MAX_GROUP_WORK`] bundles, of which `spent`
    /// are spent (and this group's added): the one after the last planned, round the set, so
    /// that every helped group has its turn.
    fn next_to_plan(&mut self, spent: &mut usize) -> Option<u64> {
        if *spent >= MAX_GROUP_WORK {
            return None;
        }
        let next = self.to_retry.range(self.cursor + 1..).next();
        let seq = *next.or_else(|| self.to_retry.iter().next())?;
        self.to_retry.remove(&seq);
        self.cursor = seq;
        *spent += self.entries.get(&seq).map_or(1, GroupEntry::planning_work);
        Some(seq)
    }

    /// Bundles ranked since the last call, given the scheduler's count now (a scheduler made
    /// anew, by a profile reload, counts from 0 again).
    fn newly_ranked(&mut self, ranked: u64) -> u64 {
        let before = std::mem::replace(&mut self.bundles_ranked, ranked);
        ranked.checked_sub(before).unwrap_or(ranked)
    }

    /// The groups with a bundle on `node`.
    pub(crate) fn holding_bundles_on(&self, node: &str) -> Vec<u64> {
        let mut seqs: Vec<u64> =
            self.iter().filter(|(_, g)| g.nodes().any(|n| n == node)).map(|(s, _)| s).collect();
        seqs.sort_unstable();
        seqs
    }
}

impl std::ops::Index<&u64> for Groups {
    type Output = GroupEntry;

    fn index(&self, seq: &u64) -> &GroupEntry {
        &self.entries[seq]
    }
}

/// A group as the owner holds it.
pub(crate) struct GroupEntry {
    pub(crate) api: Group,
    pub(crate) spec: GroupSpec,
    pub(crate) bundle_instances: Vec<std::collections::BTreeMap<String, Vec<u32>>>,
    /// While it waits: whether it could be reserved once work ends (as of the last plan).
    pub(crate) waiting: berth_core::Waiting,
}

impl GroupEntry {
    /// A new group `seq`, pending, as `body` asked for it (`spec` built from it).
    fn new(seq: u64, body: GroupCreate, spec: GroupSpec, cluster: &Cluster) -> GroupEntry {
        let first = spec.alternatives.first();
        let bundles = first.map(|a| a.bundles.as_slice()).unwrap_or_default();
        let mut api = Group {
            idempotency_key: body.idempotency_key.as_deref().map(str::to_string),
            group_id: ObjectKind::Group.id(seq),
            name: body.name.clone(),
            namespace: spec.namespace.clone(),
            strategy: spec.strategy.name().to_string(),
            state: GroupState::Pending,
            alternative: None,
            bundles: bundles
                .iter()
                .enumerate()
                .map(|(index, set)| Bundle {
                    index,
                    resources: convert::asked_map(
                        cluster,
                        set,
                        first.and_then(|a| a.unknown.get(index)),
                    ),
                    node_id: None,
                })
                .collect(),
            diagnosis: None,
            history: thin_vec::ThinVec::new(),
            created_at_ms: now_ms(),
            spec: body,
        };
        push_event(&mut api.history, EventKind::Created, None, String::new());
        let waiting = berth_core::Waiting::Pending;
        GroupEntry { api, spec, bundle_instances: Vec::new(), waiting }
    }

    /// What planning it costs, in bundles: those of every alternative.
    fn planning_work(&self) -> usize {
        self.spec.alternatives.iter().map(|a| a.bundles.len()).sum::<usize>().max(1)
    }

    pub(crate) fn record(&self) -> GroupRecord<&Group, &[BTreeMap<String, Vec<u32>>]> {
        GroupRecord { group: &self.api, bundle_instances: &self.bundle_instances }
    }

    /// The nodes its bundles are on.
    pub(crate) fn nodes(&self) -> impl Iterator<Item = &str> {
        self.api.bundles.iter().filter_map(|b| b.node_id.as_deref())
    }

    /// Its `alternative` was reserved, bundle `i` on `nodes[i]` (`placed`: the cluster's
    /// ledger of it).
    fn reserved(
        &mut self,
        alternative: usize,
        nodes: &[NodeIndex],
        placed: Option<&PlacedGroup>,
        cluster: &Cluster,
    ) {
        let registry = cluster.registry();
        let bundles = &self.spec.alternatives[alternative].bundles;
        self.api.alternative = Some(alternative);
        self.api.bundles = bundles
            .iter()
            .enumerate()
            .map(|(index, set)| Bundle {
                index,
                resources: convert::resource_map(cluster, set),
                node_id: nodes.get(index).map(|n| convert::node_id(cluster, *n).to_string()),
            })
            .collect();
        self.bundle_instances = bundles
            .iter()
            .enumerate()
            .map(|(i, set)| {
                let ledger = placed.and_then(|g| g.bundle(i));
                set.iter()
                    .filter(|(r, _)| registry.is_unit_instance(*r))
                    .filter_map(|(r, _)| {
                        Some((registry.name(r).to_string(), ledger?.instance_ids(r)))
                    })
                    .collect()
            })
            .collect();
        let verb = match self.api.state {
            GroupState::Rescheduling => EventKind::Rescheduled,
            _ => EventKind::Created,
        };
        self.api.state = GroupState::Created;
        self.api.diagnosis = None;
        let where_ = self.nodes().collect::<Vec<_>>().join(", ");
        push_event(&mut self.api.history, verb, None, format!("bundles on {where_}"));
    }

    /// It waits, for the reason `diagnosis` gives: the entry of the status's waiting list
    /// when the reason is new.
    fn waits(&mut self, diagnosis: Diagnosis, infeasible: bool) -> Option<PendingRequest> {
        self.waiting = match infeasible {
            true => berth_core::Waiting::Infeasible,
            false => berth_core::Waiting::Pending,
        };
        if self.api.diagnosis.as_ref() == Some(&diagnosis) {
            return None;
        }
        self.api.diagnosis = Some(diagnosis.clone());
        Some(self.waiting_item(diagnosis))
    }

    /// Its entry in the status's waiting list.
    fn waiting_item(&self, diagnosis: Diagnosis) -> PendingRequest {
        PendingRequest {
            item: berth_api::rest::PendingItem {
                kind: "placement_group".into(),
                id: self.api.group_id.clone(),
                diagnosis,
            },
            shapes: self.api.bundles.iter().map(|b| b.resources.clone()).collect(),
            label_selector: Default::default(),
            tolerations: convert::string_map(self.api.spec.placement.tolerations.as_ref()),
        }
    }

    /// It was removed, for `why`.
    fn removed(&mut self, why: &str) {
        self.api.state = GroupState::Removed;
        self.api.diagnosis = None;
        push_event(&mut self.api.history, EventKind::Removed, None, why);
    }

    /// `node`, holding some of its bundles, died: false when it was not reserved.
    fn lost_bundles(&mut self, node: &str) -> bool {
        if self.api.state != GroupState::Created {
            return false;
        }
        self.api.state = GroupState::Rescheduling;
        for b in &mut self.api.bundles {
            if b.node_id.as_deref() == Some(node) {
                b.node_id = None;
            }
        }
        let shared = Some(Arc::from(node));
        push_event(
            &mut self.api.history,
            EventKind::Rescheduling,
            shared.as_ref(),
            format!("node {node} died"),
        );
        true
    }
}

/// The core spec of group `seq`, from its body (as it arrives, or as stored).
pub(crate) fn build_group(
    cluster: &Cluster,
    seq: u64,
    body: &GroupCreate,
) -> Result<GroupSpec, HeadError> {
    let source = Source::body("POST /api/v1/placement_groups");
    let id = GroupId::new(&ObjectKind::Group.id(seq))
        .map_err(|e| HeadError::invalid("", e.to_string()))?;
    let name = body.name.as_deref().unwrap_or("");
    let namespace = match body.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => ns,
        _ => berth_core::actors::DEFAULT_NAMESPACE,
    };
    Ok(body.placement.build(&source, cluster, id, name, namespace, ("", At::UNKNOWN))?)
}

impl Owner {
    pub(crate) fn create_group(
        &mut self,
        seq: u64,
        mut body: GroupCreate,
    ) -> Result<Group, HeadError> {
        if let Some(first) = self.created_with(ObjectKind::Group, body.idempotency_key.as_deref()) {
            return Ok(self.groups[&first].api.clone());
        }
        self.check_owner(&mut body.ownership)?;
        if let Some(owner) = owner_of(&body.ownership) {
            self.jobs.own(owner, Owned::Group(seq));
        }
        let spec = build_group(&self.cluster, seq, &body)?;
        self.remember_key(ObjectKind::Group, body.idempotency_key.as_deref(), seq);
        self.groups.insert(seq, GroupEntry::new(seq, body, spec, &self.cluster));
        // Durable from its creation, whether it is reserved now or waits.
        self.cycle.mark_group(seq);
        self.try_group(seq);
        Ok(self.groups[&seq].api.clone())
    }

    /// Reserves (or re-plans) group `seq` if it can; else records why it waits.
    fn try_group(&mut self, seq: u64) {
        // A node may have brought a resource the group named before any node had it.
        let registry = self.cluster.registry();
        let Some(entry) = self.groups.get_mut(seq) else { return };
        entry.spec.resolve_unknown(registry);
        let started = std::time::Instant::now();
        let decision = match entry.api.state {
            GroupState::Rescheduling => {
                self.scheduler.replan_group(&mut self.cluster, &entry.api.group_id)
            }
            GroupState::Pending => self.scheduler.place_group(&mut self.cluster, &entry.spec),
            GroupState::Created | GroupState::Removed => return,
        };
        let seconds = started.elapsed().as_secs_f64();
        self.metrics.bundles_ranked(self.groups.newly_ranked(self.scheduler.bundles_ranked()));
        match decision {
            GroupDecision::Created { alternative, nodes, .. } => {
                self.metrics.decision("placed", seconds);
                self.groups.stop_waiting(seq);
                self.view.waiting.remove(&(ObjectKind::Group, seq));
                let entry = self.groups.get_mut(seq).expect("known");
                let placed = self.cluster.group(&entry.api.group_id);
                entry.reserved(alternative, &nodes, placed, &self.cluster);
                for node in entry.nodes() {
                    self.cycle.touch(node);
                }
                // Requests waiting for this group's bundles can go now.
                self.cycle.trigger(Trigger::GroupReserved);
                self.cycle.mark_group(seq);
            }
            GroupDecision::Pending(d) | GroupDecision::Infeasible(d) => {
                let infeasible = d.alternatives.iter().all(|a| !a.could_fit_later);
                self.metrics.decision(if infeasible { "infeasible" } else { "pending" }, seconds);
                self.groups.wait(seq);
                let entry = self.groups.get_mut(seq).expect("known");
                let diagnosis =
                    convert::group_diagnosis(&self.cluster, &d, infeasible, &entry.spec);
                let key = (ObjectKind::Group, seq);
                match entry.waits(diagnosis, infeasible) {
                    Some(waiting) => {
                        self.view.waiting.insert(key, Arc::new(waiting));
                        self.cycle.show_group(seq);
                    }
                    // As shown already (its bundles' shapes are as many as its bundles).
                    None if self.view.waiting.contains_key(&key) => {}
                    None => {
                        let diagnosis = entry.api.diagnosis.clone().expect("unchanged, so set");
                        self.view.waiting.insert(key, Arc::new(entry.waiting_item(diagnosis)));
                    }
                }
            }
        }
    }

    /// Plans again the waiting groups that `triggers` may help (see [`group_may_help`]), and
    /// those an earlier cycle left for later, within [`MAX_GROUP_WORK`] bundles.
    pub(crate) fn retry_groups(&mut self, triggers: &[Trigger]) {
        // What the alive nodes have free together, summed once for every group asked about.
        let mut free = None;
        let (scheduler, cluster) = (&self.scheduler, &self.cluster);
        self.groups.choose_helped(|entry| {
            let placed = match entry.api.state {
                GroupState::Rescheduling => cluster.group(&entry.api.group_id),
                _ => None,
            };
            triggers.iter().any(|&t| {
                let group = (&entry.spec, placed);
                group_may_help(t, entry.waiting, group, scheduler, cluster, &mut free)
            })
        });
        let mut spent = 0;
        while let Some(seq) = self.groups.next_to_plan(&mut spent) {
            self.try_group(seq);
        }
    }

    pub(crate) fn remove_group(&mut self, id: &str) -> Result<Group, HeadError> {
        self.remove_group_because(id, "removed by a user")
    }

    /// Removes group `id`, `why` being what its history shows.
    pub(crate) fn remove_group_because(&mut self, id: &str, why: &str) -> Result<Group, HeadError> {
        let seq = match ObjectKind::parse(id) {
            Some((ObjectKind::Group, seq)) if self.groups.contains(seq) => seq,
            _ => return Err(HeadError::NotFound { what: "placement_group", id: id.to_string() }),
        };
        if self.groups[&seq].api.state == GroupState::Removed {
            return Ok(self.groups[&seq].api.clone());
        }
        // Work inside the group ends with it; work waiting for it can never run. Placed work
        // holds one of its bundles; waiting work asks for it in its queued request.
        let waiting: HashSet<WorkId> =
            self.queue.iter().filter(|q| in_group(&q.request, id)).map(|q| q.key).collect();
        let inside_group = |key: WorkId, allocation: Option<&Allocation>| {
            waiting.contains(&key) || allocation.is_some_and(|a| in_bundle_of(a, id))
        };
        let inside: Vec<WorkId> = self
            .work
            .iter()
            .filter(|(key, e)| {
                inside_group(*key, e.allocation.as_ref()) && !e.object().ended_for_good()
            })
            .map(|(key, _)| key)
            .collect();
        let inside_why = format!("its placement group {id} was removed ({why})");
        for key in inside {
            match key {
                WorkId::Actor(_) => {
                    let _ = self.kill_actor_because(&key.id(), &inside_why);
                }
                WorkId::Task(_) => {
                    let _ = self.cancel_task_because(&key.id(), &inside_why);
                }
            }
        }
        if let Some(removed) = self.cluster.remove_group(id) {
            drop(removed);
        }
        self.groups.stop_waiting(seq);
        self.view.waiting.remove(&(ObjectKind::Group, seq));
        let entry = self.groups.get_mut(seq).expect("known");
        for node in entry.nodes() {
            if let Some(index) = self.cluster.index_of(node) {
                self.cycle.trigger(Trigger::Released(index));
            }
            self.cycle.touch(node);
        }
        entry.removed(why);
        self.cycle.mark_group(seq);
        Ok(self.groups[&seq].api.clone())
    }

    /// A node holding bundles of group `seq` died: the group waits to be re-planned.
    pub(crate) fn group_lost_bundles(&mut self, seq: u64, node: &str) {
        if self.groups.get_mut(seq).is_some_and(|e| e.lost_bundles(node)) {
            self.groups.wait(seq);
            self.groups.retry_soon(seq);
            self.cycle.mark_group(seq);
        }
    }
}

fn in_group(request: &berth_core::Request, id: &str) -> bool {
    matches!(request.strategy(), berth_core::Strategy::PlacementGroup(p) if p.group.as_str() == id)
}

fn in_bundle_of(allocation: &Allocation, id: &str) -> bool {
    matches!(allocation.source(), AllocationSource::Bundle { group, .. } if group.as_str() == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The groups `next_to_plan` gives until the budget is spent, `spent` of it spent already.
    fn planned(groups: &mut Groups, mut spent: usize) -> Vec<u64> {
        std::iter::from_fn(|| groups.next_to_plan(&mut spent)).collect()
    }

    #[test]
    fn retries_go_round_the_helped_groups_from_after_the_last_one_planned() {
        let mut groups = Groups::default();
        for seq in [3, 5, 8, 13] {
            groups.retry_soon(seq);
        }
        // Room for two (a group held nowhere costs one bundle).
        assert_eq!(planned(&mut groups, MAX_GROUP_WORK - 2), vec![3, 5]);
        assert!(groups.retries_left());
        // A group helped meanwhile, before the cursor, waits for its turn after 8 and 13.
        groups.retry_soon(1);
        assert_eq!(planned(&mut groups, MAX_GROUP_WORK - 2), vec![8, 13]);
        assert_eq!(planned(&mut groups, 0), vec![1]);
        assert!(!groups.retries_left());
    }

    #[test]
    fn a_removed_group_is_neither_waiting_nor_retried() {
        let mut groups = Groups::default();
        groups.wait(4);
        groups.retry_soon(4);
        assert!(groups.any_waiting());
        assert!(groups.remove(4).is_none());
        assert!(!groups.any_waiting());
        assert_eq!(planned(&mut groups, 0), Vec::<u64>::new());
    }

    #[test]
    fn bundles_ranked_are_counted_once_and_again_from_a_new_scheduler() {
        let mut groups = Groups::default();
        assert_eq!(groups.newly_ranked(10), 10);
        assert_eq!(groups.newly_ranked(25), 15);
        // A profile reload made the scheduler anew: it counts from 0.
        assert_eq!(groups.newly_ranked(4), 4);
    }
}
