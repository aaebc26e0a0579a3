//! Placement groups: create (reserve now or wait), re-plan after a node dies, remove.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use berth_api::rest::{Bundle, EventKind, Group, GroupCreate, GroupState};
use berth_api::spec::{At, Source};
use berth_core::cluster::AllocationSource;
use berth_core::pipeline::group::GroupDecision;
use berth_core::placement_group::{GroupId, GroupSpec};
use berth_core::{group_may_help, Allocation, Cluster, Trigger};

use super::convert;
use super::work_table::{push_event, WorkId};
use super::{Owner, MAX_GROUP_WORK};
use crate::clock::now_ms;
use crate::error::HeadError;
use crate::records::GroupRecord;
use crate::view::PendingRequest;
use berth_api::ObjectKind;

/// A group as the owner holds it.
pub(crate) struct GroupEntry {
    pub(crate) api: Group,
    pub(crate) spec: GroupSpec,
    pub(crate) bundle_instances: Vec<std::collections::BTreeMap<String, Vec<u32>>>,
    /// While it waits: whether it could be reserved once work ends (as of the last plan).
    pub(crate) waiting: berth_core::Waiting,
}

impl GroupEntry {
    /// What planning it costs, in bundles: those of every alternative.
    fn planning_work(&self) -> usize {
        self.spec.alternatives.iter().map(|a| a.bundles.len()).sum::<usize>().max(1)
    }

    pub(crate) fn record(&self) -> GroupRecord<&Group, &[BTreeMap<String, Vec<u32>>]> {
        GroupRecord { group: &self.api, bundle_instances: &self.bundle_instances }
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
    pub(crate) fn create_group(&mut self, seq: u64, body: GroupCreate) -> Result<Group, HeadError> {
        if let Some(first) = self.created_with(ObjectKind::Group, body.idempotency_key.as_deref()) {
            return Ok(self.groups[&first].api.clone());
        }
        let spec = build_group(&self.cluster, seq, &body)?;
        let first = spec.alternatives.first();
        let bundles = first.map(|a| a.bundles.clone()).unwrap_or_default();
        self.remember_key(ObjectKind::Group, body.idempotency_key.as_deref(), seq);
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
                        &self.cluster,
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
        self.groups.insert(seq, GroupEntry { api, spec, bundle_instances: Vec::new(), waiting });
        // Durable from its creation, whether it is reserved now or waits.
        self.mark_group(seq);
        self.try_group(seq);
        Ok(self.groups[&seq].api.clone())
    }

    /// Reserves (or re-plans) group `seq` if it can; else records why it waits.
    fn try_group(&mut self, seq: u64) {
        // A node may have brought a resource the group named before any node had it.
        let registry = self.cluster.registry();
        if let Some(entry) = self.groups.get_mut(&seq) {
            entry.spec.resolve_unknown(registry);
        }
        let Some(entry) = self.groups.get(&seq) else { return };
        let started = std::time::Instant::now();
        let decision = match entry.api.state {
            GroupState::Rescheduling => {
                self.scheduler.replan_group(&mut self.cluster, &entry.api.group_id)
            }
            GroupState::Pending => {
                let spec = entry.spec.clone();
                self.scheduler.place_group(&mut self.cluster, &spec)
            }
            GroupState::Created | GroupState::Removed => return,
        };
        let seconds = started.elapsed().as_secs_f64();
        // A scheduler made anew (a profile reload) counts from 0 again.
        let ranked = self.scheduler.bundles_ranked();
        let before = std::mem::replace(&mut self.bundles_ranked, ranked);
        self.metrics.bundles_ranked(ranked.checked_sub(before).unwrap_or(ranked));
        match decision {
            GroupDecision::Created { alternative, nodes, .. } => {
                self.metrics.decision("placed", seconds);
                self.waiting_groups.remove(&seq);
                self.view.waiting.remove(&(ObjectKind::Group, seq));
                let group_id = self.groups[&seq].api.group_id.clone();
                let placed = self.cluster.group(&group_id).cloned();
                let e = self.groups.get_mut(&seq).expect("known");
                let bundles = e.spec.alternatives[alternative].bundles.clone();
                e.api.alternative = Some(alternative);
                e.api.bundles = bundles
                    .iter()
                    .enumerate()
                    .map(|(index, set)| Bundle {
                        index,
                        resources: convert::resource_map(&self.cluster, set),
                        node_id: nodes
                            .get(index)
                            .map(|n| convert::node_id(&self.cluster, *n).to_string()),
                    })
                    .collect();
                e.bundle_instances = (0..bundles.len())
                    .map(|i| {
                        let ledger = placed.as_ref().and_then(|g| g.bundle(i));
                        let registry = self.cluster.registry();
                        bundles[i]
                            .iter()
                            .filter(|(r, _)| registry.is_unit_instance(*r))
                            .filter_map(|(r, _)| {
                                let ids = ledger?.instance_ids(r);
                                Some((registry.name(r).to_string(), ids))
                            })
                            .collect()
                    })
                    .collect();
                let nodes: Vec<String> =
                    e.api.bundles.iter().filter_map(|b| b.node_id.clone()).collect();
                self.touched.extend(nodes);
                let e = self.groups.get_mut(&seq).expect("known");
                let verb = if e.api.state == GroupState::Rescheduling {
                    EventKind::Rescheduled
                } else {
                    EventKind::Created
                };
                e.api.state = GroupState::Created;
                e.api.diagnosis = None;
                let where_ = e
                    .api
                    .bundles
                    .iter()
                    .filter_map(|b| b.node_id.clone())
                    .collect::<Vec<_>>()
                    .join(", ");
                push_event(&mut e.api.history, verb, None, format!("bundles on {where_}"));
                // Requests waiting for this group's bundles can go now.
                self.trigger(Trigger::GroupReserved);
                self.mark_group(seq);
            }
            GroupDecision::Pending(d) | GroupDecision::Infeasible(d) => {
                let infeasible = d.alternatives.iter().all(|a| !a.could_fit_later);
                self.metrics.decision(if infeasible { "infeasible" } else { "pending" }, seconds);
                self.waiting_groups.insert(seq);
                let spec = &self.groups[&seq].spec;
                let diagnosis = convert::group_diagnosis(&self.cluster, &d, infeasible, spec);
                let e = self.groups.get_mut(&seq).expect("known");
                e.waiting = match infeasible {
                    true => berth_core::Waiting::Infeasible,
                    false => berth_core::Waiting::Pending,
                };
                let changed = e.api.diagnosis.as_ref() != Some(&diagnosis);
                if !changed && self.view.waiting.contains_key(&(ObjectKind::Group, seq)) {
                    // As shown already (its bundles' shapes are as many as its bundles).
                    return;
                }
                e.api.diagnosis = Some(diagnosis.clone());
                let waiting = PendingRequest {
                    item: berth_api::rest::PendingItem {
                        kind: "placement_group".into(),
                        id: e.api.group_id.clone(),
                        diagnosis,
                    },
                    shapes: e.api.bundles.iter().map(|b| b.resources.clone()).collect(),
                    label_selector: Default::default(),
                    tolerations: convert::string_map(e.api.spec.placement.tolerations.as_ref()),
                };
                self.view.waiting.insert((ObjectKind::Group, seq), Arc::new(waiting));
                if changed {
                    self.dirty.shown_groups.insert(seq);
                }
            }
        }
    }

    /// Plans again the waiting groups that `triggers` may help (see [`group_may_help`]), and
    /// those an earlier cycle left for later: at most [`MAX_GROUP_WORK`] bundles, from the
    /// group after the last one planned, so that every helped group has its turn.
    pub(crate) fn retry_groups(&mut self, triggers: &[Trigger]) {
        // What the alive nodes have free together, summed once for every group asked about.
        let mut free = None;
        for &seq in &self.waiting_groups {
            let Some(entry) = self.groups.get(&seq) else { continue };
            if self.groups_to_retry.contains(&seq) {
                continue;
            }
            let placed = match entry.api.state {
                GroupState::Rescheduling => self.cluster.group(&entry.api.group_id),
                _ => None,
            };
            let helped = triggers.iter().any(|&t| {
                let group = (&entry.spec, placed);
                group_may_help(t, entry.waiting, group, &self.scheduler, &self.cluster, &mut free)
            });
            if helped {
                self.groups_to_retry.insert(seq);
            }
        }
        let mut work = 0;
        while work < MAX_GROUP_WORK {
            let next = self.groups_to_retry.range(self.group_cursor + 1..).next();
            let Some(&seq) = next.or_else(|| self.groups_to_retry.iter().next()) else { break };
            self.groups_to_retry.remove(&seq);
            self.group_cursor = seq;
            work += self.groups.get(&seq).map_or(1, |g| g.planning_work());
            self.try_group(seq);
        }
    }

    /// Plans group `seq` again in the next cycles' retries, whatever changed (it started
    /// waiting, or was restored waiting).
    pub(crate) fn retry_group_soon(&mut self, seq: u64) {
        self.groups_to_retry.insert(seq);
    }

    pub(crate) fn mark_group(&mut self, seq: u64) {
        self.dirty.groups.insert(seq);
    }

    pub(crate) fn remove_group(&mut self, id: &str) -> Result<Group, HeadError> {
        let seq = match ObjectKind::parse(id) {
            Some((ObjectKind::Group, seq)) if self.groups.contains_key(&seq) => seq,
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
        for key in inside {
            match key {
                WorkId::Actor(_) => {
                    let _ = self.kill_actor(&key.id());
                }
                WorkId::Task(_) => {
                    let _ = self.cancel_task(&key.id());
                }
            }
        }
        if let Some(removed) = self.cluster.remove_group(id) {
            drop(removed);
        }
        self.waiting_groups.remove(&seq);
        self.view.waiting.remove(&(ObjectKind::Group, seq));
        let freed: Vec<_> = self.groups[&seq]
            .api
            .bundles
            .iter()
            .filter_map(|b| b.node_id.as_deref().and_then(|n| self.cluster.index_of(n)))
            .collect();
        for index in freed {
            self.trigger(Trigger::Released(index));
        }
        let nodes: Vec<String> =
            self.groups[&seq].api.bundles.iter().filter_map(|b| b.node_id.clone()).collect();
        self.touched.extend(nodes);
        let e = self.groups.get_mut(&seq).expect("known");
        e.api.state = GroupState::Removed;
        e.api.diagnosis = None;
        push_event(&mut e.api.history, EventKind::Removed, None, "removed by a user");
        self.mark_group(seq);
        Ok(self.groups[&seq].api.clone())
    }

    /// A node holding bundles of group `seq` died: the group waits to be re-planned.
    pub(crate) fn group_lost_bundles(&mut self, seq: u64, node: &str) {
        let Some(e) = self.groups.get_mut(&seq) else { return };
        if e.api.state != GroupState::Created {
            return;
        }
        e.api.state = GroupState::Rescheduling;
        for b in &mut e.api.bundles {
            if b.node_id.as_deref() == Some(node) {
                b.node_id = None;
            }
        }
        let shared = Some(Arc::from(node));
        push_event(
            &mut e.api.history,
            EventKind::Rescheduling,
            shared.as_ref(),
            format!("node {node} died"),
        );
        self.waiting_groups.insert(seq);
        self.retry_group_soon(seq);
        self.mark_group(seq);
    }
}

fn in_group(request: &berth_core::Request, id: &str) -> bool {
    matches!(request.strategy(), berth_core::Strategy::PlacementGroup(p) if p.group.as_str() == id)
}

fn in_bundle_of(allocation: &Allocation, id: &str) -> bool {
    matches!(allocation.source(), AllocationSource::Bundle { group, .. } if group.as_str() == id)
}
