//! What the head keeps in the store, one JSON value per object.
//!
//! A record is the object as the API shows it plus what the head needs to rebuild its place in
//! the cluster after a restart: the attempt number and the exact placement (node, instance
//! IDs, bundle). Scheduling requests are not stored in core form: they are rebuilt from the
//! object's `spec` through the same parse as the REST body, so a record can never hold a
//! request the edge would refuse.

use std::collections::BTreeMap;

use berth_api::rest::{Actor, Group, Node, StringMap, Task};
use serde::{Deserialize, Serialize};

/// Where one attempt was placed. Read back as owned values; written from borrows
/// (`Placement<&str, &BTreeMap<…>>`, the same JSON): the owner does not keep it, it derives it
/// from the attempt's allocation and the API object when it writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Placement<S = String, M = BTreeMap<String, Vec<u32>>> {
    /// The node.
    pub node_id: S,
    /// Instance IDs per unit-instance resource.
    pub instances: M,
    /// The group and bundle it took from, when placed into a bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<(S, usize)>,
    /// True once the agent reported the attempt started.
    pub started: bool,
}

/// A placement as written.
pub(crate) type PlacementRef<'a> = Placement<&'a str, &'a BTreeMap<String, Vec<u32>>>;

/// A stored actor. Read back as owned values; written from borrows (`ActorRecord<&Actor,
/// Option<&Placement>>`, the same JSON), so a write copies nothing before encoding.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ActorRecord<A = Actor, P = Option<Placement>> {
    pub actor: A,
    pub attempt: u32,
    pub placement: P,
}

/// A stored task (read and written as [`ActorRecord`] is).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct TaskRecord<T = Task, P = Option<Placement>> {
    pub task: T,
    pub attempt: u32,
    pub placement: P,
}

/// A stored placement group: the API object and, when reserved, each bundle's instances.
/// Written from borrows, as [`ActorRecord`] is.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct GroupRecord<G = Group, B = Vec<BTreeMap<String, Vec<u32>>>> {
    pub group: G,
    /// Per bundle, its instance IDs per unit-instance resource (empty while not reserved).
    pub bundle_instances: B,
}

/// A stored node: what it registered with (the core's inputs) and its state.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct NodeRecord {
    pub node: Node,
    /// Resource totals now (as registered, then as changed at run time), name to quantity
    /// text.
    pub resources: StringMap,
    /// The totals the agent reported when it last registered: a later registration changes
    /// only what differs from these, so run-time changes of other resources stay. Absent in
    /// records written before it existed: `resources` stands in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<StringMap>,
    /// The user's labels (without the `berth.io/` defaults).
    pub user_labels: StringMap,
    /// The facts behind the default labels.
    pub facts: StringMap,
    /// User taints (static and added through the API), `key=value`.
    pub taints: Vec<(String, String)>,
}

impl NodeRecord {
    /// The facts behind the node's default labels, as the core takes them.
    pub(crate) fn node_facts(&self) -> berth_core::labels::NodeFacts {
        let fact = |key: &str| self.facts.get(key).cloned();
        berth_core::labels::NodeFacts {
            accelerator_type: fact("accelerator-type"),
            market_type: fact("market-type"),
            node_group: fact("node-group"),
            availability_zone: fact("availability-zone"),
            availability_region: fact("region").or_else(|| fact("availability-region")),
        }
    }
}

/// Serializes a record (never fails for these types).
pub(crate) fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    serde_json::to_vec(record).expect("records serialize")
}
