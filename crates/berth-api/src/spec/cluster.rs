//! Building the cluster file: nodes, allocations, rare resources, the scheduler settings.

use super::label_maps::{label_error_text, ByLabelKey, FactValue};
use super::located::{At, Located};
use super::parsed::{
    AllocationEntry, ClusterFile, InstanceMap, NodeEntry, ResourceMap, ResourceName,
    SchedulerSection, INSTANCES_KEY, RESOURCES_KEY,
};
use super::source::{core_path, under, Source};
use super::{FileKind, InputError};
use berth_core::cluster::NodeSpec;
use berth_core::labels::NodeFacts;
use berth_core::labels::{LabelError, Labels};
use berth_core::taints::rare_taint_key;
use berth_core::{
    labels, Allocation, Cluster, ClusterError, ConfigError, InstanceId, NodeError, NodeIndex,
    NodeState, Reason, Request, ResourceId, ResourceRegistry, ResourceSet, SchedulerConfig,
    Strategy, UnknownResources,
};
use std::collections::HashMap;
use std::path::Path;

/// A loaded cluster file: the cluster and the scheduler settings.
#[derive(Debug)]
pub struct ClusterSnapshot {
    /// The nodes, their states and ledgers with the file's allocations reserved.
    pub cluster: Cluster,
    /// The validated DEFAULT-strategy settings.
    pub config: SchedulerConfig,
}

/// Reads, parses and builds the cluster file at `path`.
pub fn load_cluster(path: &Path) -> Result<ClusterSnapshot, InputError> {
    build_cluster(&Source::read(FileKind::Cluster, path)?)
}

/// Parses and builds the cluster file `source`.
pub(super) fn build_cluster(source: &Source) -> Result<ClusterSnapshot, InputError> {
    let file: ClusterFile = source.parse()?;
    let config = scheduler_config(source, file.scheduler)?;
    let registry = match &file.unit_instance_resources {
        // The core's default: GPU.
        None => ResourceRegistry::default(),
        Some(names) => ResourceRegistry::with_unit_instance(names.iter().map(|n| n.0.as_str()))
            .map_err(|err| source.invalid("unit_instance_resources", err.to_string(), None))?,
    };
    let mut cluster = Cluster::new(registry);
    // First index of each ID, to name it when a later node repeats it.
    let mut first: HashMap<&str, (usize, u64)> = HashMap::new();
    for (i, node) in file.nodes.iter().enumerate() {
        let id = node.id.value.as_str();
        if let Some((j, line)) = first.get(id) {
            return Err(source.invalid(
                format!("nodes[{i}].id"),
                format!("node ID {id} is already used by nodes[{j}] (line {line})"),
                Some(node.id.referenced),
            ));
        }
        first.insert(id, (i, node.id.referenced.line()));
        add_node(source, &mut cluster, i, node)?;
    }
    rare_resources(source, &mut cluster, &file.rare_resources)?;
    // Actors and bundles are placed before the nodes' states are applied, as allocations
    // are, so that draining nodes can hold them (dead ones cannot: they are errors).
    let states: HashMap<&str, NodeState> = file
        .nodes
        .iter()
        .map(|node| (node.id.value.as_str(), node.state.unwrap_or(NodeState::Alive)))
        .collect();
    super::actors::place_actors(source, &mut cluster, &file.actors, &states)?;
    super::groups::reserve_groups(source, &mut cluster, &file.placement_groups, &states)?;
    for (i, node) in file.nodes.iter().enumerate() {
        set_state(source, &mut cluster, i, node)?;
    }
    Ok(ClusterSnapshot { cluster, config })
}

/// `rare_resources:`: interns the names and taints every node that has one (the core re-taints
/// the nodes added so far). Two names whose taint keys would be the same are an error: a
/// request asking for one would tolerate the other's taint.
pub(super) fn rare_resources(
    source: &Source,
    cluster: &mut Cluster,
    names: &[Located<ResourceName>],
) -> Result<(), InputError> {
    let mut ids: Vec<ResourceId> = Vec::new();
    let mut keys: Vec<String> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let field = format!("rare_resources[{i}]");
        let id = cluster
            .registry_mut()
            .intern(&name.value.0)
            .map_err(|err| source.invalid(&field, err.to_string(), Some(name.referenced)))?;
        let key = rare_taint_key(&name.value.0);
        if let Some(j) = ids.iter().position(|&other| other == id) {
            return Err(source.invalid(
                field,
                format!("{} is already listed at rare_resources[{j}]", name.value.0),
                Some(name.referenced),
            ));
        }
        if let Some(j) = keys.iter().position(|other| *other == key) {
            return Err(source.invalid(
                field,
                format!(
                    "{} would get the taint key {key}, as rare_resources[{j}] ({}) does \
                     (names that differ only in '/' and ':', or after their 58th character, \
                     get the same key)",
                    name.value.0, names[j].value.0
                ),
                Some(name.referenced),
            ));
        }
        ids.push(id);
        keys.push(key);
    }
    cluster.set_rare_resources(&ids);
    Ok(())
}

/// `scheduler:` over the core's defaults, validated by the core.
pub(super) fn scheduler_config(
    source: &Source,
    section: Option<SchedulerSection>,
) -> Result<SchedulerConfig, InputError> {
    let mut config = SchedulerConfig::default();
    let Some(section) = section else {
        return Ok(config);
    };
    if let Some(value) = &section.spread_threshold {
        config.spread_threshold = value.value;
    }
    if let Some(value) = &section.top_k_fraction {
        config.top_k_fraction = value.value;
    }
    if let Some(value) = section.avoid_gpu_nodes {
        config.avoid_gpu_nodes = value;
    }
    config.validate().map_err(|err| {
        let value = match err {
            ConfigError::SpreadThreshold(_) => &section.spread_threshold,
            ConfigError::TopKFraction(_) => &section.top_k_fraction,
        };
        // The core's path starts at the top of the cluster file (`scheduler.spread_threshold`).
        source.invalid(
            core_path(err.field(), str::to_string),
            err.rule(),
            value.as_ref().map(|v| v.referenced),
        )
    })?;
    Ok(config)
}

/// Adds node `i` and reserves its allocations in order; its state is set later, by
/// [`set_state`] (reservations need a live node).
pub(super) fn add_node(
    source: &Source,
    cluster: &mut Cluster,
    i: usize,
    node: &NodeEntry,
) -> Result<(), InputError> {
    let field = format!("nodes[{i}]");
    let total = resource_set(
        source,
        cluster,
        &node.resources.value,
        &under(&field, "resources"),
        node.resources.referenced,
    )?;
    let spec = node_spec(source, node, &field, total)?;
    let index = cluster.add_node_with(spec).map_err(|err| match &err {
        ClusterError::Node(err) => {
            let location = match err {
                NodeError::InvalidId(_) => node.id.referenced,
                NodeError::BadInstanceTotal { .. } => node.resources.referenced,
            };
            source.invalid(
                core_path(&err.field(), |section| under(&field, section)),
                err.rule(),
                Some(location),
            )
        }
        // Checked while parsing already; kept for rules the core may add.
        ClusterError::Label(err) => {
            let (path, location) = label_error_field(node, &field, err);
            source.invalid(path, label_error_text("label", err), location)
        }
        _ => source.invalid(field.clone(), err.to_string(), Some(node.id.referenced)),
    })?;
    for (j, allocation) in node.allocations.iter().enumerate() {
        reserve(source, cluster, index, allocation, &format!("{field}.allocations[{j}]"))?;
    }
    Ok(())
}

/// Sets the state of node `i` as the file gives it.
pub(super) fn set_state(
    source: &Source,
    cluster: &mut Cluster,
    i: usize,
    node: &NodeEntry,
) -> Result<(), InputError> {
    let state = node.state.unwrap_or(NodeState::Alive);
    let index = cluster.index_of(node.id.value.as_str());
    if let (Some(index), true) = (index, state != NodeState::Alive) {
        cluster
            .set_state(index, state)
            .map_err(|err| source.invalid(format!("nodes[{i}].state"), err.to_string(), None))?;
    }
    Ok(())
}

/// The node facts of the cluster file: field name, default label, value.
pub(super) fn node_facts(
    node: &NodeEntry,
) -> [(&'static str, &'static str, Option<&Located<FactValue>>); 5] {
    [
        ("accelerator_type", labels::ACCELERATOR_TYPE, node.accelerator_type.as_ref()),
        ("market_type", labels::MARKET_TYPE, node.market_type.as_ref()),
        ("node_group", labels::NODE_GROUP, node.node_group.as_ref()),
        ("availability_zone", labels::AVAILABILITY_ZONE, node.availability_zone.as_ref()),
        ("availability_region", labels::AVAILABILITY_REGION, node.availability_region.as_ref()),
    ]
}

/// The node's registration: its resources, user labels, facts and taints. Keys and values were
/// checked while parsing; what is left is a fact and a user label that say different things
/// about the same default label.
pub(super) fn node_spec(
    source: &Source,
    node: &NodeEntry,
    field: &str,
    total: ResourceSet,
) -> Result<NodeSpec, InputError> {
    let labels_field = under(field, "labels");
    let user = match &node.labels {
        None => Labels::new(),
        Some(map) => Labels::from_pairs(map.value.pairs()).map_err(|err| {
            let (path, location) = label_error_field(node, field, &err);
            source.invalid(path, label_error_text("label", &err), location)
        })?,
    };
    for (name, key, fact) in node_facts(node) {
        let (Some(fact), Some(label)) = (fact, user.get(key)) else { continue };
        if fact.value.0 != label {
            return Err(source.invalid(
                under(&labels_field, key),
                format!(
                    "{label:?} contradicts {name}: {:?}, which sets this label too; give it once",
                    fact.value.0
                ),
                node.labels.as_ref().map(|map| map.referenced),
            ));
        }
    }
    let fact = |value: Option<&Located<FactValue>>| value.map(|v| v.value.0.clone());
    let facts = NodeFacts {
        accelerator_type: fact(node.accelerator_type.as_ref()),
        market_type: fact(node.market_type.as_ref()),
        node_group: fact(node.node_group.as_ref()),
        availability_zone: fact(node.availability_zone.as_ref()),
        availability_region: fact(node.availability_region.as_ref()),
    };
    let taints = node.taints.as_ref().map_or_else(Vec::new, |map| {
        map.value.pairs().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    });
    Ok(NodeSpec { id: node.id.value.clone(), total, labels: user, facts, taints })
}

/// Where in node entry `node` (at `field`) the label or taint of a [`LabelError`] is: a user
/// label, a taint, or the fact behind a default label.
pub(super) fn label_error_field(
    node: &NodeEntry,
    field: &str,
    err: &LabelError,
) -> (String, Option<At>) {
    let key = match err {
        LabelError::Key { key, .. } | LabelError::Value { key, .. } => key.as_str(),
        LabelError::ReservedNodeId => labels::NODE_ID,
        LabelError::NotKeyValue(_) | LabelError::Duplicate(_) => "",
    };
    fn in_map<T>(
        map: Option<&Located<ByLabelKey<T>>>,
        key: &str,
        section: String,
    ) -> Option<(String, Option<At>)> {
        let map = map?;
        let found = map.value.pairs().any(|(k, _)| k == key);
        found.then(|| (under(&section, key), Some(map.referenced)))
    }
    in_map(node.labels.as_ref(), key, under(field, "labels"))
        .or_else(|| in_map(node.taints.as_ref(), key, under(field, "taints")))
        .or_else(|| {
            node_facts(node)
                .into_iter()
                .find(|(_, label, _)| *label == key)
                .and_then(|(name, _, fact)| fact.map(|f| (under(field, name), Some(f.referenced))))
        })
        .unwrap_or_else(|| (field.to_string(), None))
}

/// Reserves one allocation of the cluster file on node `index`, or says why it cannot be.
pub(super) fn reserve(
    source: &Source,
    cluster: &mut Cluster,
    index: NodeIndex,
    allocation: &Located<AllocationEntry>,
    field: &str,
) -> Result<(), InputError> {
    let location = allocation.referenced;
    // Where the amounts are: the entry itself, or its `resources`. `exact` is `Some` for the
    // long form, with the named instances when given.
    let reservation = match &allocation.value {
        AllocationEntry::Amounts(map) => Reservation {
            field,
            location,
            amounts: map,
            amounts_field: field.to_string(),
            amounts_location: location,
            exact: None,
            before: "the allocations listed before it",
        },
        AllocationEntry::Placed { resources, instances } => Reservation {
            field,
            location,
            amounts: &resources.value,
            amounts_field: under(field, RESOURCES_KEY),
            amounts_location: resources.referenced,
            exact: Some(instances.as_ref()),
            before: "the allocations listed before it",
        },
    };
    reserve_on(source, cluster, index, reservation).map(drop)
}

/// Something the cluster file says a node holds: an allocation, an actor's resources, a
/// placement group's bundle.
pub(super) struct Reservation<'a> {
    /// Its path, for "does not fit".
    pub(super) field: &'a str,
    pub(super) location: At,
    pub(super) amounts: &'a ResourceMap,
    /// The path of the amounts (`field`, or `field.resources`).
    pub(super) amounts_field: String,
    pub(super) amounts_location: At,
    /// `None`: the scheduler's rules choose the instances; `Some`: exactly those named (none
    /// named, `Some(None)`, is only right without unit-instance resources).
    pub(super) exact: Option<Option<&'a Located<InstanceMap>>>,
    /// What was reserved on the node before it, for the "does not fit" message.
    pub(super) before: &'static str,
}

/// Reserves `r` on node `index`, or says why it cannot be.
pub(super) fn reserve_on(
    source: &Source,
    cluster: &mut Cluster,
    index: NodeIndex,
    r: Reservation<'_>,
) -> Result<Allocation, InputError> {
    let Reservation { field, location, amounts, amounts_field, amounts_location, exact, before } =
        r;
    let set = resource_set(source, cluster, amounts, &amounts_field, amounts_location)?;
    // Running work obeys the request rules: the instance pool only accounts a unit-instance
    // amount that is below 1 or whole, and the cluster's reservations do not check it. The
    // core names the field within a request, whose `resources` are the amounts here.
    Request::new(set.clone(), Strategy::Default, cluster.registry()).map_err(|err| {
        let path = core_path(&err.field(), |section| {
            if section == RESOURCES_KEY {
                amounts_field.clone()
            } else {
                under(field, section)
            }
        });
        source.invalid(path, err.rule(), Some(amounts_location))
    })?;
    let reserved = match exact {
        None => cluster.reserve(index, &set),
        Some(instances) => {
            let named = match instances {
                Some(map) => instance_list(source, cluster, map, &under(field, INSTANCES_KEY))?,
                None => Vec::new(),
            };
            cluster.reserve_instances(index, &set, &named)
        }
    };
    reserved.map_err(|err| match err {
        ClusterError::Insufficient { node, reason, detail } => {
            let after = if matches!(reason, Reason::InsufficientTotal(_)) {
                String::new()
            } else {
                format!(" after {before}")
            };
            source.invalid(
                field,
                format!("does not fit on node {node}{after}: {detail}"),
                Some(location),
            )
        }
        ClusterError::Instances { node, resource, detail } => {
            let instances_location =
                exact.flatten().map_or(location, |instances| instances.referenced);
            source.invalid(
                under(&under(field, INSTANCES_KEY), &resource),
                format!("on node {node}: {detail}"),
                Some(instances_location),
            )
        }
        err => source.invalid(field, err.to_string(), Some(location)),
    })
}

/// Interns `name` in the cluster's registry; `field` is the name's path in the file.
pub(super) fn intern(
    source: &Source,
    cluster: &mut Cluster,
    name: &ResourceName,
    field: &str,
    location: At,
) -> Result<ResourceId, InputError> {
    cluster
        .registry_mut()
        .intern(&name.0)
        .map_err(|err| source.invalid(under(field, &name.0), err.to_string(), Some(location)))
}

/// Interns the names of `map`, found at `field`, and collects the amounts.
pub(super) fn resource_set(
    source: &Source,
    cluster: &mut Cluster,
    map: &ResourceMap,
    field: &str,
    location: At,
) -> Result<ResourceSet, InputError> {
    let mut set = ResourceSet::new();
    for (name, amount) in &map.0 {
        set.set(intern(source, cluster, name, field, location)?, *amount);
    }
    Ok(set)
}

/// The amounts a request asks for in `map` (found at `field`): names the cluster's registry
/// knows go into the set, valid names no node has into the unknowns (the request is then
/// infeasible with that reason), so that asking never grows the registry.
pub(super) fn request_amounts(
    source: &Source,
    cluster: &Cluster,
    map: &ResourceMap,
    field: &str,
    location: At,
) -> Result<(ResourceSet, UnknownResources), InputError> {
    let mut set = ResourceSet::new();
    let mut unknown = UnknownResources::default();
    for (name, amount) in &map.0 {
        let known = cluster.registry().lookup_checked(&name.0).map_err(|err| {
            source.invalid(under(field, &name.0), err.to_string(), Some(location))
        })?;
        match known {
            Some(id) => set.set(id, *amount),
            None => unknown.push(name.0.clone(), *amount),
        }
    }
    Ok((set, unknown))
}

/// Interns the names of `map`, found at `field`, and collects the instance IDs.
pub(super) fn instance_list(
    source: &Source,
    cluster: &mut Cluster,
    map: &Located<InstanceMap>,
    field: &str,
) -> Result<Vec<(ResourceId, Vec<InstanceId>)>, InputError> {
    map.value
        .0
        .iter()
        .map(|(name, ids)| {
            let id = intern(source, cluster, name, field, map.referenced)?;
            Ok((id, ids.0.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::test_support::source;
    use berth_core::Quantity;

    fn build(text: &str) -> Result<ClusterSnapshot, String> {
        build_cluster(&source(FileKind::Cluster, text)).map_err(|e| e.to_string())
    }

    #[test]
    fn nodes_get_their_resources_labels_taints_and_allocations() {
        let snapshot = build(
            "nodes:\n  - id: g\n    resources: {CPU: 8, GPU: 2}\n    labels: {zone: a}\n    \
             taints: {dedicated: ml}\n    accelerator_type: nvidia-a100\n    allocations:\n      \
             - {CPU: 2, GPU: 1}\nrare_resources: [GPU]\n",
        )
        .unwrap();
        let cluster = &snapshot.cluster;
        let node = cluster.node(cluster.index_of("g").unwrap()).unwrap();
        assert_eq!(node.labels().get("zone"), Some("a"));
        assert_eq!(node.labels().get("berth.io/accelerator-type"), Some("nvidia-a100"));
        assert_eq!(node.taints().len(), 2, "dedicated=ml and the rare-GPU taint");
        assert_eq!(node.available().get(berth_core::ResourceId::GPU), Quantity::ONE);
    }

    #[test]
    fn each_rule_names_its_field() {
        for (text, expected) in [
            ("nodes:\n  - {id: a, resources: {CPU: 1}}\n  - {id: a, resources: {CPU: 1}}\n", "nodes[1].id: node ID a is already used by nodes[0]"),
            ("nodes:\n  - {id: a, resources: {GPU: 1.5}}\n", "nodes[0].resources.GPU"),
            ("nodes:\n  - {id: a, resources: {CPU: 1}, allocations: [{CPU: 2}]}\n", "nodes[0].allocations[0]"),
            ("nodes:\n  - {id: a, resources: {CPU: 1}, labels: {berth.io/accelerator-type: x}, accelerator_type: y}\n", "contradicts accelerator_type"),
        ] {
            let err = build(text).expect_err(text);
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}
