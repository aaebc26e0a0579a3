//! Actors and tasks: create, place, start, exit, restart or retry, kill or cancel.

use berth_api::agent::{Assignment, InstanceIds, Start, Stop, WorkKind};
use std::collections::BTreeMap;
use std::sync::Arc;
use thin_vec::ThinVec;

use berth_api::rest::{
    Actor, ActorCreate, ActorState, Endpoint, Event, EventKind, StringMap, Task, TaskState,
    TaskSubmit,
};
use berth_api::spec::{actor_spec, ExpressionMap, LoadedRequest, Located, ParsedRequest, Source};
use berth_core::actors::ActorAffinity;
use berth_core::{Allocation, Cluster, Decision, Request, Scheduler, Strategy, Trigger};

use super::convert;
use super::Owner;
use crate::clock::now_ms;
use crate::error::HeadError;
use crate::records::{ActorRecord, Placement, PlacementRef, StartRecord, TaskRecord};
use crate::view::PendingRequest;
use crate::work_keys::WorkKeys;
use berth_api::ObjectKind;

/// Events kept per object.
pub(crate) const HISTORY: usize = 50;
/// Room made for an actor's events when it is created: `created`, `placed`, `started`, its
/// whole history while it lives (a history grown from empty had room for four).
const ACTOR_EVENTS: usize = 3;
/// The same for a task, which also finishes.
const TASK_EVENTS: usize = 4;

/// What waits in the pending queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum WorkId {
    Actor(u64),
    Task(u64),
}

impl WorkId {
    pub(crate) fn id(self) -> String {
        match self {
            WorkId::Actor(seq) => ObjectKind::Actor.id(seq),
            WorkId::Task(seq) => ObjectKind::Task.id(seq),
        }
    }

    fn view_key(self) -> (ObjectKind, u64) {
        match self {
            WorkId::Actor(seq) => (ObjectKind::Actor, seq),
            WorkId::Task(seq) => (ObjectKind::Task, seq),
        }
    }
}

/// An actor or a task as the owner holds it: the API object and its current attempt (number,
/// reservation, whether it started). Where the attempt runs is its allocation's node and the
/// API object's instances, not kept a second time (a record's placement is derived from them
/// when written): the owner holds one of these per object.
///
/// It keeps no core request: while the work waits, the pending queue holds that; once placed,
/// the allocation says what to give back; and when it must be placed again (a restart, a
/// retry, a move) the request is built anew from the spec ([`Owner::resubmit`]), as a restore
/// does. A request kept for the work's whole life was 152 of this entry's 344 bytes, a copy of
/// what the queue held while it waited.
pub(crate) struct Work<A> {
    /// The object as the API shows it, shared with the published view until it changes
    /// (then copied once: [`Work::api_mut`]), so an unchanged actor is held once, not twice.
    pub(crate) api: Arc<A>,
    pub(crate) attempt: u32,
    /// True once the agent reported the current attempt started.
    pub(crate) started: bool,
    /// What the current attempt holds, while it is placed.
    pub(crate) allocation: Option<Allocation>,
    /// Why it last waited (boxed: only waiting work has one).
    pub(crate) last_diagnosis: Option<Box<berth_core::Diagnosis>>,
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

/// An actor as the owner holds it.
pub(crate) type ActorEntry = Work<Actor>;
/// A task as the owner holds it.
pub(crate) type TaskEntry = Work<Task>;

impl<A: Clone> Work<A> {
    pub(crate) fn new(api: A) -> Work<A> {
        let api = Arc::new(api);
        Work { api, attempt: 0, started: false, allocation: None, last_diagnosis: None }
    }

    /// The current attempt, while placed.
    pub(crate) fn current(&self) -> Option<Attempt> {
        let allocation = self.allocation.as_ref()?;
        Some(Attempt { node: allocation.node(), number: self.attempt, started: self.started })
    }

    /// The object to change: copied first if the view still shows this version.
    pub(crate) fn api_mut(&mut self) -> &mut A {
        Arc::make_mut(&mut self.api)
    }
}

impl<A: WorkObject> Work<A> {
    /// The current attempt's placement as a record keeps it.
    fn placement<'a>(&'a self, cluster: &'a berth_core::Cluster) -> Option<PlacementRef<'a>> {
        let allocation = self.allocation.as_ref()?;
        // The allocation's node is in the cluster while the allocation is held (a node leaves
        // the cluster only once its work has been released); the object's node ID, set with
        // the allocation, says the same.
        let node_id = match cluster.node(allocation.node()) {
            Some(node) => node.id().as_str(),
            None => self.api.node_id().map_or("", |n| &**n),
        };
        let bundle = match allocation.source() {
            berth_core::cluster::AllocationSource::Bundle { group, bundle } => {
                Some((group.as_str(), *bundle))
            }
            berth_core::cluster::AllocationSource::Node => None,
        };
        let instances = self.api.instances();
        Some(Placement { node_id, instances, bundle, started: self.started })
    }
}

impl ActorEntry {
    pub(crate) fn record<'a>(
        &'a self,
        cluster: &'a berth_core::Cluster,
    ) -> ActorRecord<&'a Actor, Option<PlacementRef<'a>>> {
        let placement = self.placement(cluster);
        ActorRecord { actor: &self.api, attempt: self.attempt, placement }
    }
}

impl TaskEntry {
    pub(crate) fn record<'a>(
        &'a self,
        cluster: &'a berth_core::Cluster,
    ) -> TaskRecord<&'a Task, Option<PlacementRef<'a>>> {
        let placement = self.placement(cluster);
        TaskRecord { task: &self.api, attempt: self.attempt, placement }
    }
}

/// What actors and tasks have in common, so the lifecycle is written once for both.
pub(crate) trait WorkObject {
    const KIND: WorkKind;
    fn id(&self) -> &str;
    fn command(&self) -> (&str, &[String], &StringMap);
    /// The command may be forked from a warm copy (see `fork_server` in the REST bodies).
    fn fork_server(&self) -> bool;
    fn namespace(&self) -> &str;
    fn selectors(&self) -> (Option<&Located<ExpressionMap>>, Option<&Located<ExpressionMap>>);
    fn history(&mut self) -> &mut ThinVec<Event>;
    fn node_id(&self) -> Option<&Arc<str>>;
    /// Instance IDs per unit-instance resource of the current attempt.
    fn instances(&self) -> &BTreeMap<String, Vec<u32>>;
    fn set_placed(&mut self, node: Option<Arc<str>>, instances: BTreeMap<String, Vec<u32>>);
    fn set_diagnosis(&mut self, diagnosis: Option<berth_api::rest::Diagnosis>);
    /// The agent started the current attempt.
    fn set_started(&mut self);
    /// Ends it for good (DEAD, FAILED) for `reason`, without a further attempt.
    fn end_for_good(&mut self, reason: String);
}

impl WorkObject for Actor {
    const KIND: WorkKind = WorkKind::Actor;
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
    fn end_for_good(&mut self, reason: String) {
        self.state = ActorState::Dead;
        self.death_reason = Some(reason.as_str().into());
        push_event(&mut self.history, EventKind::Dead, None, reason);
    }
}

impl WorkObject for Task {
    const KIND: WorkKind = WorkKind::Task;
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
    fn end_for_good(&mut self, reason: String) {
        self.state = TaskState::Failed;
        self.failure = Some(reason.as_str().into());
        push_event(&mut self.history, EventKind::Failed, None, reason);
    }
}

/// Runs `$body` with `$e` bound to the entry `$key` names (an actor's or a task's): the body is
/// written once and compiled for both. Only the entry maps are borrowed, so the body may use
/// the owner's other fields (`$owner.cluster`), not its methods.
macro_rules! with_work {
    ($owner:expr, $key:expr, |$e:ident| $body:expr) => {
        match $key {
            WorkId::Actor(seq) => {
                let $e = $owner.actors.get_mut(&seq).expect("a queued key names a known actor");
                $body
            }
            WorkId::Task(seq) => {
                let $e = $owner.tasks.get_mut(&seq).expect("a queued key names a known task");
                $body
            }
        }
    };
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
pub(crate) fn record_start<A: WorkObject>(api: &mut A, start: &StartRecord) {
    api.set_started();
    let node = api.node_id().cloned();
    let message = pid_text(start.pid);
    push_event_at(api.history(), start.at_ms, EventKind::Started, node.as_ref(), message);
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
    fn describe(&self) -> String {
        match self {
            Ending::Exited { code: Some(code), .. } => format!("exited with code {code}"),
            Ending::Exited { signal: Some(signal), .. } => format!("killed by signal {signal}"),
            Ending::Exited { .. } => "exited".to_string(),
            Ending::FailedToStart(error) => format!("failed to start: {error}"),
            Ending::NodeDied(node) => format!("node {node} died"),
            Ending::Moved(why) => why.clone(),
        }
    }
}

/// The core request of actor `seq`, from its body (as it arrives, or as stored): its
/// placement, and its ID, namespace and labels for other actors' affinity.
pub(crate) fn build_actor(
    cluster: &Cluster,
    seq: u64,
    body: &ActorCreate,
) -> Result<Request, HeadError> {
    let source = Source::body("POST /api/v1/actors");
    let labels = body.labels.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    let actor = actor_spec(&source, &ObjectKind::Actor.id(seq), body.namespace.as_deref(), labels)?;
    Ok(body.placement.build(&source, cluster, Some(actor))?)
}

/// The core request of a task, from its body.
pub(crate) fn build_task(cluster: &Cluster, body: &TaskSubmit) -> Result<Request, HeadError> {
    Ok(body.placement.build(&Source::body("POST /api/v1/tasks"), cluster, None)?)
}

impl Owner {
    pub(crate) fn create_actor(&mut self, seq: u64, body: ActorCreate) -> Result<Actor, HeadError> {
        // A retried creation: the first one's object, as it is now.
        if let Some(first) = self.created_with(ObjectKind::Actor, body.idempotency_key.as_deref()) {
            return Ok((*self.actors[&first].api).clone());
        }
        let namespace = body.namespace.as_deref().unwrap_or("default").to_string();
        if let Some(name) = &body.name {
            // The index may name an actor that died since: its name is free again.
            let holder = self.names.get(&(namespace.clone(), name.clone()));
            let taken = holder
                .and_then(|seq| self.actors.get(seq))
                .is_some_and(|a| a.api.state != ActorState::Dead);
            if taken {
                return Err(HeadError::Conflict(format!(
                    "an actor named {name:?} is alive in namespace {namespace:?}; names are unique \
                     among live actors of a namespace"
                )));
            }
        }
        let request = build_actor(&self.cluster, seq, &body)?;
        // The scheduler's record of the actor (kept while it is placed) and the API object
        // share one ID.
        let actor_id = match request.actor() {
            Some(actor) => actor.id.shared(),
            None => ObjectKind::Actor.id(seq).into(),
        };
        let mut api = Actor {
            endpoint: None,
            work_key: None,
            actor_id,
            name: body.name.clone(),
            namespace,
            state: ActorState::Pending,
            node_id: None,
            instances: Default::default(),
            restarts: 0,
            death_reason: None,
            diagnosis: None,
            history: ThinVec::with_capacity(ACTOR_EVENTS),
            created_at_ms: now_ms(),
            spec: Arc::new(body),
        };
        push_event(&mut api.history, EventKind::Created, None, String::new());
        if let Some(name) = &api.name {
            self.names.insert((api.namespace.clone(), name.clone()), seq);
        }
        self.remember_key(ObjectKind::Actor, api.spec.idempotency_key.as_deref(), seq);
        self.actors.insert(seq, Box::new(Work::new(api)));
        self.submit(WorkId::Actor(seq), request);
        Ok((*self.actors[&seq].api).clone())
    }

    pub(crate) fn submit_task(&mut self, seq: u64, body: TaskSubmit) -> Result<Task, HeadError> {
        if let Some(first) = self.created_with(ObjectKind::Task, body.idempotency_key.as_deref()) {
            return Ok((*self.tasks[&first].api).clone());
        }
        let request = build_task(&self.cluster, &body)?;
        let mut api = Task {
            work_key: None,
            task_id: ObjectKind::Task.id(seq).into(),
            name: body.name.clone(),
            namespace: body.namespace.as_deref().unwrap_or("default").to_string(),
            state: TaskState::Pending,
            node_id: None,
            instances: Default::default(),
            attempts: 0,
            exit_code: None,
            failure: None,
            diagnosis: None,
            history: ThinVec::with_capacity(TASK_EVENTS),
            created_at_ms: now_ms(),
            spec: Arc::new(body),
        };
        push_event(&mut api.history, EventKind::Created, None, String::new());
        self.remember_key(ObjectKind::Task, api.spec.idempotency_key.as_deref(), seq);
        self.tasks.insert(seq, Box::new(Work::new(api)));
        self.submit(WorkId::Task(seq), request);
        Ok((*self.tasks[&seq].api).clone())
    }

    /// Places `key` now, or queues it with `request`.
    pub(crate) fn submit(&mut self, key: WorkId, request: Request) {
        let started = std::time::Instant::now();
        let placed =
            self.queue.submit(key, request, &mut self.scheduler, &mut self.cluster, &mut self.rng);
        let seconds = started.elapsed().as_secs_f64();
        match placed {
            Some(allocation) => {
                self.metrics.decision("placed", seconds);
                self.placed(key, allocation);
            }
            None => {
                let last = self.queue.last().expect("just queued");
                let infeasible = matches!(last.waiting, berth_core::Waiting::Infeasible);
                self.metrics.decision(if infeasible { "infeasible" } else { "pending" }, seconds);
                let (diagnosis, shape) = (last.diagnosis.clone(), self.shape(&last.request));
                let api = convert::diagnosis(&self.cluster, &diagnosis, infeasible, &last.request);
                self.set_waiting(key, diagnosis, api, shape);
                self.mark(key);
            }
        }
    }

    /// Places `key` again after an attempt ended, with its request built anew from its spec.
    fn resubmit(&mut self, key: WorkId) {
        match self.rebuild(key) {
            Ok(request) => self.submit(key, request),
            // The spec was accepted once and building depends on its text alone, so this
            // is not expected; should it happen, the work ends visibly rather than vanish.
            Err(err) => {
                let reason = format!("it could not be placed again: {err}");
                tracing::error!(work_id = %key.id(), %reason, "a spec no longer builds");
                with_work!(self, key, |e| e.api_mut().end_for_good(reason));
                self.mark(key);
            }
        }
    }

    /// `key`'s core request, built from its spec as at its creation.
    pub(crate) fn rebuild(&mut self, key: WorkId) -> Result<Request, HeadError> {
        match key {
            WorkId::Actor(seq) => {
                let spec = &self.actors.get(&seq).expect("a known actor").api.spec;
                build_actor(&self.cluster, seq, spec)
            }
            WorkId::Task(seq) => {
                build_task(&self.cluster, &self.tasks.get(&seq).expect("a known task").api.spec)
            }
        }
    }

    /// Marks `key` to be written and shown at the end of the cycle.
    fn mark(&mut self, key: WorkId) {
        match key {
            WorkId::Actor(seq) => self.dirty.actors.insert(seq),
            WorkId::Task(seq) => self.dirty.tasks.insert(seq),
        };
    }

    /// What a queued `request` asks for, as the status's waiting list shows it.
    fn shape(&self, request: &Request) -> StringMap {
        convert::asked_map(&self.cluster, request.resources(), Some(request.unknown_resources()))
    }

    /// Records why `key` waits (in its object and in the status's waiting list); `shape` is
    /// what its queued request asks for.
    fn set_waiting(
        &mut self,
        key: WorkId,
        diagnosis: berth_core::Diagnosis,
        api_diagnosis: berth_api::rest::Diagnosis,
        shape: StringMap,
    ) {
        let (label_selector, tolerations) = with_work!(self, key, |e| {
            e.api_mut().set_diagnosis(Some(api_diagnosis.clone()));
            e.last_diagnosis = Some(Box::new(diagnosis));
            let (selector, tolerations) = e.api.selectors();
            (convert::string_map(selector), convert::string_map(tolerations))
        });
        let (kind, seq) = key.view_key();
        let waiting = PendingRequest {
            item: berth_api::rest::PendingItem {
                kind: kind.word().to_string(),
                id: key.id(),
                diagnosis: api_diagnosis,
            },
            shapes: vec![shape],
            label_selector,
            tolerations,
        };
        self.view.waiting.insert((kind, seq), std::sync::Arc::new(waiting));
    }

    /// After a retry: refresh the diagnosis of everything still queued whose diagnosis changed.
    pub(crate) fn refresh_waiting(&mut self) {
        let changed: Vec<(WorkId, berth_core::Diagnosis, berth_api::rest::Diagnosis, StringMap)> =
            self.queue
                .iter()
                .filter(|q| {
                    let last = match q.key {
                        WorkId::Actor(seq) => self.actors.get(&seq).map(|e| &e.last_diagnosis),
                        WorkId::Task(seq) => self.tasks.get(&seq).map(|e| &e.last_diagnosis),
                    };
                    last.is_none_or(|last| last.as_deref() != Some(&q.diagnosis))
                })
                .map(|q| {
                    let infeasible = matches!(q.waiting, berth_core::Waiting::Infeasible);
                    let api =
                        convert::diagnosis(&self.cluster, &q.diagnosis, infeasible, &q.request);
                    (q.key, q.diagnosis.clone(), api, self.shape(&q.request))
                })
                .collect();
        for (key, diagnosis, api, shape) in changed {
            self.set_waiting(key, diagnosis, api, shape);
            // The diagnosis is derived state: shown, not stored.
            match key {
                WorkId::Actor(seq) => self.dirty.shown_actors.insert(seq),
                WorkId::Task(seq) => self.dirty.shown_tasks.insert(seq),
            };
        }
    }

    /// `key` was reserved `allocation`: record it and tell the node's agent.
    pub(crate) fn placed(&mut self, key: WorkId, allocation: Allocation) {
        let node_id = convert::node_id(&self.cluster, allocation.node());
        let instances = convert::instances(&self.cluster, &allocation);
        let (kind, seq) = key.view_key();
        self.view.waiting.remove(&(kind, seq));
        self.count_on(&node_id, key, 1);
        let start = with_work!(self, key, |e| {
            e.attempt += 1;
            e.allocation = Some(allocation.clone());
            e.started = false;
            e.last_diagnosis = None;
            e.api_mut().set_diagnosis(None);
            e.api_mut().set_placed(Some(node_id.clone()), instances.clone());
            let text = convert::instances_text(&instances);
            push_event(e.api_mut().history(), EventKind::Placed, Some(&node_id), text);
            start_message(
                &*e.api,
                e.attempt,
                &self.cluster,
                &allocation,
                &instances,
                &self.work_keys,
            )
        });
        if matches!(key, WorkId::Actor(_)) {
            self.trigger(Trigger::ActorsChanged);
        }
        self.send(&node_id, start);
        self.mark(key);
    }

    /// Counts `key`'s attempt on (+1) or off (-1) `node`, and shows the node anew.
    pub(crate) fn count_on(&mut self, node: &str, key: WorkId, delta: i64) {
        if let Some(n) = self.nodes.get_mut(node) {
            let counter = match key {
                WorkId::Actor(_) => &mut n.actors,
                WorkId::Task(_) => &mut n.tasks,
            };
            *counter = counter.saturating_add_signed(delta);
            // Most placements of a cycle land on nodes already touched: no new string then.
            if !self.touched.contains(node) {
                self.touched.insert(node.to_string());
            }
        }
    }

    /// The Start message of `key`'s current attempt (sent again when an agent reconnects).
    pub(crate) fn start_of(&self, key: WorkId) -> Option<Assignment> {
        fn start<A: WorkObject>(
            e: &Work<A>,
            cluster: &berth_core::Cluster,
            keys: &WorkKeys,
        ) -> Option<Assignment> {
            let allocation = e.allocation.as_ref()?;
            let instances = e.api.instances();
            Some(start_message(&*e.api, e.attempt, cluster, allocation, instances, keys))
        }
        match key {
            WorkId::Actor(seq) => start(self.actors.get(&seq)?, &self.cluster, &self.work_keys),
            WorkId::Task(seq) => start(self.tasks.get(&seq)?, &self.cluster, &self.work_keys),
        }
    }

    /// Gives back what `key`'s attempt held and forgets its placement; returns the node.
    fn release(&mut self, key: WorkId) -> Option<Arc<str>> {
        let allocation = with_work!(self, key, |e| {
            e.started = false;
            e.allocation.take()
        });
        if let WorkId::Actor(seq) = key {
            let id = ObjectKind::Actor.id(seq);
            if self.cluster.remove_actor(&id).is_some() {
                self.trigger(Trigger::ActorsChanged);
                self.peers_moved = true;
            }
        }
        let allocation = allocation?;
        let node_id = convert::node_id(&self.cluster, allocation.node());
        self.cluster.release(&allocation);
        self.trigger(Trigger::Released(allocation.node()));
        self.count_on(&node_id, key, -1);
        Some(node_id)
    }

    /// An attempt of `key` ended: restart, retry, or finish it.
    pub(crate) fn ended(&mut self, key: WorkId, ending: Ending) {
        let node = self.release(key);
        let text = ending.describe();
        match key {
            WorkId::Actor(seq) => {
                let e = self.actors.get_mut(&seq).expect("known");
                if e.api.state == ActorState::Dead {
                    return;
                }
                // That process no longer listens; the next attempt's will say where it does.
                e.api_mut().endpoint = None;
                push_event(
                    &mut e.api_mut().history,
                    event_kind(&ending),
                    node.as_ref(),
                    text.clone(),
                );
                let restart_allowed = e.api.spec.max_restarts < 0
                    || i64::from(e.api.restarts) < i64::from(e.api.spec.max_restarts);
                let resubmit = match &ending {
                    Ending::FailedToStart(_) => false,
                    Ending::Moved(_) => true,
                    _ => restart_allowed,
                };
                if resubmit {
                    if !matches!(ending, Ending::Moved(_)) {
                        e.api_mut().restarts = e.api.restarts.saturating_add(1);
                    }
                    e.api_mut().state = ActorState::Restarting;
                    e.api_mut().node_id = None;
                    e.api_mut().instances.clear();
                    let text = format!(
                        "restart {} of {}",
                        e.api.restarts,
                        max_text(e.api.spec.max_restarts)
                    );
                    push_event(&mut e.api_mut().history, EventKind::Restarting, None, text);
                    self.resubmit(key);
                } else {
                    e.api_mut().state = ActorState::Dead;
                    e.api_mut().death_reason = Some(match ending {
                        Ending::FailedToStart(_) => text.into(),
                        _ => format!(
                            "{text}; no restarts left (max_restarts {})",
                            e.api.spec.max_restarts
                        )
                        .into(),
                    });
                    let reason = e.api.death_reason.clone().unwrap_or_default();
                    push_event(&mut e.api_mut().history, EventKind::Dead, None, reason);
                    self.mark(key);
                }
            }
            WorkId::Task(seq) => {
                let e = self.tasks.get_mut(&seq).expect("known");
                if matches!(
                    e.api.state,
                    TaskState::Finished | TaskState::Failed | TaskState::Cancelled
                ) {
                    return;
                }
                push_event(
                    &mut e.api_mut().history,
                    event_kind(&ending),
                    node.as_ref(),
                    text.clone(),
                );
                if let Ending::Exited { code, .. } = ending {
                    e.api_mut().exit_code = code;
                }
                let success = matches!(ending, Ending::Exited { code: Some(0), .. });
                let retry_allowed = e.api.attempts <= e.api.spec.max_retries;
                if success {
                    e.api_mut().state = TaskState::Finished;
                    push_event(&mut e.api_mut().history, EventKind::Finished, None, String::new());
                    self.mark(key);
                } else if matches!(ending, Ending::Moved(_))
                    || (retry_allowed && !matches!(ending, Ending::FailedToStart(_)))
                {
                    e.api_mut().state = TaskState::Pending;
                    e.api_mut().node_id = None;
                    e.api_mut().instances.clear();
                    let text = format!(
                        "run {} of at most {}",
                        e.api.attempts + 1,
                        e.api.spec.max_retries as u64 + 1
                    );
                    push_event(&mut e.api_mut().history, EventKind::Retrying, None, text);
                    self.resubmit(key);
                } else {
                    e.api_mut().state = TaskState::Failed;
                    e.api_mut().failure = Some(match ending {
                        Ending::FailedToStart(_) => text.into(),
                        _ => format!(
                            "{text}; no retries left (max_retries {})",
                            e.api.spec.max_retries
                        )
                        .into(),
                    });
                    let failure = e.api.failure.clone().unwrap_or_default();
                    push_event(&mut e.api_mut().history, EventKind::Failed, None, failure);
                    self.mark(key);
                }
            }
        }
    }

    /// The agent reported that `key`'s attempt started. Written as a [`StartRecord`] alone,
    /// unless the object is written whole this cycle anyway.
    pub(crate) fn started(&mut self, key: WorkId, pid: u32) {
        // Reports may repeat (an agent resends until answered): the first one counts.
        let Some(attempt) = self.attempt_of(key).filter(|a| !a.started) else { return };
        let start = StartRecord { attempt: attempt.number, at_ms: now_ms(), pid };
        with_work!(self, key, |e| {
            e.started = true;
            record_start(e.api_mut(), &start);
        });
        match key {
            WorkId::Actor(seq) => self.dirty.shown_actors.insert(seq),
            WorkId::Task(seq) => self.dirty.shown_tasks.insert(seq),
        };
        self.dirty.starts.push((key, start));
    }

    /// `key`'s current attempt, while placed.
    pub(crate) fn attempt_of(&self, key: WorkId) -> Option<Attempt> {
        match key {
            WorkId::Actor(seq) => self.actors.get(&seq)?.current(),
            WorkId::Task(seq) => self.tasks.get(&seq)?.current(),
        }
    }

    /// True when `attempt` runs on the node `node_id`.
    pub(crate) fn runs_on(&self, attempt: Attempt, node_id: &str) -> bool {
        self.cluster.node(attempt.node).is_some_and(|n| n.id().as_str() == node_id)
    }

    /// Stops `key`'s running attempt on its node (a kill, a cancel, a move).
    pub(crate) fn stop(&mut self, key: WorkId, reason: &str) {
        if let Some(attempt) = self.attempt_of(key) {
            let node = convert::node_id(&self.cluster, attempt.node);
            let stop = Assignment {
                kind: Some(berth_api::agent::assignment::Kind::Stop(Stop {
                    work_id: key.id(),
                    attempt: attempt.number,
                    reason: reason.to_string(),
                })),
            };
            self.send(&node, stop);
        }
    }

    /// An actor's process says where it listens. Only the current attempt's may, while it is
    /// placed: a late word from a process that has since stopped must not hide the new one.
    pub(crate) fn register_endpoint(
        &mut self,
        id: &str,
        endpoint: Endpoint,
    ) -> Result<Actor, HeadError> {
        let seq = match ObjectKind::parse(id) {
            Some((ObjectKind::Actor, seq)) if self.actors.contains_key(&seq) => seq,
            _ => return Err(HeadError::NotFound { what: "actor", id: id.to_string() }),
        };
        let e = self.actors.get_mut(&seq).expect("known");
        if e.api.state == ActorState::Dead {
            return Err(HeadError::Conflict(format!("actor {id} is DEAD")));
        }
        if e.allocation.is_none() || e.attempt != endpoint.attempt {
            return Err(HeadError::Conflict(format!(
                "attempt {} of actor {id} is not the one placed now ({})",
                endpoint.attempt,
                match &e.allocation {
                    Some(_) => format!("that is attempt {}", e.attempt),
                    None => "it waits to be placed".to_string(),
                }
            )));
        }
        if e.api.endpoint.as_deref() != Some(&endpoint) {
            let node = e.api.node_id.clone();
            push_event(
                &mut e.api_mut().history,
                EventKind::Listening,
                node.as_ref(),
                endpoint.address.clone(),
            );
            e.api_mut().endpoint = Some(Box::new(endpoint));
            self.mark(WorkId::Actor(seq));
        }
        Ok((*self.actors[&seq].api).clone())
    }

    pub(crate) fn kill_actor(&mut self, id: &str) -> Result<Actor, HeadError> {
        let seq = match ObjectKind::parse(id) {
            Some((ObjectKind::Actor, seq)) if self.actors.contains_key(&seq) => seq,
            _ => return Err(HeadError::NotFound { what: "actor", id: id.to_string() }),
        };
        let key = WorkId::Actor(seq);
        if self.actors[&seq].api.state == ActorState::Dead {
            return Ok((*self.actors[&seq].api).clone());
        }
        self.stop(key, "killed");
        self.queue.remove(&key);
        self.view.waiting.remove(&(ObjectKind::Actor, seq));
        let node = self.release(key);
        let e = self.actors.get_mut(&seq).expect("known");
        e.api_mut().state = ActorState::Dead;
        e.api_mut().diagnosis = None;
        e.api_mut().endpoint = None;
        e.api_mut().death_reason = Some("killed by a user".into());
        push_event(&mut e.api_mut().history, EventKind::Killed, node.as_ref(), "killed by a user");
        self.mark(key);
        Ok((*self.actors[&seq].api).clone())
    }

    pub(crate) fn cancel_task(&mut self, id: &str) -> Result<Task, HeadError> {
        let seq = match ObjectKind::parse(id) {
            Some((ObjectKind::Task, seq)) if self.tasks.contains_key(&seq) => seq,
            _ => return Err(HeadError::NotFound { what: "task", id: id.to_string() }),
        };
        let key = WorkId::Task(seq);
        let state = self.tasks[&seq].api.state;
        if matches!(state, TaskState::Finished | TaskState::Failed | TaskState::Cancelled) {
            return Err(HeadError::Conflict(format!(
                "task {id} has ended ({state:?}); nothing to cancel"
            )));
        }
        self.stop(key, "cancelled");
        self.queue.remove(&key);
        self.view.waiting.remove(&(ObjectKind::Task, seq));
        let node = self.release(key);
        let e = self.tasks.get_mut(&seq).expect("known");
        e.api_mut().state = TaskState::Cancelled;
        e.api_mut().diagnosis = None;
        push_event(
            &mut e.api_mut().history,
            EventKind::Cancelled,
            node.as_ref(),
            "cancelled by a user",
        );
        self.mark(key);
        Ok((*self.tasks[&seq].api).clone())
    }

    /// Actors placed with `on_peer_moved: follow` whose peers moved away: restart them next
    /// to their peers.
    pub(crate) fn follow_peers(&mut self) {
        let violations = self.cluster.affinity_violations();
        for actor in violations {
            let Some((ObjectKind::Actor, seq)) = ObjectKind::parse(actor.as_str()) else {
                continue;
            };
            if !self.actors.contains_key(&seq) {
                continue;
            }
            let key = WorkId::Actor(seq);
            self.stop(key, "following its peers");
            self.ended(key, Ending::Moved("its peers moved (on_peer_moved: follow)".into()));
        }
    }

    /// Decides `parsed` on a copy of the cluster: nothing is reserved.
    pub(crate) fn dry_run(
        &mut self,
        parsed: &ParsedRequest,
    ) -> Result<berth_api::rest::DryRun, HeadError> {
        // Read-only: the core previews the decision (the reservation is taken on a copy of the
        // chosen node or bundle alone); copying the cluster cost ~186 MiB at 100k nodes. A
        // scheduler and RNG of its own keep the head's own decisions unchanged by dry runs.
        let loaded = parsed.build(&self.cluster)?;
        let cluster = &self.cluster;
        let mut scheduler = Scheduler::new(self.config.scheduler.clone());
        let mut rng = self.rng.clone();
        let mut out = berth_api::rest::DryRun {
            outcome: String::new(),
            node_id: None,
            bundle_nodes: Vec::new(),
            instances: Default::default(),
            diagnosis: None,
        };
        match loaded {
            LoadedRequest::Request(request) => {
                match scheduler.preview(cluster, &request, &mut rng) {
                    Decision::Placed(allocation) => {
                        out.outcome = "placed".into();
                        out.node_id =
                            Some(convert::node_id(cluster, allocation.node()).to_string());
                        out.instances = convert::instances(cluster, &allocation);
                    }
                    Decision::Pending(d) => {
                        out.outcome = "pending".into();
                        out.diagnosis = Some(convert::diagnosis(cluster, &d, false, &request));
                    }
                    Decision::Infeasible(d) => {
                        out.outcome = "infeasible".into();
                        out.diagnosis = Some(convert::diagnosis(cluster, &d, true, &request));
                    }
                }
            }
            LoadedRequest::Group(spec) => match scheduler.preview_group(cluster, &spec) {
                berth_core::pipeline::group::GroupDecision::Created { nodes, .. } => {
                    out.outcome = "placed".into();
                    out.bundle_nodes =
                        nodes.iter().map(|n| convert::node_id(cluster, *n).to_string()).collect();
                    out.node_id = out.bundle_nodes.first().cloned();
                }
                berth_core::pipeline::group::GroupDecision::Pending(d) => {
                    out.outcome = "pending".into();
                    out.diagnosis = Some(convert::group_diagnosis(cluster, &d, false, &spec));
                }
                berth_core::pipeline::group::GroupDecision::Infeasible(d) => {
                    out.outcome = "infeasible".into();
                    out.diagnosis = Some(convert::group_diagnosis(cluster, &d, true, &spec));
                }
            },
        }
        Ok(out)
    }
}

fn event_kind(ending: &Ending) -> EventKind {
    match ending {
        Ending::Exited { .. } => EventKind::Exited,
        Ending::FailedToStart(_) => EventKind::FailedToStart,
        Ending::NodeDied(_) => EventKind::NodeDied,
        Ending::Moved(_) => EventKind::Moved,
    }
}

fn max_text(max: i32) -> String {
    if max < 0 {
        "unlimited".to_string()
    } else {
        max.to_string()
    }
}

fn pid_text(pid: u32) -> String {
    if pid == 0 {
        String::new()
    } else {
        format!("pid {pid}")
    }
}

/// The affinity an actor was placed with (what a restored placement records again).
pub(crate) fn affinity_of(request: &Request) -> ActorAffinity {
    match request.strategy() {
        Strategy::ActorAffinity(affinity) => affinity.clone(),
        _ => ActorAffinity::default(),
    }
}

/// The Start assignment of an attempt.
fn start_message<A: WorkObject>(
    api: &A,
    attempt: u32,
    cluster: &berth_core::Cluster,
    allocation: &Allocation,
    instances: &BTreeMap<String, Vec<u32>>,
    keys: &WorkKeys,
) -> Assignment {
    let (command, args, env) = api.command();
    Assignment {
        kind: Some(berth_api::agent::assignment::Kind::Start(Start {
            work_id: api.id().to_string(),
            attempt,
            kind: A::KIND as i32,
            command: command.to_string(),
            args: args.to_vec(),
            env: env.clone().into_iter().collect(),
            namespace: api.namespace().to_string(),
            resources: convert::resource_map(cluster, allocation.resources()).into_iter().collect(),
            instances: instances
                .iter()
                .map(|(name, ids)| (name.clone(), InstanceIds { ids: ids.clone() }))
                .collect(),
            work_key: keys.key(api.id()),
            fork_server: api.fork_server(),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_api::spec::PlacementSpec;
    use berth_core::NodeId;

    #[test]
    fn an_objects_events_share_their_nodes_id_and_keep_the_last_fifty() {
        let (n1, n2) = (NodeId::new("n1").unwrap(), NodeId::new("n2").unwrap());
        let mut history = ThinVec::with_capacity(ACTOR_EVENTS);
        push_event(&mut history, EventKind::Created, None, String::new());
        push_event(&mut history, EventKind::Placed, Some(&n1.shared()), "GPU [0]");
        push_event(&mut history, EventKind::Started, Some(&n1.shared()), String::new());
        push_event(&mut history, EventKind::Placed, Some(&n2.shared()), String::new());
        let ids: Vec<_> = history.iter().map(|e| e.node_id.clone()).collect();
        assert_eq!(ids[0], None);
        let (placed, started, moved) = (ids[1].as_ref(), ids[2].as_ref(), ids[3].as_ref());
        assert!(Arc::ptr_eq(placed.unwrap(), started.unwrap()), "one n1 for both");
        assert!(Arc::ptr_eq(placed.unwrap(), &n1.shared()), "the node's own ID, not a copy");
        assert_eq!(moved.map(|n| &**n), Some("n2"));
        assert_eq!((history[1].kind.as_str(), &*history[1].message), ("placed", "GPU [0]"));
        for _ in 0..HISTORY {
            push_event(&mut history, EventKind::Listening, Some(&n2.shared()), String::new());
        }
        assert_eq!(history.len(), HISTORY);
        assert!(history.iter().all(|e| e.kind == "listening"));
        // A copy (as `Arc::make_mut` makes) has no spare room; an event more takes one slot.
        let mut copy = history[..2].iter().cloned().collect::<ThinVec<Event>>();
        copy.shrink_to_fit();
        push_event(&mut copy, EventKind::Started, None, String::new());
        assert_eq!((copy.len(), copy.capacity()), (3, 3));
        // What the head holds of every event of every object.
        assert_eq!(std::mem::size_of::<Event>(), 48);
    }

    #[test]
    fn work_whose_spec_no_longer_builds_ends_for_good_when_placed_again() {
        let dir = tempfile::tempdir().unwrap();
        let (keys, _) = WorkKeys::load(&berth_store::Snapshot::default());
        let config = crate::HeadConfig::new(dir.path());
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let mut owner = Owner::new(config, metrics, Arc::new(keys));
        let placement = |resources: serde_json::Value| {
            PlacementSpec::from_json(serde_json::json!({"resources": resources})).unwrap()
        };
        let body = ActorCreate {
            command: "sleep".into(),
            placement: placement(serde_json::json!({"CPU": 1})),
            max_restarts: -1,
            ..Default::default()
        };
        owner.create_actor(1, body).unwrap();
        let task = TaskSubmit {
            command: "true".into(),
            placement: placement(serde_json::json!({"CPU": 1})),
            ..Default::default()
        };
        owner.submit_task(1, task).unwrap();
        let queued = owner.queue.iter().find(|q| q.key == WorkId::Actor(1)).unwrap();
        let core_id = queued.request.actor().unwrap().id.shared();
        assert!(Arc::ptr_eq(&owner.actors[&1].api.actor_id, &core_id), "one ID, shared");
        for key in [WorkId::Actor(1), WorkId::Task(1)] {
            assert!(owner.queue.iter().any(|q| q.key == key), "no node: it waits");
            // Its request is built again from the spec whenever it is placed again.
            assert!(owner.rebuild(key).is_ok());
        }
        // Spoil the stored specs, as no accepted body could (1.5 GPUs do not build).
        let spoiled = placement(serde_json::json!({"GPU": 1.5}));
        Arc::make_mut(&mut owner.actors.get_mut(&1).unwrap().api_mut().spec).placement =
            spoiled.clone();
        Arc::make_mut(&mut owner.tasks.get_mut(&1).unwrap().api_mut().spec).placement = spoiled;
        for key in [WorkId::Actor(1), WorkId::Task(1)] {
            owner.queue.remove(&key);
            owner.resubmit(key);
            assert!(owner.queue.iter().all(|q| q.key != key), "not queued again");
        }
        let actor = &owner.actors[&1].api;
        assert_eq!(actor.state, ActorState::Dead);
        let reason = actor.death_reason.as_deref().unwrap();
        assert!(reason.starts_with("it could not be placed again: ") && reason.contains("GPU"));
        assert_eq!(actor.history.last().map(|e| e.kind), Some(EventKind::Dead));
        let task = &owner.tasks[&1].api;
        assert_eq!(task.state, TaskState::Failed);
        assert!(task.failure.as_deref().unwrap().starts_with("it could not be placed again: "));
        assert_eq!(task.history.last().map(|e| e.kind), Some(EventKind::Failed));
    }

    #[test]
    fn the_owners_entry_of_an_actor_fits_the_allocators_160_byte_class() {
        // One per actor, boxed: mimalloc rounds it up to its size class (…, 128, 160, 192, …,
        // 384, 448); with a placement of its own (see `Work`) it took 448, with a core request
        // of its own 384, with the GPU shares of its allocation inline 192.
        assert!(std::mem::size_of::<ActorEntry>() <= 160, "{}", std::mem::size_of::<ActorEntry>());
    }

    #[test]
    fn an_actor_version_fits_the_allocators_192_byte_class_and_its_spec_224() {
        use std::mem::size_of;
        // The view and the watch log hold a version of the API object per change (in an `Arc`,
        // 16 bytes more); versions share the spec, which was inline (512 bytes a version). The
        // history's length is on the heap (`ThinVec`) and the ID shared: 224 → 192.
        assert!(size_of::<Actor>() <= 176, "{}", size_of::<Actor>());
        assert!(size_of::<ActorCreate>() <= 208, "{}", size_of::<ActorCreate>());
        assert!(size_of::<Task>() <= 176, "{}", size_of::<Task>());
        let actor = Actor {
            actor_id: "actor-1".into(),
            name: None,
            namespace: "default".into(),
            state: ActorState::Pending,
            node_id: None,
            instances: BTreeMap::new(),
            restarts: 0,
            death_reason: None,
            diagnosis: None,
            endpoint: None,
            history: ThinVec::new(),
            created_at_ms: 0,
            spec: Arc::new(ActorCreate { command: "sleep".into(), ..ActorCreate::default() }),
            work_key: None,
        };
        let copy = actor.clone();
        assert!(Arc::ptr_eq(&actor.spec, &copy.spec), "a copy shares the spec");
    }
}
