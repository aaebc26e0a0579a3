//! The REST API's bodies and answers, under [`API_PREFIX`].
//!
//! Conventions, so a client can rely on them everywhere:
//! - Quantities are decimal text (`"0.5"`, `"16Gi"` in bodies; answers give plain decimals of
//!   the unit, `"17179869184"`), never floats, so nothing is lost to binary rounding.
//! - Times are milliseconds since the Unix epoch (`*_ms`).
//! - Every error is an [`ApiError`]: 400 names the field and the rule, 401 a missing or wrong
//!   token, 404 an unknown ID, 409 a conflict (a name in use), 503 a head that cannot write.
//! - The placement part of a create body (`resources`, `scheduling_strategy`, `label_selector`,
//!   `fallback_strategy`, `tolerations`, and a group's `bundles` …) is the request file's
//!   format, checked by the same code as `berth explain` (`docs/file-formats.md`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::spec::{PlacementGroupSpec, PlacementSpec};
use berth_core::Quantity;
use serde::{Deserialize, Serialize};
use thin_vec::ThinVec;

mod autoscaler;
mod job;
mod measured;
mod resource_table;
mod thin_str;
mod wire;
pub use autoscaler::{
    AutoscaledNode, AutoscalerDecision, AutoscalerPlan, AutoscalerStatus, NodeTypeStatus, PlanItem,
};
pub use job::{
    Job, JobCreate, JobEnd, JobState, Lifetime, Ownership, DEFAULT_JOB_LEASE_S, MAX_JOB_LEASE_S,
    MIN_JOB_LEASE_S,
};
pub use measured::{GpuMeasured, NodeMeasured, WorkMeasured};
pub use resource_table::ResourceTable;
pub use thin_str::ThinStr;
use utoipa::{IntoParams, ToSchema};

/// Where the API lives.
pub const API_PREFIX: &str = "/api/v1";

/// The header that carries the cluster token: `Authorization: Bearer <token>`.
pub const AUTHORIZATION: &str = "authorization";

/// A label or taint map: key to value.
pub type StringMap = BTreeMap<String, String>;

// ---------------------------------------------------------------------------------------------
// Errors.

/// What went wrong, as a machine-readable word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// 400: the body, a path segment or a query parameter breaks a rule.
    Invalid,
    /// 401: no token, or the wrong one (or a revoked one).
    Unauthorized,
    /// 403: the token is known, but its role may not do this (a read-only token writing, an
    /// agent token on the REST API).
    Forbidden,
    /// 404: no such node, actor, task or placement group.
    NotFound,
    /// 409: the request conflicts with the state (a name already in use).
    Conflict,
    /// 408: waited as long as asked, and the object is not there yet.
    Timeout,
    /// 429: a read token ran more dry runs than its rate allows; `Retry-After` says when to
    /// try again.
    TooManyRequests,
    /// 503: the head cannot make the change durable (its store failed); nothing changed.
    Unavailable,
    /// 410: a watch resumed from a version the head no longer keeps (too old, or from an
    /// earlier head process): list again, then watch from the list's version.
    Expired,
}

/// The body of every error answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ApiError {
    /// What kind of error.
    pub error: ErrorKind,
    /// The field at fault, as a path into the body (`resources.GPU`,
    /// `scheduling_strategy.expressions[0].operator`), or the path or query parameter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The rule broken, as a sentence.
    pub message: String,
}

// ---------------------------------------------------------------------------------------------
// Shared pieces.

// Held as quantities, written as text: a head keeps one per resource of every node version its
// watch log holds, and three strings each made that map several times larger.
/// One resource's amounts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ResourceUse {
    /// The total.
    #[serde(with = "amount_text")]
    #[schema(value_type = String)]
    pub total: Quantity,
    /// Reserved now.
    #[serde(with = "amount_text")]
    #[schema(value_type = String)]
    pub used: Quantity,
    /// Free now.
    #[serde(with = "amount_text")]
    #[schema(value_type = String)]
    pub available: Quantity,
}

impl ResourceUse {
    /// The amounts of a resource with `total` of which `available` is free.
    pub fn new(total: Quantity, available: Quantity) -> ResourceUse {
        ResourceUse { total, used: total.saturating_sub(available), available }
    }
}

/// A quantity as decimal text (the answers' convention), read back from text or a number.
mod amount_text {
    use berth_core::Quantity;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(amount: &Quantity, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(amount)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Quantity, D::Error> {
        Quantity::deserialize(deserializer)
    }
}

/// One reason nodes were rejected, with how many.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReasonCount {
    /// Stable code: `insufficient_total:GPU`, `untolerated_taint:gpu_node=true`.
    pub code: String,
    /// The same in words: `too little GPU in total`.
    pub text: String,
    /// Nodes (or bundles) rejected for it, summed over the attempts.
    pub count: u64,
}

/// Why something is not placed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Diagnosis {
    /// True when no node could ever hold it (autoscaler demand); false when it waits for
    /// work to end or for a peer.
    pub infeasible: bool,
    /// The whole diagnosis in words, one part per attempt:
    /// `0/5 nodes can take it now: 3 too little GPU in total, 2 untolerated taint gpu_node=true`.
    pub summary: String,
    /// Rejections per reason, most frequent first.
    pub reasons: Vec<ReasonCount>,
    /// Names the request gives that no node has, next to one the cluster has that differs only
    /// in its case or its `berth.io/` prefix: `no node has the label market-type; did you mean
    /// berth.io/market-type?`. The SDKs print them as warnings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<String>,
}

/// One entry of an object's history.
///
/// Compact (48 bytes), since the head holds the history of every object: the kind is one
/// byte, the node ID shared with the node's other events, the message a boxed text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Event {
    /// When (ms since the Unix epoch).
    pub at_ms: u64,
    /// What: `created`, `placed`, `started`, `listening`, `exited`, `failed_to_start`,
    /// `node_died`, `moved`, `restarting`, `retrying`, `dead`, `finished`, `failed`,
    /// `cancelled`, `killed`, `removed`, `rescheduling`, `rescheduled`.
    #[schema(value_type = String)]
    pub kind: EventKind,
    /// The node concerned, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub node_id: Option<Arc<str>>,
    /// Details in words.
    #[serde(default, skip_serializing_if = "is_empty_text")]
    #[schema(value_type = String)]
    pub message: Box<str>,
}

/// What an [`Event`] records, written as one lower-case word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The object was created.
    Created,
    /// An attempt was placed on a node.
    Placed,
    /// Its agent started the attempt's process.
    Started,
    /// The actor's process said where it listens.
    Listening,
    /// The attempt's process exited.
    Exited,
    /// The attempt's process could not be started.
    FailedToStart,
    /// The attempt's node died.
    NodeDied,
    /// The attempt was moved off its node (a drain, or its peers moved).
    Moved,
    /// The actor waits to be placed again.
    Restarting,
    /// The task waits to be run again.
    Retrying,
    /// The actor ended for good.
    Dead,
    /// The task exited with code 0.
    Finished,
    /// The task failed for good.
    Failed,
    /// The task was cancelled.
    Cancelled,
    /// The actor was killed.
    Killed,
    /// The placement group was removed.
    Removed,
    /// The group lost bundles with a node and waits to be placed again.
    Rescheduling,
    /// The group's lost bundles were placed again.
    Rescheduled,
    /// The job ended (its driver finished, a user stopped it, or its lease ran out).
    Ended,
    /// A word this version does not know (written by a newer head), read as `other`.
    Other,
}

impl EventKind {
    const WORDS: [(EventKind, &'static str); 20] = [
        (EventKind::Created, "created"),
        (EventKind::Placed, "placed"),
        (EventKind::Started, "started"),
        (EventKind::Listening, "listening"),
        (EventKind::Exited, "exited"),
        (EventKind::FailedToStart, "failed_to_start"),
        (EventKind::NodeDied, "node_died"),
        (EventKind::Moved, "moved"),
        (EventKind::Restarting, "restarting"),
        (EventKind::Retrying, "retrying"),
        (EventKind::Dead, "dead"),
        (EventKind::Finished, "finished"),
        (EventKind::Failed, "failed"),
        (EventKind::Cancelled, "cancelled"),
        (EventKind::Killed, "killed"),
        (EventKind::Removed, "removed"),
        (EventKind::Rescheduling, "rescheduling"),
        (EventKind::Rescheduled, "rescheduled"),
        (EventKind::Ended, "ended"),
        (EventKind::Other, "other"),
    ];

    /// The word, as the API writes it.
    pub fn as_str(self) -> &'static str {
        Self::WORDS[self as usize].1
    }

    /// The kind a word names; [`EventKind::Other`] for a word this version does not know.
    pub fn parse(word: &str) -> EventKind {
        Self::WORDS.iter().find(|(_, w)| *w == word).map_or(EventKind::Other, |(kind, _)| *kind)
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for EventKind {
    fn eq(&self, word: &str) -> bool {
        self.as_str() == word
    }
}

impl PartialEq<&str> for EventKind {
    fn eq(&self, word: &&str) -> bool {
        self.as_str() == *word
    }
}

impl Serialize for EventKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<EventKind, D::Error> {
        let word = Cow::<'de, str>::deserialize(deserializer)?;
        Ok(EventKind::parse(&word))
    }
}

fn is_empty_text(text: &str) -> bool {
    text.is_empty()
}

/// A batch of creations: each item is what the single endpoint takes, checked and answered
/// on its own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Batch<T> {
    /// At least one item, at most the head's `batch-items` limit (default 10,000).
    #[schema(min_items = 1, max_items = 10000)]
    pub items: Vec<T>,
}

/// The answer to a batch: one entry per item, in the items' order. The whole batch is durable
/// before it is sent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchAnswer<T> {
    /// The items' answers.
    pub items: Vec<BatchItem<T>>,
}

/// One item's answer: the status the single endpoint would have answered (201, or the
/// error's) with the created object or the error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchItem<T> {
    /// 201 when created; else 400 (its `field` relative to the item), 409, 503...
    pub status: u16,
    /// The created object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<T>,
    /// Why it was not created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
}

/// A list answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct List<T> {
    /// The matching objects of this page (at most `limit`), in the order `sort` asks
    /// (creation order by default).
    pub items: Vec<T>,
    /// How many objects match the filters, over every page.
    pub total: usize,
    /// The `cursor` of the next page, when there is one (the same filters and `sort` with it
    /// answer the objects after this page's last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// For actors, tasks and placement groups: how many finished objects of this kind the
    /// head has forgotten, and what it keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forgotten: Option<Forgotten>,
}

/// Finished objects (DEAD actors; FINISHED, FAILED or CANCELLED tasks; REMOVED placement
/// groups) are kept for a while, then dropped from memory and the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Forgotten {
    /// Finished objects of this kind dropped so far (over the store's whole life).
    pub dropped: u64,
    /// Seconds a finished object is kept after it finished.
    pub keep_finished_s: u64,
    /// Finished objects of this kind kept at most (the oldest-finished are dropped first).
    pub keep_finished: u64,
}

// ---------------------------------------------------------------------------------------------
// Nodes.

/// A node's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum NodeState {
    /// Heartbeating; takes new work.
    Alive,
    /// Takes no new work; its actors are moved off it.
    Draining,
    /// Its heartbeats are late (past a third of the head's heartbeat timeout): it takes no new
    /// work, and keeps what it runs (nothing is restarted or released) until it is heard from
    /// again (back to `ALIVE`, or `DRAINING` if it was draining) or the timeout passes (`DEAD`).
    Suspect,
    /// Heartbeats stopped (or it was removed); its work was moved.
    Dead,
}

/// A taint on a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Taint {
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
}

/// A node, as the head sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Node {
    /// Its ID.
    pub node_id: String,
    /// The address its agent gave (an IP).
    pub address: String,
    /// Its state.
    pub state: NodeState,
    /// Every label: the user's and Berth's `berth.io/...` defaults.
    #[schema(value_type = StringMap)]
    pub labels: Arc<StringMap>,
    /// Its taints, user taints and Berth's rare-resource taints.
    pub taints: Vec<Taint>,
    /// Resource name to amounts.
    #[schema(value_type = BTreeMap<String, ResourceUse>)]
    pub resources: ResourceTable,
    /// Actors running (or starting) there.
    pub actors: u64,
    /// Tasks running (or starting) there.
    pub tasks: u64,
    /// When it (last) registered.
    pub registered_at_ms: u64,
    /// Why it is dead, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_reason: Option<String>,
    /// What happened to it, oldest first (the last [`NODE_HISTORY`] entries): registrations,
    /// missed heartbeats, death, drains, taint, label and resource changes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<NodeEvent>,
    /// What its machine actually uses, as its agent last measured it; absent when not known
    /// (see [`NodeMeasured`]). Never in the watch stream's events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<Box<NodeMeasured>>,
}

/// The most entries a node's history keeps (the oldest go first).
pub const NODE_HISTORY: usize = 100;

/// Something that happened to a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeEvent {
    /// When (ms since the Unix epoch).
    pub at_ms: u64,
    /// What: `registered`, `registered_again`, `suspect` (heartbeats late), `alive` (back
    /// after `suspect`), `dead`, `draining`, `undrained`, `taints_added`, `taints_removed`,
    /// `labels_changed`, `resources_changed`.
    pub kind: String,
    /// Details in words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// Taints to add or remove, key to value (the body of the taint routes and the dashboard's):
/// `{"gpu_node": "true"}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(transparent)]
pub struct TaintsBody(pub StringMap);

/// Node labels to add or change, key to value: `{"zone": "us-west4-a"}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(transparent)]
pub struct LabelsBody(pub StringMap);

/// Node label keys to remove: `["zone"]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(transparent)]
pub struct LabelKeysBody(pub Vec<String>);

/// Resource totals to set on a node, name to amount (`{"GPU": "4", "my_res": "0"}`): the named
/// resources get these totals, others stay as they are; `"0"` deletes a resource.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(transparent)]
pub struct ResourcesBody(pub StringMap);

// ---------------------------------------------------------------------------------------------
// Actors.

/// An actor's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ActorState {
    /// Waiting to be placed (or placed and not yet started by its agent).
    Pending,
    /// Started on its node.
    Alive,
    /// Its process or node died; waiting to be placed again.
    Restarting,
    /// Ended for good; `death_reason` says why.
    Dead,
}

/// The body of `POST /api/v1/actors`.
// Read through a flat copy (`wire`): serde cannot refuse unknown keys beside a flattened
// field, and a flattened field would be read through a buffer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(from = "wire::ActorCreate")]
pub struct ActorCreate {
    /// A key the client chose for this creation (the `Idempotency-Key` header sets it too): a
    /// second creation with the same key, while the first object is remembered, creates
    /// nothing and answers with that object, so a client may retry a request cut off before
    /// its answer. 1 to 255 visible ASCII characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub idempotency_key: Option<ThinStr>,
    /// Its job and owner: `job_id`, `owner_id` and `lifetime`, keys of the body itself (see
    /// [`Ownership`]).
    #[serde(flatten)]
    pub ownership: Ownership,
    /// A name, unique among the namespace's live actors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub name: Option<ThinStr>,
    /// Its namespace; default `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub namespace: Option<ThinStr>,
    /// Actor labels (what other actors' affinity matches); at most 64 (the head's `labels`
    /// limit).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: StringMap,
    /// The program to run.
    #[schema(value_type = String)]
    pub command: ThinStr,
    /// Its arguments; at most 1,024 (the `args` limit).
    #[serde(default, skip_serializing_if = "<[String]>::is_empty")]
    #[schema(value_type = Vec<String>, max_items = 1024)]
    pub args: Box<[String]>,
    /// Extra environment variables; at most 256 (the `env` limit).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: StringMap,
    /// The command speaks the fork-server protocol (`docs/worker-protocol.md`): the agent may
    /// keep a warm copy of it and fork each attempt from that copy instead of starting the
    /// program anew. Default false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub fork_server: bool,
    /// How many times it is restarted after its process or node dies; -1 for always.
    #[serde(default)]
    pub max_restarts: i32,
    /// Where and on what it runs, as in the request file: `resources` (resource name to
    /// amount, `{"CPU": 1, "GPU": 0.5}`; at most 64, the `resources` limit),
    /// `scheduling_strategy`, `label_selector` (at most 32 expressions of at most 256 values
    /// each), `fallback_strategy` (at most 16) and `tolerations` (at most 32), keys of the
    /// body itself.
    #[serde(flatten)]
    pub placement: PlacementSpec,
}

/// An actor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Actor {
    /// Its ID (`actor-17`).
    // Shared text: the head's scheduler keeps the same ID for the actor while it is placed.
    #[schema(value_type = String)]
    pub actor_id: Arc<str>,
    /// Its name, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub name: Option<Box<str>>,
    /// Its namespace.
    pub namespace: String,
    /// Its state.
    pub state: ActorState,
    /// Where it runs (or was placed), when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub node_id: Option<Arc<str>>,
    /// Instance IDs reserved per resource (`{"GPU": [0]}`), as given to its process.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub instances: BTreeMap<String, Vec<u32>>,
    /// Restarts so far.
    #[schema(value_type = u64)]
    pub restarts: u32,
    /// Why it is dead, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub death_reason: Option<Box<str>>,
    /// Why it waits, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<Box<Diagnosis>>,
    /// Where its current attempt's process listens, once that process said so
    /// (`PUT /api/v1/actors/{id}/endpoint`); the SDKs' worker runtimes do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<Box<Endpoint>>,
    /// What happened to it, oldest first (the last 50 entries).
    #[schema(value_type = Vec<Event>)]
    pub history: ThinVec<Event>,
    /// When it was created.
    pub created_at_ms: u64,
    /// What it was created with.
    #[schema(value_type = ActorCreate)]
    pub spec: Arc<ActorCreate>,
    /// The actor's work key (see [`ActorEndpoint::work_key`]): only in the answer to its
    /// creation, never in later reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub work_key: Option<Box<str>>,
}

/// Where an actor's process listens for its callers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Endpoint {
    /// `HOST:PORT` the process listens on.
    pub address: String,
    /// The attempt whose process this is (1 for the first start, then one more per restart).
    pub attempt: u32,
}

/// An actor's process telling the head where it listens (`PUT /api/v1/actors/{id}/endpoint`,
/// authorised by the work key its agent gave it in `BERTH_WORK_KEY`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndpointRegister {
    /// The attempt the process belongs to (its `BERTH_ATTEMPT`).
    pub attempt: u32,
    /// `HOST:PORT` it listens on: an IP address or a host name, and a port from 1 to 65535.
    pub address: String,
}

/// How a caller reaches an actor (`GET /api/v1/actors/{id}/endpoint`, admin tokens only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ActorEndpoint {
    /// The actor.
    pub actor_id: String,
    /// Its state.
    pub state: ActorState,
    /// Where its current attempt listens; absent when the actor is DEAD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<Endpoint>,
    /// Why it is dead, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub death_reason: Option<String>,
    /// The actor's work key: its processes are given it (`BERTH_WORK_KEY`) and callers present
    /// it to them, so only those who may read this (admin tokens) can call the actor. 64 hex
    /// digits, the same for every attempt.
    pub work_key: String,
}

/// `GET /api/v1/actors/{id}/endpoint`'s query.
#[derive(Clone, Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EndpointQuery {
    /// Answer only with an endpoint of a later attempt than this one (the caller's last, when
    /// that process stopped answering); default 0: any attempt's.
    pub after_attempt: Option<u32>,
    /// Seconds to wait at most (default 30, at most 600).
    pub timeout_s: Option<f64>,
}

// ---------------------------------------------------------------------------------------------
// Tasks.

/// A task's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskState {
    /// Waiting to be placed (or to be started by its agent).
    Pending,
    /// Its process runs.
    Running,
    /// Exited with code 0.
    Finished,
    /// Failed after its last retry; `failure` says why.
    Failed,
    /// Cancelled by a user.
    Cancelled,
}

impl TaskState {
    /// FINISHED, FAILED or CANCELLED: nothing more will happen to it.
    pub fn is_final(self) -> bool {
        matches!(self, TaskState::Finished | TaskState::Failed | TaskState::Cancelled)
    }
}

/// The body of `POST /api/v1/tasks`.
// Read through a flat copy (`wire`): serde cannot refuse unknown keys beside a flattened
// field, and a flattened field would be read through a buffer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(from = "wire::TaskSubmit")]
pub struct TaskSubmit {
    /// A key the client chose for this creation (the `Idempotency-Key` header sets it too): a
    /// second creation with the same key, while the first object is remembered, creates
    /// nothing and answers with that object, so a client may retry a request cut off before
    /// its answer. 1 to 255 visible ASCII characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub idempotency_key: Option<ThinStr>,
    /// Its job and owner: `job_id`, `owner_id` and `lifetime`, keys of the body itself (see
    /// [`Ownership`]).
    #[serde(flatten)]
    pub ownership: Ownership,
    /// A name for people; need not be unique.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub name: Option<ThinStr>,
    /// Its namespace (for actor affinity); default `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub namespace: Option<ThinStr>,
    /// The program to run.
    #[schema(value_type = String)]
    pub command: ThinStr,
    /// Its arguments; at most 1,024 (the `args` limit).
    #[serde(default, skip_serializing_if = "<[String]>::is_empty")]
    #[schema(value_type = Vec<String>, max_items = 1024)]
    pub args: Box<[String]>,
    /// Extra environment variables; at most 256 (the `env` limit).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: StringMap,
    /// As for actors.
    #[serde(default, skip_serializing_if = "is_false")]
    pub fork_server: bool,
    /// How many times it is run again after a failure (non-zero exit, node death); default 3.
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// Where and on what it runs, as for actors.
    #[serde(flatten)]
    pub placement: PlacementSpec,
}

/// Ray's default for tasks.
pub const DEFAULT_TASK_RETRIES: u32 = 3;

fn default_retries() -> u32 {
    DEFAULT_TASK_RETRIES
}

fn is_false(value: &bool) -> bool {
    !value
}

/// A task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Task {
    /// Its ID (`task-9`).
    #[schema(value_type = String)]
    pub task_id: Arc<str>,
    /// Its name, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub name: Option<Box<str>>,
    /// Its namespace.
    pub namespace: String,
    /// Its state.
    pub state: TaskState,
    /// Where it runs (or ran last), when placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub node_id: Option<Arc<str>>,
    /// Instance IDs reserved per resource.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub instances: BTreeMap<String, Vec<u32>>,
    /// Runs started so far (1 on the first run).
    #[schema(value_type = u64)]
    pub attempts: u32,
    /// The exit code of the last run, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub failure: Option<Box<str>>,
    /// Why it waits, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<Box<Diagnosis>>,
    /// What happened to it, oldest first (the last 50 entries).
    #[schema(value_type = Vec<Event>)]
    pub history: ThinVec<Event>,
    /// When it was submitted.
    pub created_at_ms: u64,
    /// What it was submitted with.
    #[schema(value_type = TaskSubmit)]
    pub spec: Arc<TaskSubmit>,
    /// The task's work key (its processes are given it as `BERTH_WORK_KEY`, so whoever
    /// submitted it can tell its worker from an impostor): only in the answer to its
    /// submission, never in later reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub work_key: Option<Box<str>>,
}

/// `POST /api/v1/tasks:wait`: wait until one of these tasks has ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TasksWait {
    /// The tasks: 1 to 10,000 IDs (the head's `wait-ids` limit).
    #[schema(min_items = 1, max_items = 10000)]
    pub task_ids: Vec<String>,
    /// Seconds to wait at most (default 30, at most 600).
    #[serde(default)]
    pub timeout_s: Option<f64>,
}

/// `POST /api/v1/tasks:delivered`: the owner of these tasks has their results. A task so marked
/// ends FINISHED however its attempt ends (its process stopped because its owner ended, its
/// node lost), never CANCELLED, FAILED or retried: its result is where it belongs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TasksDelivered {
    /// The tasks: 1 to 10,000 IDs (the head's `wait-ids` limit). IDs of tasks that have ended
    /// or that the head does not know are skipped.
    #[schema(min_items = 1, max_items = 10000)]
    pub task_ids: Vec<String>,
}

/// The answer to `POST /api/v1/tasks:delivered`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TasksMarked {
    /// The named tasks that had not ended, now marked delivered.
    pub marked: Vec<String>,
}

/// The answer to `POST /api/v1/tasks:wait`: at once when one of the tasks has ended or is
/// unknown, else when one ends, else empty after the timeout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TasksEnded {
    /// The named tasks that are FINISHED, FAILED or CANCELLED.
    pub ended: Vec<Task>,
    /// The named IDs the head does not know (never submitted, or forgotten since they ended).
    pub unknown: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// Placement groups.

/// A placement group's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum GroupState {
    /// Not reserved yet.
    Pending,
    /// Every bundle is reserved.
    Created,
    /// A node holding bundles died; those bundles wait to be reserved again.
    Rescheduling,
    /// Removed; its reservations are free.
    Removed,
}

/// The body of `POST /api/v1/placement_groups` (the request file's `placement_group`, without
/// `id`: the head gives it).
// Read through a flat copy (`wire`): serde cannot refuse unknown keys beside a flattened
// field, and a flattened field would be read through a buffer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(from = "wire::GroupCreate")]
pub struct GroupCreate {
    /// A key the client chose for this creation (the `Idempotency-Key` header sets it too): a
    /// second creation with the same key, while the first object is remembered, creates
    /// nothing and answers with that object, so a client may retry a request cut off before
    /// its answer. 1 to 255 visible ASCII characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub idempotency_key: Option<ThinStr>,
    /// Its job and owner: `job_id`, `owner_id` and `lifetime`, keys of the body itself (see
    /// [`Ownership`]).
    #[serde(flatten)]
    pub ownership: Ownership,
    /// A name for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its namespace; default `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// How it is placed: `strategy` (PACK, the default, SPREAD, STRICT_PACK or
    /// STRICT_SPREAD), `bundles` (resource maps, one per bundle: `[{"GPU": 1}, {"GPU": 1}]`;
    /// at most 1,024, the `bundles` limit, of at most 64 resources each),
    /// `bundle_label_selector` (one selector per bundle, or none), `tolerations` (for every
    /// bundle) and `fallback_strategy` (alternatives: `[{"bundles": [...],
    /// "bundle_label_selector": [...]}]`; at most 16), keys of the body itself.
    #[serde(flatten)]
    pub placement: PlacementGroupSpec,
}

/// One bundle of a group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Bundle {
    /// Its index.
    pub index: usize,
    /// What it reserves, resource name to amount.
    pub resources: StringMap,
    /// The node holding it, when reserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}

/// A placement group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Group {
    /// Its ID (`pg-3`).
    pub group_id: String,
    /// The client's key of its creation (see [`GroupCreate::idempotency_key`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Its name, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its namespace.
    pub namespace: String,
    /// Its strategy.
    pub strategy: String,
    /// Its state.
    pub state: GroupState,
    /// The alternative reserved (0: `bundles`; `i`: `fallback_strategy[i − 1]`), once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alternative: Option<usize>,
    /// The bundles of the reserved alternative (of alternative 0 while pending).
    pub bundles: Vec<Bundle>,
    /// Why it waits, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<Diagnosis>,
    /// What happened to it, oldest first.
    #[schema(value_type = Vec<Event>)]
    pub history: ThinVec<Event>,
    /// When it was created.
    pub created_at_ms: u64,
    /// What it was created with.
    pub spec: GroupCreate,
}

/// Query of `GET /api/v1/placement_groups/{id}/wait`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, IntoParams)]
pub struct WaitQuery {
    /// Seconds to wait at most (default 30, at most 600).
    pub timeout_s: Option<f64>,
}

// ---------------------------------------------------------------------------------------------
// Logs.

/// Which output of an actor or task: its standard output or its standard error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    /// Standard output.
    #[default]
    Out,
    /// Standard error.
    Err,
}

impl LogStream {
    /// `out` or `err`, as in the query.
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Out => "out",
            LogStream::Err => "err",
        }
    }
}

/// Query of `GET /api/v1/logs/{id}`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, IntoParams)]
pub struct LogsQuery {
    /// `out` (standard output, the default) or `err` (standard error).
    pub stream: Option<LogStream>,
    /// `true`: keep the answer open and send what is written later, until the client goes
    /// away (or the work ends for good); default `false`.
    pub follow: Option<bool>,
    /// The first byte to send (default 0, the whole log); a log keeps every attempt's output.
    pub offset: Option<u64>,
}

// ---------------------------------------------------------------------------------------------
// Lists.

/// Filters of the list endpoints; each is optional and they combine with AND.
#[derive(Clone, Debug, Default, Deserialize, Serialize, IntoParams)]
pub struct ListQuery {
    /// Only this state (`ALIVE`, `PENDING`, ...; any case).
    pub state: Option<String>,
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only objects on this node (ID).
    pub node: Option<String>,
    /// Only objects with this label, `key=value` (actors; nodes).
    pub label: Option<String>,
    /// Only objects of this job (`job-3`; actors, tasks and placement groups).
    pub job: Option<String>,
    /// Only objects whose name or ID contains this text, in any case (nodes: whose ID or
    /// address does); at most 256 characters.
    pub name: Option<String>,
    /// At most this many items (default 1000, at most 100000).
    pub limit: Option<usize>,
    /// The column to sort by, with `-` before it for descending: `created_at_ms` (the
    /// default for actors, tasks and groups, oldest first), `-created_at_ms` (newest first),
    /// `name`, `state`… (the 400 answer to an unknown one lists the columns). Ties go by
    /// creation order (nodes: by ID).
    pub sort: Option<String>,
    /// Where the page starts: the `next_cursor` of the previous page, asked with the same
    /// `sort`.
    pub cursor: Option<String>,
}

/// Filters of `GET /api/v1/watch`; each is optional and they combine with AND.
#[derive(Clone, Debug, Default, Deserialize, Serialize, IntoParams)]
pub struct WatchQuery {
    /// Kinds, comma-separated: `node`, `actor`, `task`, `placement_group`, `job` (default:
    /// all).
    pub kind: Option<String>,
    /// Only the object with this ID (`actor-12`, a node ID).
    pub id: Option<String>,
    /// Only the objects of this job (`job-3`), and the job itself.
    pub job: Option<String>,
    /// Only objects with this label, `key=value` (nodes; actors).
    pub label: Option<String>,
    /// Only changes that leave the object in this state (`ALIVE`, `PENDING`, ...; any case).
    pub state: Option<String>,
    /// Resume after this version (the `id` of the last event seen; the `Last-Event-ID` header
    /// says the same). Without it, the stream starts with the matching objects as they are
    /// (`ADDED`), then their changes.
    pub since: Option<u64>,
    /// Without `since`: `false` skips the objects as they are and starts with the next change
    /// (a page that already shows them and only wants to know when to look again).
    pub listing: Option<bool>,
}

// ---------------------------------------------------------------------------------------------
// Cluster status and explain.

/// Node counts by state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeCounts {
    /// Alive.
    pub alive: u64,
    /// Draining.
    pub draining: u64,
    /// Suspect: heartbeats late, not dead yet.
    #[serde(default)]
    pub suspect: u64,
    /// Dead.
    pub dead: u64,
}

/// Something waiting to be placed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PendingItem {
    /// `actor`, `task` or `placement_group`.
    pub kind: String,
    /// Its ID.
    pub id: String,
    /// Why.
    pub diagnosis: Diagnosis,
}

/// Demand of one shape: what an autoscaler reads to decide which nodes to add.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Demand {
    /// Resource name to amount of one request (or one bundle).
    pub shape: StringMap,
    /// The label selector the requests carry (label key to expression).
    pub label_selector: StringMap,
    /// The tolerations they carry.
    pub tolerations: StringMap,
    /// Requests of this shape waiting.
    pub count: u64,
    /// How many of them no node could ever hold.
    pub infeasible: u64,
}

/// `GET /api/v1/cluster/status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ClusterStatus {
    /// Nodes by state.
    pub nodes: NodeCounts,
    /// Resource name to amounts over the alive and draining nodes (not suspect or dead ones).
    pub resources: BTreeMap<String, ResourceUse>,
    /// Actor counts by state (`ALIVE`: 3).
    #[schema(value_type = std::collections::HashMap<String, u64>)]
    pub actors: StringCounts,
    /// Task counts by state.
    #[schema(value_type = std::collections::HashMap<String, u64>)]
    pub tasks: StringCounts,
    /// Placement group counts by state.
    #[schema(value_type = std::collections::HashMap<String, u64>)]
    pub placement_groups: StringCounts,
    /// Waiting actors, tasks and groups, oldest first (at most 100; see `pending_total`).
    pub pending: Vec<PendingItem>,
    /// How many wait in all.
    pub pending_total: u64,
    /// Waiting requests grouped by shape, selector and tolerations, largest first.
    pub demand: Vec<Demand>,
    /// Resources under rare-resource isolation: their nodes carry the taint
    /// `berth.io/rare-NAME=true`.
    #[serde(default)]
    pub rare_resources: Vec<String>,
    /// What the operator should know of the head itself: its store's durability relaxed,
    /// its store not answering (writes refused meanwhile).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Counts by name.
pub type StringCounts = BTreeMap<String, u64>;

/// The answer of `POST /api/v1/explain` (a dry run; nothing is reserved).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DryRun {
    /// `placed`, `pending` or `infeasible`.
    pub outcome: String,
    /// The node it would go to (the first bundle's, for a group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// For a group: the node of each bundle.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bundle_nodes: Vec<String>,
    /// The instance IDs it would take.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub instances: BTreeMap<String, Vec<u32>>,
    /// Why not, when not placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<Diagnosis>,
}

/// The answer of `GET /api/v1/explain/{id}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Explanation {
    /// The ID asked about.
    pub id: String,
    /// `actor`, `task` or `placement_group`.
    pub kind: String,
    /// Its state (`PENDING`, `ALIVE`, ...).
    pub state: String,
    /// Where it is placed, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Why it waits, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<Diagnosis>,
    /// The answer in one sentence.
    pub summary: String,
}

/// `GET /healthz`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`, or `standby` for a head waiting to take the store's lease over.
    pub status: String,
    /// The head's version.
    pub version: String,
    /// A standby's: the active head (the holder of the store's lease).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Tokens.

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything through the REST API and the dashboard, tokens included; never the agent
    /// protocol.
    Admin,
    /// Reads: every GET, and dry runs (`POST /api/v1/explain`); no change, no token list.
    Read,
    /// The agent protocol only: a machine joins with it and receives work.
    Agent,
}

/// A token as listed: never its secret, which is stored only as a SHA-256 hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenInfo {
    /// Its ID (`tok-3f2a9c1e`; `admin` and `agent` for the two the head made on its first
    /// start, from `DATA_DIR/token` and `DATA_DIR/agent-token`).
    pub id: String,
    /// A name given at creation (may be empty).
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// When it was created (ms since the Unix epoch; 0 for the first-start tokens).
    pub created_at_ms: u64,
}

/// The body of `POST /api/v1/tokens`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenCreate {
    /// What it may do.
    pub role: Role,
    /// A name, to tell tokens apart in the list (at most 128 characters).
    #[serde(default)]
    pub name: String,
}

/// The answer to `POST /api/v1/tokens`: the token and, this once, its secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenCreated {
    /// The token.
    pub token: TokenInfo,
    /// The secret to send as `Authorization: Bearer <secret>`; shown only now.
    pub secret: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_kinds_are_written_and_read_as_their_words_and_unknown_words_read_as_other() {
        // `as_str` indexes the table by the variant's position: they must line up.
        for (position, (kind, word)) in EventKind::WORDS.iter().enumerate() {
            assert_eq!(*kind as usize, position, "{word}");
            assert_eq!(kind.as_str(), *word);
            assert_eq!(EventKind::parse(word), *kind);
            let json = serde_json::to_string(kind).unwrap();
            assert_eq!(json, format!("\"{word}\""));
            assert_eq!(serde_json::from_str::<EventKind>(&json).unwrap(), *kind);
        }
        let event: Event =
            serde_json::from_str(r#"{"at_ms": 1, "kind": "hibernated", "message": "zz"}"#).unwrap();
        assert_eq!((event.kind, &*event.message), (EventKind::Other, "zz"));
        assert!(serde_json::from_str::<EventKind>("7").is_err(), "a kind is a word");
        assert_eq!(std::mem::size_of::<Event>(), 48);
    }
}
