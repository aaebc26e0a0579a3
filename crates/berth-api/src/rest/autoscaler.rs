//! The autoscaler's answers: `GET /api/v1/autoscaler` and `POST /api/v1/autoscaler/plan`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::StringMap;

/// `GET /api/v1/autoscaler`: the node types, the autoscaled nodes, the last plan and the last
/// decisions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AutoscalerStatus {
    /// False when the head runs without `--autoscaler` (everything else is then empty).
    pub enabled: bool,
    /// `local` or `command`.
    pub provider: String,
    /// Autoscaled nodes at most, all types together.
    pub max_nodes: u32,
    /// Seconds a node stays idle before it is removed.
    pub idle_timeout_s: f64,
    /// Launching may run ahead of the alive autoscaled nodes by this factor (at least 5).
    pub upscaling_speed: f64,
    /// Seconds a launched node has to register.
    pub launch_timeout_s: f64,
    /// The node types, with their nodes counted.
    pub node_types: Vec<NodeTypeStatus>,
    /// The autoscaled nodes the head knows, by ID.
    pub nodes: Vec<AutoscaledNode>,
    /// The last plan made (each round plans again).
    pub last_plan: Option<AutoscalerPlan>,
    /// The latest decisions (launches, failures, removals), newest last; at most 50.
    pub decisions: Vec<AutoscalerDecision>,
    /// Counters since the head started: `launched`, `registered`, `failed`, `given_up`,
    /// `removed`.
    pub counters: BTreeMap<String, u64>,
}

/// One node type and its nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeTypeStatus {
    /// Its name (the label `berth.io/node-group` of its nodes).
    pub name: String,
    /// Its resources.
    pub resources: StringMap,
    /// Its user labels.
    pub labels: StringMap,
    /// Its taints.
    pub taints: StringMap,
    /// Kept at least.
    pub min_nodes: u32,
    /// Launched at most.
    pub max_nodes: u32,
    /// Registered and alive.
    pub alive: u32,
    /// Launched, not registered yet.
    pub launching: u32,
    /// Alive with nothing on them.
    pub idle: u32,
}

/// An autoscaled node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AutoscaledNode {
    /// Its ID.
    pub node_id: String,
    /// Its type.
    pub node_type: String,
    /// `launching`, `alive`, `idle` or `removing`.
    pub state: String,
    /// When it was launched.
    pub launched_at_ms: u64,
    /// Since when it has been idle, if it is.
    pub idle_since_ms: Option<u64>,
    /// The provider's last output for it (its last 2 KiB).
    pub output: String,
}

/// A plan: what would be launched, and per waiting item why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AutoscalerPlan {
    /// When it was made.
    pub at_ms: u64,
    /// Nodes to launch, by type.
    pub launch: BTreeMap<String, u32>,
    /// Planned beyond `upscaling_speed`, by type: launched in a later round if still needed.
    pub deferred: BTreeMap<String, u32>,
    /// Per waiting item (at most 200), oldest first.
    pub items: Vec<PlanItem>,
    /// Waiting items in all.
    pub items_total: u64,
}

/// What the plan says about one waiting item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PlanItem {
    /// The actor, task or placement group ID.
    pub id: String,
    /// `fits` (a node it has or is launching), `launch` (new nodes planned), `limited` (a
    /// type would take it, a limit stops it), `unservable` (no type ever could), `not_nodes`
    /// (it waits for something nodes cannot give).
    pub verdict: String,
    /// The node type (`launch`, `limited`) or node (`fits`).
    pub target: Option<String>,
    /// New nodes it needed (`launch`).
    pub nodes: Option<u32>,
    /// Why, in words: the limit, or per type why it refuses (`gpu: untolerated taint …`).
    pub detail: Vec<String>,
}

/// One thing the autoscaler did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AutoscalerDecision {
    /// When.
    pub at_ms: u64,
    /// `launch`, `registered`, `launch_failed`, `given_up`, `remove`, `removed`,
    /// `remove_failed`, `lost`.
    pub action: String,
    /// The node.
    pub node_id: String,
    /// Its type.
    pub node_type: String,
    /// Why, or what the provider said.
    pub reason: String,
}
