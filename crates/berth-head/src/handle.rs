//! [`HeadHandle`]: how REST handlers (and tests) talk to the head. Reads come from the
//! published [`View`]; changes are [`Command`]s to the owner task, answered once durable.
//!
//! Bodies are checked here, at the edge, on the caller's task: the JSON shape, then the
//! request document's parse (every rule one value can check alone). Only the checks that need
//! the cluster (resource names, group specs) run on the owner task.

use std::sync::Arc;
use std::time::Duration;

use berth_api::limits::Limit;
use berth_api::rest::{
    Actor, ActorCreate, ActorEndpoint, ActorState, DryRun, Endpoint, EndpointRegister, Group,
    GroupCreate, Job, JobCreate, Node, StringMap, Task, TaskSubmit, TasksEnded,
};
use berth_api::spec::{FileKind, ParsedRequest};
use tokio::sync::{mpsc, oneshot, watch};

use crate::command::{Command, JobEnding, Prepared, Reply};
use crate::error::HeadError;
use crate::ids::Sequences;
use crate::store_health::StoreHealth;
use crate::view::View;
use crate::work_keys::WorkKeys;
use berth_api::ObjectKind;

/// The longest a `wait` may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(600);

/// The longest idempotency key, in bytes.
pub const MAX_IDEMPOTENCY_KEY: usize = 255;

/// Checks a creation's `idempotency_key`: 1 to [`MAX_IDEMPOTENCY_KEY`] visible ASCII
/// characters (as an HTTP header value can carry it).
pub(crate) fn check_idempotency_key(key: Option<&str>) -> Result<(), HeadError> {
    let Some(key) = key else { return Ok(()) };
    let field = "idempotency_key";
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY {
        return Err(HeadError::invalid(
            field,
            format!("{} bytes long; give 1 to {MAX_IDEMPOTENCY_KEY}", key.len()),
        ));
    }
    if let Some(bad) = key.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(HeadError::invalid(
            field,
            format!("{bad:?} is not a visible ASCII character (use letters, digits, -, _, :, …)"),
        ));
    }
    Ok(())
}

/// A cheap, clonable handle on a running head.
#[derive(Clone, Debug)]
pub struct HeadHandle {
    pub(crate) commands: mpsc::Sender<Command>,
    pub(crate) view: watch::Receiver<Arc<View>>,
    pub(crate) sequences: Arc<Sequences>,
    pub(crate) work_keys: Arc<WorkKeys>,
    pub(crate) store: Arc<StoreHealth>,
    /// The most of each kind of thing one request may hold.
    pub(crate) limits: Arc<berth_api::limits::Limits>,
    /// What the nodes' agents last measured (heartbeats write it; reads show it).
    pub(crate) measurements: Arc<crate::measured::Measurements>,
}

impl HeadHandle {
    /// The cluster as of the last durable change.
    pub fn view(&self) -> Arc<View> {
        self.view.borrow().clone()
    }

    /// A receiver that wakes on every published change (the dashboard's live updates, waits).
    pub fn subscribe(&self) -> watch::Receiver<Arc<View>> {
        self.view.clone()
    }

    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, HeadError> {
        let (reply, answer) = oneshot::channel();
        let command = make(reply);
        if command.writes() {
            if let Some(refusal) = self.store.refusal() {
                return Err(refusal);
            }
        }
        self.commands
            .send(command)
            .await
            .map_err(|_| HeadError::Unavailable("the head is shutting down".into()))?;
        answer.await.map_err(|_| {
            HeadError::Unavailable("the head stopped before the change was durable".into())
        })?
    }

    /// Checks an actor's body (every rule one body can check alone) and numbers it.
    fn prepare_actor(&self, body: ActorCreate) -> Result<Prepared<ActorCreate>, HeadError> {
        check_process(&body.command, &body.args, &body.env)?;
        if body.max_restarts < -1 {
            return Err(HeadError::invalid(
                "max_restarts",
                format!("{} is below -1; use -1 to always restart", body.max_restarts),
            ));
        }
        if let Some(name) = &body.name {
            check_name("name", name)?;
        }
        if let Some(ns) = &body.namespace {
            check_name("namespace", ns)?;
        }
        check_idempotency_key(body.idempotency_key.as_deref())?;
        let seq = self.sequences.next(ObjectKind::Actor);
        Ok(Prepared { seq, body: Box::new(body) })
    }

    /// Checks a task's body and numbers it.
    fn prepare_task(&self, body: TaskSubmit) -> Result<Prepared<TaskSubmit>, HeadError> {
        check_process(&body.command, &body.args, &body.env)?;
        if let Some(name) = &body.name {
            check_name("name", name)?;
        }
        if let Some(ns) = &body.namespace {
            check_name("namespace", ns)?;
        }
        check_idempotency_key(body.idempotency_key.as_deref())?;
        let seq = self.sequences.next(ObjectKind::Task);
        Ok(Prepared { seq, body: Box::new(body) })
    }

    /// Creates an actor: checked, placed (or queued), durable, then answered.
    pub async fn create_actor(&self, body: ActorCreate) -> Result<Actor, HeadError> {
        let Prepared { seq, body } = self.prepare_actor(body)?;
        let mut actor = self.ask(|reply| Command::CreateActor { seq, body, reply }).await?;
        actor.work_key = Some(self.work_keys.key(&actor.actor_id).into());
        Ok(actor)
    }

    /// Submits a task.
    pub async fn submit_task(&self, body: TaskSubmit) -> Result<Task, HeadError> {
        let Prepared { seq, body } = self.prepare_task(body)?;
        let mut task = self.ask(|reply| Command::SubmitTask { seq, body, reply }).await?;
        task.work_key = Some(self.work_keys.key(&task.task_id).into());
        Ok(task)
    }

    /// Creates actors as one batch: each body checked and answered on its own (in order), the
    /// whole batch durable before the answer. `Err` only when the head cannot answer at all.
    pub async fn create_actors(
        &self,
        bodies: Vec<ActorCreate>,
    ) -> Result<Vec<Result<Actor, HeadError>>, HeadError> {
        let prepared = bodies.into_iter().map(|b| self.prepare_actor(b)).collect();
        let answers = self.batch(prepared, |items, reply| Command::CreateActors { items, reply });
        let mut answers = answers.await?;
        for actor in answers.iter_mut().flatten() {
            actor.work_key = Some(self.work_keys.key(&actor.actor_id).into());
        }
        Ok(answers)
    }

    /// Submits tasks as one batch (see [`HeadHandle::create_actors`]).
    pub async fn submit_tasks(
        &self,
        bodies: Vec<TaskSubmit>,
    ) -> Result<Vec<Result<Task, HeadError>>, HeadError> {
        let prepared = bodies.into_iter().map(|b| self.prepare_task(b)).collect();
        let answers = self.batch(prepared, |items, reply| Command::SubmitTasks { items, reply });
        let mut answers = answers.await?;
        for task in answers.iter_mut().flatten() {
            task.work_key = Some(self.work_keys.key(&task.task_id).into());
        }
        Ok(answers)
    }

    /// Sends the prepared items of a batch as one command and puts the owner's answers back
    /// beside the items refused at the edge, in order.
    async fn batch<B, T>(
        &self,
        prepared: Vec<Result<Prepared<B>, HeadError>>,
        make: impl FnOnce(Vec<Prepared<B>>, Reply<Vec<Result<T, HeadError>>>) -> Command,
    ) -> Result<Vec<Result<T, HeadError>>, HeadError> {
        let mut answers: Vec<Option<Result<T, HeadError>>> = Vec::with_capacity(prepared.len());
        let mut items = Vec::new();
        for item in prepared {
            match item {
                Ok(item) => {
                    items.push(item);
                    answers.push(None);
                }
                Err(err) => answers.push(Some(Err(err))),
            }
        }
        let mut applied = if items.is_empty() {
            Vec::new().into_iter()
        } else {
            self.ask(|reply| make(items, reply)).await?.into_iter()
        };
        let answers = answers
            .into_iter()
            .map(|answer| {
                answer.or_else(|| applied.next()).unwrap_or_else(|| {
                    Err(HeadError::Unavailable("the head answered fewer items than sent".into()))
                })
            })
            .collect();
        Ok(answers)
    }

    /// Creates a placement group (reserved now, or pending).
    pub async fn create_group(&self, body: GroupCreate) -> Result<Group, HeadError> {
        if let Some(name) = body.name.as_deref().filter(|n| !n.is_empty()) {
            check_name("name", name)?;
        }
        if let Some(ns) = &body.namespace {
            check_name("namespace", ns)?;
        }
        check_idempotency_key(body.idempotency_key.as_deref())?;
        let seq = self.sequences.next(ObjectKind::Group);
        let body = Box::new(body);
        self.ask(|reply| Command::CreateGroup { seq, body, reply }).await
    }

    /// Creates a job, held by the lease its driver renews.
    pub async fn create_job(&self, body: JobCreate) -> Result<Job, HeadError> {
        if let Some(name) = body.name.as_deref().filter(|n| !n.is_empty()) {
            check_name("name", name)?;
        }
        if let Some(ns) = &body.namespace {
            check_name("namespace", ns)?;
        }
        check_idempotency_key(body.idempotency_key.as_deref())?;
        if let Some(lease) = body.lease_s.filter(|l| !l.is_finite()) {
            return Err(HeadError::invalid(
                "lease_s",
                format!("{lease} is not a number of seconds"),
            ));
        }
        for (key, value) in &body.metadata {
            let field = format!("metadata.{key}");
            check_name(&field, key)?;
            check_text(&field, value)?;
        }
        let seq = self.sequences.next(ObjectKind::Job);
        let body = Box::new(body);
        self.ask(|reply| Command::CreateJob { seq, body, reply }).await
    }

    /// Renews a running job's lease.
    pub async fn renew_job(&self, id: &str) -> Result<Job, HeadError> {
        let id = id.to_string();
        self.ask(|reply| Command::RenewJob { id, reply }).await
    }

    /// Ends a job as its driver (FINISHED): what it owns ends with it.
    pub async fn finish_job(&self, id: &str, reason: Option<String>) -> Result<Job, HeadError> {
        self.end_job(id, JobEnding::Finished, reason).await
    }

    /// Stops a job as a user (STOPPED): what it owns ends with it.
    pub async fn stop_job(&self, id: &str, reason: Option<String>) -> Result<Job, HeadError> {
        self.end_job(id, JobEnding::Stopped, reason).await
    }

    async fn end_job(
        &self,
        id: &str,
        ending: JobEnding,
        reason: Option<String>,
    ) -> Result<Job, HeadError> {
        if let Some(reason) = &reason {
            check_text("reason", reason)?;
        }
        let id = id.to_string();
        self.ask(|reply| Command::EndJob { id, ending, reason, reply }).await
    }

    /// Kills an actor for good (no restart); its process is stopped.
    pub async fn kill_actor(&self, id: &str) -> Result<Actor, HeadError> {
        let id = id.to_string();
        self.ask(|reply| Command::KillActor { id, reply }).await
    }

    /// Cancels a task (stopping it if it runs).
    pub async fn cancel_task(&self, id: &str) -> Result<Task, HeadError> {
        let id = id.to_string();
        self.ask(|reply| Command::CancelTask { id, reply }).await
    }

    /// Marks tasks whose results reached their owner: they end FINISHED however their attempts
    /// end. Answers the IDs marked (those not ended yet).
    pub async fn tasks_delivered(&self, ids: Vec<String>) -> Result<Vec<String>, HeadError> {
        let most = self.limits.get(berth_api::limits::Limit::WaitIds);
        if ids.is_empty() || ids.len() > most {
            return Err(HeadError::invalid(
                "task_ids",
                format!("give 1 to {most} task IDs, not {}", ids.len()),
            ));
        }
        self.ask(|reply| Command::TasksDelivered { ids, reply }).await
    }

    /// Removes a placement group, stopping the actors and tasks inside it.
    pub async fn remove_group(&self, id: &str) -> Result<Group, HeadError> {
        let id = id.to_string();
        self.ask(|reply| Command::RemoveGroup { id, reply }).await
    }

    /// Drains a node (by ID or address): no new work, its actors move.
    pub async fn drain_node(&self, node: &str) -> Result<Node, HeadError> {
        let node = node.to_string();
        self.ask(|reply| Command::DrainNode { node, reply }).await
    }

    /// Ends a node's drain (by ID or address): it takes new work again.
    pub async fn undrain_node(&self, node: &str) -> Result<Node, HeadError> {
        let node = node.to_string();
        self.ask(|reply| Command::UndrainNode { node, reply }).await
    }

    /// Adds taints to a node (by ID or address).
    pub async fn add_taints(&self, node: &str, taints: StringMap) -> Result<Node, HeadError> {
        self.within(Limit::Labels, taints.len())?;
        check_taints(&taints)?;
        let node = node.to_string();
        self.ask(|reply| Command::Taints { node, taints, add: true, reply }).await
    }

    /// Refuses a body of more than `limit` allows (the whole body is the map counted).
    fn within(&self, limit: Limit, count: usize) -> Result<(), HeadError> {
        match count > self.limits.get(limit) {
            true => Err(HeadError::invalid("", self.limits.refusal(limit, "the body"))),
            false => Ok(()),
        }
    }

    /// Removes taints from a node (by ID or address); waiting work is re-decided.
    pub async fn remove_taints(&self, node: &str, taints: StringMap) -> Result<Node, HeadError> {
        self.within(Limit::Labels, taints.len())?;
        check_taints(&taints)?;
        let node = node.to_string();
        self.ask(|reply| Command::Taints { node, taints, add: false, reply }).await
    }

    /// Adds or changes user labels of a node (by ID or address); waiting work is re-decided,
    /// running work stays.
    pub async fn set_labels(&self, node: &str, labels: StringMap) -> Result<Node, HeadError> {
        if labels.is_empty() {
            return Err(HeadError::invalid("", "give at least one label: {\"key\": \"value\"}"));
        }
        self.within(Limit::Labels, labels.len())?;
        let node = node.to_string();
        self.ask(|reply| Command::Labels { node, set: labels, remove: Vec::new(), reply }).await
    }

    /// Removes user labels of a node (by ID or address); keys it does not have are ignored.
    pub async fn remove_labels(&self, node: &str, keys: Vec<String>) -> Result<Node, HeadError> {
        if keys.is_empty() {
            return Err(HeadError::invalid("", "give at least one label key: [\"key\"]"));
        }
        self.within(Limit::Labels, keys.len())?;
        let node = node.to_string();
        self.ask(|reply| Command::Labels { node, set: StringMap::new(), remove: keys, reply }).await
    }

    /// Sets resource totals of a node (by ID or address; `"0"` deletes a resource); waiting
    /// work is re-decided, running work stays.
    pub async fn set_resources(&self, node: &str, resources: StringMap) -> Result<Node, HeadError> {
        if resources.is_empty() {
            return Err(HeadError::invalid("", "give at least one resource: {\"GPU\": \"4\"}"));
        }
        self.within(Limit::Resources, resources.len())?;
        let node = node.to_string();
        self.ask(|reply| Command::Resources { node, resources, reply }).await
    }

    /// Decides `document` (a request file's content, JSON) against the live cluster without
    /// reserving anything.
    pub async fn dry_run(&self, document: String) -> Result<DryRun, HeadError> {
        let parsed =
            Box::new(ParsedRequest::parse(FileKind::Body, "POST /api/v1/explain", document)?);
        self.ask(|reply| Command::DryRun { parsed, reply }).await
    }

    /// The autoscaler's plan for what waits now, reserving and launching nothing: with the
    /// node types of `file` (an autoscaler file's text) when given, else the configured ones.
    pub async fn autoscaler_plan(
        &self,
        file: Option<String>,
    ) -> Result<berth_api::rest::AutoscalerPlan, HeadError> {
        let settings = match file {
            None => None,
            Some(text) => {
                Some(Box::new(berth_api::spec::node_types::parse_autoscaler("request body", text)?))
            }
        };
        self.ask(|reply| Command::AutoscalePlan { settings, reply }).await
    }

    /// Writes the token hashes to the store; returns once they are durable.
    pub(crate) async fn store_keyring(
        &self,
        stored: crate::keyring::StoredKeyring,
    ) -> Result<(), HeadError> {
        self.ask(|reply| Command::StoreKeyring { stored, reply }).await
    }

    /// An actor's process says where it listens; `key` must be the actor's work key.
    pub async fn register_endpoint(
        &self,
        id: &str,
        key: Option<&str>,
        body: EndpointRegister,
    ) -> Result<Actor, HeadError> {
        if !key.is_some_and(|key| self.work_keys.verify(id, key)) {
            return Err(HeadError::Unauthorized(format!(
                "only a process of {id} may say where it listens: send its work key \
                 ($BERTH_WORK_KEY) as `Authorization: Bearer <key>`"
            )));
        }
        check_address("address", &body.address)?;
        if body.attempt == 0 {
            return Err(HeadError::invalid("attempt", "attempts count from 1 ($BERTH_ATTEMPT)"));
        }
        let endpoint = Endpoint { address: body.address, attempt: body.attempt };
        let id = id.to_string();
        self.ask(|reply| Command::RegisterEndpoint { id, endpoint, reply }).await
    }

    /// Re-checks the published view on every change until `check` answers, at most
    /// `timeout` (capped at [`MAX_WAIT`]): the long polls' one mechanism. `Ok(None)` when the
    /// time ran out; `check`'s error ends the wait at once.
    async fn wait_until<T>(
        &self,
        timeout: Duration,
        mut check: impl FnMut(&View) -> Result<Option<T>, HeadError>,
    ) -> Result<Option<T>, HeadError> {
        let mut view = self.subscribe();
        let deadline = tokio::time::Instant::now() + timeout.min(MAX_WAIT);
        loop {
            let current = view.borrow_and_update().clone();
            if let Some(answer) = check(&current)? {
                return Ok(Some(answer));
            }
            match tokio::time::timeout_at(deadline, view.changed()).await {
                Ok(Ok(())) => continue,
                Ok(Err(_)) => {
                    return Err(HeadError::Unavailable("the head is shutting down".into()))
                }
                Err(_) => return Ok(None),
            }
        }
    }

    /// How to reach an actor: waits, at most `timeout`, until an attempt later than
    /// `after_attempt` listens or the actor is dead.
    pub async fn actor_endpoint(
        &self,
        id: &str,
        after_attempt: u32,
        timeout: Duration,
    ) -> Result<ActorEndpoint, HeadError> {
        let mut state = ActorState::Pending;
        let answer = self
            .wait_until(timeout, |view| {
                let actor = view
                    .actor(id)
                    .ok_or(HeadError::NotFound { what: "actor", id: id.to_string() })?;
                state = actor.state;
                let listening = actor.endpoint.as_ref().filter(|e| e.attempt > after_attempt);
                Ok((listening.is_some() || actor.state == ActorState::Dead).then(|| {
                    ActorEndpoint {
                        actor_id: actor.actor_id.to_string(),
                        state: actor.state,
                        endpoint: listening.map(|e| Endpoint::clone(e)),
                        death_reason: actor.death_reason.as_deref().map(str::to_string),
                        work_key: self.work_keys.key(&actor.actor_id),
                    }
                }))
            })
            .await?;
        answer.ok_or_else(|| {
            HeadError::Timeout(format!(
                "actor {id} has no process listening after attempt {after_attempt} after {:.1} s \
                 (it is {state:?})",
                timeout.as_secs_f64()
            ))
        })
    }

    /// Waits, at most `timeout`, until one of `ids` has ended or is unknown; answers with all
    /// of them that have (empty at the timeout).
    pub async fn wait_tasks(
        &self,
        ids: &[String],
        timeout: Duration,
    ) -> Result<TasksEnded, HeadError> {
        let most = self.limits.get(berth_api::limits::Limit::WaitIds);
        if ids.is_empty() || ids.len() > most {
            return Err(HeadError::invalid(
                "task_ids",
                format!("give 1 to {most} task IDs, not {}", ids.len()),
            ));
        }
        let answer = self
            .wait_until(timeout, |view| {
                let mut answer = TasksEnded { ended: Vec::new(), unknown: Vec::new() };
                for id in ids {
                    match view.task(id) {
                        None => answer.unknown.push(id.clone()),
                        Some(task) if task.state.is_final() => answer.ended.push((*task).clone()),
                        Some(_) => {}
                    }
                }
                Ok((!answer.ended.is_empty() || !answer.unknown.is_empty()).then_some(answer))
            })
            .await?;
        Ok(answer.unwrap_or(TasksEnded { ended: Vec::new(), unknown: Vec::new() }))
    }

    /// Waits until the group is created (or removed), at most `timeout`.
    pub async fn wait_group(&self, id: &str, timeout: Duration) -> Result<Group, HeadError> {
        let answer = self
            .wait_until(timeout, |view| {
                let group = view
                    .group(id)
                    .ok_or(HeadError::NotFound { what: "placement_group", id: id.to_string() })?;
                Ok((!matches!(group.state, berth_api::rest::GroupState::Pending))
                    .then(|| (*group).clone()))
            })
            .await?;
        answer.ok_or_else(|| {
            HeadError::Timeout(format!(
                "placement group {id} is still PENDING after {:.1} s",
                timeout.as_secs_f64()
            ))
        })
    }
}

/// The most bytes of a name, namespace, argument or environment entry.
pub const MAX_TEXT_BYTES: usize = 4096;

/// Free text for people: at most [`MAX_TEXT_BYTES`], no hidden characters.
fn check_text(field: &str, text: &str) -> Result<(), HeadError> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(HeadError::invalid(
            field,
            format!("{} bytes; at most {MAX_TEXT_BYTES}", text.len()),
        ));
    }
    match berth_api::text::hidden_character(text) {
        Some(c) => Err(HeadError::invalid(field, berth_api::text::hidden_character_rule(c))),
        None => Ok(()),
    }
}

fn check_name(field: &str, name: &str) -> Result<(), HeadError> {
    if name.is_empty() || name.len() > 253 {
        return Err(HeadError::invalid(field, "must be 1 to 253 characters"));
    }
    match berth_api::text::hidden_character(name) {
        Some(c) => Err(HeadError::invalid(field, berth_api::text::hidden_character_rule(c))),
        None => Ok(()),
    }
}

/// `HOST:PORT`: a host name or IP address (IPv6 in brackets) and a port from 1 to 65535.
fn check_address(field: &str, address: &str) -> Result<(), HeadError> {
    let rule = "must be HOST:PORT (a host name or IP address, IPv6 in brackets, and a port \
                from 1 to 65535)";
    if address.parse::<std::net::SocketAddr>().is_ok_and(|a| a.port() != 0) {
        return Ok(());
    }
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(HeadError::invalid(field, rule));
    };
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|part| {
            !part.is_empty()
                && part.len() <= 63
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        });
    if !host_ok || !port.parse::<u16>().is_ok_and(|p| p != 0) {
        return Err(HeadError::invalid(field, rule));
    }
    Ok(())
}

fn check_process(command: &str, args: &[String], env: &StringMap) -> Result<(), HeadError> {
    if command.trim().is_empty() {
        return Err(HeadError::invalid("command", "must not be empty"));
    }
    let text_rule = |field: String, text: &str| {
        if text.contains('\0') {
            Err(HeadError::invalid(field, "must not contain a NUL byte"))
        } else if text.len() > MAX_TEXT_BYTES {
            Err(HeadError::invalid(field, format!("is longer than {MAX_TEXT_BYTES} bytes")))
        } else {
            Ok(())
        }
    };
    text_rule("command".into(), command)?;
    for (i, arg) in args.iter().enumerate() {
        text_rule(format!("args[{i}]"), arg)?;
    }
    for (key, value) in env {
        let field = format!("env.{key}");
        if key.is_empty() || key.contains('=') {
            return Err(HeadError::invalid(
                field,
                "a variable name must be non-empty, without '='",
            ));
        }
        text_rule(field.clone(), key)?;
        text_rule(field, value)?;
    }
    Ok(())
}

fn check_taints(taints: &StringMap) -> Result<(), HeadError> {
    if taints.is_empty() {
        return Err(HeadError::invalid("", "give at least one taint: {\"key\": \"value\"}"));
    }
    for (key, value) in taints {
        berth_api::spec::check_taint(key, value)
            .map_err(|rule| HeadError::invalid(key.clone(), rule))?;
    }
    Ok(())
}
