//! The work table: every actor and task the owner holds, one entry each, keyed by [`WorkId`].
//!
//! Actors and tasks share their lifecycle (placed, started, ended, placed again), so the table
//! holds one kind of entry, [`Work`]: the current attempt's state beside the API object, an
//! actor's or a task's ([`WorkApi`]). Code that applies to both goes through [`WorkObject`],
//! the small trait the two API types implement; what differs between them is data in their
//! objects (`max_restarts` against `max_retries`, the states they end in) and each type's
//! answer to [`WorkObject::attempt_ended`].

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use berth_api::agent::WorkKind;
use berth_api::rest::{Actor, ActorState, Event, EventKind, Ownership, StringMap, Task, TaskState};
use berth_api::spec::{ExpressionMap, Located};
use berth_api::ObjectKind;
use berth_core::Allocation;
use thin_vec::ThinVec;

use crate::clock::now_ms;
use crate::records::{encode, ActorRecord, Placement, PlacementRef, StartRecord, TaskRecord};

/// Events kept per object.
pub(crate) const HISTORY: usize = 50;

/// Which actor or task: what waits in the pending queue, and the table's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum WorkId {
    Actor(u64),
    Task(u64),
}

impl WorkId {
    pub(crate) fn id(self) -> String {
        let (kind, seq) = self.view_key();
        kind.id(seq)
    }

    /// The kind and number, as the view and the store key objects.
    pub(crate) fn view_key(self) -> (ObjectKind, u64) {
        match self {
            WorkId::Actor(seq) => (ObjectKind::Actor, seq),
            WorkId::Task(seq) => (ObjectKind::Task, seq),
        }
    }

    /// The work of `kind` numbered `seq`, when `kind` is an actor's or a task's.
    pub(crate) fn of(kind: ObjectKind, seq: u64) -> Option<WorkId> {
        match kind {
            ObjectKind::Actor => Some(WorkId::Actor(seq)),
            ObjectKind::Task => Some(WorkId::Task(seq)),
            ObjectKind::Group | ObjectKind::Job => None,
        }
    }

    /// The work an object ID names, when it is an actor's or a task's.
    pub(crate) fn parse(id: &str) -> Option<WorkId> {
        match ObjectKind::parse(id)? {
            (ObjectKind::Actor, seq) => Some(WorkId::Actor(seq)),
            (ObjectKind::Task, seq) => Some(WorkId::Task(seq)),
            (ObjectKind::Group | ObjectKind::Job, _) => None,
        }
    }
}

/// The API object of an entry: shared with the published view until it changes (then copied
/// once, [`Work::object_mut`]), so an unchanged actor is held once, not twice.
#[derive(Clone, Debug)]
pub(crate) enum WorkApi {
    Actor(Arc<Actor>),
    Task(Arc<Task>),
}

/// An actor or a task as the owner holds it: the API object and its current attempt (number,
/// reservation, whether it started). Where the attempt runs is its allocation's node and the
/// API object's instances, not kept a second time (a record's placement is derived from them
/// when written): the owner holds one of these per object.
///
/// It keeps no core request: while the work waits, the pending queue holds that; once placed,
/// the allocation says what to give back; and when it must be placed again (a restart, a
/// retry, a move) the request is built anew from the spec ([`super::Owner::resubmit`]), as a
/// restore does. A request kept for the work's whole life was 152 of this entry's 344 bytes, a
/// copy of what the queue held while it waited.
pub(crate) struct Work {
    pub(crate) api: WorkApi,
    pub(crate) attempt: u32,
    /// True once the agent reported the current attempt started.
    pub(crate) started: bool,
    /// What the current attempt holds, while it is placed.
    pub(crate) allocation: Option<Allocation>,
    /// A task whose owner said its result arrived (`POST /api/v1/tasks:delivered`): it ends
    /// FINISHED however its attempt ends. Kept in memory only: after a restart, an attempt's
    /// end is judged as usual.
    pub(crate) delivered: bool,
}

/// The current attempt of a placed actor or task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Attempt {
    /// Its node.
    pub(crate) node: berth_core::NodeIndex,
    /// Its number (1 for the first).
    pub(crate) number: u32,
    /// Its agent reported it started.
    pub(crate) started: bool,
}

impl Work {
    pub(crate) fn new(api: WorkApi) -> Work {
        Work { api, attempt: 0, started: false, allocation: None, delivered: false }
    }

    /// The current attempt, while placed.
    pub(crate) fn current(&self) -> Option<Attempt> {
        let allocation = self.allocation.as_ref()?;
        Some(Attempt { node: allocation.node(), number: self.attempt, started: self.started })
    }

    /// The object, whichever kind it is.
    pub(crate) fn object(&self) -> &dyn WorkObject {
        match &self.api {
            WorkApi::Actor(actor) => &**actor,
            WorkApi::Task(task) => &**task,
        }
    }

    /// The object to change: copied first if the view still shows this version.
    pub(crate) fn object_mut(&mut self) -> &mut dyn WorkObject {
        match &mut self.api {
            WorkApi::Actor(actor) => Arc::<Actor>::make_mut(actor),
            WorkApi::Task(task) => Arc::<Task>::make_mut(task),
        }
    }

    /// The actor, when this is one.
    pub(crate) fn actor(&self) -> Option<&Arc<Actor>> {
        match &self.api {
            WorkApi::Actor(actor) => Some(actor),
            WorkApi::Task(_) => None,
        }
    }

    /// The task, when this is one.
    pub(crate) fn task(&self) -> Option<&Arc<Task>> {
        match &self.api {
            WorkApi::Task(task) => Some(task),
            WorkApi::Actor(_) => None,
        }
    }

    /// The actor to change, when this is one (copied first as [`Work::object_mut`]).
    pub(crate) fn actor_mut(&mut self) -> Option<&mut Actor> {
        match &mut self.api {
            WorkApi::Actor(actor) => Some(Arc::make_mut(actor)),
            WorkApi::Task(_) => None,
        }
    }

    /// The task to change, when this is one.
    pub(crate) fn task_mut(&mut self) -> Option<&mut Task> {
        match &mut self.api {
            WorkApi::Task(task) => Some(Arc::make_mut(task)),
            WorkApi::Actor(_) => None,
        }
    }

    /// The current attempt's placement as a record keeps it.
    fn placement<'a>(&'a self, cluster: &'a berth_core::Cluster) -> Option<PlacementRef<'a>> {
        let allocation = self.allocation.as_ref()?;
        // The allocation's node is in the cluster while the allocation is held (a node leaves
        // the cluster only once its work has been released); the object's node ID, set with
        // the allocation, says the same.
        let node_id = match cluster.node(allocation.node()) {
            Some(node) => node.id().as_str(),
            None => self.object().node_id().map_or("", |n| &**n),
        };
        let bundle = match allocation.source() {
            berth_core::cluster::AllocationSource::Bundle { group, bundle } => {
                Some((group.as_str(), *bundle))
            }
            berth_core::cluster::AllocationSource::Node => None,
        };
        let instances = self.object().instances();
        Some(Placement { node_id, instances, bundle, started: self.started })
    }

    /// The record the store keeps of it, encoded.
    pub(crate) fn record(&self, cluster: &berth_core::Cluster) -> Vec<u8> {
        let placement = self.placement(cluster);
        match &self.api {
            WorkApi::Actor(actor) => {
                encode(&ActorRecord { actor: &**actor, attempt: self.attempt, placement })
            }
            WorkApi::Task(task) => {
                encode(&TaskRecord { task: &**task, attempt: self.attempt, placement })
            }
        }
    }
}

/// Every actor and task the owner holds, and the index of actors' names.
#[derive(Default)]
pub(crate) struct WorkTable {
    /// Boxed: an entry is about 150 bytes, and a table of them inline was most of the head's
    /// memory per actor (a hash table keeps up to half its slots free) and of a batch's time
    /// (each doubling moved every entry into freshly zeroed pages).
    entries: HashMap<WorkId, Box<Work>>,
    /// Named actors by (namespace, name): the last actor created with the name.
    pub(crate) names: HashMap<(String, Box<str>), u64>,
    /// Why each waiting entry last waited, to tell when it changes. Beside the entries, not
    /// in them: only waiting work has one, and a field of it in every entry took the entry
    /// past the allocator's 160-byte class.
    diagnoses: HashMap<WorkId, Box<berth_core::Diagnosis>>,
}

impl WorkTable {
    pub(crate) fn get(&self, key: WorkId) -> Option<&Work> {
        self.entries.get(&key).map(|e| &**e)
    }

    pub(crate) fn get_mut(&mut self, key: WorkId) -> Option<&mut Work> {
        self.entries.get_mut(&key).map(|e| &mut **e)
    }

    /// The entry `key` names, which the caller knows is held (a queued or placed key).
    pub(crate) fn known(&mut self, key: WorkId) -> &mut Work {
        self.get_mut(key).expect("a queued or placed key names a held entry")
    }

    pub(crate) fn contains(&self, key: WorkId) -> bool {
        self.entries.contains_key(&key)
    }

    /// Holds `work` under `key`; an entry already there is kept (restores read each record
    /// once).
    pub(crate) fn insert(&mut self, key: WorkId, work: Work) {
        if let Entry::Vacant(slot) = self.entries.entry(key) {
            slot.insert(Box::new(work));
        }
    }

    pub(crate) fn remove(&mut self, key: WorkId) -> Option<Box<Work>> {
        self.diagnoses.remove(&key);
        self.entries.remove(&key)
    }

    /// Why `key` last waited, while it waits.
    pub(crate) fn last_diagnosis(&self, key: WorkId) -> Option<&berth_core::Diagnosis> {
        self.diagnoses.get(&key).map(|d| &**d)
    }

    /// Records why `key` waits (or, `None`, that it no longer does).
    pub(crate) fn set_last_diagnosis(
        &mut self,
        key: WorkId,
        diagnosis: Option<berth_core::Diagnosis>,
    ) {
        match diagnosis {
            Some(diagnosis) => {
                self.diagnoses.insert(key, Box::new(diagnosis));
            }
            None => {
                self.diagnoses.remove(&key);
            }
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (WorkId, &Work)> {
        self.entries.iter().map(|(key, work)| (*key, &**work))
    }

    /// The actor `seq`, if held.
    pub(crate) fn actor(&self, seq: u64) -> Option<&Arc<Actor>> {
        self.get(WorkId::Actor(seq))?.actor()
    }

    /// The task `seq`, if held.
    pub(crate) fn task(&self, seq: u64) -> Option<&Arc<Task>> {
        self.get(WorkId::Task(seq))?.task()
    }
}

/// How an attempt ended.
#[derive(Clone, Debug)]
pub(crate) enum Ending {
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
    FailedToStart(String),
    NodeDied(String),
    /// Moved off a draining node (not counted as a restart).
    Moved(String),
}

impl Ending {
    pub(crate) fn describe(&self) -> String {
        match self {
            Ending::Exited { code: Some(code), .. } => format!("exited with code {code}"),
            Ending::Exited { signal: Some(signal), .. } => format!("killed by signal {signal}"),
            Ending::Exited { .. } => "exited".to_string(),
            Ending::FailedToStart(error) => format!("failed to start: {error}"),
            Ending::NodeDied(node) => format!("node {node} died"),
            Ending::Moved(why) => why.clone(),
        }
    }

    fn event_kind(&self) -> EventKind {
        match self {
            Ending::Exited { .. } => EventKind::Exited,
            Ending::FailedToStart(_) => EventKind::FailedToStart,
            Ending::NodeDied(_) => EventKind::NodeDied,
            Ending::Moved(_) => EventKind::Moved,
        }
    }
}

/// What follows an attempt's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AfterEnd {
    /// It had ended already (killed, cancelled): nothing changes.
    Nothing,
    /// Placed again (a restart, a retry, a move).
    Again,
    /// It ended for good (DEAD, FINISHED, FAILED).
    Ended,
}

/// What actors and tasks have in common, so the lifecycle is written once for both.
pub(crate) trait WorkObject {
    fn kind(&self) -> WorkKind;
    fn id(&self) -> &str;
    fn command(&self) -> (&str, &[String], &StringMap);
    /// The command may be forked from a warm copy (see `fork_server` in the REST bodies).
    fn fork_server(&self) -> bool;
    fn namespace(&self) -> &str;
    fn selectors(&self) -> (Option<&Located<ExpressionMap>>, Option<&Located<ExpressionMap>>);
    fn history(&mut self) -> &mut ThinVec<Event>;
    /// What happened to it, oldest first.
    fn events(&self) -> &[Event];
    fn created_at_ms(&self) -> u64;
    /// The client's key of its creation.
    fn idempotency_key(&self) -> Option<&str>;
    /// Its job and owner as its creation named them.
    fn ownership(&self) -> &Ownership;
    /// Its state, as the API writes it (`ALIVE`, `RUNNING` …).
    fn state_word(&self) -> &'static str;
    fn node_id(&self) -> Option<&Arc<str>>;
    /// Instance IDs per unit-instance resource of the current attempt.
    fn instances(&self) -> &BTreeMap<String, Vec<u32>>;
    fn set_placed(&mut self, node: Option<Arc<str>>, instances: BTreeMap<String, Vec<u32>>);
    fn set_diagnosis(&mut self, diagnosis: Option<berth_api::rest::Diagnosis>);
    /// The agent started the current attempt.
    fn set_started(&mut self);
    /// Ends it for good (DEAD, FAILED) for `reason`, without a further attempt.
    fn end_for_good(&mut self, reason: String);
    /// True once it ended for good (DEAD; FINISHED, FAILED, CANCELLED).
    fn ended_for_good(&self) -> bool;
    /// Its current attempt ended as `ending` on `node` (`text` says how): records it, and
    /// says whether it runs again (an actor restarts while `max_restarts` allows, a task is
    /// retried while `max_retries` allows and finishes when it exits 0).
    fn attempt_ended(&mut self, ending: &Ending, node: Option<&Arc<str>>, text: String)
        -> AfterEnd;
}

impl WorkObject for Actor {
    fn kind(&self) -> WorkKind {
        WorkKind::Actor
    }
    fn id(&self) -> &str {
        &self.actor_id
    }
    fn command(&self) -> (&str, &[String], &StringMap) {
        (&self.spec.command, &self.spec.args, &self.spec.env)
    }
    fn fork_server(&self) -> bool {
        self.spec.fork_server
    }
    fn namespace(&self) -> &str {
        &self.namespace
    }
    fn selectors(&self) -> (Option<&Located<ExpressionMap>>, Option<&Located<ExpressionMap>>) {
        let placement = &self.spec.placement;
        (placement.label_selector.as_deref(), placement.tolerations.as_deref())
    }
    fn history(&mut self) -> &mut ThinVec<Event> {
        &mut self.history
    }
    fn events(&self) -> &[Event] {
        &self.history
    }
    fn created_at_ms(&self) -> u64 {
        self.created_at_ms
    }
    fn idempotency_key(&self) -> Option<&str> {
        self.spec.idempotency_key.as_deref()
    }
    fn state_word(&self) -> &'static str {
        match self.state {
            ActorState::Pending => "PENDING",
            ActorState::Alive => "ALIVE",
            ActorState::Restarting => "RESTARTING",
            ActorState::Dead => "DEAD",
        }
    }
    fn ownership(&self) -> &Ownership {
        &self.spec.ownership
    }
    fn node_id(&self) -> Option<&Arc<str>> {
        self.node_id.as_ref()
    }
    fn instances(&self) -> &BTreeMap<String, Vec<u32>> {
        &self.instances
    }
    fn set_placed(&mut self, node: Option<Arc<str>>, instances: BTreeMap<String, Vec<u32>>) {
        (self.node_id, self.instances) = (node, instances);
        // A new attempt's process has not said where it listens yet.
        self.endpoint = None;
    }
    fn set_diagnosis(&mut self, diagnosis: Option<berth_api::rest::Diagnosis>) {
        self.diagnosis = diagnosis.map(Box::new);
    }
    fn set_started(&mut self) {
        self.state = ActorState::Alive;
    }
    fn ended_for_good(&self) -> bool {
        self.state == ActorState::Dead
    }
    fn end_for_good(&mut self, reason: String) {
        self.state = ActorState::Dead;
        self.death_reason = Some(reason.as_str().into());
        push_event(&mut self.history, EventKind::Dead, None, reason);
    }
    fn attempt_ended(
        &mut self,
        ending: &Ending,
        node: Option<&Arc<str>>,
        text: String,
    ) -> AfterEnd {
        if self.state == ActorState::Dead {
            return AfterEnd::Nothing;
        }
        // That process no longer listens; the next attempt's will say where it does.
        self.endpoint = None;
        push_event(&mut self.history, ending.event_kind(), node, text.clone());
        let max = self.spec.max_restarts;
        let restart_allowed = max < 0 || i64::from(self.restarts) < i64::from(max);
        let again = match ending {
            Ending::FailedToStart(_) => false,
            Ending::Moved(_) => true,
            _ => restart_allowed,
        };
        if again {
            if !matches!(ending, Ending::Moved(_)) {
                self.restarts = self.restarts.saturating_add(1);
            }
            self.state = ActorState::Restarting;
            self.node_id = None;
            self.instances.clear();
            let max = if max < 0 { "unlimited".to_string() } else { max.to_string() };
            let text = format!("restart {} of {max}", self.restarts);
            push_event(&mut self.history, EventKind::Restarting, None, text);
            return AfterEnd::Again;
        }
        let reason = match ending {
            Ending::FailedToStart(_) => text,
            _ => format!("{text}; no restarts left (max_restarts {max})"),
        };
        self.state = ActorState::Dead;
        self.death_reason = Some(reason.as_str().into());
        push_event(&mut self.history, EventKind::Dead, None, reason);
        AfterEnd::Ended
    }
}

impl WorkObject for Task {
    fn kind(&self) -> WorkKind {
        WorkKind::Task
    }
    fn id(&self) -> &str {
        &self.task_id
    }
    fn command(&self) -> (&str, &[String], &StringMap) {
        (&self.spec.command, &self.spec.args, &self.spec.env)
    }
    fn fork_server(&self) -> bool {
        self.spec.fork_server
    }
    fn namespace(&self) -> &str {
        &self.namespace
    }
    fn selectors(&self) -> (Option<&Located<ExpressionMap>>, Option<&Located<ExpressionMap>>) {
        let placement = &self.spec.placement;
        (placement.label_selector.as_deref(), placement.tolerations.as_deref())
    }
    fn history(&mut self) -> &mut ThinVec<Event> {
        &mut self.history
    }
    fn events(&self) -> &[Event] {
        &self.history
    }
    fn created_at_ms(&self) -> u64 {
        self.created_at_ms
    }
    fn idempotency_key(&self) -> Option<&str> {
        self.spec.idempotency_key.as_deref()
    }
    fn state_word(&self) -> &'static str {
        match self.state {
            TaskState::Pending => "PENDING",
            TaskState::Running => "RUNNING",
            TaskState::Finished => "FINISHED",
            TaskState::Failed => "FAILED",
            TaskState::Cancelled => "CANCELLED",
        }
    }
    fn ownership(&self) -> &Ownership {
        &self.spec.ownership
    }
    fn node_id(&self) -> Option<&Arc<str>> {
        self.node_id.as_ref()
    }
    fn instances(&self) -> &BTreeMap<String, Vec<u32>> {
        &self.instances
    }
    fn set_placed(&mut self, node: Option<Arc<str>>, instances: BTreeMap<String, Vec<u32>>) {
        if node.is_some() {
            self.attempts = self.attempts.saturating_add(1);
        }
        (self.node_id, self.instances) = (node, instances);
    }
    fn set_diagnosis(&mut self, diagnosis: Option<berth_api::rest::Diagnosis>) {
        self.diagnosis = diagnosis.map(Box::new);
    }
    fn set_started(&mut self) {
        self.state = TaskState::Running;
    }
    fn ended_for_good(&self) -> bool {
        self.state.is_final()
    }
    fn end_for_good(&mut self, reason: String) {
        self.state = TaskState::Failed;
        self.failure = Some(reason.as_str().into());
        push_event(&mut self.history, EventKind::Failed, None, reason);
    }
    fn attempt_ended(
        &mut self,
        ending: &Ending,
        node: Option<&Arc<str>>,
        text: String,
    ) -> AfterEnd {
        if self.state.is_final() {
            return AfterEnd::Nothing;
        }
        push_event(&mut self.history, ending.event_kind(), node, text.clone());
        if let Ending::Exited { code, .. } = ending {
            self.exit_code = *code;
        }
        if matches!(ending, Ending::Exited { code: Some(0), .. }) {
            self.state = TaskState::Finished;
            push_event(&mut self.history, EventKind::Finished, None, String::new());
            return AfterEnd::Ended;
        }
        let retry_allowed = self.attempts <= self.spec.max_retries;
        if matches!(ending, Ending::Moved(_))
            || (retry_allowed && !matches!(ending, Ending::FailedToStart(_)))
        {
            self.state = TaskState::Pending;
            self.node_id = None;
            self.instances.clear();
            let text = format!(
                "run {} of at most {}",
                self.attempts + 1,
                u64::from(self.spec.max_retries) + 1
            );
            push_event(&mut self.history, EventKind::Retrying, None, text);
            return AfterEnd::Again;
        }
        let failure = match ending {
            Ending::FailedToStart(_) => text,
            _ => format!("{text}; no retries left (max_retries {})", self.spec.max_retries),
        };
        self.state = TaskState::Failed;
        self.failure = Some(failure.as_str().into());
        push_event(&mut self.history, EventKind::Failed, None, failure);
        AfterEnd::Ended
    }
}

/// A task whose result reached its owner ends FINISHED: its attempt ended (`ending`, with its
/// text, when it ended on its own) or was stopped with its owner. False when it had ended.
pub(crate) fn finish_delivered(
    task: &mut Task,
    ending: Option<(&Ending, String)>,
    node: Option<&Arc<str>>,
) -> bool {
    if task.state.is_final() {
        return false;
    }
    if let Some((ending, text)) = ending {
        push_event(&mut task.history, ending.event_kind(), node, text);
        if let Ending::Exited { code, .. } = ending {
            task.exit_code = *code;
        }
    }
    task.state = TaskState::Finished;
    push_event(&mut task.history, EventKind::Finished, None, "its result reached its owner");
    true
}

/// Appends an event, keeping the last [`HISTORY`]. A node's ID is its shared text (the core's
/// [`berth_core::NodeId`]): every event and object placed on the node holds it once.
pub(crate) fn push_event(
    history: &mut ThinVec<Event>,
    kind: EventKind,
    node_id: Option<&Arc<str>>,
    message: impl Into<Box<str>>,
) {
    push_event_at(history, now_ms(), kind, node_id, message);
}

/// [`push_event`] of an event that happened at `at_ms`.
fn push_event_at(
    history: &mut ThinVec<Event>,
    at_ms: u64,
    kind: EventKind,
    node_id: Option<&Arc<str>>,
    message: impl Into<Box<str>>,
) {
    if history.len() >= HISTORY {
        history.remove(0);
    } else if history.len() == history.capacity() {
        // A history copied from the version the view still shows has no room to spare, and
        // growing by doubling would give an actor's three events room for four (224 bytes,
        // not 160): events are few, so grow by one.
        history.reserve_exact(1);
    }
    let node_id = node_id.cloned();
    history.push(Event { at_ms, kind, node_id, message: message.into() });
}

/// Shows `api`'s current attempt started as `start` tells (an agent's report now, or a
/// start record at a restore).
pub(crate) fn record_start(api: &mut dyn WorkObject, start: &StartRecord) {
    api.set_started();
    let node = api.node_id().cloned();
    let message = if start.pid == 0 { String::new() } else { format!("pid {}", start.pid) };
    push_event_at(api.history(), start.at_ms, EventKind::Started, node.as_ref(), message);
}
