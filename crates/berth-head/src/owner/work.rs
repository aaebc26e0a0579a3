//! Actors and tasks: create, place, start, exit, restart or retry, kill or cancel (the
//! entries they are held in: `work_table`).

use berth_api::agent::{Assignment, InstanceIds, Start, Stop};
use std::collections::BTreeMap;
use std::sync::Arc;
use thin_vec::ThinVec;

use berth_api::rest::{
    Actor, ActorCreate, ActorState, Endpoint, EventKind, Lifetime, StringMap, Task, TaskState,
    TaskSubmit,
};
use berth_api::spec::{actor_spec, LoadedRequest, ParsedRequest, Source};
use berth_core::actors::ActorAffinity;
use berth_core::{Allocation, Cluster, Decision, Request, Scheduler, Strategy, Trigger};

use super::convert;
use super::jobs::{owner_of, Owned, OwnerRef};
use super::work_table::{
    finish_delivered, push_event, record_start, AfterEnd, Ending, Work, WorkApi, WorkObject,
};
use super::Owner;
use crate::clock::now_ms;
use crate::error::HeadError;
use crate::records::StartRecord;
use crate::view::PendingRequest;
use crate::work_keys::WorkKeys;
use berth_api::ObjectKind;

pub(crate) use super::work_table::{Attempt, WorkId};

/// Room made for an actor's events when it is created: `created`, `placed`, `started`, its
/// whole history while it lives (a history grown from empty had room for four).
const ACTOR_EVENTS: usize = 3;
/// The same for a task, which also finishes.
const TASK_EVENTS: usize = 4;

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
    pub(crate) fn create_actor(
        &mut self,
        seq: u64,
        mut body: ActorCreate,
    ) -> Result<Actor, HeadError> {
        // A retried creation: the first one's object, as it is now.
        if let Some(first) = self.created_with(ObjectKind::Actor, body.idempotency_key.as_deref()) {
            return Ok(self.actor_answer(first));
        }
        self.check_owner(&mut body.ownership)?;
        let namespace = body.namespace.as_deref().unwrap_or("default").to_string();
        if let Some(name) = &body.name {
            // The index may name an actor that died since: its name is free again.
            let holder = self.work.names.get(&(namespace.clone(), Box::from(&**name)));
            let taken = holder
                .and_then(|seq| self.work.actor(*seq))
                .is_some_and(|a| a.state != ActorState::Dead);
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
            name: body.name.as_deref().map(Box::from),
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
            self.work.names.insert((api.namespace.clone(), name.clone()), seq);
        }
        self.remember_key(ObjectKind::Actor, api.spec.idempotency_key.as_deref(), seq);
        let spec = &api.spec;
        if let Some(owner) = owner_of(&spec.ownership) {
            self.jobs.own(owner, Owned::Work(WorkId::Actor(seq)));
        }
        self.work.insert(WorkId::Actor(seq), Work::new(WorkApi::Actor(Arc::new(api))));
        self.submit(WorkId::Actor(seq), request);
        Ok(self.actor_answer(seq))
    }

    pub(crate) fn submit_task(
        &mut self,
        seq: u64,
        mut body: TaskSubmit,
    ) -> Result<Task, HeadError> {
        if let Some(first) = self.created_with(ObjectKind::Task, body.idempotency_key.as_deref()) {
            return Ok(self.task_answer(first));
        }
        if body.ownership.lifetime == Lifetime::Detached {
            return Err(HeadError::invalid(
                "lifetime",
                "a task cannot be detached: it ends with its owner (a detached actor outlives it)",
            ));
        }
        self.check_owner(&mut body.ownership)?;
        let request = build_task(&self.cluster, &body)?;
        let mut api = Task {
            work_key: None,
            task_id: ObjectKind::Task.id(seq).into(),
            name: body.name.as_deref().map(Box::from),
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
        let spec = &api.spec;
        if let Some(owner) = owner_of(&spec.ownership) {
            self.jobs.own(owner, Owned::Work(WorkId::Task(seq)));
        }
        self.work.insert(WorkId::Task(seq), Work::new(WorkApi::Task(Arc::new(api))));
        self.submit(WorkId::Task(seq), request);
        Ok(self.task_answer(seq))
    }

    /// Actor `seq` as an answer shows it (held: the caller just found or made it).
    fn actor_answer(&self, seq: u64) -> Actor {
        (**self.work.actor(seq).expect("a held actor")).clone()
    }

    /// Task `seq` as an answer shows it.
    fn task_answer(&self, seq: u64) -> Task {
        (**self.work.task(seq).expect("a held task")).clone()
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
                self.cycle.mark_work(key);
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
                self.work.known(key).object_mut().end_for_good(reason);
                self.cycle.mark_work(key);
            }
        }
    }

    /// `key`'s core request, built from its spec as at its creation.
    pub(crate) fn rebuild(&mut self, key: WorkId) -> Result<Request, HeadError> {
        let work = self.work.get(key).expect("a held entry");
        match (&work.api, key) {
            (WorkApi::Actor(actor), WorkId::Actor(seq)) => {
                build_actor(&self.cluster, seq, &actor.spec)
            }
            (WorkApi::Task(task), _) => build_task(&self.cluster, &task.spec),
            (WorkApi::Actor(_), WorkId::Task(_)) => unreachable!("a task's key names a task"),
        }
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
        let e = self.work.known(key);
        e.object_mut().set_diagnosis(Some(api_diagnosis.clone()));
        let (selector, tolerations) = e.object().selectors();
        let (label_selector, tolerations) =
            (convert::string_map(selector), convert::string_map(tolerations));
        self.work.set_last_diagnosis(key, Some(diagnosis));
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
                .filter(|q| self.work.last_diagnosis(q.key) != Some(&q.diagnosis))
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
            self.cycle.show_work(key);
        }
    }

    /// `key` was reserved `allocation`: record it and tell the node's agent.
    pub(crate) fn placed(&mut self, key: WorkId, allocation: Allocation) {
        let node_id = convert::node_id(&self.cluster, allocation.node());
        let instances = convert::instances(&self.cluster, &allocation);
        let (kind, seq) = key.view_key();
        self.view.waiting.remove(&(kind, seq));
        self.count_on(&node_id, key, 1);
        self.work.set_last_diagnosis(key, None);
        let e = self.work.known(key);
        e.attempt += 1;
        e.allocation = Some(allocation.clone());
        e.started = false;
        let api = e.object_mut();
        api.set_diagnosis(None);
        api.set_placed(Some(node_id.clone()), instances.clone());
        let text = convert::instances_text(&instances);
        push_event(api.history(), EventKind::Placed, Some(&node_id), text);
        let start = start_message(
            e.object(),
            e.attempt,
            &self.cluster,
            &allocation,
            &instances,
            &self.work_keys,
        );
        if matches!(key, WorkId::Actor(_)) {
            self.cycle.trigger(Trigger::ActorsChanged);
        }
        self.send(&node_id, start);
        self.cycle.mark_work(key);
    }

    /// Counts `key`'s attempt on (+1) or off (-1) `node`, and shows the node anew.
    pub(crate) fn count_on(&mut self, node: &str, key: WorkId, delta: i64) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.count(key, delta);
            self.cycle.touch(node);
        }
    }

    /// The Start message of `key`'s current attempt (sent again when an agent reconnects).
    pub(crate) fn start_of(&self, key: WorkId) -> Option<Assignment> {
        let e = self.work.get(key)?;
        let allocation = e.allocation.as_ref()?;
        let instances = e.object().instances();
        Some(start_message(
            e.object(),
            e.attempt,
            &self.cluster,
            allocation,
            instances,
            &self.work_keys,
        ))
    }

    /// Gives back what `key`'s attempt held and forgets its placement; returns the node. The
    /// attempt's process is gone (or being stopped), and what it owned ends with it.
    fn release(&mut self, key: WorkId) -> Option<Arc<str>> {
        let e = self.work.known(key);
        e.started = false;
        let allocation = e.allocation.take();
        if allocation.is_some() {
            let why = format!("its owner {}'s process ended", key.id());
            self.end_owned(OwnerRef::Work(key), &why);
        }
        if let WorkId::Actor(seq) = key {
            let id = ObjectKind::Actor.id(seq);
            if self.cluster.remove_actor(&id).is_some() {
                self.cycle.trigger(Trigger::ActorsChanged);
                self.cycle.peer_moved();
            }
        }
        let allocation = allocation?;
        let node_id = convert::node_id(&self.cluster, allocation.node());
        self.cluster.release(&allocation);
        self.cycle.trigger(Trigger::Released(allocation.node()));
        self.count_on(&node_id, key, -1);
        Some(node_id)
    }

    /// An attempt of `key` ended: restart, retry, or finish it.
    pub(crate) fn ended(&mut self, key: WorkId, ending: Ending) {
        let node = self.release(key);
        let text = ending.describe();
        let e = self.work.known(key);
        if e.delivered {
            if let Some(task) = e.task_mut() {
                if finish_delivered(task, Some((&ending, text)), node.as_ref()) {
                    self.cycle.mark_work(key);
                }
                return;
            }
        }
        match self.work.known(key).object_mut().attempt_ended(&ending, node.as_ref(), text) {
            AfterEnd::Nothing => {}
            AfterEnd::Again => self.resubmit(key),
            AfterEnd::Ended => self.cycle.mark_work(key),
        }
    }

    /// The agent reported that `key`'s attempt started. Written as a [`StartRecord`] alone,
    /// unless the object is written whole this cycle anyway.
    pub(crate) fn started(&mut self, key: WorkId, pid: u32) {
        // Reports may repeat (an agent resends until answered): the first one counts.
        let Some(attempt) = self.attempt_of(key).filter(|a| !a.started) else { return };
        let start = StartRecord { attempt: attempt.number, at_ms: now_ms(), pid };
        let e = self.work.known(key);
        e.started = true;
        record_start(e.object_mut(), &start);
        self.cycle.work_started(key, start);
    }

    /// `key`'s current attempt, while placed.
    pub(crate) fn attempt_of(&self, key: WorkId) -> Option<Attempt> {
        self.work.get(key)?.current()
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
        let seq = self.held_actor(id)?;
        let key = WorkId::Actor(seq);
        let e = self.work.known(key);
        let api = e.actor().expect("an actor's key");
        if api.state == ActorState::Dead {
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
        if api.endpoint.as_deref() != Some(&endpoint) {
            let actor = e.actor_mut().expect("an actor's key");
            let node = actor.node_id.clone();
            let address = endpoint.address.clone();
            push_event(&mut actor.history, EventKind::Listening, node.as_ref(), address);
            actor.endpoint = Some(Box::new(endpoint));
            self.cycle.mark_work(key);
        }
        Ok(self.actor_answer(seq))
    }

    /// The number of the held actor `id`; not found otherwise.
    fn held_actor(&self, id: &str) -> Result<u64, HeadError> {
        match WorkId::parse(id) {
            Some(key @ WorkId::Actor(seq)) if self.work.contains(key) => Ok(seq),
            _ => Err(HeadError::NotFound { what: "actor", id: id.to_string() }),
        }
    }

    pub(crate) fn kill_actor(&mut self, id: &str) -> Result<Actor, HeadError> {
        self.kill_actor_because(id, "killed by a user")
    }

    /// Kills actor `id` for good, `why` being the death reason it shows.
    pub(crate) fn kill_actor_because(&mut self, id: &str, why: &str) -> Result<Actor, HeadError> {
        let seq = self.held_actor(id)?;
        let key = WorkId::Actor(seq);
        if self.actor_answer(seq).state == ActorState::Dead {
            return Ok(self.actor_answer(seq));
        }
        self.stop(key, "killed");
        self.queue.remove(&key);
        self.view.waiting.remove(&(ObjectKind::Actor, seq));
        let node = self.release(key);
        let actor = self.work.known(key).actor_mut().expect("an actor's key");
        actor.state = ActorState::Dead;
        actor.diagnosis = None;
        actor.endpoint = None;
        actor.death_reason = Some(why.into());
        push_event(&mut actor.history, EventKind::Killed, node.as_ref(), why);
        self.cycle.mark_work(key);
        Ok(self.actor_answer(seq))
    }

    pub(crate) fn cancel_task(&mut self, id: &str) -> Result<Task, HeadError> {
        self.cancel_task_because(id, "cancelled by a user")
    }

    /// Cancels task `id`, `why` being what its history shows.
    pub(crate) fn cancel_task_because(&mut self, id: &str, why: &str) -> Result<Task, HeadError> {
        let seq = match WorkId::parse(id) {
            Some(key @ WorkId::Task(seq)) if self.work.contains(key) => seq,
            _ => return Err(HeadError::NotFound { what: "task", id: id.to_string() }),
        };
        let key = WorkId::Task(seq);
        let state = self.task_answer(seq).state;
        if matches!(state, TaskState::Finished | TaskState::Failed | TaskState::Cancelled) {
            return Err(HeadError::Conflict(format!(
                "task {id} has ended ({state:?}); nothing to cancel"
            )));
        }
        if self.work.known(key).delivered {
            self.finish_delivered_now(key, seq);
            return Ok(self.task_answer(seq));
        }
        self.stop(key, "cancelled");
        self.queue.remove(&key);
        self.view.waiting.remove(&(ObjectKind::Task, seq));
        let node = self.release(key);
        let task = self.work.known(key).task_mut().expect("a task's key");
        task.state = TaskState::Cancelled;
        task.diagnosis = None;
        push_event(&mut task.history, EventKind::Cancelled, node.as_ref(), why);
        self.cycle.mark_work(key);
        Ok(self.task_answer(seq))
    }

    /// Marks the tasks of `ids` whose results reached their owner (those not ended); returns
    /// their IDs.
    pub(crate) fn tasks_delivered(&mut self, ids: &[String]) -> Vec<String> {
        let mut marked = Vec::new();
        for id in ids {
            let Some(key @ WorkId::Task(seq)) = WorkId::parse(id) else { continue };
            if !self.work.contains(key) || self.task_answer(seq).state.is_final() {
                continue;
            }
            self.work.known(key).delivered = true;
            if self.attempt_of(key).is_none() {
                // Waiting to run again (its node died after the result arrived): it is done.
                self.finish_delivered_now(key, seq);
            }
            marked.push(id.clone());
        }
        marked
    }

    /// Task `seq`, whose result is with its owner, is FINISHED now: its process (if any) is
    /// stopped, it leaves the queue, and what it held is given back.
    fn finish_delivered_now(&mut self, key: WorkId, seq: u64) {
        self.stop(key, "its result reached its owner");
        self.queue.remove(&key);
        self.view.waiting.remove(&(ObjectKind::Task, seq));
        let node = self.release(key);
        let task = self.work.known(key).task_mut().expect("a task's key");
        task.diagnosis = None;
        finish_delivered(task, None, node.as_ref());
        self.cycle.mark_work(key);
    }

    /// Actors placed with `on_peer_moved: follow` whose peers moved away: restart them next
    /// to their peers.
    pub(crate) fn follow_peers(&mut self) {
        let violations = self.cluster.affinity_violations();
        for actor in violations {
            let Some(key @ WorkId::Actor(_)) = WorkId::parse(actor.as_str()) else {
                continue;
            };
            if !self.work.contains(key) {
                continue;
            }
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

/// The affinity an actor was placed with (what a restored placement records again).
pub(crate) fn affinity_of(request: &Request) -> ActorAffinity {
    match request.strategy() {
        Strategy::ActorAffinity(affinity) => affinity.clone(),
        _ => ActorAffinity::default(),
    }
}

/// The Start assignment of an attempt.
fn start_message(
    api: &dyn WorkObject,
    attempt: u32,
    cluster: &berth_core::Cluster,
    allocation: &Allocation,
    instances: &BTreeMap<String, Vec<u32>>,
    keys: &WorkKeys,
) -> Assignment {
    let (command, args, env) = api.command();
    let mut env: std::collections::HashMap<String, String> = env.clone().into_iter().collect();
    // Its job, for the SDKs in the process: what it creates belongs to the same job.
    if let Some(job) = api.ownership().job_id.as_deref() {
        env.insert("BERTH_JOB_ID".into(), job.into());
    }
    Assignment {
        kind: Some(berth_api::agent::assignment::Kind::Start(Start {
            work_id: api.id().to_string(),
            attempt,
            kind: api.kind() as i32,
            command: command.to_string(),
            args: args.to_vec(),
            env,
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
    use super::super::work_table::HISTORY;
    use super::*;
    use berth_api::rest::Event;
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
        let actor_id = &owner.work.actor(1).unwrap().actor_id;
        assert!(Arc::ptr_eq(actor_id, &core_id), "one ID, shared");
        for key in [WorkId::Actor(1), WorkId::Task(1)] {
            assert!(owner.queue.iter().any(|q| q.key == key), "no node: it waits");
            // Its request is built again from the spec whenever it is placed again.
            assert!(owner.rebuild(key).is_ok());
        }
        // Spoil the stored specs, as no accepted body could (1.5 GPUs do not build).
        let spoiled = placement(serde_json::json!({"GPU": 1.5}));
        let actor = owner.work.get_mut(WorkId::Actor(1)).unwrap().actor_mut().unwrap();
        Arc::make_mut(&mut actor.spec).placement = spoiled.clone();
        let task = owner.work.get_mut(WorkId::Task(1)).unwrap().task_mut().unwrap();
        Arc::make_mut(&mut task.spec).placement = spoiled;
        for key in [WorkId::Actor(1), WorkId::Task(1)] {
            owner.queue.remove(&key);
            owner.resubmit(key);
            assert!(owner.queue.iter().all(|q| q.key != key), "not queued again");
        }
        let actor = owner.work.actor(1).unwrap();
        assert_eq!(actor.state, ActorState::Dead);
        let reason = actor.death_reason.as_deref().unwrap();
        assert!(reason.starts_with("it could not be placed again: ") && reason.contains("GPU"));
        assert_eq!(actor.history.last().map(|e| e.kind), Some(EventKind::Dead));
        let task = owner.work.task(1).unwrap();
        assert_eq!(task.state, TaskState::Failed);
        assert!(task.failure.as_deref().unwrap().starts_with("it could not be placed again: "));
        assert_eq!(task.history.last().map(|e| e.kind), Some(EventKind::Failed));
    }

    #[test]
    fn the_owners_entry_of_an_actor_fits_the_allocators_160_byte_class() {
        // One per actor, boxed: mimalloc rounds it up to its size class (…, 128, 160, 192, …,
        // 384, 448); with a placement of its own (see `Work`) it took 448, with a core request
        // of its own 384, with the GPU shares of its allocation inline 192.
        assert!(std::mem::size_of::<Work>() <= 160, "{}", std::mem::size_of::<Work>());
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
