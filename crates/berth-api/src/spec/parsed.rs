//! The input files as serde reads them: the cluster and request files' sections, resource
//! maps, allocations and the value types whose rules are checked while parsing.

use super::actors::{ActorEntry, ActorSection};
use super::groups::{GroupSection, ReservedGroupEntry};
use super::label_maps::{ExpressionMap, FactValue, LabelMap, TaintMap};
use super::located::Located;
use super::strategy::StrategySpec;
use berth_core::{InstanceId, NodeId, NodeState, Quantity, ResourceRegistry};
use serde::de::IntoDeserializer;
use serde::de::{DeserializeOwned, DeserializeSeed, MapAccess, Visitor};
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use std::collections::HashSet;
use std::convert::Infallible;
use std::fmt;
use std::marker::PhantomData;

/// The cluster file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClusterFile {
    /// DEFAULT-strategy settings; absent keys keep the core's defaults.
    #[serde(default)]
    pub(super) scheduler: Option<SchedulerSection>,
    /// Resources accounted per instance (whole instances or a share of one).
    #[serde(default)]
    pub(super) unit_instance_resources: Option<Vec<ResourceName>>,
    /// The nodes, in the order they get their indices (ties in scoring follow this order).
    pub(super) nodes: Vec<NodeEntry>,
    /// Resources whose nodes are tainted `berth.io/rare-<resource>=true` automatically
    /// (rare-resource isolation). Located for "given twice" and taint-key clashes.
    #[serde(default)]
    pub(super) rare_resources: Vec<Located<ResourceName>>,
    /// Actors already placed, with their labels (actor affinity reads them).
    #[serde(default)]
    pub(super) actors: Vec<ActorEntry>,
    /// Placement groups already reserved, each bundle on its node.
    #[serde(default)]
    pub(super) placement_groups: Vec<ReservedGroupEntry>,
}

/// `scheduler:` in the cluster file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SchedulerSection {
    /// Located: only [`SchedulerConfig::validate`] checks the range.
    pub(super) spread_threshold: Option<Located<Quantity>>,
    /// Located: only [`SchedulerConfig::validate`] checks the range.
    pub(super) top_k_fraction: Option<Located<Quantity>>,
    pub(super) avoid_gpu_nodes: Option<bool>,
}

/// One entry of `nodes:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NodeEntry {
    /// Located for the duplicate-ID error.
    pub(super) id: Located<NodeId>,
    /// Located for the core's per-resource rules (GPU totals must be whole).
    pub(super) resources: Located<ResourceMap>,
    #[serde(default)]
    pub(super) state: Option<NodeState>,
    /// Work already running, reserved in order. Located for "does not fit".
    #[serde(default)]
    pub(super) allocations: Vec<Located<AllocationEntry>>,
    /// User labels, on top of the default labels. Located for [`field_path`] and for a clash
    /// with a node fact.
    #[serde(default)]
    pub(super) labels: Option<Located<LabelMap>>,
    /// Taints, `key: value`. Located for [`field_path`].
    #[serde(default)]
    pub(super) taints: Option<Located<TaintMap>>,
    /// The facts behind the default labels (`berth.io/accelerator-type` and so on).
    #[serde(default)]
    pub(super) accelerator_type: Option<Located<FactValue>>,
    #[serde(default)]
    pub(super) market_type: Option<Located<FactValue>>,
    #[serde(default)]
    pub(super) node_group: Option<Located<FactValue>>,
    #[serde(default)]
    pub(super) availability_zone: Option<Located<FactValue>>,
    #[serde(default)]
    pub(super) availability_region: Option<Located<FactValue>>,
}

/// The request file: an actor or task (`resources`, with `actor` for an actor), or a
/// placement group (`placement_group`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RequestFile {
    /// Located for the core's per-resource rules (GPU amounts above 1 must be whole).
    #[serde(default)]
    pub(super) resources: Option<Located<ResourceMap>>,
    /// The group to place, instead of `resources`.
    #[serde(default)]
    pub(super) placement_group: Option<Located<GroupSection>>,
    /// Set when the request places an actor: its ID, namespace and labels.
    #[serde(default)]
    pub(super) actor: Option<Located<ActorSection>>,
    /// Located for the core's affinity-flag rules.
    #[serde(default)]
    pub(super) scheduling_strategy: Option<Box<Located<StrategySpec>>>,
    /// Located for "no such node".
    #[serde(default)]
    pub(super) preferred_node: Option<Located<NodeId>>,
    /// Must hold on the node, whatever the strategy. Located for [`field_path`].
    #[serde(default)]
    pub(super) label_selector: Option<Box<Located<ExpressionMap>>>,
    /// Selectors tried in order when `label_selector` finds no node that can take the
    /// request now.
    #[serde(default)]
    pub(super) fallback_strategy: Vec<FallbackEntry>,
    /// Taints the request accepts. Located for [`field_path`].
    #[serde(default)]
    pub(super) tolerations: Option<Box<Located<ExpressionMap>>>,
}

/// One entry of `fallback_strategy`: `{label_selector: {…}}`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FallbackEntry {
    /// The selector tried instead of the request's own.
    #[schema(value_type = super::schema::Selector)]
    pub label_selector: Located<ExpressionMap>,
}

/// A resource name whose syntax was checked while parsing, so the error points at the key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ResourceName(pub(super) String);

impl<'de> Deserialize<'de> for ResourceName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ResourceName, D::Error> {
        let name = String::deserialize(deserializer)?;
        // The registry owns the naming rule; checked without interning anything into the
        // cluster's (the file may still be rejected).
        ResourceRegistry::check_name(&name).map_err(de::Error::custom)?;
        Ok(ResourceName(name))
    }
}

/// A map keyed by resource name, in the order the file gives it (so custom resources get IDs,
/// and print, in file order).
///
/// Invariant relied on by [`field_path`]: every map whose keys the user chooses is parsed
/// directly inside a [`Located`], never nested in another user-keyed map.
#[derive(Clone, Debug, PartialEq)]
pub struct ByResource<V>(pub(super) Vec<(ResourceName, V)>);

impl<V> ByResource<V> {
    /// The value given for `name`, if any.
    pub fn get(&self, name: &str) -> Option<&V> {
        self.0.iter().find(|(n, _)| n.0 == name).map(|(_, value)| value)
    }

    /// The entries, in the order read.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(name, value)| (name.0.as_str(), value))
    }
}

impl<V: Serialize> Serialize for ByResource<V> {
    /// A map, in the order read.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(name, value)| (&name.0, value)))
    }
}

impl<V> Default for ByResource<V> {
    fn default() -> Self {
        ByResource(Vec::new())
    }
}

/// A map of resource name to amount: `{CPU: 2, GPU: 0.5}`.
pub type ResourceMap = ByResource<Quantity>;

/// A map of resource name to the instance IDs an allocation holds: `{GPU: [0, 1]}`.
pub(super) type InstanceMap = ByResource<InstanceIds>;

/// A list of instance IDs, `[0, 1]`. Whether the IDs exist and their number matches the
/// amount is the core's to check.
#[derive(Debug)]
pub(super) struct InstanceIds(pub(super) Vec<InstanceId>);

impl<'de> Deserialize<'de> for InstanceIds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<InstanceIds, D::Error> {
        struct ListVisitor;
        impl<'de> Visitor<'de> for ListVisitor {
            type Value = InstanceIds;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of instance IDs, such as [0] or [0, 1]")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<InstanceIds, A::Error> {
                let mut ids = Vec::new();
                while let Some(id) = seq.next_element::<InstanceNumber>()? {
                    ids.push(id.0);
                }
                Ok(InstanceIds(ids))
            }
        }
        deserializer.deserialize_any(ListVisitor)
    }
}

/// One instance ID: a whole number from 0 (`GPU 0` is the first GPU of its node).
pub(super) struct InstanceNumber(pub(super) InstanceId);

impl<'de> Deserialize<'de> for InstanceNumber {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<InstanceNumber, D::Error> {
        struct NumberVisitor;
        impl<'de> Visitor<'de> for NumberVisitor {
            type Value = InstanceNumber;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an instance ID: a whole number from 0, such as 0 for the first GPU")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<InstanceNumber, E> {
                InstanceId::try_from(v)
                    .map(InstanceNumber)
                    .map_err(|_| E::custom(format!("{v} is too large for an instance ID")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<InstanceNumber, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!("{v} is negative; instance IDs count from 0"))),
                }
            }
        }
        deserializer.deserialize_any(NumberVisitor)
    }
}

/// What a [`ByResource`] map holds per resource.
pub(super) trait ResourceValue: DeserializeOwned {
    /// The map as the parser's "expected …" message describes it.
    const EXPECTING: &'static str;
}

impl ResourceValue for Quantity {
    const EXPECTING: &'static str = "a map of resource name to amount, such as {CPU: 2, GPU: 0.5}";
}

impl ResourceValue for InstanceIds {
    const EXPECTING: &'static str = "a map of resource name to instance IDs, such as {GPU: [0, 1]}";
}

impl<'de, V: ResourceValue> Deserialize<'de> for ByResource<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ByResource<V>, D::Error> {
        deserializer.deserialize_any(ByResourceVisitor(PhantomData))
    }
}

pub(super) struct ByResourceVisitor<V>(pub(super) PhantomData<V>);

impl<'de, V: ResourceValue> Visitor<'de> for ByResourceVisitor<V> {
    type Value = ByResource<V>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(V::EXPECTING)
    }
    fn visit_unit<E: de::Error>(self) -> Result<ByResource<V>, E> {
        // `resources:` with nothing after it: no resources.
        Ok(ByResource::default())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ByResource<V>, A::Error> {
        let mut entries: Vec<(ResourceName, V)> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        while let Some((name, value)) = map.next_entry::<ResourceName, V>()? {
            // The YAML parser rejects duplicate keys already; this keeps the rule if its
            // policy ever changes.
            if !seen.insert(name.0.clone()) {
                return Err(de::Error::custom(format!("resource {:?} is given twice", name.0)));
            }
            entries.push((name, value));
        }
        // Kept for the object's life (one per actor in the head): no spare capacity.
        entries.shrink_to_fit();
        Ok(ByResource(entries))
    }
}

/// The keys of an allocation's long form.
pub(super) const RESOURCES_KEY: &str = "resources";
pub(super) const INSTANCES_KEY: &str = "instances";

/// One entry of `nodes[i].allocations`: work already running on the node, in one of two forms
/// told apart by their values (documented in `docs/file-formats.md`):
///
/// - a resource map, `{CPU: 4, GPU: 0.5}`, whose values are all amounts: reserved like a
///   request, the core's rules choosing the instances;
/// - the long form, `{resources: {CPU: 1, GPU: 0.5}, instances: {GPU: [1]}}`, whose values are
///   maps: reserved on exactly the instances named.
///
/// An entry is in the long form when its `resources` or `instances` key has a map as its
/// value; the long form then takes no other key. Otherwise it is a resource map, and every
/// value must be an amount, so a resource may be called `resources` (`{resources: 2}`). Each
/// value's form is known from the value itself, so the entry is parsed in one pass, without
/// buffering, and every error keeps its field path and line.
#[derive(Debug)]
pub(super) enum AllocationEntry {
    /// The short form.
    Amounts(ResourceMap),
    /// The long form.
    Placed {
        /// What the allocation holds.
        resources: Located<ResourceMap>,
        /// The instances it holds of each unit-instance resource; absent, none are named
        /// (which the core accepts only when `resources` has no unit-instance resource).
        instances: Option<Located<InstanceMap>>,
    },
}

impl<'de> Deserialize<'de> for AllocationEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<AllocationEntry, D::Error> {
        deserializer.deserialize_any(AllocationVisitor)
    }
}

pub(super) struct AllocationVisitor;

impl<'de> Visitor<'de> for AllocationVisitor {
    type Value = AllocationEntry;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "an allocation: a map of resource name to amount, such as {CPU: 2, GPU: 0.5}, or \
             {resources: {CPU: 1, GPU: 0.5}, instances: {GPU: [0]}}",
        )
    }

    fn visit_unit<E: de::Error>(self) -> Result<AllocationEntry, E> {
        // `- ` with nothing after it: an allocation of nothing, as `resources:` is.
        Ok(AllocationEntry::Amounts(ResourceMap::default()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AllocationEntry, A::Error> {
        let mut amounts: Vec<(ResourceName, Quantity)> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        let mut resources: Option<Located<ResourceMap>> = None;
        let mut instances: Option<Located<InstanceMap>> = None;
        // The form the entries read so far are in: `None` before the first, then `Some(true)`
        // for the long form.
        let mut long: Option<bool> = None;
        while let Some(name) = map.next_key::<ResourceName>()? {
            let key = name.0.as_str();
            let is_section = key == RESOURCES_KEY || key == INSTANCES_KEY;
            // The YAML parser rejects duplicate keys already; this keeps the rule if its
            // policy ever changes.
            if !seen.insert(name.0.clone()) {
                return Err(de::Error::custom(format!("{key:?} is given twice")));
            }
            if long == Some(true) && !is_section {
                let never: Infallible = map.next_value_seed(Reject(format!(
                    "an allocation written with {RESOURCES_KEY}: {{…}} takes only the keys \
                     {RESOURCES_KEY} and {INSTANCES_KEY}; list {key} inside {RESOURCES_KEY}"
                )))?;
                match never {}
            }
            let amount = if key == RESOURCES_KEY {
                let section = map.next_value_seed(SectionSeed::new(RESOURCES_KEY, long))?;
                match section.value {
                    Section::Map(m) => {
                        resources = Some(Located::new(m, section.referenced));
                        None
                    }
                    Section::Amount(amount) => Some(amount),
                }
            } else if key == INSTANCES_KEY {
                let section = map.next_value_seed(SectionSeed::new(INSTANCES_KEY, long))?;
                match section.value {
                    Section::Map(m) => {
                        instances = Some(Located::new(m, section.referenced));
                        None
                    }
                    Section::Amount(amount) => Some(amount),
                }
            } else {
                Some(map.next_value::<Quantity>()?)
            };
            long = Some(amount.is_none());
            if let Some(amount) = amount {
                amounts.push((name, amount));
            }
        }
        if long != Some(true) {
            return Ok(AllocationEntry::Amounts(ByResource(amounts)));
        }
        let resources = resources.ok_or_else(|| {
            de::Error::custom(format!(
                "an allocation written with {INSTANCES_KEY}: {{…}} needs {RESOURCES_KEY}: \
                 {{…}} too, such as {{resources: {{GPU: 0.5}}, instances: {{GPU: [0]}}}}"
            ))
        })?;
        Ok(AllocationEntry::Placed { resources, instances })
    }
}

/// The value of a `resources` or `instances` key in an allocation: a map (the long form), or
/// the amount of a resource that happens to have that name (a resource map).
#[derive(Debug)]
pub(super) enum Section<V> {
    Map(ByResource<V>),
    Amount(Quantity),
}

impl<'de, V: ResourceValue> Deserialize<'de> for Section<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Section<V>, D::Error> {
        deserializer.deserialize_any(SectionVisitor(PhantomData))
    }
}

pub(super) struct SectionVisitor<V>(pub(super) PhantomData<V>);

impl<'de, V: ResourceValue> Visitor<'de> for SectionVisitor<V> {
    type Value = Section<V>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an amount, or {} (the long form)", V::EXPECTING)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Section<V>, A::Error> {
        ByResource::deserialize(de::value::MapAccessDeserializer::new(map)).map(Section::Map)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Section<V>, E> {
        // No amount is null; `resources:` with nothing after it is an empty map, as elsewhere.
        Ok(Section::Map(ByResource::default()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Section<V>, E> {
        Quantity::deserialize(v.into_deserializer()).map(Section::Amount)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Section<V>, E> {
        Quantity::deserialize(v.into_deserializer()).map(Section::Amount)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Section<V>, E> {
        Quantity::deserialize(v.into_deserializer()).map(Section::Amount)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Section<V>, E> {
        Quantity::deserialize(v.into_deserializer()).map(Section::Amount)
    }
}

/// Reads a [`Section`] and checks it is in the form of the entries before it, so that a
/// mistake is reported at its key.
pub(super) struct SectionSeed<V> {
    pub(super) key: &'static str,
    /// The form so far, as in [`AllocationVisitor::visit_map`].
    pub(super) long: Option<bool>,
    pub(super) value: PhantomData<V>,
}

impl<V> SectionSeed<V> {
    pub(super) fn new(key: &'static str, long: Option<bool>) -> SectionSeed<V> {
        SectionSeed { key, long, value: PhantomData }
    }
}

impl<'de, V: ResourceValue> DeserializeSeed<'de> for SectionSeed<V> {
    type Value = Located<Section<V>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        let section = Located::<Section<V>>::deserialize(deserializer)?;
        match (&section.value, self.long) {
            (Section::Map(_), Some(false)) => Err(de::Error::custom(format!(
                "a map here makes this the long form of an allocation, but it has resource \
                 amounts too; write {{{RESOURCES_KEY}: {{…}}, {INSTANCES_KEY}: {{…}}}} with every \
                 amount inside {RESOURCES_KEY}"
            ))),
            (Section::Amount(_), Some(true)) => Err(de::Error::custom(format!(
                "in the long form of an allocation, {} is {}",
                self.key,
                V::EXPECTING
            ))),
            _ => Ok(section),
        }
    }
}

/// Fails at the value of the key just read, so that the error names that key.
pub(super) struct Reject(pub(super) String);

impl<'de> DeserializeSeed<'de> for Reject {
    type Value = Infallible;

    fn deserialize<D: Deserializer<'de>>(self, _: D) -> Result<Infallible, D::Error> {
        Err(de::Error::custom(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::test_support::*;
    use crate::spec::FileKind;

    #[test]
    fn allocation_forms_are_told_apart_by_their_values() {
        let parse = |entry: &str| {
            let text =
                format!("nodes:\n  - id: a\n    resources: {{}}\n    allocations: [{entry}]\n");
            let file: ClusterFile = source(FileKind::Cluster, &text).parse().unwrap();
            file.nodes.into_iter().next().unwrap().allocations.remove(0).value
        };
        let names = |map: &ResourceMap| map.0.iter().map(|(n, _)| n.0.clone()).collect::<Vec<_>>();
        match parse("{resources: 2, instances: 1, CPU: 1}") {
            AllocationEntry::Amounts(map) => {
                assert_eq!(names(&map), ["resources", "instances", "CPU"]);
            }
            other => panic!("a resource map: {other:?}"),
        }
        match parse("{instances: {GPU: [1]}, resources: {CPU: 1, GPU: 0.5}}") {
            AllocationEntry::Placed { resources, instances } => {
                assert_eq!(names(&resources.value), ["CPU", "GPU"]);
                let instances = instances.unwrap().value;
                assert_eq!(instances.0[0].0 .0, "GPU");
                assert_eq!(instances.0[0].1 .0, [1]);
            }
            other => panic!("the long form: {other:?}"),
        }
        match parse("{resources: {CPU: 1}}") {
            AllocationEntry::Placed { instances, .. } => assert!(instances.is_none()),
            other => panic!("the long form: {other:?}"),
        }
        match parse("{}") {
            AllocationEntry::Amounts(map) => assert!(map.0.is_empty()),
            other => panic!("an empty resource map: {other:?}"),
        }
    }
}
