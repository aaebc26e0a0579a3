//! Placement groups in the input files: a group to place (`placement_group:` of a request
//! file), groups already reserved (`placement_groups:` of the cluster file), and the
//! `PLACEMENT_GROUP` strategy's group ID.
//!
//! The group's own rules (bundles present and not empty, one selector per bundle, GPU amounts
//! below 1 or whole) are the core's, [`GroupSpec::validate`], whose errors name a path within
//! the group (`fallback_strategy[0].bundles[1].GPU`); the file's path of the group goes in
//! front.

use std::collections::HashMap;

use super::{At, Located};
use berth_core::labels::LabelError;
use berth_core::placement_group::{BundleSet, GroupError, GroupId, GroupSpec, GroupStrategy};
use berth_core::selector::Tolerations;
use berth_core::{Allocation, Cluster, NodeId, NodeIndex, NodeState};
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

use super::actors::NamespaceText;
use super::cluster::{request_amounts, reserve_on, Reservation};
use super::label_maps::{ExpressionMap, StringOnly};
use super::parsed::{InstanceMap, ResourceMap};
use super::placement::PlacementGroupSpec;
use super::request::selector;
use super::source::{under, Source};
use super::InputError;

/// A placement group's ID: the syntax of a label value, not empty.
#[derive(Debug)]
pub(super) struct GroupIdText(pub(super) GroupId);

impl<'de> Deserialize<'de> for GroupIdText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<GroupIdText, D::Error> {
        let text = deserializer.deserialize_any(StringOnly("a placement group ID"))?;
        GroupId::new(&text).map(GroupIdText).map_err(|err| match err {
            LabelError::Value { value, rule, .. } => {
                de::Error::custom(format!("placement group ID {value:?} is invalid: {rule}"))
            }
            err => de::Error::custom(err),
        })
    }
}

/// PLACEMENT_GROUP's `bundle`: a bundle index, a whole number from 0.
#[derive(Debug)]
pub(super) struct BundleIndex(pub(super) usize);

impl<'de> Deserialize<'de> for BundleIndex {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<BundleIndex, D::Error> {
        struct IndexVisitor;
        impl de::Visitor<'_> for IndexVisitor {
            type Value = BundleIndex;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a bundle index: a whole number from 0, such as 0 for the first bundle")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<BundleIndex, E> {
                usize::try_from(v)
                    .map(BundleIndex)
                    .map_err(|_| E::custom(format!("{v} is too large for a bundle index")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<BundleIndex, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!("{v} is negative; bundles count from 0"))),
                }
            }
        }
        deserializer.deserialize_any(IndexVisitor)
    }
}

/// `strategy:` of a group: `PACK`, `SPREAD`, `STRICT_PACK`, `STRICT_SPREAD`, any case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupStrategyName(pub(super) GroupStrategy);

impl Serialize for GroupStrategyName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.name())
    }
}

impl<'de> Deserialize<'de> for GroupStrategyName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<GroupStrategyName, D::Error> {
        let text = deserializer.deserialize_any(StringOnly("a placement group strategy"))?;
        GroupStrategy::parse(&text).map(GroupStrategyName).ok_or_else(|| {
            de::Error::custom(format!(
                "unknown placement group strategy {text:?}; use PACK, SPREAD, STRICT_PACK or \
                 STRICT_SPREAD"
            ))
        })
    }
}

/// Free text (a group's `name`).
#[derive(Debug)]
struct Text(String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Text, D::Error> {
        deserializer.deserialize_any(StringOnly("a name")).map(Text)
    }
}

/// One selector per bundle, in bundle order.
pub type SelectorList = Located<Vec<Located<ExpressionMap>>>;

/// `placement_group:` of a request file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GroupSection {
    /// Located for "already reserved".
    id: Located<GroupIdText>,
    #[serde(default)]
    name: Option<Text>,
    #[serde(default)]
    namespace: Option<NamespaceText>,
    #[serde(default)]
    strategy: Option<GroupStrategyName>,
    /// Each bundle a resource map. Located (the list and each bundle) for the core's rules.
    bundles: Located<Vec<Located<ResourceMap>>>,
    #[serde(default)]
    bundle_label_selector: Option<SelectorList>,
    /// For every bundle of every alternative. Located for [`super::field_path`].
    #[serde(default)]
    tolerations: Option<Located<ExpressionMap>>,
    /// Alternatives tried in order when the bundles cannot be reserved now.
    #[serde(default)]
    fallback_strategy: Vec<Located<GroupFallback>>,
}

impl GroupSection {
    /// The group's placement, as a body gives it.
    fn spec(&self) -> PlacementGroupSpec {
        PlacementGroupSpec {
            strategy: self.strategy,
            bundles: self.bundles.clone(),
            bundle_label_selector: self.bundle_label_selector.clone(),
            tolerations: self.tolerations.clone(),
            fallback_strategy: self.fallback_strategy.clone(),
        }
    }
}

/// One entry of a group's `fallback_strategy`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupFallback {
    /// Resource maps, one per bundle.
    #[schema(value_type = Vec<super::schema::Resources>)]
    bundles: Located<Vec<Located<ResourceMap>>>,
    /// One selector per bundle, or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<super::schema::Selector>>)]
    bundle_label_selector: Option<SelectorList>,
}

/// One entry of `placement_groups:` in the cluster file: a group whose bundles are reserved.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReservedGroupEntry {
    /// Located for the duplicate-ID error.
    id: Located<GroupIdText>,
    #[serde(default)]
    name: Option<Text>,
    #[serde(default)]
    namespace: Option<NamespaceText>,
    #[serde(default)]
    strategy: Option<GroupStrategyName>,
    /// The bundles that were reserved, each with its node.
    bundles: Located<Vec<Located<ReservedBundle>>>,
    #[serde(default)]
    bundle_label_selector: Option<SelectorList>,
    #[serde(default)]
    tolerations: Option<Located<ExpressionMap>>,
}

/// One reserved bundle: what it holds, on which node, and optionally which instances.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReservedBundle {
    resources: Located<ResourceMap>,
    /// Located for "no such node" and the strict strategies' rules.
    node: Located<NodeId>,
    #[serde(default)]
    instances: Option<Located<InstanceMap>>,
}

// ---------------------------------------------------------------------------------------------
// Building.

/// Where a path within a group is in the file, for the core's errors: the longest known
/// prefix of the path wins.
struct Locations<L = At>(Vec<(String, L)>);

impl<L> Default for Locations<L> {
    fn default() -> Self {
        Locations(Vec::new())
    }
}

impl<L: Copy> Locations<L> {
    fn add(&mut self, path: impl Into<String>, location: L) {
        self.0.push((path.into(), location));
    }

    fn of(&self, path: &str) -> Option<L> {
        self.0
            .iter()
            .filter(|(prefix, _)| {
                path == prefix
                    || path
                        .strip_prefix(prefix.as_str())
                        .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
            })
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, location)| *location)
    }
}

/// A [`GroupError`] as (the bundle or list it is about, the resource if any, the rule).
fn error_parts(err: &GroupError) -> (String, Option<String>, String) {
    let field = err.field();
    let (field, resource) = match err {
        GroupError::FractionalInstances { resource, .. } => {
            let base = field
                .strip_suffix(resource.as_str())
                .and_then(|b| b.strip_suffix('.'))
                .unwrap_or(field);
            (base.to_string(), Some(resource.clone()))
        }
        _ => (field.to_string(), None),
    };
    (field, resource, err.rule())
}

/// The bundles of one alternative, interned, with their selectors; records where each is.
fn bundle_set(
    source: &Source,
    cluster: &Cluster,
    field: &str,
    bundles: &[(&Located<ResourceMap>, String)],
    selectors: Option<&SelectorList>,
) -> Result<BundleSet, InputError> {
    let amounts = bundles
        .iter()
        .map(|(map, path)| request_amounts(source, cluster, &map.value, path, map.referenced))
        .collect::<Result<Vec<_>, _>>()?;
    let (bundles, unknown): (Vec<_>, Vec<_>) = amounts.into_iter().unzip();
    // Empty unless some bundle names a resource no node has.
    let unknown = if unknown.iter().all(|u| u.is_empty()) { Vec::new() } else { unknown };
    let selectors = match selectors {
        None => Vec::new(),
        Some(list) => list
            .value
            .iter()
            .enumerate()
            .map(|(i, map)| selector(source, map, &format!("{field}[{i}]")))
            .collect::<Result<Vec<_>, _>>()?,
    };
    Ok(BundleSet { bundles, selectors, unknown })
}

/// The group to place, from a request file's `placement_group:`. Its ID must not be one the
/// cluster file reserved already.
pub(super) fn request_group(
    source: &Source,
    cluster: &Cluster,
    section: &Located<GroupSection>,
) -> Result<GroupSpec, InputError> {
    let group = &section.value;
    let id = group.id.value.0.clone();
    if cluster.group(id.as_str()).is_some() {
        return Err(source.invalid(
            "placement_group.id",
            format!(
                "placement group {id} is already reserved in the cluster file; give the new \
                 group another ID (or send a task into it with {{type: PLACEMENT_GROUP, group: \
                 {id}}})"
            ),
            Some(group.id.referenced),
        ));
    }
    let name = group.name.as_ref().map_or("", |n| n.0.as_str());
    let namespace = namespace(group.namespace.as_ref().map(|n| n.0.as_str()));
    let at = ("placement_group", section.referenced);
    group.spec().build(source, cluster, id, name, &namespace, at)
}

/// Builds `group` (see [`PlacementGroupSpec::build`]).
pub(super) fn build_group(
    source: &Source,
    cluster: &Cluster,
    group: &PlacementGroupSpec,
    id: GroupId,
    (name, namespace): (&str, &str),
    (top, at): (&str, At),
) -> Result<GroupSpec, InputError> {
    let join = |path: &str| if top.is_empty() { path.to_string() } else { format!("{top}.{path}") };
    let mut locations: Locations = Locations::default();
    let mut alternatives = Vec::new();
    let entries = std::iter::once((String::new(), &group.bundles, &group.bundle_label_selector))
        .chain(group.fallback_strategy.iter().enumerate().map(|(i, entry)| {
            locations.add(format!("fallback_strategy[{i}]"), entry.referenced);
            (
                format!("fallback_strategy[{i}]."),
                &entry.value.bundles,
                &entry.value.bundle_label_selector,
            )
        }))
        .collect::<Vec<_>>();
    for (prefix, bundles, selectors) in entries {
        locations.add(format!("{prefix}bundles"), bundles.referenced);
        let listed: Vec<(&Located<ResourceMap>, String)> = bundles
            .value
            .iter()
            .enumerate()
            .map(|(b, map)| {
                let path = format!("{prefix}bundles[{b}]");
                locations.add(path.clone(), map.referenced);
                (map, join(&path))
            })
            .collect();
        if let Some(list) = selectors {
            locations.add(format!("{prefix}bundle_label_selector"), list.referenced);
        }
        let field = join(&format!("{prefix}bundle_label_selector"));
        alternatives.push(bundle_set(source, cluster, &field, &listed, selectors.as_ref())?);
    }
    let tolerations = match &group.tolerations {
        None => Tolerations::default(),
        Some(map) => Tolerations(selector(source, map, &under(top, "tolerations"))?),
    };
    let spec = GroupSpec {
        id,
        name: name.to_string(),
        namespace: namespace.to_string(),
        strategy: group.group_strategy(),
        alternatives,
        tolerations,
    };
    spec.validate(cluster.registry()).map_err(|err| {
        let (base, resource, rule) = error_parts(&err);
        let location = locations.of(&base).unwrap_or(at);
        let path = join(&base);
        let path = resource.map_or(path.clone(), |r| under(&path, &r));
        source.invalid(path, rule, Some(location))
    })?;
    Ok(spec)
}

/// A namespace as given, or `default`.
pub(super) fn namespace(given: Option<&str>) -> String {
    match given {
        Some(ns) if !ns.is_empty() => ns.to_string(),
        _ => berth_core::actors::DEFAULT_NAMESPACE.to_string(),
    }
}

/// Reserves the cluster file's placement groups in order, each bundle on its node with the
/// instances named (or, without `instances`, those the scheduler's rules choose). `states` is
/// each node's state in the file.
pub(super) fn reserve_groups(
    source: &Source,
    cluster: &mut Cluster,
    entries: &[ReservedGroupEntry],
    states: &HashMap<&str, NodeState>,
) -> Result<(), InputError> {
    let mut first: HashMap<String, (usize, u64)> = HashMap::new();
    for (i, entry) in entries.iter().enumerate() {
        let top = format!("placement_groups[{i}]");
        let id = entry.id.value.0.clone();
        if let Some((j, line)) = first.get(id.as_str()) {
            return Err(source.invalid(
                under(&top, "id"),
                format!(
                    "placement group ID {id} is already used by placement_groups[{j}] (line \
                     {line})"
                ),
                Some(entry.id.referenced),
            ));
        }
        first.insert(id.to_string(), (i, entry.id.referenced.line()));
        reserve_group(source, cluster, &top, entry, states)?;
    }
    Ok(())
}

/// Reserves one group of the cluster file, found at `top`.
fn reserve_group(
    source: &Source,
    cluster: &mut Cluster,
    top: &str,
    entry: &ReservedGroupEntry,
    states: &HashMap<&str, NodeState>,
) -> Result<(), InputError> {
    let strategy = entry.strategy.as_ref().map_or(GroupStrategy::Pack, |s| s.0);
    let mut locations: Locations = Locations::default();
    locations.add("bundles", entry.bundles.referenced);
    let listed: Vec<(&Located<ResourceMap>, String)> = entry
        .bundles
        .value
        .iter()
        .enumerate()
        .map(|(b, bundle)| {
            locations.add(format!("bundles[{b}]"), bundle.value.resources.referenced);
            (&bundle.value.resources, format!("{top}.bundles[{b}].resources"))
        })
        .collect();
    if let Some(list) = &entry.bundle_label_selector {
        locations.add("bundle_label_selector", list.referenced);
    }
    let selectors = entry.bundle_label_selector.as_ref();
    let set =
        bundle_set(source, cluster, &format!("{top}.bundle_label_selector"), &listed, selectors)?;
    let tolerations = match &entry.tolerations {
        None => Tolerations::default(),
        Some(map) => Tolerations(selector(source, map, &under(top, "tolerations"))?),
    };
    let spec = GroupSpec {
        id: entry.id.value.0.clone(),
        name: entry.name.as_ref().map_or_else(String::new, |n| n.0.clone()),
        namespace: namespace(entry.namespace.as_ref().map(|n| n.0.as_str())),
        strategy,
        alternatives: vec![set],
        tolerations,
    };
    spec.validate(cluster.registry()).map_err(|err| {
        let (base, resource, rule) = error_parts(&err);
        let location = locations.of(&base).unwrap_or(entry.id.referenced);
        // A bundle's amounts are under its `resources` here.
        let path = if base.starts_with("bundles[") {
            under(&format!("{top}.{base}"), "resources")
        } else {
            format!("{top}.{base}")
        };
        let path = resource.map_or(path.clone(), |r| under(&path, &r));
        source.invalid(path, rule, Some(location))
    })?;
    let nodes = bundle_nodes(source, cluster, top, strategy, entry, states)?;
    // Each bundle is reserved as an allocation would be, which checks it fits and finds its
    // instances; then the whole plan is given back and reserved as the group, all at once.
    let mut taken: Vec<Allocation> = Vec::new();
    let mut failure = None;
    for (b, (bundle, node)) in entry.bundles.value.iter().zip(&nodes).enumerate() {
        let field = format!("{top}.bundles[{b}]");
        let amounts_field = under(&field, "resources");
        let reserved = reserve_on(
            source,
            cluster,
            *node,
            Reservation {
                field: &field,
                location: bundle.referenced,
                amounts: &bundle.value.resources.value,
                amounts_field,
                amounts_location: bundle.value.resources.referenced,
                exact: bundle.value.instances.as_ref().map(Some),
                before: "the allocations, actors and bundles listed before it",
            },
        );
        match reserved {
            Ok(allocation) => taken.push(allocation),
            Err(err) => {
                failure = Some(err);
                break;
            }
        }
    }
    let plan: Vec<(NodeIndex, Vec<_>)> =
        taken.iter().map(|a| (a.node(), a.instances().collect())).collect();
    for allocation in &taken {
        cluster.release(allocation);
    }
    if let Some(err) = failure {
        return Err(err);
    }
    cluster
        .reserve_group(spec, 0, &plan)
        .map_err(|err| source.invalid(top, err.to_string(), Some(entry.id.referenced)))
}

/// The node of each bundle, checked: it exists, is not dead, and the strict strategies hold
/// (STRICT_PACK: one node; STRICT_SPREAD: a different node each).
fn bundle_nodes(
    source: &Source,
    cluster: &Cluster,
    top: &str,
    strategy: GroupStrategy,
    entry: &ReservedGroupEntry,
    states: &HashMap<&str, NodeState>,
) -> Result<Vec<NodeIndex>, InputError> {
    let mut nodes: Vec<NodeIndex> = Vec::new();
    for (b, bundle) in entry.bundles.value.iter().enumerate() {
        let field = format!("{top}.bundles[{b}].node");
        let node_id = bundle.value.node.value.as_str();
        let location = Some(bundle.value.node.referenced);
        let Some(node) = cluster.index_of(node_id) else {
            return Err(source.invalid(
                field,
                format!("there is no node {node_id} in the cluster file; name one of its nodes"),
                location,
            ));
        };
        if states.get(node_id) == Some(&NodeState::Dead) {
            return Err(source.invalid(
                field,
                format!("node {node_id} is dead, and a dead node holds no bundle"),
                location,
            ));
        }
        let clash = match strategy {
            GroupStrategy::StrictPack => nodes.iter().position(|&n| n != node).map(|j| {
                format!(
                    "STRICT_PACK puts every bundle on one node, but bundle {j} is on {} and \
                     this one on {node_id}",
                    entry.bundles.value[j].value.node.value
                )
            }),
            GroupStrategy::StrictSpread => nodes.iter().position(|&n| n == node).map(|j| {
                format!(
                    "STRICT_SPREAD puts every bundle on a different node, but bundle {j} is on \
                     {node_id} too"
                )
            }),
            GroupStrategy::Pack | GroupStrategy::Spread => None,
        };
        if let Some(rule) = clash {
            return Err(source.invalid(field, rule, location));
        }
        nodes.push(node);
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_take_the_longest_prefix_at_a_segment_boundary() {
        let at = |line: u64| line;
        let mut locations: Locations<u64> = Locations::default();
        locations.add("bundles", at(1));
        locations.add("bundles[1]", at(2));
        locations.add("bundles[10]", at(3));
        assert_eq!(locations.of("bundles[1].GPU"), Some(at(2)));
        assert_eq!(locations.of("bundles[10]"), Some(at(3)));
        assert_eq!(locations.of("bundles"), Some(at(1)));
        assert_eq!(locations.of("bundle_label_selector"), None);
    }

    #[test]
    fn group_errors_split_into_place_resource_and_rule() {
        let err = GroupError::FractionalInstances {
            field: "fallback_strategy[0].bundles[1].nvidia.com/gpu".into(),
            resource: "nvidia.com/gpu".into(),
            quantity: berth_core::Quantity::parse("1.5").unwrap(),
        };
        let (base, resource, rule) = error_parts(&err);
        assert_eq!(base, "fallback_strategy[0].bundles[1]");
        assert_eq!(resource.as_deref(), Some("nvidia.com/gpu"));
        assert!(rule.starts_with("1.5 is not allowed"), "{rule}");
        let (base, resource, rule) =
            error_parts(&GroupError::EmptyBundle { field: "bundles[0]".into() });
        assert_eq!((base.as_str(), resource), ("bundles[0]", None));
        assert_eq!(rule, "a bundle must ask for at least one resource");
    }
}
