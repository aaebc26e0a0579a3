//! The cluster and request file formats (see `docs/file-formats.md`) and their conversion into
//! core types.
//!
//! Loading a file has two steps, each with its own kind of check:
//!
//! 1. **Parse**: serde-saphyr reads the YAML (or JSON) into the `*File` structs below. Serde
//!    checks the shape and every rule a single value can check alone: amounts
//!    ([`Quantity`]'s parser), node IDs, resource names, strategy names, unknown keys.
//!    `serde_path_to_error` records the field path; serde-saphyr gives the line and column.
//! 2. **Build**: the parsed files become a [`Cluster`], a [`SchedulerConfig`] and a
//!    [`Request`] through the core's own constructors, which check the rules that need context
//!    (duplicate node IDs, allocations that must fit, on the instances they name if they do,
//!    GPU amounts, affinity flags). Values that such a rule can reject are wrapped in
//!    [`Spanned`] so the error can still give a line. The core's errors name their field
//!    relative to what was passed in (`resources.GPU`); [`core_path`] puts the path of that
//!    thing in the file in front.
//!
//! Every error is an [`InputError`] naming the file, the field path and the rule.
//!
//! Actors (`actors:`, `actor:`, ACTOR_AFFINITY) are in [`actors`], placement groups
//! (`placement_groups:`, `placement_group:`, PLACEMENT_GROUP) in [`groups`].

mod actors;
mod groups;
pub mod node_types;

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use berth_core::actors::{MatchMode, OnPeerMoved};
use berth_core::cluster::NodeSpec;
use berth_core::labels::{self, LabelError, Labels, NodeFacts};
use berth_core::placement_group::GroupSpec;
use berth_core::request::{GroupPlacement, NodeLabel};
use berth_core::selector::{LabelSelector, SelectorError, Tolerations};
use berth_core::taints::rare_taint_key;
use berth_core::{
    Allocation, Cluster, ClusterError, ConfigError, InstanceId, NodeAffinity, NodeError, NodeId,
    NodeIndex, NodeState, Quantity, Reason, Request, RequestError, ResourceId, ResourceRegistry,
    ResourceSet, SchedulerConfig, Strategy, UnknownResources,
};
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_saphyr::{Location, MessageFormatter, NonFiniteFloatPolicy, Spanned};
use thiserror::Error;

use actors::{
    ActorEntry, ActorSection, AffinityDraft, ExpressionEntry, MatchName, OnPeerMovedName,
};
use groups::{BundleIndex, GroupIdText, GroupSection, ReservedGroupEntry};

/// Which of the two input files an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// The `--cluster` file.
    Cluster,
    /// The `--request` file.
    Request,
    /// The `--profile` file (read by `explain`; the core checks it).
    Profile,
    /// The `--labels-file` of `berth validate labels`.
    Labels,
    /// The JSON body of a REST call (its "path" is the method and route).
    Body,
    /// The autoscaler's node-types file (`--autoscaler`).
    NodeTypes,
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::Cluster => "cluster file",
            FileKind::Request => "request file",
            FileKind::Profile => "profile file",
            FileKind::Labels => "labels file",
            FileKind::Body => "request body of",
            FileKind::NodeTypes => "autoscaler file",
        })
    }
}

/// Bad input: the file could not be read, or its content breaks a rule. `berth` exits with
/// status 2 on any of these.
#[derive(Debug, Error)]
pub enum InputError {
    /// The file could not be read (missing, a directory, no permission, not UTF-8).
    #[error("cannot read {kind} {}: {source}", path.display())]
    Read {
        /// Which file.
        kind: FileKind,
        /// The path as given on the command line.
        path: PathBuf,
        /// The operating system's answer.
        source: io::Error,
    },
    /// The file was read but a value in it is invalid.
    #[error("{0}")]
    Invalid(Box<Invalid>),
}

/// One invalid value: where it is and which rule it breaks.
#[derive(Debug)]
pub struct Invalid {
    /// Which file.
    pub kind: FileKind,
    /// The path as given on the command line.
    pub path: PathBuf,
    /// The field path, `nodes[1].resources.GPU`; empty for the document as a whole.
    pub field: String,
    /// The rule broken, as a sentence.
    pub message: String,
    /// Line and column (1-based) when known.
    pub location: Option<(u64, u64)>,
    /// The text of that line, for the snippet under the message.
    pub line_text: Option<String>,
}

impl fmt::Display for Invalid {
    /// `cluster file c.yaml:5:22: nodes[1].resources.CPU: -1 is negative; …`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.path.display())?;
        if let Some((line, column)) = self.location {
            write!(f, ":{line}:{column}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl InputError {
    /// The offending line with a caret under the column, as compilers print it; `None` when
    /// the error has no location.
    pub fn snippet(&self) -> Option<String> {
        let InputError::Invalid(invalid) = self else {
            return None;
        };
        let (line, column) = invalid.location?;
        let text = invalid.line_text.as_deref()?;
        let column = usize::try_from(column).unwrap_or(usize::MAX);
        let (shown, caret_at) = window(text, column);
        let number = line.to_string();
        let gutter = " ".repeat(number.len());
        // Keep tabs as tabs under the line so the caret lines up however the terminal
        // expands them.
        let pad: String = shown
            .chars()
            .take(caret_at.saturating_sub(1))
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        Some(format!("{gutter} |\n{number} | {shown}\n{gutter} | {pad}^\n"))
    }
}

/// At most [`SNIPPET_WIDTH`] characters of `text` around `column` (1-based), with `…` where
/// it was cut, and the column of the same character in the result.
fn window(text: &str, column: usize) -> (String, usize) {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= SNIPPET_WIDTH {
        return (text.to_string(), column);
    }
    let start = column.saturating_sub(SNIPPET_WIDTH / 2).min(chars.len() - SNIPPET_WIDTH);
    let end = start + SNIPPET_WIDTH;
    let mut shown = String::new();
    let mut caret_at = column.saturating_sub(start);
    if start > 0 {
        shown.push('…');
        caret_at = caret_at.saturating_add(1);
    }
    shown.extend(&chars[start..end]);
    if end < chars.len() {
        shown.push('…');
    }
    (shown, caret_at)
}

/// The widest source line a snippet shows; longer lines are cut around the column.
const SNIPPET_WIDTH: usize = 80;

/// The field name `Spanned` reads its inner value from; it shows up in the paths
/// `serde_path_to_error` records and is removed by [`field_path`].
const SPANNED_VALUE: &str = "value";

// ---------------------------------------------------------------------------------------------
// The file formats, as parsed.

/// The cluster file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    /// DEFAULT-strategy settings; absent keys keep the core's defaults.
    #[serde(default)]
    scheduler: Option<SchedulerSection>,
    /// Resources accounted per instance (whole instances or a share of one).
    #[serde(default)]
    unit_instance_resources: Option<Vec<ResourceName>>,
    /// The nodes, in the order they get their indices (ties in scoring follow this order).
    nodes: Vec<NodeEntry>,
    /// Resources whose nodes are tainted `berth.io/rare-<resource>=true` automatically
    /// (rare-resource isolation). Spanned for "given twice" and taint-key clashes.
    #[serde(default)]
    rare_resources: Vec<Spanned<ResourceName>>,
    /// Actors already placed, with their labels (actor affinity reads them).
    #[serde(default)]
    actors: Vec<ActorEntry>,
    /// Placement groups already reserved, each bundle on its node.
    #[serde(default)]
    placement_groups: Vec<ReservedGroupEntry>,
}

/// `scheduler:` in the cluster file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SchedulerSection {
    /// Spanned: only [`SchedulerConfig::validate`] checks the range.
    spread_threshold: Option<Spanned<Quantity>>,
    /// Spanned: only [`SchedulerConfig::validate`] checks the range.
    top_k_fraction: Option<Spanned<Quantity>>,
    avoid_gpu_nodes: Option<bool>,
}

/// One entry of `nodes:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeEntry {
    /// Spanned for the duplicate-ID error.
    id: Spanned<NodeId>,
    /// Spanned for the core's per-resource rules (GPU totals must be whole).
    resources: Spanned<ResourceMap>,
    #[serde(default)]
    state: Option<NodeState>,
    /// Work already running, reserved in order. Spanned for "does not fit".
    #[serde(default)]
    allocations: Vec<Spanned<AllocationEntry>>,
    /// User labels, on top of the default labels. Spanned for [`field_path`] and for a clash
    /// with a node fact.
    #[serde(default)]
    labels: Option<Spanned<LabelMap>>,
    /// Taints, `key: value`. Spanned for [`field_path`].
    #[serde(default)]
    taints: Option<Spanned<TaintMap>>,
    /// The facts behind the default labels (`berth.io/accelerator-type` and so on).
    #[serde(default)]
    accelerator_type: Option<Spanned<FactValue>>,
    #[serde(default)]
    market_type: Option<Spanned<FactValue>>,
    #[serde(default)]
    node_group: Option<Spanned<FactValue>>,
    #[serde(default)]
    availability_zone: Option<Spanned<FactValue>>,
    #[serde(default)]
    availability_region: Option<Spanned<FactValue>>,
}

/// The request file: an actor or task (`resources`, with `actor` for an actor), or a
/// placement group (`placement_group`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestFile {
    /// Spanned for the core's per-resource rules (GPU amounts above 1 must be whole).
    #[serde(default)]
    resources: Option<Spanned<ResourceMap>>,
    /// The group to place, instead of `resources`.
    #[serde(default)]
    placement_group: Option<Spanned<GroupSection>>,
    /// Set when the request places an actor: its ID, namespace and labels.
    #[serde(default)]
    actor: Option<Spanned<ActorSection>>,
    /// Spanned for the core's affinity-flag rules.
    #[serde(default)]
    scheduling_strategy: Option<Spanned<StrategySpec>>,
    /// Spanned for "no such node".
    #[serde(default)]
    preferred_node: Option<Spanned<NodeId>>,
    /// Must hold on the node, whatever the strategy. Spanned for [`field_path`].
    #[serde(default)]
    label_selector: Option<Spanned<ExpressionMap>>,
    /// Selectors tried in order when `label_selector` finds no node that can take the
    /// request now.
    #[serde(default)]
    fallback_strategy: Vec<FallbackEntry>,
    /// Taints the request accepts. Spanned for [`field_path`].
    #[serde(default)]
    tolerations: Option<Spanned<ExpressionMap>>,
}

/// One entry of `fallback_strategy`: `{label_selector: {…}}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FallbackEntry {
    label_selector: Spanned<ExpressionMap>,
}

/// A resource name whose syntax was checked while parsing, so the error points at the key.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ResourceName(String);

impl<'de> Deserialize<'de> for ResourceName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ResourceName, D::Error> {
        let name = String::deserialize(deserializer)?;
        // The registry owns the naming rule; a scratch registry applies it without
        // interning anything into the cluster's (the file may still be rejected).
        ResourceRegistry::default().intern(&name).map_err(de::Error::custom)?;
        Ok(ResourceName(name))
    }
}

/// A map keyed by resource name, in the order the file gives it (so custom resources get IDs,
/// and print, in file order).
///
/// Invariant relied on by [`field_path`]: every map whose keys the user chooses is parsed
/// directly inside a [`Spanned`], never nested in another user-keyed map.
#[derive(Debug)]
struct ByResource<V>(Vec<(ResourceName, V)>);

impl<V> Default for ByResource<V> {
    fn default() -> Self {
        ByResource(Vec::new())
    }
}

/// A map of resource name to amount: `{CPU: 2, GPU: 0.5}`.
type ResourceMap = ByResource<Quantity>;

/// A map of resource name to the instance IDs an allocation holds: `{GPU: [0, 1]}`.
type InstanceMap = ByResource<InstanceIds>;

/// A list of instance IDs, `[0, 1]`. Whether the IDs exist and their number matches the
/// amount is the core's to check.
#[derive(Debug)]
struct InstanceIds(Vec<InstanceId>);

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
struct InstanceNumber(InstanceId);

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
trait ResourceValue: DeserializeOwned {
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

struct ByResourceVisitor<V>(PhantomData<V>);

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
        Ok(ByResource(entries))
    }
}

/// The keys of an allocation's long form.
const RESOURCES_KEY: &str = "resources";
const INSTANCES_KEY: &str = "instances";

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
enum AllocationEntry {
    /// The short form.
    Amounts(ResourceMap),
    /// The long form.
    Placed {
        /// What the allocation holds.
        resources: Spanned<ResourceMap>,
        /// The instances it holds of each unit-instance resource; absent, none are named
        /// (which the core accepts only when `resources` has no unit-instance resource).
        instances: Option<Spanned<InstanceMap>>,
    },
}

impl<'de> Deserialize<'de> for AllocationEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<AllocationEntry, D::Error> {
        deserializer.deserialize_any(AllocationVisitor)
    }
}

struct AllocationVisitor;

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
        let mut resources: Option<Spanned<ResourceMap>> = None;
        let mut instances: Option<Spanned<InstanceMap>> = None;
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
                        resources = Some(Spanned::new(m, section.referenced, section.defined));
                        None
                    }
                    Section::Amount(amount) => Some(amount),
                }
            } else if key == INSTANCES_KEY {
                let section = map.next_value_seed(SectionSeed::new(INSTANCES_KEY, long))?;
                match section.value {
                    Section::Map(m) => {
                        instances = Some(Spanned::new(m, section.referenced, section.defined));
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
enum Section<V> {
    Map(ByResource<V>),
    Amount(Quantity),
}

impl<'de, V: ResourceValue> Deserialize<'de> for Section<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Section<V>, D::Error> {
        deserializer.deserialize_any(SectionVisitor(PhantomData))
    }
}

struct SectionVisitor<V>(PhantomData<V>);

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
struct SectionSeed<V> {
    key: &'static str,
    /// The form so far, as in [`AllocationVisitor::visit_map`].
    long: Option<bool>,
    value: PhantomData<V>,
}

impl<V> SectionSeed<V> {
    fn new(key: &'static str, long: Option<bool>) -> SectionSeed<V> {
        SectionSeed { key, long, value: PhantomData }
    }
}

impl<'de, V: ResourceValue> DeserializeSeed<'de> for SectionSeed<V> {
    type Value = Spanned<Section<V>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        let section = Spanned::<Section<V>>::deserialize(deserializer)?;
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
struct Reject(String);

impl<'de> DeserializeSeed<'de> for Reject {
    type Value = Infallible;

    fn deserialize<D: Deserializer<'de>>(self, _: D) -> Result<Infallible, D::Error> {
        Err(de::Error::custom(self.0))
    }
}

// ---------------------------------------------------------------------------------------------
// Labels, taints, selectors and tolerations: maps of label key to text.

/// A map of label key to text, in file order: node labels, taints, a label selector or
/// tolerations. Each entry is checked while parsing by `T`'s rule, key and value together at
/// the value, so that the error's path names the key (`nodes[0].labels."example.com/x"`) and
/// its line is the value's.
///
/// Values are strings, as in Kubernetes: `team: 42` and `gpu_node: true` are errors that ask
/// for quotes (`"42"`, `"true"`), so the text is always exactly what was written (YAML would
/// read `1.10` as the number 1.1).
///
/// Like [`ByResource`], such a map is always parsed directly inside a [`Spanned`] (see
/// [`field_path`]).
#[derive(Debug)]
struct ByLabelKey<T>(Vec<(String, String)>, PhantomData<T>);

impl<T> ByLabelKey<T> {
    fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// What a [`ByLabelKey`] map holds, and the rule each entry follows.
trait LabelText {
    /// The map as the parser's "expected …" message describes it.
    const EXPECTING: &'static str;
    /// What one value is, for the "expected a string" message.
    const VALUE: &'static str;
    /// Checks one entry; the message names what is wrong (the path names the key).
    fn check(key: &str, value: &str) -> Result<(), String>;
}

/// `labels:` of a node: user labels; `berth.io/node-id` is Berth's.
#[derive(Debug)]
struct UserLabel;

impl LabelText for UserLabel {
    const EXPECTING: &'static str = "a map of label key to value, such as {team: ml}";
    const VALUE: &'static str = "a label value";
    fn check(key: &str, value: &str) -> Result<(), String> {
        if key == labels::NODE_ID {
            return Err(LabelError::ReservedNodeId.to_string());
        }
        Labels::new().insert(key, value).map_err(|err| label_error_text("label", &err))
    }
}

/// `taints:` of a node. The `berth.io/` prefix is Berth's: rare-resource isolation sets
/// `berth.io/rare-<resource>` itself.
#[derive(Debug)]
struct TaintText;

/// The taint keys Berth sets itself start with this.
const RESERVED_TAINT_PREFIX: &str = labels::BERTH_PREFIX;

impl LabelText for TaintText {
    const EXPECTING: &'static str = "a map of taint key to value, such as {gpu_node: \"true\"}";
    const VALUE: &'static str = "a taint value";
    fn check(key: &str, value: &str) -> Result<(), String> {
        check_taint(key, value)?;
        if key.starts_with(RESERVED_TAINT_PREFIX) {
            return Err(format!(
                "taint keys beginning with {RESERVED_TAINT_PREFIX} are set by Berth (list a \
                 resource in rare_resources to taint the nodes that have it)"
            ));
        }
        Ok(())
    }
}

/// `label_selector`, `hard`, `soft` and `tolerations`: key → expression.
#[derive(Debug)]
struct Expression;

impl LabelText for Expression {
    const EXPECTING: &'static str =
        "a map of label key to expression, such as {region: \"in(us-west,us-east)\"}";
    const VALUE: &'static str = "an expression";
    fn check(key: &str, value: &str) -> Result<(), String> {
        LabelSelector::parse([(key, value)]).map(drop).map_err(|err| match err {
            // The path names the key already.
            SelectorError::Expression { expression, rule, .. } => {
                format!("expression {expression:?} is invalid: {rule}")
            }
            err => selector_error_text(&err),
        })
    }
}

/// A node's user labels.
type LabelMap = ByLabelKey<UserLabel>;
/// A node's taints.
type TaintMap = ByLabelKey<TaintText>;
/// A label selector or tolerations.
type ExpressionMap = ByLabelKey<Expression>;

impl<'de, T: LabelText> Deserialize<'de> for ByLabelKey<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ByLabelKey<T>, D::Error> {
        deserializer.deserialize_any(ByLabelKeyVisitor(PhantomData))
    }
}

struct ByLabelKeyVisitor<T>(PhantomData<T>);

impl<'de, T: LabelText> Visitor<'de> for ByLabelKeyVisitor<T> {
    type Value = ByLabelKey<T>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }
    fn visit_unit<E: de::Error>(self) -> Result<ByLabelKey<T>, E> {
        // `labels:` with nothing after it: none.
        Ok(ByLabelKey(Vec::new(), PhantomData))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ByLabelKey<T>, A::Error> {
        let mut entries: Vec<(String, String)> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            // The YAML parser rejects duplicate keys already; this keeps the rule if its
            // policy ever changes.
            if entries.iter().any(|(k, _)| *k == key) {
                return Err(de::Error::custom(format!("{key:?} is given twice")));
            }
            let value = map.next_value_seed(LabelTextSeed::<T>(&key, PhantomData))?;
            entries.push((key, value));
        }
        Ok(ByLabelKey(entries, PhantomData))
    }
}

/// Reads the value of `key` in a [`ByLabelKey`] map: a string that, with its key, follows
/// `T`'s rule.
struct LabelTextSeed<'k, T>(&'k str, PhantomData<T>);

impl<'de, T: LabelText> DeserializeSeed<'de> for LabelTextSeed<'_, T> {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        let value = deserializer.deserialize_any(StringOnly(T::VALUE))?;
        T::check(self.0, &value).map_err(de::Error::custom)?;
        Ok(value)
    }
}

/// A string and nothing else; other scalars are asked to be quoted.
struct StringOnly(&'static str);

impl StringOnly {
    fn quote<E: de::Error>(&self, found: &str, text: impl fmt::Display) -> E {
        E::custom(format!(
            "expected {} (a string), found the {found} {text}; write it in quotes: \"{text}\"",
            self.0
        ))
    }
}

impl<'de> Visitor<'de> for StringOnly {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (a string)", self.0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
        Err(self.quote("boolean", v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        Err(self.quote("number", v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        Err(self.quote("number", v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
        Err(self.quote("number", v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<String, E> {
        Err(E::custom(format!(
            "expected {} (a string), found nothing (null); write \"\" for the empty string",
            self.0
        )))
    }
}

/// A node fact that becomes a default label (`availability_zone: us-west1-a`): a label value.
#[derive(Debug)]
struct FactValue(String);

impl<'de> Deserialize<'de> for FactValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<FactValue, D::Error> {
        let value = deserializer.deserialize_any(StringOnly("a label value"))?;
        labels::validate_value("", &value).map_err(|err| match err {
            LabelError::Value { value, rule, .. } => {
                de::Error::custom(format!("label value {value:?} is invalid: {rule}"))
            }
            err => de::Error::custom(err),
        })?;
        Ok(FactValue(value))
    }
}

/// A [`LabelError`] about a label, taint or other `what`, without the word "label" where it
/// is not one: `taint key "bad key" is invalid: …`.
pub fn label_error_text(what: &str, err: &LabelError) -> String {
    match err {
        LabelError::Key { key, rule } => format!("{what} key {key:?} is invalid: {rule}"),
        LabelError::Value { key, value, rule } => {
            format!("{what} {key:?}: value {value:?} is invalid: {rule}")
        }
        other => other.to_string(),
    }
}

/// A [`SelectorError`] with the key named once: `key "region": expression "in()" is invalid:
/// in() needs at least one value`.
pub fn selector_error_text(err: &SelectorError) -> String {
    match err {
        SelectorError::Key(err) => label_error_text("label", err),
        SelectorError::Expression { key, expression, rule } => {
            format!("key {key:?}: expression {expression:?} is invalid: {rule}")
        }
    }
}

/// Checks a taint `key=value` (the label syntax).
pub fn check_taint(key: &str, value: &str) -> Result<(), String> {
    labels::validate_key(key)
        .and_then(|()| labels::validate_value(key, value))
        .map_err(|err| label_error_text("taint", &err))
}

/// A strategy name, case-insensitive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StrategyName {
    Default,
    Spread,
    Random,
    NodeAffinity,
    NodeLabel,
    ActorAffinity,
    PlacementGroup,
}

/// Shown when a strategy name is not one of ours.
const STRATEGY_HELP: &str = "use DEFAULT, SPREAD, RANDOM, or a map such as \
                             {type: NODE_AFFINITY, node_id: node-1}, \
                             {type: NODE_LABEL, hard: {zone: a}}, \
                             {type: ACTOR_AFFINITY, expressions: [{key: app, operator: IN, \
                             values: [web]}]} or {type: PLACEMENT_GROUP, group: pg-1}";

impl StrategyName {
    fn parse(text: &str) -> Option<StrategyName> {
        match text.to_ascii_uppercase().as_str() {
            "DEFAULT" => Some(StrategyName::Default),
            "SPREAD" => Some(StrategyName::Spread),
            "RANDOM" => Some(StrategyName::Random),
            "NODE_AFFINITY" => Some(StrategyName::NodeAffinity),
            "NODE_LABEL" => Some(StrategyName::NodeLabel),
            "ACTOR_AFFINITY" => Some(StrategyName::ActorAffinity),
            "PLACEMENT_GROUP" => Some(StrategyName::PlacementGroup),
            _ => None,
        }
    }

    /// The name as files write it.
    fn name(self) -> &'static str {
        match self {
            StrategyName::Default => "DEFAULT",
            StrategyName::Spread => "SPREAD",
            StrategyName::Random => "RANDOM",
            StrategyName::NodeAffinity => "NODE_AFFINITY",
            StrategyName::NodeLabel => "NODE_LABEL",
            StrategyName::ActorAffinity => "ACTOR_AFFINITY",
            StrategyName::PlacementGroup => "PLACEMENT_GROUP",
        }
    }

    fn parse_or_error<E: de::Error>(text: &str) -> Result<StrategyName, E> {
        StrategyName::parse(text).ok_or_else(|| {
            E::custom(format!("unknown scheduling strategy {text:?}; {STRATEGY_HELP}"))
        })
    }
}

impl<'de> Deserialize<'de> for StrategyName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<StrategyName, D::Error> {
        let text = String::deserialize(deserializer)?;
        StrategyName::parse_or_error(&text)
    }
}

/// The map form of `scheduling_strategy`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StrategyMap {
    #[serde(rename = "type")]
    kind: StrategyName,
    node_id: Option<String>,
    /// `true`/`false` with NODE_AFFINITY, a selector with NODE_LABEL.
    soft: Option<Spanned<Soft>>,
    spill_on_unavailable: Option<bool>,
    fail_on_unavailable: Option<bool>,
    /// NODE_LABEL: the selector that must hold.
    hard: Option<Spanned<ExpressionMap>>,
    /// ACTOR_AFFINITY: the expressions, checked together with their operators when the request
    /// is built (so that an error names `expressions[i].values`). Spanned for "none given".
    expressions: Option<Spanned<Vec<Spanned<ExpressionEntry>>>>,
    /// ACTOR_AFFINITY: how hard expressions combine.
    #[serde(rename = "match")]
    match_mode: Option<MatchName>,
    /// ACTOR_AFFINITY: what the actor does when a peer moves.
    on_peer_moved: Option<OnPeerMovedName>,
    /// PLACEMENT_GROUP: the group.
    group: Option<GroupIdText>,
    /// PLACEMENT_GROUP: the bundle; absent for the first bundle that can take the request.
    bundle: Option<BundleIndex>,
}

/// `soft:` in the map form of `scheduling_strategy`: a flag for NODE_AFFINITY, the preferred
/// selector for NODE_LABEL. Told apart by the value; which one fits the `type` is checked by
/// [`StrategyMap::into_strategy`].
#[derive(Debug)]
enum Soft {
    Flag(bool),
    Selector(ExpressionMap),
}

impl<'de> Deserialize<'de> for Soft {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Soft, D::Error> {
        struct SoftVisitor;
        impl<'de> Visitor<'de> for SoftVisitor {
            type Value = Soft;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "true or false (NODE_AFFINITY), or a map of label key to expression \
                     (NODE_LABEL)",
                )
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Soft, E> {
                Ok(Soft::Flag(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Soft, A::Error> {
                ExpressionMap::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(Soft::Selector)
            }
        }
        deserializer.deserialize_any(SoftVisitor)
    }
}

/// `scheduling_strategy`: a name (`SPREAD`) or a map (`{type: NODE_AFFINITY, node_id: …}`).
/// The core's [`Request::new`] checks the affinity flags against `soft`.
#[derive(Debug)]
enum StrategySpec {
    /// Every rule that a single value can break was checked while parsing.
    Ready(Strategy),
    /// ACTOR_AFFINITY, whose expressions are checked when the request is built
    /// ([`actors::affinity`]), so that the error can name the expression's field.
    ActorAffinity(AffinityDraft),
}

impl StrategySpec {
    /// The strategy, when it needed no building.
    #[cfg(test)]
    fn ready(&self) -> Option<&Strategy> {
        match self {
            StrategySpec::Ready(strategy) => Some(strategy),
            StrategySpec::ActorAffinity(_) => None,
        }
    }
}

impl<'de> Deserialize<'de> for StrategySpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<StrategySpec, D::Error> {
        struct SpecVisitor;
        impl<'de> Visitor<'de> for SpecVisitor {
            type Value = StrategySpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a scheduling strategy; {STRATEGY_HELP}")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<StrategySpec, E> {
                let strategy = match StrategyName::parse_or_error(text)? {
                    StrategyName::Default => Strategy::Default,
                    StrategyName::Spread => Strategy::Spread,
                    StrategyName::Random => Strategy::Random,
                    StrategyName::NodeAffinity => {
                        return Err(E::custom(
                            "NODE_AFFINITY needs a node: write it as a map, such as \
                             {type: NODE_AFFINITY, node_id: node-1}",
                        ))
                    }
                    StrategyName::NodeLabel => {
                        return Err(E::custom(NODE_LABEL_NEEDS_SELECTORS));
                    }
                    StrategyName::ActorAffinity => {
                        return Err(E::custom(ACTOR_AFFINITY_NEEDS_EXPRESSIONS));
                    }
                    StrategyName::PlacementGroup => {
                        return Err(E::custom(PLACEMENT_GROUP_NEEDS_GROUP));
                    }
                };
                Ok(StrategySpec::Ready(strategy))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<StrategySpec, A::Error> {
                let spec = StrategyMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                spec.into_strategy().map_err(de::Error::custom)
            }
        }
        deserializer.deserialize_any(SpecVisitor)
    }
}

impl StrategyMap {
    /// Checks which keys go with which `type`; the flag combinations are the core's to check,
    /// and ACTOR_AFFINITY's expressions are checked when the request is built.
    fn into_strategy(self) -> Result<StrategySpec, String> {
        let (affinity, label, actor, group) = (
            StrategyName::NodeAffinity,
            StrategyName::NodeLabel,
            StrategyName::ActorAffinity,
            StrategyName::PlacementGroup,
        );
        // Keys that belong to some types only (`soft` is checked per type below: its meaning
        // differs between the two types that take it).
        let owned: [(&str, bool, StrategyName); 9] = [
            ("node_id", self.node_id.is_some(), affinity),
            ("spill_on_unavailable", self.spill_on_unavailable.is_some(), affinity),
            ("fail_on_unavailable", self.fail_on_unavailable.is_some(), affinity),
            ("hard", self.hard.is_some(), label),
            ("expressions", self.expressions.is_some(), actor),
            ("match", self.match_mode.is_some(), actor),
            ("on_peer_moved", self.on_peer_moved.is_some(), actor),
            ("group", self.group.is_some(), group),
            ("bundle", self.bundle.is_some(), group),
        ];
        if let Some((key, _, owner)) =
            owned.iter().find(|(_, given, owner)| *given && *owner != self.kind)
        {
            return Err(format!("{key} is only allowed with type {}", owner.name()));
        }
        let (soft_flag, soft_selector) = match self.soft.map(|soft| soft.value) {
            None => (None, None),
            Some(Soft::Flag(flag)) => (Some(flag), None),
            Some(Soft::Selector(map)) => (None, Some(map)),
        };
        let soft_given = soft_flag.is_some() || soft_selector.is_some();
        let strategy = match self.kind {
            StrategyName::Default => Strategy::Default,
            StrategyName::Spread => Strategy::Spread,
            StrategyName::Random => Strategy::Random,
            StrategyName::NodeAffinity => {
                if soft_selector.is_some() {
                    return Err("soft is true or false with type NODE_AFFINITY; a selector in \
                                soft needs type NODE_LABEL"
                        .to_string());
                }
                let node = self.node_id.ok_or("node_id is required with type NODE_AFFINITY")?;
                Strategy::NodeAffinity(NodeAffinity {
                    node,
                    soft: soft_flag.unwrap_or(false),
                    spill_on_unavailable: self.spill_on_unavailable.unwrap_or(false),
                    fail_on_unavailable: self.fail_on_unavailable.unwrap_or(false),
                })
            }
            StrategyName::NodeLabel => {
                if soft_flag.is_some() {
                    return Err("soft is a map of label key to expression with type \
                                NODE_LABEL, such as {type: NODE_LABEL, soft: {zone: a}}"
                        .to_string());
                }
                if self.hard.is_none() && soft_selector.is_none() {
                    return Err(NODE_LABEL_NEEDS_SELECTORS.to_string());
                }
                let selector = |map: Option<&ExpressionMap>| {
                    LabelSelector::parse(map.into_iter().flat_map(ByLabelKey::pairs))
                        .map_err(|err| selector_error_text(&err))
                };
                Strategy::NodeLabel(NodeLabel {
                    hard: selector(self.hard.as_ref().map(|hard| &hard.value))?,
                    soft: selector(soft_selector.as_ref())?,
                })
            }
            StrategyName::ActorAffinity => {
                if soft_given {
                    return Err("soft is given per expression with type ACTOR_AFFINITY: \
                                {key: app, operator: IN, values: [web], soft: true}"
                        .to_string());
                }
                let expressions =
                    self.expressions.ok_or_else(|| ACTOR_AFFINITY_NEEDS_EXPRESSIONS.to_string())?;
                return Ok(StrategySpec::ActorAffinity(AffinityDraft {
                    match_mode: self.match_mode.map_or(MatchMode::All, |m| m.0),
                    on_peer_moved: self.on_peer_moved.map_or(OnPeerMoved::Stay, |o| o.0),
                    expressions,
                }));
            }
            StrategyName::PlacementGroup => {
                if soft_given {
                    return Err(
                        "soft is only allowed with type NODE_AFFINITY or NODE_LABEL".to_string()
                    );
                }
                let group = self.group.ok_or_else(|| PLACEMENT_GROUP_NEEDS_GROUP.to_string())?;
                Strategy::PlacementGroup(GroupPlacement {
                    group: group.0,
                    bundle: self.bundle.map(|b| b.0),
                })
            }
        };
        if soft_given && self.kind != affinity && self.kind != label {
            return Err("soft is only allowed with type NODE_AFFINITY or NODE_LABEL".to_string());
        }
        Ok(StrategySpec::Ready(strategy))
    }
}

/// Shown when NODE_LABEL has neither selector.
const NODE_LABEL_NEEDS_SELECTORS: &str = "NODE_LABEL needs hard, soft or both: maps of label \
                                          key to expression, such as \
                                          {type: NODE_LABEL, hard: {zone: a}}";

/// Shown when ACTOR_AFFINITY has no expressions.
const ACTOR_AFFINITY_NEEDS_EXPRESSIONS: &str =
    "ACTOR_AFFINITY needs expressions: write it as a map, such as {type: ACTOR_AFFINITY, \
     expressions: [{key: app, operator: IN, values: [web]}]}";

/// Shown when PLACEMENT_GROUP names no group.
const PLACEMENT_GROUP_NEEDS_GROUP: &str =
    "PLACEMENT_GROUP needs a group: write it as a map, such as {type: PLACEMENT_GROUP, group: \
     pg-1, bundle: 0}";

// ---------------------------------------------------------------------------------------------
// Reading and parsing.

/// One input file's text, kept for error snippets.
#[derive(Debug)]
struct Source {
    kind: FileKind,
    path: PathBuf,
    text: String,
}

impl Source {
    fn from_text(kind: FileKind, name: &str, text: String) -> Source {
        Source { kind, path: PathBuf::from(name), text }
    }

    fn read(kind: FileKind, path: &Path) -> Result<Source, InputError> {
        let text = std::fs::read_to_string(path).map_err(|source| InputError::Read {
            kind,
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Source { kind, path: path.to_path_buf(), text })
    }

    /// True when the file has nothing but blank lines and comments.
    fn is_blank(&self) -> bool {
        self.text.lines().all(|line| {
            let line = line.trim();
            line.is_empty() || line.starts_with('#')
        })
    }

    /// Parses the whole file as one YAML document (JSON is YAML too). A REST body is JSON by
    /// construction and is read by serde_json, several times faster than a YAML parser: the
    /// same types, rules and field paths (`Spanned` values carry no location then).
    fn parse<T: DeserializeOwned>(&self) -> Result<T, InputError> {
        if self.kind == FileKind::Body {
            return self.parse_json();
        }
        if self.is_blank() {
            // The parser would say "unexpected end of file", which does not say what to write.
            return Err(self.invalid(
                "",
                "the file is empty; expected a mapping (see docs/file-formats.md)",
                None,
            ));
        }
        let options = serde_saphyr::options! {
            // Only `true`/`false` are booleans: `avoid_gpu_nodes: no` is an error, not a
            // silent YAML 1.1 `false` (and a resource named `y` stays a name).
            strict_booleans: true,
            // `.nan` and `.inf` reach the amount parser as text, which rejects them with
            // the amount rule rather than a parser-policy message.
            non_finite_float_policy: NonFiniteFloatPolicy::AsString,
        };
        let mut field = String::new();
        let parsed = serde_saphyr::with_deserializer_from_str_with_options(
            &self.text,
            options,
            |deserializer| {
                serde_path_to_error::deserialize(deserializer).map_err(|err| {
                    field = field_path(err.path());
                    err.into_inner()
                })
            },
        );
        parsed.map_err(|err| {
            // The user-facing formatter words messages for people who write YAML rather than
            // Rust ("null is not allowed here", not "use Option<String>").
            let message = serde_saphyr::UserMessageFormatter.format_message(&err);
            self.invalid(field, message.into_owned(), err.location())
        })
    }

    fn parse_json<T: DeserializeOwned>(&self) -> Result<T, InputError> {
        let mut deserializer = serde_json::Deserializer::from_str(&self.text);
        let strip = |err: &serde_json::Error| {
            // serde_json appends " at line 1 column 42" to every message: the field says where.
            let message = err.to_string();
            match message.rfind(" at line ") {
                Some(cut) if err.line() > 0 => message[..cut].to_string(),
                _ => message,
            }
        };
        let parsed: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
            let field = json_path(err.path());
            self.invalid(field, strip(err.inner()), None)
        })?;
        deserializer.end().map_err(|err| self.invalid("", strip(&err), None))?;
        Ok(parsed)
    }

    /// An error at `field`, pointing at `location` when it is known.
    fn invalid(
        &self,
        field: impl Into<String>,
        message: impl Into<String>,
        location: Option<Location>,
    ) -> InputError {
        let location = location.filter(|l| l.line() > 0).map(|l| (l.line(), l.column().max(1)));
        let line_text = location.and_then(|(line, _)| {
            let index = usize::try_from(line - 1).ok()?;
            self.text.lines().nth(index).map(str::to_string)
        });
        InputError::Invalid(Box::new(Invalid {
            kind: self.kind,
            path: self.path.clone(),
            field: field.into(),
            message: message.into(),
            location,
            line_text,
        }))
    }
}

/// Formats a recorded path as `nodes[1].resources.GPU`.
///
/// `Spanned<T>` reads its value from an inner field named `value`, which serde_path_to_error
/// records like a key. Such a segment is dropped unless it directly follows one that was
/// dropped: user-keyed maps sit directly inside a `Spanned` (see [`ResourceMap`]), so in
/// `resources.value.value` the first is `Spanned`'s and the second a resource named `value`.
fn field_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    let mut after_dropped = false;
    for segment in path.iter() {
        let key = match segment {
            Segment::Seq { index } => {
                out.push_str(&format!("[{index}]"));
                after_dropped = false;
                continue;
            }
            Segment::Map { key } if key == SPANNED_VALUE && !after_dropped => {
                after_dropped = true;
                continue;
            }
            Segment::Map { key } => key,
            Segment::Enum { variant } => variant,
            // Where the parser failed before a key was known (a duplicate key, bad syntax).
            Segment::Unknown => {
                after_dropped = false;
                continue;
            }
        };
        after_dropped = false;
        push_key(&mut out, key);
    }
    out
}

/// Formats a path recorded over JSON (where `Spanned` adds no segment of its own).
fn json_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => push_key(&mut out, key),
            Segment::Enum { variant } => push_key(&mut out, variant),
            Segment::Unknown => {}
        }
    }
    out
}

/// Appends `.key`, quoting keys that are not plain words (`resources."nvidia.com/t4"`).
fn push_key(out: &mut String, key: &str) {
    if !out.is_empty() {
        out.push('.');
    }
    let plain =
        !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        out.push_str(key);
    } else {
        out.push_str(&format!("{key:?}"));
    }
}

/// `prefix.key`, the key quoted as [`push_key`] does.
fn under(prefix: &str, key: &str) -> String {
    let mut path = prefix.to_string();
    push_key(&mut path, key);
    path
}

/// The full path of `field`, a path the core gives relative to what it was passed
/// ([`RequestError::field`]: `resources.GPU`, `scheduling_strategy.node_id`), where `section`
/// gives the file's path of its first segment.
///
/// The core's paths are a section name and at most one key after it, and that key may contain
/// dots itself (a resource named `nvidia.com/gpu`): only the first dot separates, and the key
/// is quoted as every other path quotes it.
fn core_path(field: &str, section: impl FnOnce(&str) -> String) -> String {
    match field.split_once('.') {
        Some((head, key)) => under(&section(head), key),
        None => section(field),
    }
}

// ---------------------------------------------------------------------------------------------
// Building core types.

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
    let source = Source::read(FileKind::Cluster, path)?;
    let file: ClusterFile = source.parse()?;
    let config = scheduler_config(&source, file.scheduler)?;
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
        add_node(&source, &mut cluster, i, node)?;
    }
    rare_resources(&source, &mut cluster, &file.rare_resources)?;
    // Actors and bundles are placed before the nodes' states are applied, as allocations
    // are, so that draining nodes can hold them (dead ones cannot: they are errors).
    let states: HashMap<&str, NodeState> = file
        .nodes
        .iter()
        .map(|node| (node.id.value.as_str(), node.state.unwrap_or(NodeState::Alive)))
        .collect();
    actors::place_actors(&source, &mut cluster, &file.actors, &states)?;
    groups::reserve_groups(&source, &mut cluster, &file.placement_groups, &states)?;
    for (i, node) in file.nodes.iter().enumerate() {
        set_state(&source, &mut cluster, i, node)?;
    }
    Ok(ClusterSnapshot { cluster, config })
}

/// `rare_resources:`: interns the names and taints every node that has one (the core re-taints
/// the nodes added so far). Two names whose taint keys would be the same are an error: a
/// request asking for one would tolerate the other's taint.
fn rare_resources(
    source: &Source,
    cluster: &mut Cluster,
    names: &[Spanned<ResourceName>],
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
fn scheduler_config(
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
fn add_node(
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
fn set_state(
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
fn node_facts(node: &NodeEntry) -> [(&'static str, &'static str, Option<&Spanned<FactValue>>); 5] {
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
fn node_spec(
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
    let fact = |value: Option<&Spanned<FactValue>>| value.map(|v| v.value.0.clone());
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
fn label_error_field(
    node: &NodeEntry,
    field: &str,
    err: &LabelError,
) -> (String, Option<Location>) {
    let key = match err {
        LabelError::Key { key, .. } | LabelError::Value { key, .. } => key.as_str(),
        LabelError::ReservedNodeId => labels::NODE_ID,
        LabelError::NotKeyValue(_) | LabelError::Duplicate(_) => "",
    };
    fn in_map<T>(
        map: Option<&Spanned<ByLabelKey<T>>>,
        key: &str,
        section: String,
    ) -> Option<(String, Option<Location>)> {
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
fn reserve(
    source: &Source,
    cluster: &mut Cluster,
    index: NodeIndex,
    allocation: &Spanned<AllocationEntry>,
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
struct Reservation<'a> {
    /// Its path, for "does not fit".
    field: &'a str,
    location: Location,
    amounts: &'a ResourceMap,
    /// The path of the amounts (`field`, or `field.resources`).
    amounts_field: String,
    amounts_location: Location,
    /// `None`: the scheduler's rules choose the instances; `Some`: exactly those named (none
    /// named, `Some(None)`, is only right without unit-instance resources).
    exact: Option<Option<&'a Spanned<InstanceMap>>>,
    /// What was reserved on the node before it, for the "does not fit" message.
    before: &'static str,
}

/// Reserves `r` on node `index`, or says why it cannot be.
fn reserve_on(
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
fn intern(
    source: &Source,
    cluster: &mut Cluster,
    name: &ResourceName,
    field: &str,
    location: Location,
) -> Result<ResourceId, InputError> {
    cluster
        .registry_mut()
        .intern(&name.0)
        .map_err(|err| source.invalid(under(field, &name.0), err.to_string(), Some(location)))
}

/// Interns the names of `map`, found at `field`, and collects the amounts.
fn resource_set(
    source: &Source,
    cluster: &mut Cluster,
    map: &ResourceMap,
    field: &str,
    location: Location,
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
fn request_amounts(
    source: &Source,
    cluster: &Cluster,
    map: &ResourceMap,
    field: &str,
    location: Location,
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
fn instance_list(
    source: &Source,
    cluster: &mut Cluster,
    map: &Spanned<InstanceMap>,
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

/// What a request file asks for: an actor or task to place, or a placement group.
#[derive(Debug)]
pub enum LoadedRequest {
    /// An actor or task (`resources`, and `actor` for an actor).
    Request(Request),
    /// A placement group (`placement_group`).
    Group(GroupSpec),
}

/// Reads, parses and builds the request file at `path`. Its resource names are interned in
/// `cluster`'s registry: a resource no node has is a reason, not an input error.
pub fn load_request(path: &Path, cluster: &mut Cluster) -> Result<LoadedRequest, InputError> {
    let source = Source::read(FileKind::Request, path)?;
    let file: RequestFile = source.parse()?;
    ParsedRequest { source, file }.build(cluster)
}

/// A request document that passed every check a value can pass alone (the parse), waiting for
/// the checks that need the cluster ([`ParsedRequest::build`]). The head parses REST bodies
/// at the edge, on the handler's task, and builds them on the task that owns the cluster.
#[derive(Debug)]
pub struct ParsedRequest {
    source: Source,
    file: RequestFile,
}

impl ParsedRequest {
    /// Parses `text`, a request document in the request file's format (JSON or YAML), whose
    /// errors name `kind` and `name` (`request body of POST /api/v1/actors`).
    pub fn parse(kind: FileKind, name: &str, text: String) -> Result<ParsedRequest, InputError> {
        let source = Source::from_text(kind, name, text);
        let file: RequestFile = source.parse()?;
        Ok(ParsedRequest { source, file })
    }

    /// Builds the core request (or group spec) against `cluster`. A resource no node has is a
    /// reason (the request is infeasible), not an input error, and is not interned: only
    /// nodes grow the registry.
    pub fn build(&self, cluster: &mut Cluster) -> Result<LoadedRequest, InputError> {
        let (source, file) = (&self.source, &self.file);
        match (&file.resources, &file.placement_group) {
        (Some(resources), None) => request(source, cluster, file, resources),
        (None, Some(group)) => {
            // The group's keys are inside `placement_group`; the request's own do not apply.
            let request_keys = [
                ("actor", file.actor.as_ref().map(|a| a.referenced)),
                ("scheduling_strategy", file.scheduling_strategy.as_ref().map(|s| s.referenced)),
                ("preferred_node", file.preferred_node.as_ref().map(|n| n.referenced)),
                ("label_selector", file.label_selector.as_ref().map(|l| l.referenced)),
                (
                    "fallback_strategy",
                    file.fallback_strategy.first().map(|f| f.label_selector.referenced),
                ),
                ("tolerations", file.tolerations.as_ref().map(|t| t.referenced)),
            ];
            if let Some((key, location)) = request_keys.iter().find(|(_, given)| given.is_some()) {
                return Err(source.invalid(
                    *key,
                    format!(
                        "{key} is a key of an actor or task request, not of a placement group \
                         request; a group takes bundle_label_selector, tolerations and \
                         fallback_strategy inside placement_group"
                    ),
                    *location,
                ));
            }
            groups::request_group(source, cluster, group).map(LoadedRequest::Group)
        }
        (Some(_), Some(group)) => Err(source.invalid(
            "placement_group",
            "a request file places either an actor or task (resources) or a placement group \
             (placement_group), not both; a task goes into a group with scheduling_strategy: \
             {type: PLACEMENT_GROUP, group: …}",
            Some(group.referenced),
        )),
        (None, None) => Err(source.invalid(
            "",
            "a request file needs resources (an actor or task, such as resources: {CPU: 1}) or \
             placement_group (a placement group); see docs/file-formats.md",
            None,
        )),
    }
    }
}

/// Builds the actor or task request of `file`, whose `resources` are `resources`.
fn request(
    source: &Source,
    cluster: &mut Cluster,
    file: &RequestFile,
    resources: &Spanned<ResourceMap>,
) -> Result<LoadedRequest, InputError> {
    let resource_location = resources.referenced;
    let (resources, unknown) =
        request_amounts(source, cluster, &resources.value, "resources", resource_location)?;
    let (strategy, strategy_location) = match &file.scheduling_strategy {
        Some(spec) => {
            let strategy = match &spec.value {
                StrategySpec::Ready(strategy) => strategy.clone(),
                StrategySpec::ActorAffinity(draft) => actors::affinity(source, draft)?,
            };
            (strategy, Some(spec.referenced))
        }
        None => (Strategy::Default, None),
    };
    if let Strategy::PlacementGroup(_) = strategy {
        // The bundle's node was chosen when the group was reserved.
        let selectors = [
            ("label_selector", file.label_selector.as_ref().map(|l| l.referenced)),
            (
                "fallback_strategy",
                file.fallback_strategy.first().map(|f| f.label_selector.referenced),
            ),
            ("tolerations", file.tolerations.as_ref().map(|t| t.referenced)),
        ];
        if let Some((key, location)) = selectors.iter().find(|(_, given)| given.is_some()) {
            return Err(source.invalid(
                *key,
                format!(
                    "{key} does not apply with scheduling_strategy PLACEMENT_GROUP: the \
                     request runs on its bundle's node, chosen when the group was reserved \
                     (give selectors and tolerations to the group)"
                ),
                *location,
            ));
        }
    }
    let request = Request::new(resources, strategy, cluster.registry())
        .map_err(|err| {
            let location = match err {
                RequestError::FractionalInstances { .. } | RequestError::ForeignResource(_) => {
                    Some(resource_location)
                }
                RequestError::AffinityFlag { .. } | RequestError::AffinityNode(_) => {
                    strategy_location
                }
            };
            // The request file is the request: the core's paths start at its top.
            source.invalid(core_path(&err.field(), str::to_string), err.rule(), location)
        })?
        .with_unknown_resources(unknown);
    let preferred = match &file.preferred_node {
        None => None,
        Some(node) => Some(cluster.index_of(node.value.as_str()).ok_or_else(|| {
            source.invalid(
                "preferred_node",
                format!(
                    "there is no node {} in the cluster; name one of the cluster file's nodes",
                    node.value
                ),
                Some(node.referenced),
            )
        })?),
    };
    let label_selector = match &file.label_selector {
        None => LabelSelector::default(),
        Some(map) => selector(source, map, "label_selector")?,
    };
    let fallback = file
        .fallback_strategy
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let field = format!("fallback_strategy[{i}].label_selector");
            selector(source, &entry.label_selector, &field)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let tolerations = match &file.tolerations {
        None => Tolerations::default(),
        Some(map) => Tolerations(selector(source, map, "tolerations")?),
    };
    let request = request
        .with_preferred_node(preferred)
        .with_label_selector(label_selector)
        .with_fallback(fallback)
        .with_tolerations(tolerations);
    actors::with_actor(source, cluster, request, file.actor.as_ref()).map(LoadedRequest::Request)
}

/// The selector (or tolerations) of `map`, found at `field`. Every entry was checked while
/// parsing; an error here would be a rule the parse did not know.
fn selector(
    source: &Source,
    map: &Spanned<ExpressionMap>,
    field: &str,
) -> Result<LabelSelector, InputError> {
    LabelSelector::parse(map.value.pairs()).map_err(|err| {
        let path = match &err {
            SelectorError::Key(LabelError::Key { key, .. })
            | SelectorError::Expression { key, .. } => under(field, key),
            SelectorError::Key(_) => field.to_string(),
        };
        source.invalid(path, selector_error_text(&err), Some(map.referenced))
    })
}

/// Reads a labels file (`berth validate labels --labels-file`): a YAML map of label key to
/// value, user labels only (`berth.io/node-id` is Berth's). A file with nothing in it (or only
/// comments) has no labels.
pub fn load_labels_file(path: &Path) -> Result<Labels, InputError> {
    labels_of(Source::read(FileKind::Labels, path)?)
}

/// Parses the text of a labels file that arrived over the network (an agent's
/// `--labels-file`), with errors naming `name`.
pub fn parse_labels_text(name: &str, text: String) -> Result<Labels, InputError> {
    labels_of(Source::from_text(FileKind::Labels, name, text))
}

fn labels_of(source: Source) -> Result<Labels, InputError> {
    if source.is_blank() {
        return Ok(Labels::new());
    }
    let map: Spanned<LabelMap> = source.parse()?;
    // Checked while parsing; kept for rules the core may add.
    Labels::from_pairs(map.value.pairs())
        .map_err(|err| source.invalid("", label_error_text("label", &err), Some(map.referenced)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(kind: FileKind, text: &str) -> Source {
        Source { kind, path: PathBuf::from("test.yaml"), text: text.to_string() }
    }

    fn parse_error<T: DeserializeOwned + fmt::Debug>(text: &str) -> Invalid {
        match source(FileKind::Cluster, text).parse::<T>() {
            Err(InputError::Invalid(invalid)) => *invalid,
            other => panic!("expected an invalid-input error, got {other:?}"),
        }
    }

    #[test]
    fn json_bodies_are_read_with_the_same_rules_and_full_paths() {
        let error = |text: &str| match ParsedRequest::parse(FileKind::Body, "POST /x", text.into())
        {
            Err(InputError::Invalid(invalid)) => (invalid.field, invalid.message),
            other => panic!("expected an invalid body, got {other:?}"),
        };
        let (field, message) = error(r#"{"resources": {"value": -1}}"#);
        assert_eq!(field, "resources.value");
        assert!(message.contains("negative"), "{message}");
        assert_eq!(
            error(r#"{"resources": {"CPU": 1}, "label_selector": {"zone": "in("}}"#).0,
            "label_selector.zone"
        );
        assert_eq!(error(r#"{"resources": {"CPU": 1}} trailing"#).0, "");
        let (field, message) = error(r#"{"resources": {"CPU": 1}, "colour": 1}"#);
        assert_eq!(field, "colour");
        assert!(!message.contains("at line"), "{message}");
        let parsed = ParsedRequest::parse(
            FileKind::Body,
            "POST /x",
            r#"{"resources": {"GPU": 0.5}}"#.into(),
        );
        let mut cluster = Cluster::new(ResourceRegistry::default());
        assert!(matches!(parsed.unwrap().build(&mut cluster), Ok(LoadedRequest::Request(_))));
    }

    #[test]
    fn requests_never_grow_the_registry_so_made_up_names_never_exhaust_it() {
        // More distinct names than the registry can ever hold (65,536): each request is
        // accepted (infeasible: no node has the resource), and the registry stays as it was.
        let mut cluster = Cluster::new(ResourceRegistry::default());
        let before = cluster.registry().len();
        for i in 0..70_000 {
            let body = format!(r#"{{"resources": {{"CPU": 1, "made-up-{i}": 2}}}}"#);
            let parsed = ParsedRequest::parse(FileKind::Body, "POST /x", body).unwrap();
            let Ok(LoadedRequest::Request(request)) = parsed.build(&mut cluster) else {
                panic!("request {i} was refused");
            };
            assert_eq!(
                request.unknown_resources().iter().next(),
                Some((&*format!("made-up-{i}"), Quantity::from_whole(2)))
            );
        }
        let group = r#"{"placement_group": {"id": "pg", "bundles": [{"TPU": 1}, {"CPU": 1}]}}"#;
        let parsed = ParsedRequest::parse(FileKind::Body, "POST /x", group.into()).unwrap();
        let Ok(LoadedRequest::Group(spec)) = parsed.build(&mut cluster) else { panic!() };
        assert_eq!(
            spec.alternatives[0].unknown_reason().as_deref(),
            Some("bundle 0: no node has the resource \"TPU\" (asked 1)")
        );
        assert_eq!(cluster.registry().len(), before, "the registry did not grow");
        // A bad name is still an input error, naming it.
        let bad =
            ParsedRequest::parse(FileKind::Body, "POST /x", r#"{"resources": {"a b": 1}}"#.into());
        assert!(bad.is_err_and(|e| e.to_string().contains("\"a b\" is invalid")));
    }

    #[test]
    fn paths_drop_spanned_wrappers_but_keep_a_resource_named_value() {
        let err = parse_error::<RequestFile>("resources: {value: -1}\n");
        assert_eq!(err.field, "resources.value");
        assert!(err.message.contains("negative"), "{}", err.message);
        let err = parse_error::<RequestFile>("resources: {CPU: 1, nvidia.com/t4: x}\n");
        assert_eq!(err.field, "resources.\"nvidia.com/t4\"");
        let err = parse_error::<ClusterFile>(
            "nodes:\n  - id: a\n    resources: {}\n    allocations:\n      - {CPU: 1.00001}\n",
        );
        assert_eq!(err.field, "nodes[0].allocations[0].CPU");
        assert_eq!(err.location, Some((5, 15)));
        // The long form's sections are Spanned too; `value` as a resource name survives.
        let err = parse_error::<ClusterFile>(
            "nodes:\n  - id: a\n    resources: {}\n    allocations:\n      \
             - {resources: {value: 1}, instances: {value: [x]}}\n",
        );
        assert_eq!(err.field, "nodes[0].allocations[0].instances.value[0]");
        let err = parse_error::<ClusterFile>(
            "nodes:\n  - id: a\n    resources: {}\n    allocations:\n      \
             - {value: 1, resources: x}\n",
        );
        assert_eq!(err.field, "nodes[0].allocations[0].resources");
    }

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

    #[test]
    fn strategy_accepts_names_in_any_case_and_the_map_form() {
        for (text, expected) in [
            ("spread", Strategy::Spread),
            ("Random", Strategy::Random),
            ("{type: default}", Strategy::Default),
            (
                "{type: NODE_AFFINITY, node_id: n1, soft: true}",
                Strategy::NodeAffinity(NodeAffinity {
                    node: "n1".into(),
                    soft: true,
                    spill_on_unavailable: false,
                    fail_on_unavailable: false,
                }),
            ),
        ] {
            let yaml = format!("resources: {{}}\nscheduling_strategy: {text}\n");
            let file: RequestFile = source(FileKind::Request, &yaml).parse().unwrap();
            assert_eq!(file.scheduling_strategy.unwrap().value.ready(), Some(&expected), "{text}");
        }
    }

    #[test]
    fn node_label_strategy_and_selectors_parse() {
        let yaml = "resources: {}\nscheduling_strategy:\n  type: node_label\n  \
                    hard: {zone: \"IN(a, b)\"}\n  soft: {value: \"!exists()\"}\n\
                    label_selector: {team: ml}\nfallback_strategy:\n  - label_selector: {}\n\
                    tolerations: {gpu_node: \"exists()\"}\n";
        let file: RequestFile = source(FileKind::Request, yaml).parse().unwrap();
        let expected = Strategy::NodeLabel(NodeLabel {
            hard: LabelSelector::parse([("zone", "in(a,b)")]).unwrap(),
            soft: LabelSelector::parse([("value", "!exists()")]).unwrap(),
        });
        assert_eq!(file.scheduling_strategy.unwrap().value.ready(), Some(&expected));
        let pairs = |map: &ExpressionMap| -> Vec<(String, String)> {
            map.pairs().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        assert_eq!(pairs(&file.label_selector.unwrap().value), [("team".into(), "ml".into())]);
        assert!(pairs(&file.fallback_strategy[0].label_selector.value).is_empty());
        assert_eq!(
            pairs(&file.tolerations.unwrap().value),
            [("gpu_node".into(), "exists()".into())]
        );
    }

    #[test]
    fn label_values_are_strings_only() {
        for (value, found) in [("42", "number 42"), ("true", "boolean true"), ("~", "null")] {
            let err = parse_error::<ClusterFile>(&format!(
                "nodes:\n  - id: a\n    resources: {{}}\n    labels: {{team: {value}}}\n"
            ));
            assert_eq!(err.field, "nodes[0].labels.team", "{value}");
            assert!(err.message.contains(found), "{value}: {}", err.message);
        }
        let file: ClusterFile = source(
            FileKind::Cluster,
            "nodes:\n  - id: a\n    resources: {}\n    labels: {v: \"1.10\", e: \"\"}\n",
        )
        .parse()
        .unwrap();
        let labels = file.nodes[0].labels.as_ref().unwrap();
        assert_eq!(labels.value.pairs().collect::<Vec<_>>(), [("v", "1.10"), ("e", "")]);
    }

    #[test]
    fn strategy_errors_name_the_rule() {
        let cases = [
            ("PACK", "scheduling_strategy", "unknown scheduling strategy \"PACK\""),
            ("NODE_AFFINITY", "scheduling_strategy", "needs a node"),
            ("{type: SPREAD, soft: true}", "scheduling_strategy", "soft is only allowed"),
            ("{type: NODE_AFFINITY}", "scheduling_strategy", "node_id is required"),
            ("{type: SPREAD, weight: 2}", "scheduling_strategy.weight", "unknown field"),
            ("{type: NODE_AFFINITY, node_id: n1, soft: 1}", "scheduling_strategy.soft", ""),
        ];
        for (text, field, rule) in cases {
            let err = parse_error::<RequestFile>(&format!(
                "resources: {{}}\nscheduling_strategy: {text}\n"
            ));
            assert_eq!(err.field, field, "{text}: {}", err.message);
            assert!(err.message.contains(rule), "{text}: {}", err.message);
            assert_eq!(err.location.map(|l| l.0), Some(2), "{text}");
        }
    }

    #[test]
    fn snippet_points_at_the_column() {
        let err = source(FileKind::Cluster, "a: 1\n  b:\tc: 2\n").invalid("b", "bad", None);
        assert!(err.snippet().is_none(), "no location, no snippet");
        let invalid = parse_error::<ClusterFile>("nodes:\n  - id: a\n\tresources: {}\n");
        let snippet = InputError::Invalid(Box::new(invalid)).snippet().unwrap();
        assert!(snippet.contains("2 |   - id: a\n"), "{snippet}");
    }
}
