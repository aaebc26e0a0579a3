//! What the head keeps in the store, one JSON value per object.
//!
//! A record is the object as the API shows it plus what the head needs to rebuild its place in
//! the cluster after a restart: the attempt number and the exact placement (node, instance
//! IDs, bundle). Scheduling requests are not stored in core form: they are built again from the
//! object's typed `spec` (read by the same types as the REST body, so a record can never hold
//! a value the edge would refuse) by the one build that made them at creation.

use std::collections::BTreeMap;

use berth_api::rest::{Actor, Group, Node, StringMap, Task};
use berth_store::Table;
use serde::{Deserialize, Serialize};

use berth_api::ObjectKind;

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

/// The start of an actor's or task's attempt, stored alone under the object's key in
/// [`Table::Starts`]: its agent's report changes only this much of the object, and writing
/// the whole object again for it was half of what a creation cost the store (every actor
/// is written at its creation and again at its start). A restore applies it to the object's
/// record when it names the record's attempt and the record does not show it started yet; a
/// record written later holds the start itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StartRecord {
    pub attempt: u32,
    pub at_ms: u64,
    /// The process's ID (0: unknown).
    pub pid: u32,
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

/// The table of `kind`'s records.
pub(crate) fn table(kind: ObjectKind) -> Table {
    match kind {
        ObjectKind::Actor => Table::Actors,
        ObjectKind::Task => Table::Tasks,
        ObjectKind::Group => Table::Groups,
        ObjectKind::Job => Table::Jobs,
    }
}

/// The store key of the `seq`th actor, task or group: its ID with the number zero-padded to
/// 20 digits (`actor-00000000000000000017`), so that keys sort in creation order. IDs sort as
/// text (`actor-10000` between `actor-1000` and `actor-1001`): keyed by ID, a commit's new
/// records landed in leaves all over the table, and redb rewrites every page an insert
/// touches. Measured on `berth bench api`'s batch pattern (1,000 new records and 800 rewritten
/// per commit): a third less time per redb commit alone, and 5-12 % more batched creations/s.
pub(crate) fn store_key(kind: ObjectKind, seq: u64) -> String {
    // Written digit by digit rather than with `format!`: every record of every cycle gets a
    // key, and the formatting machinery was 4 % of the owner's time in a batch (`perf`).
    let prefix = kind.prefix();
    let mut digits = [b'0'; 20];
    let mut rest = seq;
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    let mut key = String::with_capacity(prefix.len() + digits.len());
    key.push_str(prefix);
    // Every byte is an ASCII digit.
    key.extend(digits.iter().map(|&b| char::from(b)));
    key
}

/// The kind and number of a store key, and whether the key has [`store_key`]'s form; a store
/// written before that form keys its records by ID (`actor-17`), which reads the same.
pub(crate) fn parse_store_key(key: &str) -> Option<(ObjectKind, u64, bool)> {
    if let Some((kind, seq)) = ObjectKind::parse(key) {
        return Some((kind, seq, key.len() == kind.prefix().len() + 20));
    }
    ObjectKind::ALL.into_iter().find_map(|kind| {
        let digits = key.strip_prefix(kind.prefix())?;
        if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok().map(|seq| (kind, seq, true))
    })
}

/// Serializes a record (never fails for these types).
pub(crate) fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    serde_json::to_vec(record).expect("records serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_keys_sort_in_creation_order_and_read_back() {
        let keys: Vec<String> =
            [9, 10, 999, 1000, 10_000, u64::MAX].map(|n| store_key(ObjectKind::Actor, n)).into();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        assert_eq!(keys[0], "actor-00000000000000000009");
        assert_eq!(keys[5], "actor-18446744073709551615");
        for seq in [0, 1, 42, 1_000_000_007, u64::MAX / 3] {
            assert_eq!(store_key(ObjectKind::Group, seq), format!("pg-{seq:020}"));
        }
        for (kind, seq) in
            [(ObjectKind::Actor, 17), (ObjectKind::Task, 1), (ObjectKind::Group, u64::MAX)]
        {
            assert_eq!(parse_store_key(&store_key(kind, seq)), Some((kind, seq, true)));
        }
    }

    #[test]
    fn ids_read_as_keys_of_the_old_form() {
        assert_eq!(parse_store_key("actor-17"), Some((ObjectKind::Actor, 17, false)));
        assert_eq!(parse_store_key("pg-3"), Some((ObjectKind::Group, 3, false)));
        // The largest number has 20 digits and no zero to pad: one key in both forms.
        assert_eq!(
            parse_store_key("task-18446744073709551615"),
            Some((ObjectKind::Task, u64::MAX, true))
        );
        for bad in ["actor-", "actor-x", "actor-0000000000000000001", "node-1", "actor-+1"] {
            assert_eq!(parse_store_key(bad), None, "{bad}");
        }
        assert_eq!(parse_store_key("actor-99999999999999999999"), None, "beyond u64");
    }
}
