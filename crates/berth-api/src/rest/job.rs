//! Jobs and owners: a driver's session with the cluster, and who owns each piece of work.
//!
//! A driver (an SDK's `init`) creates a job and holds it with a lease it renews. Every actor,
//! task and placement group may name its job and its owner: the driver (no `owner_id`) or the
//! actor or task whose process created it. When an owner ends (a job ends; an actor's or a
//! task's process ends), what it owns ends with it, transitively, unless it is `detached`.

use serde::{Deserialize, Serialize};
use thin_vec::ThinVec;
use utoipa::ToSchema;

use super::{Event, StringMap, ThinStr};

/// The lease a job holds when its creation names none (seconds): as long as a node's
/// heartbeat timeout, so that a driver that a busy machine starves of CPU for a while is not
/// taken for a dead one.
pub const DEFAULT_JOB_LEASE_S: f64 = 30.0;
/// The shortest lease a job may ask for (seconds).
pub const MIN_JOB_LEASE_S: f64 = 1.0;
/// The longest lease a job may ask for (seconds): a day.
pub const MAX_JOB_LEASE_S: f64 = 86_400.0;

/// A job's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// Its driver holds it.
    Running,
    /// Its driver ended it (a clean shutdown or exit).
    Finished,
    /// A user stopped it (`berth job stop`).
    Stopped,
    /// Its driver stopped renewing its lease (killed, or cut off): the lease ran out.
    Lost,
}

impl JobState {
    /// The state as the API writes it: `RUNNING`, `FINISHED`, `STOPPED`, `LOST`.
    pub fn word(self) -> &'static str {
        match self {
            JobState::Running => "RUNNING",
            JobState::Finished => "FINISHED",
            JobState::Stopped => "STOPPED",
            JobState::Lost => "LOST",
        }
    }

    /// Anything but RUNNING: nothing more will happen to it.
    pub fn is_final(self) -> bool {
        self != JobState::Running
    }
}

/// The body of `POST /api/v1/jobs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobCreate {
    /// A key the client chose for this creation (the `Idempotency-Key` header sets it too), as
    /// for actors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub idempotency_key: Option<ThinStr>,
    /// A name for people (the SDKs send the program's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its namespace; default `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Seconds the job lives without a renewal (`POST /api/v1/jobs/{id}/renew`); from 1 to
    /// 86,400, default 30. The SDKs renew every sixth of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_s: Option<f64>,
    /// What the driver says of itself, for people (`sdk`, `host`, `pid`, `entrypoint` …); at
    /// most 64 entries (the `labels` limit), values of at most 4,096 bytes.
    #[serde(default, skip_serializing_if = "StringMap::is_empty")]
    pub metadata: StringMap,
}

/// A job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Job {
    /// Its ID (`job-3`).
    pub job_id: String,
    /// Its state.
    pub state: JobState,
    /// Its lease in milliseconds: it becomes LOST that long after its last renewal.
    pub lease_ms: u64,
    /// When it ended, once it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_ms: Option<u64>,
    /// Why it ended, once it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_reason: Option<String>,
    /// What happened to it, oldest first.
    #[schema(value_type = Vec<Event>)]
    pub history: ThinVec<Event>,
    /// When it was created.
    pub created_at_ms: u64,
    /// What it was created with.
    pub spec: JobCreate,
}

/// The body of `POST /api/v1/jobs/{id}/stop` and `…/finish` (optional).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobEnd {
    /// Why, for people; at most 4,096 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Who owns a piece of work, as its creation says (keys of the create body itself).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Ownership {
    /// The job it belongs to (`job-3`), which must be RUNNING. Default: its owner's job, or
    /// none (work of no job is detached: it ends only when it is ended by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub job_id: Option<ThinStr>,
    /// The actor or task whose process creates it (`actor-5`, `task-9`), which must not have
    /// ended: it ends when that process ends, unless it is detached. Default: the job's
    /// driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub owner_id: Option<ThinStr>,
    /// `detached`: it outlives its owner and its job (actors and placement groups; a task
    /// always ends with its owner). Default `non_detached`.
    #[serde(default, skip_serializing_if = "Lifetime::is_default")]
    pub lifetime: Lifetime,
}

/// Whether a piece of work ends with its owner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Lifetime {
    /// It ends when its owner ends (the default, as in Ray).
    #[default]
    NonDetached,
    /// It outlives its owner and its job: it ends only when it is killed or removed (or, for
    /// an actor, when it runs out of restarts).
    Detached,
}

impl Lifetime {
    /// True for the default, which answers leave out.
    pub fn is_default(&self) -> bool {
        *self == Lifetime::NonDetached
    }
}
