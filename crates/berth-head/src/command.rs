//! The owner's command protocol: what the edges (REST handlers, the agent protocol, the
//! autoscaler's task) send the owner task, and where each command's answer goes. The edges and
//! the owner both depend on this module; it depends on neither, so imports point one way.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use berth_api::agent::{Assignment, RegisterReply, RegisterRequest, StatusReplies, StatusReports};
use berth_api::rest::{
    Actor, ActorCreate, DryRun, Endpoint, Group, GroupCreate, Job, JobCreate, Node, StringMap,
    Task, TaskSubmit,
};
use berth_api::spec::node_types::NodeType;
use berth_api::spec::ParsedRequest;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

use crate::error::HeadError;

/// A change for the owner task to apply. Each carries where to send its answer.
#[derive(Debug)]
pub(crate) enum Command {
    CreateActor {
        seq: u64,
        body: Box<ActorCreate>,
        reply: Reply<Actor>,
    },
    SubmitTask {
        seq: u64,
        body: Box<TaskSubmit>,
        reply: Reply<Task>,
    },
    /// A batch: each item applied as its single command would be, answered together.
    CreateActors {
        items: Vec<Prepared<ActorCreate>>,
        reply: Reply<Vec<Result<Actor, HeadError>>>,
    },
    SubmitTasks {
        items: Vec<Prepared<TaskSubmit>>,
        reply: Reply<Vec<Result<Task, HeadError>>>,
    },
    CreateJob {
        seq: u64,
        body: Box<JobCreate>,
        reply: Reply<Job>,
    },
    RenewJob {
        id: String,
        reply: Reply<Job>,
    },
    EndJob {
        id: String,
        ending: JobEnding,
        reason: Option<String>,
        reply: Reply<Job>,
    },
    CreateGroup {
        seq: u64,
        body: Box<GroupCreate>,
        reply: Reply<Group>,
    },
    KillActor {
        id: String,
        reply: Reply<Actor>,
    },
    RegisterEndpoint {
        id: String,
        endpoint: Endpoint,
        reply: Reply<Actor>,
    },
    CancelTask {
        id: String,
        reply: Reply<Task>,
    },
    TasksDelivered {
        ids: Vec<String>,
        reply: Reply<Vec<String>>,
    },
    RemoveGroup {
        id: String,
        reply: Reply<Group>,
    },
    DrainNode {
        node: String,
        reply: Reply<Node>,
    },
    UndrainNode {
        node: String,
        reply: Reply<Node>,
    },
    Taints {
        node: String,
        taints: StringMap,
        add: bool,
        reply: Reply<Node>,
    },
    Labels {
        node: String,
        set: StringMap,
        remove: Vec<String>,
        reply: Reply<Node>,
    },
    Resources {
        node: String,
        resources: StringMap,
        reply: Reply<Node>,
    },
    DryRun {
        parsed: Box<ParsedRequest>,
        reply: Reply<DryRun>,
    },
    Agent(AgentCommand),
    Tick,
    /// An autoscaler round; answered once its records are durable.
    Autoscale {
        reply: oneshot::Sender<AutoscaleActions>,
    },
    /// What the autoscaler's provider answered.
    AutoscaleOutcome(AutoscaleOutcome),
    /// Keep the token hashes in the store (a standby that takes over knows them).
    StoreKeyring {
        stored: crate::keyring::StoredKeyring,
        reply: Reply<()>,
    },
    /// A dry-run plan, with these settings or the configured ones.
    AutoscalePlan {
        settings: Option<Box<berth_api::spec::node_types::AutoscalerSettings>>,
        reply: Reply<berth_api::rest::AutoscalerPlan>,
    },
}

impl Command {
    /// Whether it asks for a change the store must keep: refused at once while the store is
    /// down. Dry runs, plans, agents' reports and the autoscaler's rounds go on from memory.
    pub(crate) fn writes(&self) -> bool {
        !matches!(
            self,
            Command::DryRun { .. }
                | Command::RenewJob { .. }
                | Command::Agent(_)
                | Command::Tick
                | Command::Autoscale { .. }
                | Command::AutoscaleOutcome(_)
                | Command::AutoscalePlan { .. }
        )
    }

    /// How much work the command is for the owner, in single creations: a batch's items, an
    /// agent's reports, 1 for anything else.
    pub(crate) fn work(&self) -> usize {
        match self {
            Command::CreateActors { items, .. } => items.len(),
            Command::SubmitTasks { items, .. } => items.len(),
            Command::Agent(AgentCommand::Report { reports, .. }) => reports.reports.len(),
            _ => 1,
        }
        .max(1)
    }
}

/// How a job ends when asked to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JobEnding {
    /// Its driver says it is done.
    Finished,
    /// A user stops it.
    Stopped,
}

pub(crate) type Reply<T> = oneshot::Sender<Result<T, HeadError>>;

/// A create body checked at the edge (read, with every rule one value can check alone) and
/// numbered.
#[derive(Debug)]
pub(crate) struct Prepared<T> {
    pub(crate) seq: u64,
    pub(crate) body: Box<T>,
}

/// When a node's session last showed life.
#[derive(Debug)]
pub(crate) struct Liveness {
    pub(crate) session: u64,
    pub(crate) last_seen_ms: AtomicU64,
    /// Set by the owner when the session ends (node dead, re-registered): the heartbeat
    /// stream then tells the agent to register again.
    pub(crate) ended: std::sync::atomic::AtomicBool,
}

/// The live sessions' [`Liveness`] cells, by node: the owner writes them as sessions begin
/// and end, and heartbeat streams find theirs here, so that a heartbeat never waits for the
/// owner (a busy owner would otherwise hold up the very beats that keep its nodes alive).
#[derive(Debug, Default)]
pub(crate) struct Sessions(std::sync::RwLock<std::collections::HashMap<String, Arc<Liveness>>>);

impl Sessions {
    /// `node`'s session is now `cell`'s.
    pub(crate) fn begin(&self, node: &str, cell: Arc<Liveness>) {
        self.0.write().unwrap_or_else(|p| p.into_inner()).insert(node.to_string(), cell);
    }

    /// `node` has no live session any more.
    pub(crate) fn end(&self, node: &str) {
        self.0.write().unwrap_or_else(|p| p.into_inner()).remove(node);
    }

    /// The cell of `node`'s session `session`, if that session is live.
    pub(crate) fn find(&self, node: &str, session: u64) -> Option<Arc<Liveness>> {
        let sessions = self.0.read().unwrap_or_else(|p| p.into_inner());
        sessions.get(node).filter(|cell| cell.session == session).cloned()
    }
}

/// The sending half of a node's assignment stream.
pub(crate) type AssignmentSender = mpsc::UnboundedSender<Result<Assignment, Status>>;

/// A call from an agent, for the owner.
#[derive(Debug)]
pub(crate) enum AgentCommand {
    Register {
        request: Box<RegisterRequest>,
        reply: oneshot::Sender<Result<RegisterReply, Status>>,
    },
    OpenAssignments {
        node_id: String,
        session: u64,
        reply: oneshot::Sender<Result<mpsc::UnboundedReceiver<Result<Assignment, Status>>, Status>>,
    },
    Heartbeat {
        node_id: String,
        session: u64,
        reply: oneshot::Sender<Result<Arc<Liveness>, Status>>,
    },
    Report {
        reports: StatusReports,
        reply: oneshot::Sender<Result<StatusReplies, Status>>,
    },
}

/// What the provider must do after a round.
#[derive(Debug, Default)]
pub(crate) struct AutoscaleActions {
    /// Nodes to create: ID and type.
    pub(crate) create: Vec<(String, NodeType)>,
    /// Nodes to delete: ID and type name.
    pub(crate) delete: Vec<(String, String)>,
}

/// What the provider answered.
#[derive(Debug)]
pub(crate) enum AutoscaleOutcome {
    Created { node_id: String, output: String },
    CreateFailed { node_id: String, error: String, output: String },
    Deleted { node_id: String, output: String },
    DeleteFailed { node_id: String, error: String },
}
