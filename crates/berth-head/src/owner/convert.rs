//! Core values as the API shows them.

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_api::rest::{self, ReasonCount, ResourceUse, StringMap, Taint};
use berth_api::spec::{ExpressionMap, Located};
use berth_core::cluster::NamedInstances;
use berth_core::pipeline::group::GroupDiagnosis;
use berth_core::{Allocation, Cluster, Diagnosis, NodeIndex, ReasonKind, ResourceSet};

/// The ID of the node at `index` (empty if it was removed, which callers never ask).
pub(crate) fn node_id(cluster: &Cluster, index: NodeIndex) -> Arc<str> {
    cluster.node(index).map(|n| n.id().shared()).unwrap_or_else(|| Arc::from(""))
}

/// Resource name to amount.
pub(crate) fn resource_map(cluster: &Cluster, set: &ResourceSet) -> StringMap {
    let registry = cluster.registry();
    set.iter().map(|(id, q)| (registry.name(id).to_string(), q.to_string())).collect()
}

/// What a request asks for, by name: `set` and the resources no node has (yet), so the
/// waiting list and autoscaler demand show the whole shape.
pub(crate) fn asked_map(
    cluster: &Cluster,
    set: &ResourceSet,
    unknown: Option<&berth_core::UnknownResources>,
) -> StringMap {
    let mut map = resource_map(cluster, set);
    for (name, amount) in unknown.into_iter().flat_map(|u| u.iter()) {
        map.insert(name.to_string(), amount.to_string());
    }
    map
}

/// Instance IDs per unit-instance resource of an allocation.
pub(crate) fn instances(cluster: &Cluster, allocation: &Allocation) -> BTreeMap<String, Vec<u32>> {
    let registry = cluster.registry();
    allocation
        .instances()
        .filter(|(_, ids)| !ids.is_empty())
        .map(|(id, ids)| (registry.name(id).to_string(), ids))
        .collect()
}

/// `GPU [0, 1]`, for history entries.
pub(crate) fn instances_text(instances: &BTreeMap<String, Vec<u32>>) -> String {
    instances.iter().map(|(name, ids)| format!("{name} {ids:?}")).collect::<Vec<_>>().join(", ")
}

/// Stored instance IDs back in core form (names interned).
pub(crate) fn named_instances(
    cluster: &mut Cluster,
    instances: &BTreeMap<String, Vec<u32>>,
) -> Result<NamedInstances, String> {
    instances
        .iter()
        .map(|(name, ids)| {
            let id = cluster.registry_mut().intern(name).map_err(|e| e.to_string())?;
            Ok((id, ids.clone()))
        })
        .collect()
}

/// A selector or tolerations map of a body (key to expression text).
pub(crate) fn string_map(value: Option<&Located<ExpressionMap>>) -> StringMap {
    let pairs = value.into_iter().flat_map(|map| map.value.pairs());
    pairs.map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn reasons(cluster: &Cluster, totals: Vec<(ReasonKind, u64)>) -> Vec<ReasonCount> {
    let mut out: Vec<ReasonCount> = totals
        .into_iter()
        .map(|(kind, count)| ReasonCount {
            code: kind.code(cluster),
            text: kind.describe(cluster),
            count,
        })
        .collect();
    out.sort_by(|a, b| b.count.cmp(&a.count).then(a.code.cmp(&b.code)));
    out
}

/// A request's diagnosis.
pub(crate) fn diagnosis(
    cluster: &Cluster,
    d: &Diagnosis,
    infeasible: bool,
    request: &berth_core::Request,
) -> rest::Diagnosis {
    rest::Diagnosis {
        infeasible,
        summary: d.describe(cluster),
        reasons: reasons(cluster, d.totals()),
        hints: berth_core::hints::request_hints(cluster, request),
    }
}

/// A group's diagnosis: the reasons of every bundle that found no node, summed.
pub(crate) fn group_diagnosis(
    cluster: &Cluster,
    d: &GroupDiagnosis,
    infeasible: bool,
    spec: &berth_core::placement_group::GroupSpec,
) -> rest::Diagnosis {
    let mut totals: Vec<(ReasonKind, u64)> = Vec::new();
    for alternative in &d.alternatives {
        for (_, attempt) in &alternative.failed {
            for (kind, n) in &attempt.rejected {
                match totals.iter_mut().find(|(k, _)| k == kind) {
                    Some((_, total)) => *total += n,
                    None => totals.push((*kind, *n)),
                }
            }
        }
    }
    rest::Diagnosis {
        infeasible,
        summary: d.describe(cluster),
        reasons: reasons(cluster, totals),
        hints: berth_core::hints::group_hints(cluster, spec),
    }
}

/// The API's picture of a node: the core's ledger plus what only the head knows. The labels
/// are `previous`'s (the version shown now) while they are the same: a node gets a new
/// version whenever work comes or goes, and the watch log keeps many.
pub(crate) fn node(
    cluster: &Cluster,
    index: NodeIndex,
    base: &rest::Node,
    previous: Option<&rest::Node>,
    actors: u64,
    tasks: u64,
) -> rest::Node {
    let mut out = base.clone();
    out.actors = actors;
    out.tasks = tasks;
    let Some(node) = cluster.node(index) else { return out };
    // Suspect is the heartbeat clock's word, never stored: the record keeps the state the node
    // returns to (alive or draining) when it is heard from again.
    if node.state() == berth_core::NodeState::Suspect {
        out.state = rest::NodeState::Suspect;
    }
    let labels = node.labels();
    let same = |shown: &StringMap| {
        shown.len() == labels.len()
            && shown.iter().zip(labels.iter()).all(|((k, v), (key, value))| k == key && v == value)
    };
    out.labels = match previous {
        Some(previous) if same(&previous.labels) => previous.labels.clone(),
        _ => Arc::new(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
    };
    out.taints = node
        .taints()
        .iter()
        .map(|t| {
            let taint = cluster.taint(*t);
            Taint { key: taint.key.clone(), value: taint.value.clone() }
        })
        .collect();
    let registry = cluster.registry();
    // A dead node's ledger keeps what was reserved when it died; nothing runs there now.
    let dead = node.state() == berth_core::NodeState::Dead;
    out.resources = node
        .total()
        .iter()
        .map(|(id, total)| {
            let free = if dead { total } else { node.available().get(id) };
            (registry.shared_name(id), ResourceUse::new(total, free))
        })
        .collect();
    out
}
