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

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use berth_core::{
    Cluster, ClusterError, ConfigError, InstanceId, NodeAffinity, NodeError, NodeId, NodeIndex,
    NodeState, Quantity, Reason, Request, RequestError, ResourceId, ResourceRegistry, ResourceSet,
    SchedulerConfig, Strategy,
};
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_saphyr::{Location, MessageFormatter, NonFiniteFloatPolicy, Spanned};
use thiserror::Error;

/// Which of the two input files an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// The `--cluster` file.
    Cluster,
    /// The `--request` file.
    Request,
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::Cluster => "cluster file",
            FileKind::Request => "request file",
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
}

/// The request file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestFile {
    /// Spanned for the core's per-resource rules (GPU amounts above 1 must be whole).
    resources: Spanned<ResourceMap>,
    /// Spanned for the core's affinity-flag rules.
    #[serde(default)]
    scheduling_strategy: Option<Spanned<StrategySpec>>,
    /// Spanned for "no such node".
    #[serde(default)]
    preferred_node: Option<Spanned<NodeId>>,
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

/// A strategy name, case-insensitive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StrategyName {
    Default,
    Spread,
    Random,
    NodeAffinity,
}

/// Shown when a strategy name is not one of ours.
const STRATEGY_HELP: &str = "use DEFAULT, SPREAD, RANDOM, or a map such as \
                             {type: NODE_AFFINITY, node_id: node-1}";

impl StrategyName {
    fn parse(text: &str) -> Option<StrategyName> {
        match text.to_ascii_uppercase().as_str() {
            "DEFAULT" => Some(StrategyName::Default),
            "SPREAD" => Some(StrategyName::Spread),
            "RANDOM" => Some(StrategyName::Random),
            "NODE_AFFINITY" => Some(StrategyName::NodeAffinity),
            _ => None,
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
    soft: Option<bool>,
    spill_on_unavailable: Option<bool>,
    fail_on_unavailable: Option<bool>,
}

/// `scheduling_strategy`: a name (`SPREAD`) or a map (`{type: NODE_AFFINITY, node_id: …}`).
/// The core's [`Request::new`] checks the affinity flags against `soft`.
#[derive(Debug)]
struct StrategySpec(Strategy);

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
                };
                Ok(StrategySpec(strategy))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<StrategySpec, A::Error> {
                let spec = StrategyMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                spec.into_strategy().map(StrategySpec).map_err(de::Error::custom)
            }
        }
        deserializer.deserialize_any(SpecVisitor)
    }
}

impl StrategyMap {
    /// Checks which keys go with which `type`; the flag combinations are the core's to check.
    fn into_strategy(self) -> Result<Strategy, String> {
        let simple = match self.kind {
            StrategyName::Default => Strategy::Default,
            StrategyName::Spread => Strategy::Spread,
            StrategyName::Random => Strategy::Random,
            StrategyName::NodeAffinity => {
                let node = self.node_id.ok_or("node_id is required with type NODE_AFFINITY")?;
                return Ok(Strategy::NodeAffinity(NodeAffinity {
                    node,
                    soft: self.soft.unwrap_or(false),
                    spill_on_unavailable: self.spill_on_unavailable.unwrap_or(false),
                    fail_on_unavailable: self.fail_on_unavailable.unwrap_or(false),
                }));
            }
        };
        let extra = [
            ("node_id", self.node_id.is_some()),
            ("soft", self.soft.is_some()),
            ("spill_on_unavailable", self.spill_on_unavailable.is_some()),
            ("fail_on_unavailable", self.fail_on_unavailable.is_some()),
        ];
        match extra.iter().find(|(_, given)| *given) {
            Some((key, _)) => Err(format!("{key} is only allowed with type NODE_AFFINITY")),
            None => Ok(simple),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reading and parsing.

/// One input file's text, kept for error snippets.
struct Source {
    kind: FileKind,
    path: PathBuf,
    text: String,
}

impl Source {
    fn read(kind: FileKind, path: &Path) -> Result<Source, InputError> {
        let text = std::fs::read_to_string(path).map_err(|source| InputError::Read {
            kind,
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Source { kind, path: path.to_path_buf(), text })
    }

    /// Parses the whole file as one YAML document (JSON is YAML too).
    fn parse<T: DeserializeOwned>(&self) -> Result<T, InputError> {
        let blank = self.text.lines().all(|line| {
            let line = line.trim();
            line.is_empty() || line.starts_with('#')
        });
        if blank {
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
    Ok(ClusterSnapshot { cluster, config })
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

/// Adds node `i`, reserves its allocations in order, then sets its state (reservations need a
/// live node).
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
    let index = cluster.add_node(node.id.value.clone(), total).map_err(|err| match &err {
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
        _ => source.invalid(field.clone(), err.to_string(), Some(node.id.referenced)),
    })?;
    for (j, allocation) in node.allocations.iter().enumerate() {
        reserve(source, cluster, index, allocation, &format!("{field}.allocations[{j}]"))?;
    }
    let state = node.state.unwrap_or(NodeState::Alive);
    if state != NodeState::Alive {
        cluster
            .set_state(index, state)
            .map_err(|err| source.invalid(format!("{field}.state"), err.to_string(), None))?;
    }
    Ok(())
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
    let (amounts, amounts_field, amounts_location, exact) = match &allocation.value {
        AllocationEntry::Amounts(map) => (map, field.to_string(), location, None),
        AllocationEntry::Placed { resources, instances } => (
            &resources.value,
            under(field, RESOURCES_KEY),
            resources.referenced,
            Some(instances.as_ref()),
        ),
    };
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
                ""
            } else {
                " after the allocations listed before it"
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
    })?;
    Ok(())
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

/// Reads, parses and builds the request file at `path`. Its resource names are interned in
/// `cluster`'s registry: a resource no node has is a reason, not an input error.
pub fn load_request(path: &Path, cluster: &mut Cluster) -> Result<Request, InputError> {
    let source = Source::read(FileKind::Request, path)?;
    let file: RequestFile = source.parse()?;
    let resources = resource_set(
        &source,
        cluster,
        &file.resources.value,
        "resources",
        file.resources.referenced,
    )?;
    let (strategy, strategy_location) = match file.scheduling_strategy {
        Some(spec) => (spec.value.0, Some(spec.referenced)),
        None => (Strategy::Default, None),
    };
    let request = Request::new(resources, strategy, cluster.registry()).map_err(|err| {
        let location = match err {
            RequestError::FractionalInstances { .. } | RequestError::ForeignResource(_) => {
                Some(file.resources.referenced)
            }
            RequestError::AffinityFlag { .. } | RequestError::AffinityNode(_) => strategy_location,
        };
        // The request file is the request: the core's paths start at its top.
        source.invalid(core_path(&err.field(), str::to_string), err.rule(), location)
    })?;
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
    Ok(request.with_preferred_node(preferred))
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
            assert_eq!(file.scheduling_strategy.unwrap().value.0, expected, "{text}");
        }
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
