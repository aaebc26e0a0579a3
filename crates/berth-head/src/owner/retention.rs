//! Forgetting finished objects: DEAD actors, FINISHED/FAILED/CANCELLED tasks, REMOVED
//! placement groups and ended jobs are kept for [`Retention::keep_for`] after they finish, and at most
//! [`Retention::keep_count`] of each kind, then dropped from memory, the view and the store.
//!
//! Finished objects are noted when a cycle writes them (whatever path finished them), in the
//! order they finished, and dropped at the start of a later cycle, so an object is always
//! written before it is deleted and a put never follows its delete in one batch. What was
//! dropped is counted in the store (`Meta/retention`) with the highest sequence number dropped
//! per kind, so IDs are never handed out twice even when every object of a kind is gone.

use crate::changes::{ChangeType, Object};
use std::collections::{HashSet, VecDeque};

use berth_api::rest::{Event, Forgotten, GroupState};
use berth_store::{Batch, Snapshot, Table};
use serde::{Deserialize, Serialize};

use super::jobs::{owner_of, Owned};
use super::work_table::{Work, WorkId};
use super::Owner;
use crate::config::Retention;
use crate::records::encode;
use berth_api::ObjectKind;

/// The `Meta` key of the retention ledger.
pub(crate) const LEDGER_KEY: &str = "retention";

/// What was dropped of one kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KindLedger {
    /// Objects dropped so far.
    pub(crate) dropped: u64,
    /// The highest sequence number dropped (new IDs start above it after a restart).
    pub(crate) last_seq: u64,
}

/// What was dropped, per kind; stored under `Meta/retention`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Ledger {
    pub(crate) actors: KindLedger,
    pub(crate) tasks: KindLedger,
    pub(crate) groups: KindLedger,
    /// (Ledgers written before jobs existed have none.)
    #[serde(default)]
    pub(crate) jobs: KindLedger,
}

impl Ledger {
    pub(crate) fn of(&self, kind: ObjectKind) -> &KindLedger {
        match kind {
            ObjectKind::Actor => &self.actors,
            ObjectKind::Task => &self.tasks,
            ObjectKind::Group => &self.groups,
            ObjectKind::Job => &self.jobs,
        }
    }

    fn of_mut(&mut self, kind: ObjectKind) -> &mut KindLedger {
        match kind {
            ObjectKind::Actor => &mut self.actors,
            ObjectKind::Task => &mut self.tasks,
            ObjectKind::Group => &mut self.groups,
            ObjectKind::Job => &mut self.jobs,
        }
    }

    /// The ledger stored in `snapshot`, or an empty one (a store from before retention, or an
    /// unreadable value: counts restart at zero, IDs still come from the remaining keys).
    pub(crate) fn load(snapshot: &Snapshot) -> Result<Ledger, String> {
        match snapshot.get(Table::Meta, LEDGER_KEY) {
            None => Ok(Ledger::default()),
            Some(bytes) => serde_json::from_slice(bytes)
                .map_err(|err| format!("{} {LEDGER_KEY}: {err}", Table::Meta)),
        }
    }
}

/// Finished objects of one kind, oldest-finished first.
#[derive(Default)]
struct Queue {
    order: VecDeque<(u64, u64)>,
    members: HashSet<u64>,
}

/// The owner's record of finished objects and of what it dropped.
#[derive(Default)]
pub(crate) struct Finished {
    queues: [Queue; 4],
    pub(crate) ledger: Ledger,
    /// Store keys to delete in this cycle's batch.
    deletes: Vec<(Table, String)>,
    ledger_changed: bool,
}

/// When an object finished: its last event (the one that ended it, or a later note).
fn finished_at(history: &[Event], created_at_ms: u64) -> u64 {
    history.last().map_or(created_at_ms, |e| e.at_ms)
}

impl Finished {
    /// Notes that `seq` of `kind` finished at `at_ms` (again: no effect).
    fn note(&mut self, kind: ObjectKind, seq: u64, at_ms: u64) {
        let queue = &mut self.queues[kind.index()];
        if queue.members.insert(seq) {
            queue.order.push_back((at_ms, seq));
        }
    }

    /// The next object of `kind` to drop at `now_ms` under `retention`, if any.
    fn next_due(&mut self, kind: ObjectKind, retention: &Retention, now_ms: u64) -> Option<u64> {
        let keep_for_ms = u64::try_from(retention.keep_for.as_millis()).unwrap_or(u64::MAX);
        let queue = &mut self.queues[kind.index()];
        let &(at_ms, seq) = queue.order.front()?;
        let over_count = queue.order.len() > retention.keep_count;
        // A time too far off to add up never comes.
        let expired = at_ms.checked_add(keep_for_ms).is_some_and(|due| due <= now_ms);
        if !(over_count || expired) {
            return None;
        }
        queue.order.pop_front();
        queue.members.remove(&seq);
        Some(seq)
    }

    /// Finished objects of `kind` kept now.
    #[cfg(test)]
    pub(crate) fn kept(&self, kind: ObjectKind) -> usize {
        self.queues[kind.index()].order.len()
    }

    /// What the view shows of `kind`'s retention.
    pub(crate) fn shown(&self, kind: ObjectKind, retention: &Retention) -> Forgotten {
        Forgotten {
            dropped: self.ledger.of(kind).dropped,
            keep_finished_s: retention.keep_for.as_secs(),
            keep_finished: retention.keep_count as u64,
        }
    }

    /// Adds this cycle's deletes (and the ledger, when it changed) to `batch`.
    pub(crate) fn write(&mut self, batch: &mut Batch) -> bool {
        for (table, key) in self.deletes.drain(..) {
            batch.delete(table, key);
        }
        let changed = std::mem::take(&mut self.ledger_changed);
        if changed {
            batch.put(Table::Meta, LEDGER_KEY, encode(&self.ledger));
        }
        changed
    }
}

impl Owner {
    /// Notes every object of this cycle's writes that is finished (called as they are written,
    /// so whatever path finished an object, it is noted).
    pub(crate) fn note_finished(&mut self, kind: ObjectKind, seq: u64) {
        let at_ms = match WorkId::of(kind, seq) {
            Some(key) => self
                .work
                .get(key)
                .map(Work::object)
                .filter(|o| o.ended_for_good())
                .map(|o| finished_at(o.events(), o.created_at_ms())),
            None if kind == ObjectKind::Job => self
                .jobs
                .get(seq)
                .filter(|e| e.api.state.is_final())
                .map(|e| finished_at(&e.api.history, e.api.created_at_ms)),
            None => self
                .groups
                .get(seq)
                .filter(|e| e.api.state == GroupState::Removed)
                .map(|e| finished_at(&e.api.history, e.api.created_at_ms)),
        };
        if let Some(at_ms) = at_ms {
            self.finished.note(kind, seq, at_ms);
        }
    }

    /// Notes every finished object after a restore, oldest-finished first, so the first cycle
    /// drops what expired while the head was down.
    pub(crate) fn note_restored_finished(&mut self) {
        let at = |history: &[Event]| history.last().map_or(0, |e| e.at_ms);
        let mut all: Vec<(u64, ObjectKind, u64)> = Vec::new();
        all.extend(self.work.iter().map(|(key, e)| {
            let (kind, seq) = key.view_key();
            (at(e.object().events()), kind, seq)
        }));
        all.extend(self.groups.iter().map(|(s, e)| (at(&e.api.history), ObjectKind::Group, s)));
        all.extend(self.jobs.iter().map(|(s, e)| (at(&e.api.history), ObjectKind::Job, s)));
        all.sort_unstable();
        for (_, kind, seq) in all {
            self.note_finished(kind, seq);
        }
    }

    /// Drops every finished object past its retention at `now_ms`. Returns how many.
    pub(crate) fn forget_finished(&mut self, now_ms: u64) -> usize {
        let retention = self.config.retention;
        let mut dropped = 0;
        for kind in ObjectKind::ALL {
            while let Some(seq) = self.finished.next_due(kind, &retention, now_ms) {
                self.forget(kind, seq);
                dropped += 1;
            }
        }
        dropped
    }

    /// Removes one finished object from memory, the view and (in this cycle's batch) the store.
    fn forget(&mut self, kind: ObjectKind, seq: u64) {
        let key: Option<Box<str>>;
        let present = match kind {
            ObjectKind::Actor | ObjectKind::Task => {
                let work_id = WorkId::of(kind, seq).expect("an actor's or a task's kind");
                let entry = self.work.remove(work_id);
                key = entry.as_ref().and_then(|e| e.object().idempotency_key().map(Box::from));
                if let Some(owner) = entry.as_ref().and_then(|e| owner_of(e.object().ownership())) {
                    self.jobs.disown(owner, Owned::Work(work_id));
                }
                if let Some(api) = entry.as_ref().and_then(|e| e.actor()) {
                    // The name may already belong to a newer actor.
                    if let Some(name) = &api.name {
                        let key = (api.namespace.clone(), name.clone());
                        if self.work.names.get(&key) == Some(&seq) {
                            self.work.names.remove(&key);
                        }
                    }
                }
                let last = match kind {
                    ObjectKind::Actor => self.view.actors.remove(&seq).map(Object::Actor),
                    _ => self.view.tasks.remove(&seq).map(Object::Task),
                };
                if let Some(last) = last {
                    self.view.changes.push(ChangeType::Deleted, last);
                }
                self.cycle.forget_work(work_id);
                entry.is_some()
            }
            ObjectKind::Group => {
                let entry = self.groups.remove(seq);
                key = entry.as_ref().and_then(|e| e.api.idempotency_key.as_deref().map(Box::from));
                if let Some(owner) = entry.as_ref().and_then(|e| owner_of(&e.api.spec.ownership)) {
                    self.jobs.disown(owner, Owned::Group(seq));
                }
                if let Some(last) = self.view.groups.remove(&seq) {
                    self.view.changes.push(ChangeType::Deleted, Object::Group(last));
                }
                self.cycle.forget_group(seq);
                entry.is_some()
            }
            ObjectKind::Job => {
                let entry = self.jobs.remove(seq);
                key = entry
                    .as_ref()
                    .and_then(|e| e.api.spec.idempotency_key.as_deref().map(Box::from));
                if let Some(last) = self.view.jobs.remove(&seq) {
                    self.view.changes.push(ChangeType::Deleted, Object::Job(last));
                }
                self.cycle.forget_job(seq);
                entry.is_some()
            }
        };
        self.view.waiting.remove(&(kind, seq));
        if let Some(key) = key {
            if self.idempotency.get(&(kind, key.clone())) == Some(&seq) {
                self.idempotency.remove(&(kind, key));
            }
        }
        if present {
            let key = crate::records::store_key(kind, seq);
            if WorkId::of(kind, seq).is_some() {
                self.finished.deletes.push((Table::Starts, key.clone()));
            }
            self.finished.deletes.push((crate::records::table(kind), key));
            let ledger = self.finished.ledger.of_mut(kind);
            ledger.dropped += 1;
            ledger.last_seq = ledger.last_seq.max(seq);
            self.finished.ledger_changed = true;
        }
    }

    /// Shows the retention counts in the view.
    pub(crate) fn show_retention(&mut self) {
        let retention = self.config.retention;
        self.view.forgotten = ObjectKind::ALL.map(|kind| self.finished.shown(kind, &retention));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn retention(keep_for_ms: u64, keep_count: usize) -> Retention {
        Retention { keep_for: Duration::from_millis(keep_for_ms), keep_count }
    }

    fn drain(finished: &mut Finished, kind: ObjectKind, r: &Retention, now: u64) -> Vec<u64> {
        std::iter::from_fn(|| finished.next_due(kind, r, now)).collect()
    }

    #[test]
    fn objects_past_their_time_are_dropped_oldest_first() {
        let mut f = Finished::default();
        f.note(ObjectKind::Task, 3, 1_000);
        f.note(ObjectKind::Task, 1, 2_000);
        f.note(ObjectKind::Task, 2, 9_000);
        let r = retention(5_000, 100);
        assert_eq!(drain(&mut f, ObjectKind::Task, &r, 6_999), [3]);
        assert_eq!(drain(&mut f, ObjectKind::Task, &r, 7_000), [1]);
        assert_eq!(f.kept(ObjectKind::Task), 1);
        assert_eq!(drain(&mut f, ObjectKind::Task, &r, 14_000), [2]);
    }

    #[test]
    fn more_than_the_count_drops_the_oldest_finished() {
        let mut f = Finished::default();
        for seq in 1..=5 {
            f.note(ObjectKind::Actor, seq, 100 * seq);
        }
        let r = retention(3_600_000, 2);
        assert_eq!(drain(&mut f, ObjectKind::Actor, &r, 600), [1, 2, 3]);
        assert_eq!(f.kept(ObjectKind::Actor), 2);
        assert!(drain(&mut f, ObjectKind::Group, &r, 600).is_empty(), "kinds are counted apart");
    }

    #[test]
    fn noting_twice_keeps_one_entry() {
        let mut f = Finished::default();
        f.note(ObjectKind::Group, 7, 10);
        f.note(ObjectKind::Group, 7, 20);
        assert_eq!(f.kept(ObjectKind::Group), 1);
    }

    #[test]
    fn a_huge_keep_for_never_overflows() {
        let mut f = Finished::default();
        f.note(ObjectKind::Task, 1, u64::MAX - 1);
        let r = Retention { keep_for: Duration::MAX, keep_count: 10 };
        assert!(drain(&mut f, ObjectKind::Task, &r, u64::MAX).is_empty());
    }
}
