//! What one cycle of the owner produces besides its changes to the state: the objects to write
//! and show, the answers and assignments to give once the cycle is durable, and the triggers
//! for what waits. Every part of the owner adds to it; `flush` and the committer take it.

use std::collections::BTreeSet;
use std::sync::Arc;

use berth_api::agent::Assignment;
use berth_core::Trigger;
use berth_store::{Batch, Table};

use super::work_table::WorkId;
use crate::command::AssignmentSender;
use crate::keyring::StoredKeyring;
use crate::records::StartRecord;
use crate::view::View;

/// More distinct triggers than this in one cycle are retried as one `Everything`.
const MAX_TRIGGERS: usize = 64;

/// What a cycle hands to the committer.
pub(crate) struct Cycle {
    pub(super) batch: Batch,
    pub(super) view: Arc<View>,
    pub(super) effects: Vec<Effect>,
}

impl Cycle {
    /// Takes `next` (a later cycle) into this one: its writes after these, its view, its
    /// effects after these.
    pub(super) fn merge(&mut self, next: Cycle) {
        self.batch.append(next.batch);
        self.view = next.view;
        self.effects.extend(next.effects);
    }
}

/// Something to do once the cycle is durable.
pub(crate) enum Effect {
    /// Answer a caller.
    Reply(Box<dyn FnOnce() + Send>),
    /// Send an agent an assignment.
    Send(AssignmentSender, Box<Assignment>),
}

/// Objects changed this cycle: to write and show, or (derived changes such as a new
/// diagnosis) only to show. Each is copied into the view once per cycle, however often it
/// changed.
#[derive(Default)]
pub(crate) struct Dirty {
    pub(super) work: BTreeSet<WorkId>,
    pub(super) groups: BTreeSet<u64>,
    pub(super) nodes: BTreeSet<String>,
    pub(super) shown_work: BTreeSet<WorkId>,
    pub(super) shown_groups: BTreeSet<u64>,
    pub(super) jobs: BTreeSet<u64>,
    /// Attempts started this cycle (written alone unless their object is written whole).
    pub(super) starts: Vec<(WorkId, StartRecord)>,
}

/// The cycle's output as it is gathered.
#[derive(Default)]
pub(crate) struct CycleOutput {
    dirty: Dirty,
    effects: Vec<Effect>,
    triggers: Vec<Trigger>,
    /// True when an actor stopped or moved this cycle (followers may have to follow).
    peers_moved: bool,
    /// Nodes whose view entry must be refreshed at the end of the cycle.
    touched: BTreeSet<String>,
    /// The cluster-wide settings changed and must be written with this cycle.
    pub(super) settings_changed: bool,
    /// Token hashes to write with this cycle.
    pub(super) keyring: Option<StoredKeyring>,
    /// Keys of records a restore found under an older form of their key: deleted with the
    /// first cycle's writes, which write those objects again under `records::store_key`.
    pub(super) stale_keys: Vec<(Table, String)>,
}

impl CycleOutput {
    /// Queues an answer for when this cycle is durable.
    pub(crate) fn reply<T: Send + 'static>(
        &mut self,
        reply: tokio::sync::oneshot::Sender<T>,
        value: T,
    ) {
        self.effects.push(Effect::Reply(Box::new(move || {
            let _ = reply.send(value);
        })));
    }

    /// Queues `assignment` for when this cycle is durable, to the agent stream `to` if there
    /// is one open (without one, the agent gets every unstarted assignment when it opens one).
    pub(super) fn send(&mut self, to: Option<AssignmentSender>, assignment: Assignment) {
        if let Some(tx) = to {
            self.effects.push(Effect::Send(tx, Box::new(assignment)));
        }
    }

    /// The answers and assignments gathered so far, for the committer.
    pub(super) fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// Records that something changed which waiting requests may wait for.
    pub(crate) fn trigger(&mut self, trigger: Trigger) {
        if self.triggers.len() <= MAX_TRIGGERS && !self.triggers.contains(&trigger) {
            self.triggers.push(trigger);
        }
    }

    /// The triggers gathered so far: one `Everything` when there were too many to tell apart.
    pub(super) fn triggers(&self) -> Vec<Trigger> {
        if self.triggers.len() > MAX_TRIGGERS {
            return vec![Trigger::Everything];
        }
        self.triggers.clone()
    }

    /// [`CycleOutput::triggers`], leaving none.
    pub(super) fn take_triggers(&mut self) -> Vec<Trigger> {
        let triggers = self.triggers();
        self.triggers.clear();
        triggers
    }

    /// An actor stopped or moved: actors that follow their peers are looked at again.
    pub(super) fn peer_moved(&mut self) {
        self.peers_moved = true;
    }

    /// Whether an actor stopped or moved since the last call.
    pub(super) fn take_peers_moved(&mut self) -> bool {
        std::mem::take(&mut self.peers_moved)
    }

    /// `key` is written and shown at the end of the cycle.
    pub(super) fn mark_work(&mut self, key: WorkId) {
        self.dirty.work.insert(key);
    }

    /// `key` is shown anew at the end of the cycle (derived state: not written).
    pub(super) fn show_work(&mut self, key: WorkId) {
        self.dirty.shown_work.insert(key);
    }

    /// `key`'s attempt started: its start is written (alone, unless `key` is written whole).
    pub(super) fn work_started(&mut self, key: WorkId, start: StartRecord) {
        self.dirty.shown_work.insert(key);
        self.dirty.starts.push((key, start));
    }

    /// Group `seq` is written and shown at the end of the cycle.
    pub(super) fn mark_group(&mut self, seq: u64) {
        self.dirty.groups.insert(seq);
    }

    /// Group `seq` is shown anew at the end of the cycle (derived state: not written).
    pub(super) fn show_group(&mut self, seq: u64) {
        self.dirty.shown_groups.insert(seq);
    }

    /// Job `seq` is written and shown at the end of the cycle.
    pub(super) fn mark_job(&mut self, seq: u64) {
        self.dirty.jobs.insert(seq);
    }

    /// Node `node_id` is written and shown at the end of the cycle.
    pub(super) fn mark_node(&mut self, node_id: &str) {
        self.dirty.nodes.insert(node_id.to_string());
        self.touch(node_id);
    }

    /// Node `node_id`'s view entry is refreshed at the end of the cycle (its ledger changed).
    pub(super) fn touch(&mut self, node_id: &str) {
        // Most placements of a cycle land on nodes already touched: no new string then.
        if !self.touched.contains(node_id) {
            self.touched.insert(node_id.to_string());
        }
    }

    /// A forgotten object is neither written nor shown, whatever happened to it this cycle.
    pub(super) fn forget_work(&mut self, key: WorkId) {
        self.dirty.work.remove(&key);
        self.dirty.shown_work.remove(&key);
    }

    /// See [`CycleOutput::forget_work`].
    pub(super) fn forget_group(&mut self, seq: u64) {
        self.dirty.groups.remove(&seq);
        self.dirty.shown_groups.remove(&seq);
    }

    /// See [`CycleOutput::forget_work`].
    pub(super) fn forget_job(&mut self, seq: u64) {
        self.dirty.jobs.remove(&seq);
    }

    /// The nodes touched so far, leaving none.
    pub(super) fn take_touched(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.touched)
    }

    /// The objects marked so far, leaving none.
    pub(super) fn take_dirty(&mut self) -> Dirty {
        std::mem::take(&mut self.dirty)
    }
}

#[cfg(test)]
mod tests {
    use berth_core::NodeIndex;

    use super::*;

    #[test]
    fn triggers_are_kept_once_each_and_too_many_are_everything() {
        let mut cycle = CycleOutput::default();
        cycle.trigger(Trigger::ActorsChanged);
        cycle.trigger(Trigger::ActorsChanged);
        assert_eq!(cycle.take_triggers(), vec![Trigger::ActorsChanged]);
        assert!(cycle.take_triggers().is_empty());
        for i in 0..=MAX_TRIGGERS as u32 {
            cycle.trigger(Trigger::Released(NodeIndex(i)));
        }
        assert_eq!(cycle.triggers(), vec![Trigger::Everything]);
        assert_eq!(cycle.take_triggers(), vec![Trigger::Everything]);
        assert!(cycle.take_triggers().is_empty());
    }

    #[test]
    fn a_forgotten_object_is_neither_written_nor_shown() {
        let mut cycle = CycleOutput::default();
        cycle.mark_work(WorkId::Task(1));
        cycle.show_work(WorkId::Task(1));
        cycle.mark_work(WorkId::Task(2));
        cycle.mark_group(7);
        cycle.show_group(7);
        cycle.forget_work(WorkId::Task(1));
        cycle.forget_group(7);
        let dirty = cycle.take_dirty();
        assert_eq!(dirty.work.into_iter().collect::<Vec<_>>(), vec![WorkId::Task(2)]);
        assert!(dirty.shown_work.is_empty() && dirty.groups.is_empty());
        assert!(dirty.shown_groups.is_empty());
    }

    #[test]
    fn marking_a_node_touches_it_once() {
        let mut cycle = CycleOutput::default();
        cycle.mark_node("a");
        cycle.touch("a");
        cycle.touch("b");
        assert_eq!(cycle.take_touched().into_iter().collect::<Vec<_>>(), vec!["a", "b"]);
        assert_eq!(cycle.take_dirty().nodes.into_iter().collect::<Vec<_>>(), vec!["a"]);
    }
}
