//! Rebuilding the owner's state from the store after a restart.
//!
//! Order matters: nodes first (as they were: alive, draining or dead), then reserved groups
//! with their bundles on the same nodes and instances, then every placed attempt on its node
//! with the same instance IDs (what the agents run), and last, in creation order, what was
//! waiting. A placement that cannot be rebuilt (its node is gone) ends as if its node died.
//! Restored nodes must heartbeat again within the timeout, counted from the restart.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use berth_api::rest::{GroupState, Job, NodeState as ApiNodeState};
use berth_core::cluster::NodeSpec;
use berth_core::labels::Labels;
use berth_core::{Allocation, NodeId, NodeState, Quantity, Request, ResourceSet};
use berth_store::{Snapshot, Table};

use super::groups::{build_group, GroupEntry};
use super::jobs::{owner_of, JobEntry, Owned, OwnerRef};
use super::nodes::NodeEntry;
use super::retention::Ledger;
use super::work::{affinity_of, build_actor, build_task};
use super::work_table::{record_start, Ending, Work, WorkApi, WorkId, WorkObject};
use super::{convert, Owner};
use crate::clock::monotonic_ms;
use crate::ids::Sequences;
use crate::records::{
    self, parse_store_key, ActorRecord, GroupRecord, NodeRecord, Placement, StartRecord, TaskRecord,
};
use berth_api::ObjectKind;

/// What a restore found, for the head's start-up log.
#[derive(Debug, Default)]
pub(crate) struct Restored {
    pub(crate) nodes: usize,
    pub(crate) actors: usize,
    pub(crate) tasks: usize,
    pub(crate) groups: usize,
    pub(crate) jobs: usize,
    /// Records that could not be read or rebuilt, with why (kept in the store, not loaded).
    pub(crate) skipped: Vec<String>,
}

fn decode<T: serde::de::DeserializeOwned>(
    table: Table,
    key: &str,
    bytes: &[u8],
    skipped: &mut Vec<String>,
) -> Option<T> {
    match serde_json::from_slice(bytes) {
        Ok(v) => Some(v),
        Err(err) => {
            skipped.push(format!("{table} {key}: {err}"));
            None
        }
    }
}

/// Applies the start stored apart for the `seq`th object of `kind` (see [`StartRecord`]) to
/// its restored `api` and `placement`, when it is one of `attempt` and `placement` does not
/// show it yet. A start that cannot be read is reported in `out` and not applied.
fn apply_start(
    snapshot: &Snapshot,
    (kind, seq, attempt): (ObjectKind, u64, u32),
    placement: &mut Option<Placement>,
    api: &mut dyn WorkObject,
    out: &mut Restored,
) {
    let Some(placed) = placement.as_mut().filter(|p| !p.started) else { return };
    let key = records::store_key(kind, seq);
    let Some(bytes) = snapshot.get(Table::Starts, &key) else { return };
    match serde_json::from_slice::<StartRecord>(bytes) {
        Ok(start) if start.attempt == attempt => {
            placed.started = true;
            record_start(api, &start);
        }
        Ok(_) => {}
        Err(err) => out.skipped.push(format!("{} {key}: {err}", Table::Starts)),
    }
}

/// An actor's or task's record (`kind`) under `key`: its object, attempt and placement; none
/// (reported in `out`) if it cannot be read.
fn read_work(
    kind: ObjectKind,
    key: &str,
    bytes: &[u8],
    out: &mut Restored,
) -> Option<(WorkApi, u32, Option<Placement>)> {
    let table = records::table(kind);
    if kind == ObjectKind::Actor {
        let record = decode::<ActorRecord>(table, key, bytes, &mut out.skipped)?;
        Some((WorkApi::Actor(Arc::new(record.actor)), record.attempt, record.placement))
    } else {
        let record = decode::<TaskRecord>(table, key, bytes, &mut out.skipped)?;
        Some((WorkApi::Task(Arc::new(record.task)), record.attempt, record.placement))
    }
}

/// Time beyond the heartbeat timeout that a reloaded head gives every agent to register
/// again before it declares the node dead (an agent notices a silent partition of its old
/// head within 5 s).
const RESTORE_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

impl Owner {
    pub(crate) fn restore(&mut self, snapshot: &Snapshot, sequences: &Sequences) -> Restored {
        let mut out = Restored::default();
        self.restore_nodes(snapshot, &mut out);
        self.restore_settings(snapshot, &mut out.skipped);
        self.restore_autoscaler(snapshot, &mut out.skipped);
        self.restore_groups(snapshot, &mut out);
        self.restore_jobs(snapshot, &mut out);
        let waiting = self.restore_work(snapshot, &mut out);
        for (key, request) in waiting {
            self.submit(key, request);
        }
        match Ledger::load(snapshot) {
            Ok(ledger) => self.finished.ledger = ledger,
            Err(err) => out.skipped.push(err),
        }
        self.note_restored_finished();
        self.show_retention();
        self.restore_idempotency_keys();
        self.restore_ownership();
        // IDs continue after the highest ever given, including those forgotten since.
        let ledger = self.finished.ledger;
        let max = |kind: ObjectKind, table: Table| {
            snapshot
                .table(table)
                .keys()
                .filter_map(|k| parse_store_key(k))
                .filter(|(k, _, _)| *k == kind)
                .map(|(_, s, _)| s)
                .max()
                .unwrap_or(0)
                .max(ledger.of(kind).last_seq)
        };
        sequences.actors.store(max(ObjectKind::Actor, Table::Actors), Ordering::Relaxed);
        sequences.tasks.store(max(ObjectKind::Task, Table::Tasks), Ordering::Relaxed);
        sequences.groups.store(max(ObjectKind::Group, Table::Groups), Ordering::Relaxed);
        sequences.jobs.store(max(ObjectKind::Job, Table::Jobs), Ordering::Relaxed);
        // Restoring writes nothing new except what changed (work whose node is gone).
        out
    }

    /// The creations' idempotency keys, from the objects kept.
    fn restore_idempotency_keys(&mut self) {
        let work = self.work.iter().map(|(key, e)| {
            let (kind, seq) = key.view_key();
            (kind, seq, e.object().idempotency_key().map(Box::<str>::from))
        });
        let groups = self.groups.iter().map(|(s, e)| {
            (ObjectKind::Group, s, e.api.idempotency_key.as_deref().map(Box::<str>::from))
        });
        let jobs = self.jobs.iter().map(|(s, e)| {
            (ObjectKind::Job, s, e.api.spec.idempotency_key.as_deref().map(Box::<str>::from))
        });
        let keys: Vec<(ObjectKind, u64, Option<Box<str>>)> =
            work.chain(groups).chain(jobs).collect();
        for (kind, seq, key) in keys {
            self.remember_key(kind, key.as_deref(), seq);
        }
    }

    /// What each owner owns, from the objects' records (what ended owns nothing any more).
    fn restore_ownership(&mut self) {
        let work = self
            .work
            .iter()
            .filter(|(_, e)| !e.object().ended_for_good())
            .filter_map(|(key, e)| Some((owner_of(e.object().ownership())?, Owned::Work(key))));
        let groups =
            self.groups.iter().filter(|(_, e)| e.api.state != GroupState::Removed).filter_map(
                |(seq, e)| {
                    let spec = &e.api.spec;
                    let owner = owner_of(&spec.ownership)?;
                    Some((owner, Owned::Group(seq)))
                },
            );
        let owned: Vec<(OwnerRef, Owned)> = work.chain(groups).collect();
        for (owner, owned) in owned {
            self.jobs.own(owner, owned);
        }
    }

    /// Jobs as they were; a running one holds a whole lease from the restart, and a grace (its
    /// driver may first have to find the new head).
    fn restore_jobs(&mut self, snapshot: &Snapshot, out: &mut Restored) {
        let now = monotonic_ms();
        for (key, bytes) in snapshot.table(Table::Jobs) {
            let Some(job) = decode::<Job>(Table::Jobs, key, bytes, &mut out.skipped) else {
                continue;
            };
            let Some((seq, current)) = self.record_seq(ObjectKind::Job, key, out) else {
                continue;
            };
            let grace = RESTORE_GRACE.as_millis() as u64;
            let lease_until_ms = now + job.lease_ms + grace;
            self.view.jobs.insert(seq, Arc::new(job.clone()));
            self.jobs.insert(seq, JobEntry { api: job, lease_until_ms });
            if !current {
                self.replace_key(ObjectKind::Job, key, seq);
            }
            out.jobs += 1;
        }
    }

    fn restore_nodes(&mut self, snapshot: &Snapshot, out: &mut Restored) {
        for (key, bytes) in snapshot.table(Table::Nodes) {
            let Some(record) = decode::<NodeRecord>(Table::Nodes, key, bytes, &mut out.skipped)
            else {
                continue;
            };
            match self.restore_node(record) {
                Ok(()) => out.nodes += 1,
                Err(err) => out.skipped.push(format!("node {key}: {err}")),
            }
            self.nodes.restored_id(key);
        }
    }

    fn restore_node(&mut self, record: NodeRecord) -> Result<(), String> {
        let id = NodeId::new(&record.node.node_id).map_err(|e| e.to_string())?;
        let mut total = ResourceSet::new();
        for (name, amount) in &record.resources {
            let q = Quantity::parse(amount).map_err(|e| format!("resources.{name}: {e}"))?;
            let r = self.cluster.registry_mut().intern(name).map_err(|e| e.to_string())?;
            total.set(r, q);
        }
        let labels = Labels::from_pairs(record.user_labels.iter()).map_err(|e| e.to_string())?;
        let facts = record.node_facts();
        let spec = NodeSpec { id, total, labels, facts, taints: record.taints.clone() };
        let index = self.cluster.add_node_with(spec).map_err(|e| e.to_string())?;
        let mut record = record;
        if record.node.state == ApiNodeState::Suspect {
            record.node.state = ApiNodeState::Alive;
        }
        let state = record.node.state;
        match state {
            // Never stored by this head (it is the heartbeat clock's word); a record that says
            // it is alive until the restore's grace says otherwise.
            ApiNodeState::Alive | ApiNodeState::Suspect => {}
            ApiNodeState::Draining => {
                self.cluster.set_state(index, NodeState::Draining).map_err(|e| e.to_string())?
            }
            ApiNodeState::Dead => {
                self.cluster.set_state(index, NodeState::Dead).map_err(|e| e.to_string())?
            }
        }
        let node_id = record.node.node_id.clone();
        if state != ApiNodeState::Dead {
            // The agent must register within the timeout and a grace: after a takeover an
            // agent may first have to notice that its old head is gone (across a partition,
            // by its keepalive).
            let grace = RESTORE_GRACE.as_millis() as u64;
            self.nodes.restored_session(&node_id, monotonic_ms() + grace);
        }
        self.nodes.insert(
            node_id.clone(),
            NodeEntry { index, record, actors: 0, tasks: 0, suspect: false },
        );
        self.cycle.touch(&node_id);
        Ok(())
    }

    fn restore_groups(&mut self, snapshot: &Snapshot, out: &mut Restored) {
        for (key, bytes) in snapshot.table(Table::Groups) {
            let Some(record) = decode::<GroupRecord>(Table::Groups, key, bytes, &mut out.skipped)
            else {
                continue;
            };
            let Some((seq, current)) = self.record_seq(ObjectKind::Group, key, out) else {
                continue;
            };
            let spec = match build_group(&self.cluster, seq, &record.group.spec) {
                Ok(spec) => spec,
                Err(err) => {
                    out.skipped.push(format!("group {key}: {err}"));
                    continue;
                }
            };
            let mut entry = GroupEntry {
                api: record.group,
                spec,
                bundle_instances: record.bundle_instances,
                waiting: berth_core::Waiting::Pending,
            };
            match entry.api.state {
                GroupState::Created => {
                    if let Err(err) = self.rereserve_group(&entry) {
                        tracing::warn!(group_id = %key, error = %err, "placement group could not be reserved again; placing it anew");
                        entry.api.state = GroupState::Pending;
                        self.groups.wait(seq);
                        self.cycle.mark_group(seq);
                    }
                }
                GroupState::Pending | GroupState::Rescheduling => {
                    // A partly lost group is placed anew, whole.
                    entry.api.state = GroupState::Pending;
                    self.groups.wait(seq);
                }
                GroupState::Removed => {}
            }
            self.view.groups.insert(seq, Arc::new(entry.api.clone()));
            self.groups.insert(seq, entry);
            if !current {
                self.replace_key(ObjectKind::Group, key, seq);
            }
            out.groups += 1;
        }
        let waiting: Vec<u64> = self.groups.waiting().collect();
        for seq in waiting {
            self.groups.retry_soon(seq);
        }
    }

    fn rereserve_group(&mut self, entry: &GroupEntry) -> Result<(), String> {
        let mut plan = Vec::new();
        for (i, bundle) in entry.api.bundles.iter().enumerate() {
            let node = bundle.node_id.as_deref().ok_or("a bundle has no node")?;
            let index =
                self.cluster.index_of(node).ok_or_else(|| format!("node {node} is unknown"))?;
            let instances = entry.bundle_instances.get(i).cloned().unwrap_or_default();
            let named = convert::named_instances(&mut self.cluster, &instances)?;
            plan.push((index, named));
        }
        let alternative = entry.api.alternative.unwrap_or(0);
        self.cluster
            .reserve_group(entry.spec.clone(), alternative, &plan)
            .map_err(|e| e.to_string())
    }

    /// Restores actors and tasks; returns the ones waiting, in creation order, with their
    /// requests. A record's request is built from its spec (whether or not the work has ended,
    /// so that a record whose spec no longer builds is reported), and kept only while needed:
    /// to queue the work, or to reserve its placement again.
    fn restore_work(&mut self, snapshot: &Snapshot, out: &mut Restored) -> Vec<(WorkId, Request)> {
        let mut waiting = Vec::new();
        let mut lost = Vec::new();
        for kind in [ObjectKind::Actor, ObjectKind::Task] {
            for (key, bytes) in snapshot.table(records::table(kind)) {
                let Some((api, attempt, mut placement)) = read_work(kind, key, bytes, out) else {
                    continue;
                };
                let Some((seq, current)) = self.record_seq(kind, key, out) else {
                    continue;
                };
                let request = match &api {
                    WorkApi::Actor(actor) => build_actor(&self.cluster, seq, &actor.spec),
                    WorkApi::Task(task) => build_task(&self.cluster, &task.spec),
                };
                let request = match request {
                    Ok(r) => r,
                    Err(err) => {
                        out.skipped.push(format!("{} {key}: {err}", kind.word()));
                        continue;
                    }
                };
                let mut work = Work::new(api);
                work.attempt = attempt;
                apply_start(snapshot, (kind, seq, attempt), &mut placement, work.object_mut(), out);
                if let (Some(spec), Some(actor)) = (request.actor(), work.actor_mut()) {
                    // One ID for the API object and the scheduler's record, as when created.
                    actor.actor_id = spec.id.shared();
                }
                match &work.api {
                    WorkApi::Actor(actor) => {
                        self.view.actors.insert(seq, actor.clone());
                        if let Some(name) = &actor.name {
                            self.work.names.insert((actor.namespace.clone(), name.clone()), seq);
                        }
                        out.actors += 1;
                    }
                    WorkApi::Task(task) => {
                        self.view.tasks.insert(seq, task.clone());
                        out.tasks += 1;
                    }
                }
                let ended = work.object().ended_for_good();
                let work_id = WorkId::of(kind, seq).expect("an actor's or a task's kind");
                self.work.insert(work_id, work);
                if !current {
                    self.replace_key(kind, key, seq);
                }
                match (ended, placement) {
                    (true, _) => {}
                    (false, Some(placement)) => {
                        if let Err(err) = self.rereserve(work_id, placement, &request) {
                            lost.push((work_id, err));
                        }
                    }
                    (false, None) => waiting.push((work_id, request)),
                }
            }
        }
        for (key, err) in lost {
            tracing::warn!(work_id = %key.id(), error = %err, "could not be placed where it ran; it restarts");
            self.ended(key, Ending::NodeDied(err));
        }
        waiting
    }

    /// The number of the record under `key` in `kind`'s table, and whether the key has the
    /// current form; none if the key is not one of that kind's or a record with that number was
    /// restored already (a store holds one per object: an old-form key is replaced in the same
    /// commit that writes the new one).
    fn record_seq(&self, kind: ObjectKind, key: &str, out: &mut Restored) -> Option<(u64, bool)> {
        let word = kind.word();
        let Some((_, seq, current)) = parse_store_key(key).filter(|(k, ..)| *k == kind) else {
            out.skipped.push(format!("{word} {key}: not a key of a {word}"));
            return None;
        };
        let known = match WorkId::of(kind, seq) {
            Some(key) => self.work.contains(key),
            None if kind == ObjectKind::Job => self.jobs.contains(seq),
            None => self.groups.contains(seq),
        };
        if known {
            out.skipped.push(format!("{word} {key}: a second record of {}", kind.id(seq)));
            return None;
        }
        Some((seq, current))
    }

    /// Notes that the restored object `seq` was stored under an old-form `key`: the first
    /// cycle deletes that key and writes the object under its current one.
    fn replace_key(&mut self, kind: ObjectKind, key: &str, seq: u64) {
        self.cycle.stale_keys.push((records::table(kind), key.to_owned()));
        match WorkId::of(kind, seq) {
            Some(key) => self.cycle.mark_work(key),
            None if kind == ObjectKind::Job => self.cycle.mark_job(seq),
            None => self.cycle.mark_group(seq),
        }
    }

    /// Reserves `key`'s recorded placement again, with the same instances.
    fn rereserve(
        &mut self,
        key: WorkId,
        placement: Placement,
        request: &Request,
    ) -> Result<(), String> {
        let node = self
            .cluster
            .index_of(&placement.node_id)
            .ok_or_else(|| format!("node {} is unknown", placement.node_id))?;
        let allocation: Allocation = match &placement.bundle {
            Some((group, bundle)) => self
                .cluster
                .reserve_in_bundle(group, *bundle, request.resources())
                .map_err(|e| e.to_string())?,
            None => {
                let named = convert::named_instances(&mut self.cluster, &placement.instances)?;
                self.cluster
                    .reserve_instances(node, request.resources(), &named)
                    .map_err(|e| e.to_string())?
            }
        };
        if let Some(actor) = request.actor() {
            if let Err(err) = self.cluster.place_actor(actor, node, affinity_of(request)) {
                self.cluster.release(&allocation);
                return Err(err.to_string());
            }
        }
        let node_id = placement.node_id.clone();
        let e = self.work.known(key);
        e.allocation = Some(allocation);
        e.started = placement.started;
        self.count_on(&node_id, key, 1);
        Ok(())
    }
}
