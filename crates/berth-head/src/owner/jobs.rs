//! Jobs and ownership: a driver's job held by a lease, and what each owner owns, so that what
//! an owner owns ends when the owner does.
//!
//! Owners are jobs (their drivers) and actors' and tasks' processes. An object names its owner
//! at creation (`job_id`, `owner_id`); unless it is detached, it ends when its owner ends: a
//! job when it finishes, is stopped or loses its lease; an actor's or a task's process when its
//! attempt ends (an exit, a restart, a kill, its node's death), as the handles it held die with
//! it. Ending is transitive: an actor that ends this way ends what it owns in turn.

use std::collections::{HashMap, HashSet};

use berth_api::limits::Limit;
use berth_api::rest::{
    EventKind, Job, JobCreate, JobState, Lifetime, Ownership, ThinStr, DEFAULT_JOB_LEASE_S,
    MAX_JOB_LEASE_S, MIN_JOB_LEASE_S,
};
use berth_api::ObjectKind;
use thin_vec::ThinVec;

use super::work_table::{push_event, WorkId};
use super::Owner;
use crate::clock::{monotonic_ms, now_ms};
use crate::command::JobEnding;
use crate::error::HeadError;

/// Who owns a piece of work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum OwnerRef {
    /// A job's driver.
    Job(u64),
    /// An actor's or a task's process (its current attempt).
    Work(WorkId),
}

/// A piece of work an owner owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Owned {
    Work(WorkId),
    Group(u64),
}

/// The jobs the owner holds, and what every owner owns.
#[derive(Default)]
pub(crate) struct Jobs {
    entries: HashMap<u64, JobEntry>,
    /// The non-detached objects of each owner, while the objects are kept.
    owned: HashMap<OwnerRef, HashSet<Owned>>,
}

/// A job as the owner holds it.
pub(crate) struct JobEntry {
    pub(crate) api: Job,
    /// When its lease runs out (ms since the epoch), while it runs. Not stored: a restored job
    /// gets a whole lease and a grace from the restart.
    pub(crate) lease_until_ms: u64,
}

impl Jobs {
    pub(crate) fn get(&self, seq: u64) -> Option<&JobEntry> {
        self.entries.get(&seq)
    }

    pub(crate) fn contains(&self, seq: u64) -> bool {
        self.entries.contains_key(&seq)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &JobEntry)> {
        self.entries.iter().map(|(seq, entry)| (*seq, entry))
    }

    pub(crate) fn insert(&mut self, seq: u64, entry: JobEntry) {
        self.entries.insert(seq, entry);
    }

    /// Forgets job `seq` (ended) and what its driver owned.
    pub(crate) fn remove(&mut self, seq: u64) -> Option<JobEntry> {
        self.owned.remove(&OwnerRef::Job(seq));
        self.entries.remove(&seq)
    }

    /// `owner` owns `owned` (which ends with it).
    pub(crate) fn own(&mut self, owner: OwnerRef, owned: Owned) {
        self.owned.entry(owner).or_default().insert(owned);
    }

    /// `owned` is forgotten: its owner no longer has it to end.
    pub(crate) fn disown(&mut self, owner: OwnerRef, owned: Owned) {
        if let Some(set) = self.owned.get_mut(&owner) {
            set.remove(&owned);
            if set.is_empty() {
                self.owned.remove(&owner);
            }
        }
    }

    /// What `owner` owned, which it owns no more (it ended), in creation order.
    fn take_owned(&mut self, owner: OwnerRef) -> Vec<Owned> {
        let mut owned: Vec<Owned> = self.owned.remove(&owner).into_iter().flatten().collect();
        owned.sort_unstable_by_key(|o| match o {
            Owned::Group(seq) => (0, *seq),
            Owned::Work(WorkId::Actor(seq)) => (1, *seq),
            Owned::Work(WorkId::Task(seq)) => (2, *seq),
        });
        owned
    }

    /// The running jobs whose lease ran out at `now`, oldest first.
    fn expired(&self, now: u64) -> Vec<u64> {
        let mut seqs: Vec<u64> = self
            .iter()
            .filter(|(_, j)| j.api.state == JobState::Running && j.lease_until_ms < now)
            .map(|(seq, _)| seq)
            .collect();
        seqs.sort_unstable();
        seqs
    }
}

/// The owner an object's creation names (`owner_id`, else the driver of `job_id`), if it ends
/// with one.
pub(crate) fn owner_of(ownership: &Ownership) -> Option<OwnerRef> {
    if ownership.lifetime == Lifetime::Detached {
        return None;
    }
    let work = ownership.owner_id.as_deref().and_then(WorkId::parse);
    match (work, ownership.job_id.as_deref().and_then(job_seq)) {
        (Some(work), _) => Some(OwnerRef::Work(work)),
        (None, Some(job)) => Some(OwnerRef::Job(job)),
        (None, None) => None,
    }
}

/// The number of job ID `id` (`job-3`).
pub(crate) fn job_seq(id: &str) -> Option<u64> {
    match ObjectKind::parse(id)? {
        (ObjectKind::Job, seq) => Some(seq),
        _ => None,
    }
}

impl Owner {
    pub(crate) fn create_job(&mut self, seq: u64, body: JobCreate) -> Result<Job, HeadError> {
        if let Some(first) = self.created_with(ObjectKind::Job, body.idempotency_key.as_deref()) {
            return Ok(self.jobs.entries[&first].api.clone());
        }
        let lease_s = body.lease_s.unwrap_or(DEFAULT_JOB_LEASE_S);
        if !(MIN_JOB_LEASE_S..=MAX_JOB_LEASE_S).contains(&lease_s) {
            return Err(HeadError::invalid(
                "lease_s",
                format!("{lease_s} is not from {MIN_JOB_LEASE_S} to {MAX_JOB_LEASE_S} seconds"),
            ));
        }
        let limits = &self.config.limits;
        if body.metadata.len() > limits.get(Limit::Labels) {
            return Err(HeadError::invalid("metadata", limits.refusal(Limit::Labels, "metadata")));
        }
        let lease_ms = (lease_s * 1000.0).round() as u64;
        let now = now_ms();
        let mut api = Job {
            job_id: ObjectKind::Job.id(seq),
            state: JobState::Running,
            lease_ms,
            ended_at_ms: None,
            end_reason: None,
            history: ThinVec::new(),
            created_at_ms: now,
            spec: body,
        };
        push_event(&mut api.history, EventKind::Created, None, String::new());
        self.remember_key(ObjectKind::Job, api.spec.idempotency_key.as_deref(), seq);
        self.jobs.insert(seq, JobEntry { api, lease_until_ms: monotonic_ms() + lease_ms });
        self.cycle.mark_job(seq);
        Ok(self.jobs.entries[&seq].api.clone())
    }

    /// The running job `id`, else why not.
    fn running_job(&self, id: &str) -> Result<u64, HeadError> {
        let not_found = || HeadError::NotFound { what: "job", id: id.to_string() };
        let seq = job_seq(id).filter(|seq| self.jobs.contains(*seq)).ok_or_else(not_found)?;
        let job = &self.jobs.entries[&seq].api;
        if job.state.is_final() {
            let why = job.end_reason.as_deref().unwrap_or("");
            let state = job.state.word();
            return Err(HeadError::Conflict(format!("job {id} has ended ({state}: {why})")));
        }
        Ok(seq)
    }

    /// Renews job `id`'s lease: it lives a whole lease from now. Not written: a restart gives
    /// every running job a whole lease anew.
    pub(crate) fn renew_job(&mut self, id: &str) -> Result<Job, HeadError> {
        let seq = self.running_job(id)?;
        let entry = self.jobs.entries.get_mut(&seq).expect("running");
        entry.lease_until_ms = monotonic_ms() + entry.api.lease_ms;
        Ok(entry.api.clone())
    }

    /// Ends job `id` as its driver or a user asks (an ended job is answered as it is).
    pub(crate) fn end_job(
        &mut self,
        id: &str,
        ending: JobEnding,
        reason: Option<String>,
    ) -> Result<Job, HeadError> {
        let seq = match self.running_job(id) {
            Ok(seq) => seq,
            Err(HeadError::Conflict(_)) => {
                return Ok(self.jobs.entries[&job_seq(id).expect("known")].api.clone())
            }
            Err(err) => return Err(err),
        };
        let (state, default) = match ending {
            JobEnding::Finished => (JobState::Finished, "its driver finished"),
            JobEnding::Stopped => (JobState::Stopped, "stopped by a user"),
        };
        let reason = reason.filter(|r| !r.is_empty()).unwrap_or_else(|| default.to_string());
        self.job_ended(seq, state, reason);
        Ok(self.jobs.entries[&seq].api.clone())
    }

    /// Jobs whose lease ran out at `now` are LOST, and what they owned ends.
    pub(crate) fn check_job_leases(&mut self, now: u64) {
        for seq in self.jobs.expired(now) {
            let entry = &self.jobs.entries[&seq];
            let silent = now.saturating_sub(entry.lease_until_ms) + entry.api.lease_ms;
            let reason = format!(
                "its driver renewed no lease for {silent} ms (lease {} ms): killed, or cut off",
                entry.api.lease_ms
            );
            tracing::warn!(job = %entry.api.job_id, %reason, "job {} is LOST", entry.api.job_id);
            self.job_ended(seq, JobState::Lost, reason);
        }
    }

    fn job_ended(&mut self, seq: u64, state: JobState, reason: String) {
        let entry = self.jobs.entries.get_mut(&seq).expect("known");
        let job = &mut entry.api;
        job.state = state;
        job.ended_at_ms = Some(now_ms());
        push_event(&mut job.history, EventKind::Ended, None, reason.clone());
        job.end_reason = Some(reason.clone());
        let why = format!("its job {} ended ({}: {reason})", job.job_id, state.word());
        self.metrics.job_ended(state);
        self.cycle.mark_job(seq);
        self.end_owned(OwnerRef::Job(seq), &why);
    }

    /// `owner` ended: what it owns ends, each as it ends when a user ends it, with `why`.
    pub(crate) fn end_owned(&mut self, owner: OwnerRef, why: &str) {
        for owned in self.jobs.take_owned(owner) {
            match owned {
                Owned::Work(key @ WorkId::Actor(_)) => {
                    let _ = self.kill_actor_because(&key.id(), why);
                }
                Owned::Work(key @ WorkId::Task(_)) => {
                    let _ = self.cancel_task_because(&key.id(), why);
                }
                Owned::Group(seq) => {
                    let _ = self.remove_group_because(&ObjectKind::Group.id(seq), why);
                }
            }
        }
    }

    /// Checks what a creation says of its job and owner (the job runs, the owner's process runs
    /// and is of that job), and names the job when only the owner does: the object belongs to
    /// its owner's job.
    pub(crate) fn check_owner(&self, ownership: &mut Ownership) -> Result<(), HeadError> {
        let job = self.owners_job(ownership.job_id.as_deref(), ownership.owner_id.as_deref())?;
        ownership.job_id = job.as_deref().map(ThinStr::from);
        Ok(())
    }

    /// The job an object of `job_id` and `owner_id` belongs to, or why it cannot be created.
    /// Owned by a driver, it needs a running job; owned by a process, it needs that process
    /// running, and belongs to its owner's job even when that job has ended (a detached actor
    /// outlives its job, and what it creates is its own).
    fn owners_job(
        &self,
        job_id: Option<&str>,
        owner_id: Option<&str>,
    ) -> Result<Option<String>, HeadError> {
        let Some(owner) = owner_id else {
            if let Some(job) = job_id {
                self.running_job(job).map_err(|err| match err {
                    HeadError::NotFound { .. } => {
                        HeadError::invalid("job_id", format!("no job {job} (see GET /api/v1/jobs)"))
                    }
                    other => other,
                })?;
            }
            return Ok(job_id.map(str::to_string));
        };
        let key = WorkId::parse(owner).filter(|k| self.work.contains(*k)).ok_or_else(|| {
            HeadError::invalid("owner_id", format!("no actor or task {owner}; the owner is one"))
        })?;
        let work = self.work.get(key).expect("held");
        if work.allocation.is_none() {
            return Err(HeadError::Conflict(format!(
                "owner_id: {owner} has no running process (it is {}): what it would own would \
                 end at once",
                work.object().state_word()
            )));
        }
        let owners_job = work.object().ownership().job_id.as_deref();
        match (job_id, owners_job) {
            (Some(job), theirs) if Some(job) != theirs => Err(HeadError::invalid(
                "job_id",
                format!("{job} is not the job of its owner {owner} ({})", theirs.unwrap_or("none")),
            )),
            (_, theirs) => Ok(theirs.map(str::to_string)),
        }
    }
}
