//! The owner task: the only code that changes the cluster.
//!
//! It receives [`Command`]s in order, applies a whole burst of them (a cycle), retries what
//! waits if the cycle changed something it waits for, and hands the cycle's writes, its new
//! [`View`] and its answers to the committer. The committer makes the writes durable in one
//! store commit (group commit), and only then publishes the view, answers the callers and sends
//! the agents their assignments: durable before acknowledged, without the owner ever waiting
//! for the disk. Commits are applied in cycle order; a failed commit stops the head (its memory
//! would be ahead of the store), and a restart reloads the truth.
//!
//! - `owner/cycle.rs`: what a cycle produces (objects to write and show, answers, assignments,
//!   triggers), gathered by every part and taken by `flush` and the committer.
//! - `owner/work.rs`: actors and tasks (create, place, start, exit, restart, kill).
//! - `owner/work_table.rs`: the table they are held in, one entry kind for both, and what
//!   differs between them (`WorkObject`).
//! - `owner/groups.rs`: placement groups (`Groups`: the groups, which wait, which to retry).
//! - `owner/jobs.rs`: jobs (a driver's lease) and ownership: what ends when its owner ends.
//! - `owner/nodes.rs`: agents (register, sessions, liveness), node death (`Nodes`: the nodes
//!   and their agents' sessions).
//! - `owner/node_edits.rs`: taints, labels, capacity and drain of a running node.
//! - `owner/convert.rs`: core values → API values.
//! - `owner/restore.rs`: rebuilding the state from the store after a restart.
//! - `owner/retention.rs`: forgetting finished objects after their time.
//! - `owner/settings.rs`: cluster-wide settings kept in the store (rare-resource isolation).
//! - `owner/autoscale.rs`: the autoscaler's records, rounds and the provider's answers.

mod autoscale;
mod convert;
#[cfg(test)]
mod cost_tests;
mod cycle;
mod groups;
mod jobs;
#[cfg(test)]
mod liveness_tests;
mod node_edits;
mod nodes;
mod outbox;
mod restore;
mod retention;
mod settings;
mod work;
mod work_table;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_api::agent::Assignment;
use berth_core::{Cluster, PendingQueue, ResourceRegistry, Scheduler, Trigger};
use berth_store::{AnyStore, Batch, Epoch, Table};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokio::sync::{mpsc, watch};

use crate::changes::{ChangeType, Object};
use crate::command::Command;
use crate::config::HeadConfig;
use crate::error::HeadError;
use crate::metrics::Metrics;
use crate::records::{self, encode};
use crate::view::View;
use crate::work_keys::WorkKeys;
use berth_api::ObjectKind;

pub(crate) use work::WorkId;

/// The work ([`Command::work`]: 1 per command, a batch's items) after which a cycle takes no
/// more commands, so that one cycle's commit stays small, a burst does not starve the view of
/// updates, and the owner applies the next cycle while the committer makes this one durable.
/// Counting commands instead (at most 8,192), the batches that arrived together went into one
/// cycle, were committed, answered and sent again together: the owner and the store took turns
/// instead of working at once (`berth bench api`'s batch phase: four batches of 1,000 in a
/// cycle of 44 ms, then their commit of 28 ms, then the next four).
const MAX_CYCLE_WORK: usize = 1024;

pub(crate) use cycle::{Cycle, Effect};

/// The state the owner task holds: the core's (the cluster, the scheduler, what waits) and
/// the head's parts (work, groups, nodes), the view it publishes and the cycle's output.
pub(crate) struct Owner {
    pub(crate) cluster: Cluster,
    pub(crate) scheduler: Scheduler,
    pub(crate) rng: ChaCha8Rng,
    pub(crate) queue: PendingQueue<WorkId>,
    /// Every actor and task, and the actors' names.
    pub(crate) work: work_table::WorkTable,
    pub(crate) groups: groups::Groups,
    pub(crate) nodes: nodes::Nodes,
    /// The jobs, and what each owner owns.
    pub(crate) jobs: jobs::Jobs,
    pub(crate) view: View,
    /// What this cycle has produced so far.
    pub(crate) cycle: cycle::CycleOutput,
    /// Finished objects in the order they finished, and what was forgotten.
    pub(crate) finished: retention::Finished,
    pub(crate) config: HeadConfig,
    pub(crate) metrics: Arc<Metrics>,
    /// Derives the key each Start gives the work's process.
    pub(crate) work_keys: Arc<WorkKeys>,
    /// The autoscaler's records, when the head runs one.
    pub(crate) autoscaler: Option<autoscale::Autoscaler>,
    /// Creations' idempotency keys: the object each created, while that object is kept.
    pub(crate) idempotency: HashMap<(ObjectKind, Box<str>), u64>,
    /// The ID counters the handle numbers new work with (the head's own once it starts).
    pub(crate) sequences: Arc<crate::ids::Sequences>,
    /// Where the owner stops the head when an agent's report proves the store behind.
    pub(crate) stopped: Option<watch::Sender<Option<crate::Stop>>>,
}

impl Owner {
    pub(crate) fn new(
        config: HeadConfig,
        metrics: Arc<Metrics>,
        work_keys: Arc<WorkKeys>,
    ) -> Owner {
        let seed = config.seed;
        let autoscaler =
            config.autoscaler.as_ref().map(|a| autoscale::Autoscaler::new(a.settings.clone()));
        let mut owner = Owner {
            cluster: Cluster::new(ResourceRegistry::default()),
            scheduler: Scheduler::new(config.scheduler.clone()),
            rng: ChaCha8Rng::seed_from_u64(seed),
            queue: PendingQueue::new(),
            work: work_table::WorkTable::default(),
            groups: groups::Groups::default(),
            nodes: nodes::Nodes::default(),
            jobs: jobs::Jobs::default(),
            view: View::default(),
            cycle: cycle::CycleOutput::default(),
            finished: retention::Finished::default(),
            config,
            metrics,
            work_keys,
            autoscaler,
            idempotency: HashMap::default(),
            sequences: Arc::default(),
            stopped: None,
        };
        owner.show_retention();
        owner
    }

    /// The object an earlier creation of `kind` with `key` made, if it is still kept.
    pub(crate) fn created_with(&self, kind: ObjectKind, key: Option<&str>) -> Option<u64> {
        let seq = *self.idempotency.get(&(kind, Box::from(key?)))?;
        let kept = match kind {
            ObjectKind::Actor => self.work.contains(WorkId::Actor(seq)),
            ObjectKind::Task => self.work.contains(WorkId::Task(seq)),
            ObjectKind::Group => self.groups.contains(seq),
            ObjectKind::Job => self.jobs.contains(seq),
        };
        kept.then_some(seq)
    }

    /// Remembers that the creation with `key` made `seq`.
    pub(crate) fn remember_key(&mut self, kind: ObjectKind, key: Option<&str>, seq: u64) {
        if let Some(key) = key {
            self.idempotency.insert((kind, Box::from(key)), seq);
        }
    }

    /// Queues an assignment for `node` for when this cycle is durable. Without a stream open,
    /// nothing is sent: the agent gets every unstarted assignment when it opens one.
    pub(crate) fn send(&mut self, node: &str, assignment: Assignment) {
        self.cycle.send(self.nodes.assignments_to(node), assignment);
    }

    fn apply(&mut self, command: Command) {
        match command {
            Command::CreateActor { seq, body, reply } => {
                let answer = self.create_actor(seq, *body);
                self.cycle.reply(reply, answer);
            }
            Command::SubmitTask { seq, body, reply } => {
                let answer = self.submit_task(seq, *body);
                self.cycle.reply(reply, answer);
            }
            Command::CreateActors { items, reply } => {
                let half = items.len() / 2;
                let answers = items
                    .into_iter()
                    .enumerate()
                    .map(|(i, item)| {
                        if i == half {
                            // A stall here would hold the owner; only a kill is meaningful.
                            let _ = crate::failpoint::reach(crate::failpoint::BATCH_MID);
                        }
                        self.create_actor(item.seq, *item.body)
                    })
                    .collect();
                self.cycle.reply(reply, Ok(answers));
            }
            Command::SubmitTasks { items, reply } => {
                let answers =
                    items.into_iter().map(|item| self.submit_task(item.seq, *item.body)).collect();
                self.cycle.reply(reply, Ok(answers));
            }
            Command::CreateJob { seq, body, reply } => {
                let answer = self.create_job(seq, *body);
                self.cycle.reply(reply, answer);
            }
            Command::RenewJob { id, reply } => {
                let answer = self.renew_job(&id);
                // Changes nothing the store keeps, so nothing to wait for.
                let _ = reply.send(answer);
            }
            Command::EndJob { id, ending, reason, reply } => {
                let answer = self.end_job(&id, ending, reason);
                self.cycle.reply(reply, answer);
            }
            Command::CreateGroup { seq, body, reply } => {
                let answer = self.create_group(seq, *body);
                self.cycle.reply(reply, answer);
            }
            Command::KillActor { id, reply } => {
                let answer = self.kill_actor(&id);
                self.cycle.reply(reply, answer);
            }
            Command::RegisterEndpoint { id, endpoint, reply } => {
                let answer = self.register_endpoint(&id, endpoint);
                self.cycle.reply(reply, answer);
            }
            Command::CancelTask { id, reply } => {
                let answer = self.cancel_task(&id);
                self.cycle.reply(reply, answer);
            }
            Command::TasksDelivered { ids, reply } => {
                let answer = Ok(self.tasks_delivered(&ids));
                self.cycle.reply(reply, answer);
            }
            Command::RemoveGroup { id, reply } => {
                let answer = self.remove_group(&id);
                self.cycle.reply(reply, answer);
            }
            Command::DrainNode { node, reply } => {
                let answer = self.drain_node(&node);
                self.cycle.reply(reply, answer);
            }
            Command::UndrainNode { node, reply } => {
                let answer = self.undrain_node(&node);
                self.cycle.reply(reply, answer);
            }
            Command::Taints { node, taints, add, reply } => {
                let answer = self.change_taints(&node, &taints, add);
                self.cycle.reply(reply, answer);
            }
            Command::Labels { node, set, remove, reply } => {
                let answer = self.change_labels(&node, &set, &remove);
                self.cycle.reply(reply, answer);
            }
            Command::Resources { node, resources, reply } => {
                let answer = self.set_resources(&node, &resources);
                self.cycle.reply(reply, answer);
            }
            Command::DryRun { parsed, reply } => {
                let answer = self.dry_run(&parsed);
                // Changes nothing, so nothing to wait for.
                let _ = reply.send(answer);
            }
            Command::Autoscale { reply } => {
                let actions = self.autoscale();
                self.cycle.reply(reply, actions);
            }
            Command::AutoscaleOutcome(outcome) => self.autoscale_outcome(outcome),
            Command::StoreKeyring { stored, reply } => {
                self.cycle.keyring = Some(stored);
                self.cycle.reply(reply, Ok(()));
            }
            Command::AutoscalePlan { settings, reply } => {
                let answer = self.autoscale_dry_run(settings.as_deref()).ok_or_else(|| {
                    HeadError::Conflict(
                        "the head runs without an autoscaler (--autoscaler FILE); send an \
                         autoscaler file as the body to plan with its node types"
                            .into(),
                    )
                });
                let _ = reply.send(answer);
            }
            Command::Agent(command) => self.agent_command(command),
            Command::Tick => self.check_liveness(),
        }
    }

    /// Retries what waits, for every change this cycle made.
    fn retry_waiting(&mut self) {
        // Groups first: a whole reservation is harder to find room for than one request.
        if self.groups.any_waiting() {
            self.retry_groups(&self.cycle.triggers());
        }
        // With what the groups' reservations changed (work waiting to go into them).
        let triggers = self.cycle.take_triggers();
        if triggers.is_empty() {
            return;
        }
        for trigger in triggers {
            if self.queue.is_empty() {
                break;
            }
            let placed =
                self.queue.retry(trigger, &mut self.scheduler, &mut self.cluster, &mut self.rng);
            for (key, allocation) in placed {
                self.placed(key, allocation);
            }
        }
        self.refresh_waiting();
        // An actor that stopped or moved can break `on_peer_moved: follow` actors' affinity.
        if self.cycle.take_peers_moved() {
            self.follow_peers();
        }
        // What this retry changed may help others (an actor placed satisfies an affinity).
        let again = self.cycle.take_triggers();
        let actors_changed =
            again.iter().any(|t| matches!(t, Trigger::ActorsChanged | Trigger::Everything));
        if actors_changed && !self.queue.is_empty() {
            let placed = self.queue.retry(
                Trigger::ActorsChanged,
                &mut self.scheduler,
                &mut self.cluster,
                &mut self.rng,
            );
            for (key, allocation) in placed {
                self.placed(key, allocation);
            }
            self.refresh_waiting();
        }
        // Nothing else it triggered can help what waits: placing only takes room.
        let _ = self.cycle.take_triggers();
    }

    /// The cycle's writes.
    fn flush(&mut self) -> Batch {
        for id in self.cycle.take_touched() {
            self.refresh_node(&id);
        }
        let mut batch = Batch::new();
        // Before this cycle's writes: what is dropped was written in an earlier cycle.
        self.forget_finished(crate::clock::now_ms());
        if self.finished.write(&mut batch) {
            self.show_retention();
        }
        self.write_settings(&mut batch);
        self.write_autoscaler(&mut batch);
        if let Some(stored) = self.cycle.keyring.take() {
            batch.put(Table::Meta, crate::keyring::KEYRING_KEY, encode(&stored));
        }
        for (table, key) in self.cycle.stale_keys.drain(..) {
            batch.delete(table, key);
        }
        let dirty = self.cycle.take_dirty();
        for key in &dirty.work {
            if let Some(entry) = self.work.get(*key) {
                let (kind, seq) = key.view_key();
                let table = if kind == ObjectKind::Actor { Table::Actors } else { Table::Tasks };
                batch.put(table, records::store_key(kind, seq), entry.record(&self.cluster));
                self.note_finished(kind, seq);
            }
        }
        for key in dirty.work.union(&dirty.shown_work) {
            let Some(entry) = self.work.get(*key) else { continue };
            let (_, seq) = key.view_key();
            match &entry.api {
                work_table::WorkApi::Actor(api) => {
                    let old = self.view.actors.insert(seq, api.clone());
                    self.view.changes.push(changed(old.is_some()), Object::Actor(api.clone()));
                }
                work_table::WorkApi::Task(api) => {
                    let old = self.view.tasks.insert(seq, api.clone());
                    self.view.changes.push(changed(old.is_some()), Object::Task(api.clone()));
                }
            }
        }
        for (key, start) in &dirty.starts {
            // Not for an object written whole, nor one forgotten since (both end before it).
            if self.work.contains(*key) && !dirty.work.contains(key) {
                let (kind, seq) = key.view_key();
                batch.put(Table::Starts, records::store_key(kind, seq), encode(start));
            }
        }
        for seq in &dirty.groups {
            if let Some(entry) = self.groups.get(*seq) {
                batch.put(
                    Table::Groups,
                    records::store_key(ObjectKind::Group, *seq),
                    encode(&entry.record()),
                );
                self.note_finished(ObjectKind::Group, *seq);
            }
        }
        for seq in dirty.groups.union(&dirty.shown_groups) {
            if let Some(entry) = self.groups.get(*seq) {
                let api = Arc::new(entry.api.clone());
                let old = self.view.groups.insert(*seq, api.clone());
                self.view.changes.push(changed(old.is_some()), Object::Group(api));
            }
        }
        for seq in &dirty.jobs {
            if let Some(entry) = self.jobs.get(*seq) {
                let key = records::store_key(ObjectKind::Job, *seq);
                batch.put(Table::Jobs, key, encode(&entry.api));
                let api = Arc::new(entry.api.clone());
                let old = self.view.jobs.insert(*seq, api.clone());
                self.view.changes.push(changed(old.is_some()), Object::Job(api));
                self.note_finished(ObjectKind::Job, *seq);
            }
        }
        for id in dirty.nodes {
            if let Some(entry) = self.nodes.get(&id) {
                batch.put(Table::Nodes, id.clone(), encode(&entry.record));
            }
        }
        batch
    }
}

impl Owner {
    /// What the restore changed (work whose node is gone, groups placed anew) and the first
    /// view, for the head to make durable and publish before it serves anyone.
    pub(crate) fn first_cycle(&mut self) -> (Batch, Arc<View>) {
        self.retry_waiting();
        let batch = self.flush();
        self.view.generation += 1;
        // Answers and assignments of the restore: none can exist before anyone is served.
        drop(self.cycle.take_effects());
        (batch, Arc::new(self.view.clone()))
    }
}

/// Runs the owner until every handle is dropped or `stop` says so. On `stop`, commands already
/// sent are applied in a last cycle (whose answers the committer gives once it is durable) and
/// later ones are refused: callers get "the head is shutting down".
pub(crate) async fn run(
    mut owner: Owner,
    mut commands: mpsc::Receiver<Command>,
    cycles: mpsc::Sender<Cycle>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick =
        tokio::time::interval(owner.config.heartbeat_interval.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stopping = false;
    loop {
        let first = tokio::select! {
            biased;
            command = commands.recv() => match command {
                Some(command) => command,
                None => break,
            },
            _ = tick.tick() => Command::Tick,
            // Only a real stop: a dropped sender (a head dropped without shutdown) is not one.
            Ok(_) = stop.wait_for(|s| *s), if !stopping => {
                // No new command gets in; what is queued is the last cycle.
                stopping = true;
                commands.close();
                Command::Tick
            }
            // Groups a change helped that the last cycle's budget left: a cycle of their own
            // once no command waits.
            () = std::future::ready(()), if owner.groups.retries_left() => Command::Tick,
        };
        let busy = Instant::now();
        let mut work = first.work();
        owner.apply(first);
        let mut applied = 1;
        while work < MAX_CYCLE_WORK || stopping {
            match commands.try_recv() {
                Ok(command) => {
                    work += command.work();
                    owner.apply(command);
                    applied += 1;
                }
                Err(_) => break,
            }
        }
        owner.retry_waiting();
        let batch = owner.flush();
        owner.view.generation += 1;
        let cycle = Cycle {
            batch,
            view: Arc::new(owner.view.clone()),
            effects: owner.cycle.take_effects(),
        };
        owner.metrics.cycle(busy.elapsed().as_secs_f64(), applied as u64);
        if cycles.send(cycle).await.is_err() || stopping {
            break;
        }
    }
}

/// Runs the committer (`commit_loop`, made by `make`) on a thread of its own, with a
/// current-thread runtime: a commit runs there from start to fsync and the cycle's answers go
/// out as soon as it returns, instead of a blocking-pool hand-off and a wait for a worker that
/// is busy with HTTP and agents (batched creations/s +14 to +31 % in three alternating pairs of
/// `berth bench api`). The handle ends when the committer does.
pub(crate) async fn spawn_committer<F, Fut>(make: F) -> std::io::Result<tokio::task::JoinHandle<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (ready, built) = tokio::sync::oneshot::channel::<std::io::Result<()>>();
    let (done, finished) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new().name("berth-commit".into()).spawn(move || {
        // Built on this thread (a runtime must not be dropped where the caller's is running);
        // a failure is told to the caller, whose start fails with it.
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(err) => {
                let _ = ready.send(Err(err));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        runtime.block_on(make());
        let _ = done.send(());
    })?;
    built.await.unwrap_or_else(|_| Err(std::io::Error::other("the commit thread ended early")))?;
    Ok(tokio::spawn(async move {
        let _ = finished.await;
    }))
}

/// How the committer commits.
pub(crate) struct CommitSettings {
    /// The outbox's window (see `outbox`).
    pub(crate) assignment_window: Duration,
    /// How long a failed commit is retried before the head steps down.
    pub(crate) retry_window: Duration,
    /// Where the committer says whether the store answers (writes are refused while not).
    pub(crate) health: Arc<crate::store_health::StoreHealth>,
}

/// The first wait between attempts at a failed commit; doubled each time, up to
/// [`RETRY_MAX_DELAY`].
const RETRY_FIRST_DELAY: Duration = Duration::from_millis(50);
/// The longest wait between attempts at a failed commit.
const RETRY_MAX_DELAY: Duration = Duration::from_secs(1);

/// Makes cycles durable in order, merging the ones that queued up while a commit ran, then
/// publishes and answers. A commit that fails for a reason that may pass (the network, a
/// store restarting or failing over) is retried with backoff for `retry_window`, the cycles
/// arriving meanwhile merged into it, so the owner never waits for the store; a final
/// failure (fenced, behind) or a retry window run out stops the head, and returns why.
pub(crate) async fn commit_loop(
    store: AnyStore,
    epoch: Epoch,
    mut cycles: mpsc::Receiver<Cycle>,
    view: watch::Sender<Arc<View>>,
    metrics: Arc<Metrics>,
    settings: CommitSettings,
) -> Result<(), crate::Stop> {
    let mut outbox = outbox::Outbox::new(settings.assignment_window);
    loop {
        let due = outbox.due();
        let first = tokio::select! {
            next = cycles.recv() => match next {
                Some(cycle) => cycle,
                None => break,
            },
            // (Built even when disabled, never polled then.)
            () = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)),
                if due.is_some() =>
            {
                outbox.send_due(tokio::time::Instant::now());
                continue;
            }
        };
        let mut pending = first;
        while let Ok(next) = cycles.try_recv() {
            pending.merge(next);
        }
        if !pending.batch.is_empty() {
            if let Some(stall) = crate::failpoint::reach(crate::failpoint::COMMIT_BEFORE) {
                tokio::time::sleep(stall).await;
            }
            let started = Instant::now();
            if let Err(err) = commit(&store, epoch, &mut pending, &mut cycles, &settings).await {
                tracing::error!(error = %err, "store commit failed; stopping the head");
                // The answers are dropped: callers see 503 (the change is not acknowledged).
                // What earlier commits made durable still goes out.
                drop(pending);
                outbox.send_all(tokio::time::Instant::now());
                return Err(crate::Stop::from_store(&err));
            }
            metrics.commit(started.elapsed().as_secs_f64(), pending.batch.len() as u64);
            if let Some(stall) = crate::failpoint::reach(crate::failpoint::COMMIT_AFTER) {
                tokio::time::sleep(stall).await;
            }
        }
        view.send_replace(pending.view);
        for effect in pending.effects {
            match effect {
                Effect::Reply(answer) => answer(),
                Effect::Send(tx, assignment) => outbox.hold(tx, assignment),
            }
        }
        outbox.send_due(tokio::time::Instant::now());
    }
    outbox.send_all(tokio::time::Instant::now());
    Ok(())
}

/// Commits `pending`, retrying a failure that may pass for the settings' window; cycles that
/// arrive while it waits are merged into `pending`. The error that ended it, if any.
async fn commit(
    store: &AnyStore,
    epoch: Epoch,
    pending: &mut Cycle,
    cycles: &mut mpsc::Receiver<Cycle>,
    settings: &CommitSettings,
) -> Result<(), berth_store::StoreError> {
    let mut deadline = None;
    let mut delay = RETRY_FIRST_DELAY;
    loop {
        let err = match store.commit_on_this_thread(epoch, &pending.batch).await {
            Ok(()) => {
                if deadline.is_some() {
                    settings.health.mark_up();
                    tracing::warn!("the store answers again; writes are accepted");
                }
                return Ok(());
            }
            Err(err) if !err.is_transient() => return Err(err),
            Err(err) => err,
        };
        let now = tokio::time::Instant::now();
        let until = *deadline.get_or_insert_with(|| {
            tracing::warn!(error = %err, window = ?settings.retry_window, "a store commit failed; retrying, and refusing writes meanwhile");
            settings.health.mark_down(err.to_string());
            now + settings.retry_window
        });
        if now >= until {
            settings.health.mark_down(err.to_string());
            return Err(err);
        }
        let wake = (now + delay).min(until);
        // The owner goes on (agents' reports, the pending queue): its cycles join this one.
        loop {
            tokio::select! {
                next = cycles.recv() => match next {
                    Some(next) => pending.merge(next),
                    None => {
                        tokio::time::sleep_until(wake).await;
                        break;
                    }
                },
                () = tokio::time::sleep_until(wake) => break,
            }
        }
        delay = (delay * 2).min(RETRY_MAX_DELAY);
    }
}

/// A change to an object the view had (`existed`) or a new one.
pub(crate) fn changed(existed: bool) -> ChangeType {
    if existed {
        ChangeType::Modified
    } else {
        ChangeType::Added
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Prepared;
    use berth_api::rest::ActorCreate;

    fn batch(first_seq: u64, items: usize) -> Command {
        let items = (first_seq..first_seq + items as u64)
            .map(|seq| {
                let body = ActorCreate {
                    command: "sleep".into(),
                    placement: berth_api::spec::PlacementSpec::from_json(
                        serde_json::json!({"resources": {"CPU": 1}}),
                    )
                    .unwrap(),
                    ..Default::default()
                };
                Prepared { seq, body: Box::new(body) }
            })
            .collect();
        Command::CreateActors { items, reply: tokio::sync::oneshot::channel().0 }
    }

    fn test_owner(dir: &std::path::Path) -> Owner {
        let (keys, _) = WorkKeys::load(&berth_store::Snapshot::default());
        Owner::new(HeadConfig::new(dir), Arc::new(Metrics::new()), Arc::new(keys))
    }

    #[tokio::test]
    async fn a_start_goes_out_once_durable_with_what_the_attempt_holds() {
        use crate::command::AgentCommand;
        use berth_api::agent::{assignment, RegisterRequest};
        let dir = tempfile::tempdir().unwrap();
        let mut owner = test_owner(dir.path());
        let request = RegisterRequest {
            node_id: "n1".into(),
            address: "10.0.0.1".into(),
            resources: [("CPU".into(), "4".into()), ("GPU".into(), "2".into())].into(),
            ..Default::default()
        };
        let reply = tokio::sync::oneshot::channel().0;
        owner.apply(Command::Agent(AgentCommand::Register { request: Box::new(request), reply }));
        let session = owner.nodes.link("n1").expect("registered").liveness.session;
        let (reply, opened) = tokio::sync::oneshot::channel();
        let open = AgentCommand::OpenAssignments { node_id: "n1".into(), session, reply };
        owner.apply(Command::Agent(open));
        let mut stream = opened.await.unwrap().unwrap();
        let body = ActorCreate {
            command: "train".into(),
            args: ["--epochs".to_string(), "3".into()].into(),
            env: [("MODE".into(), "fast".into())].into(),
            placement: berth_api::spec::PlacementSpec::from_json(
                serde_json::json!({"resources": {"CPU": 0.5, "GPU": 1}}),
            )
            .unwrap(),
            ..Default::default()
        };
        let reply = tokio::sync::oneshot::channel().0;
        owner.apply(Command::CreateActor { seq: 7, body: Box::new(body), reply });
        let _ = owner.flush();
        // Nothing is sent before the cycle is durable: the committer sends what it queued.
        assert!(stream.try_recv().is_err());
        for effect in owner.cycle.take_effects() {
            if let Effect::Send(tx, assignment) = effect {
                tx.send(Ok(*assignment)).unwrap();
            }
        }
        let sent = stream.try_recv().unwrap().unwrap();
        let Some(assignment::Kind::Start(start)) = sent.kind else { panic!("a Start: {sent:?}") };
        assert_eq!((start.work_id.as_str(), start.attempt), ("actor-7", 1));
        assert_eq!((start.command.as_str(), start.args.join(" ")), ("train", "--epochs 3".into()));
        assert_eq!(start.env.get("MODE").map(String::as_str), Some("fast"));
        assert_eq!(start.namespace, "default");
        let resources: std::collections::BTreeSet<(&str, &str)> =
            start.resources.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(resources, [("CPU", "0.5"), ("GPU", "1")].into());
        assert_eq!(start.instances["GPU"].ids, [0]);
        assert!(owner.work_keys.verify("actor-7", &start.work_key));
        assert!(stream.try_recv().is_err(), "one message");
        // Sent again when the agent reconnects: the same message.
        let again = owner.start_of(WorkId::Actor(7)).and_then(|a| a.kind);
        assert_eq!(again, Some(assignment::Kind::Start(start)));
    }

    #[tokio::test]
    async fn records_under_their_old_keys_are_restored_and_the_first_cycle_rekeys_them() {
        use crate::ids::Sequences;
        use berth_store::{Op, RedbStore, Store};
        let dir = tempfile::tempdir().unwrap();
        let mut owner = test_owner(dir.path());
        owner.apply(batch(1, 2));
        let written = owner.flush();
        // As a store written before the padded keys holds them: keyed by ID.
        let mut old = Batch::new();
        for op in written.ops() {
            if let Op::Put { table: Table::Actors, key, value } = op {
                let (kind, seq, current) = records::parse_store_key(key).expect("a store key");
                assert!(current, "{key}");
                old.put(Table::Actors, kind.id(seq), value.clone());
            }
        }
        assert_eq!(old.len(), 2);
        let store = RedbStore::open(dir.path().join("store")).await.unwrap();
        let lease = store.acquire_lease("test", Duration::from_secs(60)).await.unwrap();
        store.commit(lease.epoch(), old).await.unwrap();
        let actor_keys = |snapshot: &berth_store::Snapshot| -> Vec<String> {
            snapshot.table(Table::Actors).keys().cloned().collect()
        };
        let snapshot = store.load().await.unwrap();
        assert_eq!(actor_keys(&snapshot), ["actor-1", "actor-2"]);

        let sequences = Sequences::default();
        let mut restarted = test_owner(dir.path());
        let restored = restarted.restore(&snapshot, &sequences);
        assert_eq!((restored.actors, restored.skipped.len()), (2, 0), "{:?}", restored.skipped);
        assert_eq!(sequences.actors.load(std::sync::atomic::Ordering::Relaxed), 2);
        store.commit(lease.epoch(), restarted.flush()).await.unwrap();
        let snapshot = store.load().await.unwrap();
        let new_keys =
            [records::store_key(ObjectKind::Actor, 1), records::store_key(ObjectKind::Actor, 2)];
        assert_eq!(actor_keys(&snapshot), new_keys);

        // Once rekeyed, a restore has nothing to replace; a record stored under both forms
        // (which no commit writes) is restored once.
        let mut both = Batch::new();
        both.put(
            Table::Actors,
            "actor-1",
            snapshot.get(Table::Actors, &new_keys[0]).unwrap().to_vec(),
        );
        store.commit(lease.epoch(), both).await.unwrap();
        let mut again = test_owner(dir.path());
        let restored = again.restore(&store.load().await.unwrap(), &Sequences::default());
        assert_eq!(restored.actors, 2);
        assert_eq!(restored.skipped, ["actor actor-1: a second record of actor-1"]);
        assert!(again.cycle.stale_keys.is_empty(), "{:?}", again.cycle.stale_keys);
    }

    #[tokio::test]
    async fn a_start_is_written_alone_and_a_restore_applies_it_to_its_attempt_only() {
        use crate::command::AgentCommand;
        use crate::ids::Sequences;
        use berth_api::agent::{
            status_report, RegisterRequest, Started, StatusReport, StatusReports,
        };
        use berth_api::rest::{ActorState, EventKind};
        use berth_store::{Op, RedbStore, Store};
        let dir = tempfile::tempdir().unwrap();
        let mut owner = test_owner(dir.path());
        owner.config.retention.keep_count = 0;
        let request = RegisterRequest {
            node_id: "n1".into(),
            address: "10.0.0.1".into(),
            resources: [("CPU".into(), "4".into())].into(),
            ..Default::default()
        };
        let reply = tokio::sync::oneshot::channel().0;
        owner.apply(Command::Agent(AgentCommand::Register { request: Box::new(request), reply }));
        owner.apply(batch(1, 1));
        let placed = owner.flush();
        let session = owner.nodes.link("n1").expect("registered").liveness.session;
        let report = StatusReport {
            node_id: "n1".into(),
            session,
            work_id: "actor-1".into(),
            attempt: 1,
            status: Some(status_report::Status::Started(Started { pid: 42 })),
        };
        let reply = tokio::sync::oneshot::channel().0;
        let reports = StatusReports { reports: vec![report.clone(), report] };
        owner.apply(Command::Agent(AgentCommand::Report { reports, reply }));
        let started = owner.flush();
        let key = records::store_key(ObjectKind::Actor, 1);
        let start = match started.ops() {
            [Op::Put { table: Table::Starts, key: k, value }] if *k == key => {
                serde_json::from_slice::<records::StartRecord>(value).unwrap()
            }
            other => panic!("one start record, once, and nothing else: {other:?}"),
        };
        assert_eq!((start.attempt, start.pid), (1, 42));
        assert_eq!(owner.view.actor("actor-1").unwrap().state, ActorState::Alive, "shown");
        // Forgotten once dead: both records go.
        let reply = tokio::sync::oneshot::channel().0;
        owner.apply(Command::KillActor { id: "actor-1".into(), reply });
        let _dead = owner.flush();
        let forgotten: Vec<_> =
            owner.flush().ops().iter().map(|op| (op.table(), op.key().to_owned())).collect();
        for table in [Table::Actors, Table::Starts] {
            assert!(forgotten.contains(&(table, key.clone())), "{table}: {forgotten:?}");
        }

        let store = RedbStore::open(dir.path().join("store")).await.unwrap();
        let lease = store.acquire_lease("test", Duration::from_secs(60)).await.unwrap();
        store.commit(lease.epoch(), placed).await.unwrap();
        store.commit(lease.epoch(), started).await.unwrap();
        let restore = || async {
            let mut restarted = test_owner(dir.path());
            let restored = restarted.restore(&store.load().await.unwrap(), &Sequences::default());
            let actor = restarted.view.actor("actor-1").unwrap();
            let started = restarted.work.get(WorkId::Actor(1)).unwrap().started;
            (actor, started, restored.skipped)
        };
        let (actor, started, skipped) = restore().await;
        assert_eq!(skipped, Vec::<String>::new());
        assert!(started);
        assert_eq!(actor.state, ActorState::Alive);
        let last = actor.history.last().unwrap();
        assert_eq!(
            (last.kind, last.at_ms, &*last.message),
            (EventKind::Started, start.at_ms, "pid 42")
        );
        assert_eq!(last.node_id.as_deref(), Some("n1"));

        // A start of another attempt than the record's is not this attempt's.
        let mut other = Batch::new();
        let stale = records::StartRecord { attempt: 2, ..start };
        other.put(Table::Starts, key.clone(), encode(&stale));
        store.commit(lease.epoch(), other).await.unwrap();
        let (actor, started, skipped) = restore().await;
        assert_eq!((started, skipped.len()), (false, 0), "{skipped:?}");
        assert_eq!(actor.state, ActorState::Pending);
        assert_eq!(actor.node_id.as_deref(), Some("n1"), "placed, not started");
        // One that cannot be read is reported, and the actor restored as its record says.
        let mut garbled = Batch::new();
        garbled.put(Table::Starts, key.clone(), b"{".to_vec());
        store.commit(lease.epoch(), garbled).await.unwrap();
        let (actor, started, skipped) = restore().await;
        assert_eq!((started, actor.state), (false, ActorState::Pending));
        assert!(
            matches!(&skipped[..], [s] if s.starts_with(&format!("starts {key}: "))),
            "{skipped:?}"
        );
    }

    #[tokio::test]
    async fn the_committer_runs_on_its_own_named_thread_and_its_handle_ends_with_it() {
        let (name_tx, name_rx) = tokio::sync::oneshot::channel();
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
        let handle = spawn_committer(move || async move {
            let _ = name_tx.send(std::thread::current().name().map(str::to_string));
            // Timers and I/O work on its runtime (a network store needs them).
            tokio::time::sleep(Duration::from_millis(1)).await;
            let _ = go_rx.await;
        })
        .await
        .expect("a thread");
        assert_eq!(name_rx.await.expect("it ran").as_deref(), Some("berth-commit"));
        assert!(!handle.is_finished(), "the committer still runs");
        go_tx.send(()).expect("it waits");
        handle.await.expect("the handle ends once the committer has");
    }

    #[tokio::test]
    async fn a_cycle_stops_taking_batches_once_its_work_reaches_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let owner = test_owner(dir.path());
        let (commands_tx, commands) = mpsc::channel(8);
        let (cycles_tx, mut cycles) = mpsc::channel(8);
        let (_stop_tx, stop) = watch::channel(false);
        // Three batches queued before the owner runs: each alone is under the cap, two are not.
        let size = MAX_CYCLE_WORK / 2 + 1;
        for b in 0..3 {
            commands_tx.send(batch(1 + (b * size) as u64, size)).await.unwrap();
        }
        assert_eq!(Command::Tick.work(), 1);
        assert_eq!(batch(1, size).work(), size, "a batch weighs its items");
        let owner = tokio::spawn(run(owner, commands, cycles_tx, stop));
        let mut writes = Vec::new();
        while writes.iter().sum::<usize>() < 3 * size {
            let cycle = cycles.recv().await.expect("the owner runs");
            if !cycle.batch.is_empty() {
                writes.push(cycle.batch.len());
            }
        }
        // One actor record each: the first two batches in one cycle, the third in the next
        // (all three in one before the cap counted a batch's items).
        assert_eq!(writes, [2 * size, size]);
        owner.abort();
    }
}
