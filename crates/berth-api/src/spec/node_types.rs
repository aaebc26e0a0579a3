//! The autoscaler's file (`berth start --head --autoscaler FILE`, `berth up --autoscale FILE`):
//! the node types it may launch, the limits, and the provider that creates machines.
//!
//! A node type is written like a node of the cluster file (`resources`, `labels`, `taints`, the
//! facts) without `id`, `state` and `allocations`, plus `min_nodes` and `max_nodes`. Its nodes
//! get the fact `node_group: <type name>`, the label `berth.io/node-group` (seed 003's "worker
//! group name set by autoscaler"). Each type is checked by building a node of it, so a type is
//! accepted exactly when a node registering with its values would be.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::Located;
use berth_core::labels::{Labels, NodeFacts};
use berth_core::{Cluster, NodeId, Quantity, ResourceRegistry};
use serde::Deserialize;

use super::cluster::{label_error_field, node_spec, resource_set};
use super::label_maps::{FactValue, LabelMap, TaintMap};
use super::parsed::{NodeEntry, ResourceMap};
use super::source::{core_path, under, Source};
use super::{FileKind, InputError};

/// Default `idle_timeout_s`: a node with nothing on it for this long is removed.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default `launch_timeout_s`: a node that has not registered this long after the provider
/// created it is given up.
pub const DEFAULT_LAUNCH_TIMEOUT: Duration = Duration::from_secs(120);
/// Default `max_nodes` (the whole cluster's autoscaled nodes).
pub const DEFAULT_MAX_NODES: u32 = 16;
/// Default `upscaling_speed`, Ray's: launching may run ahead of the running nodes by this
/// factor (at least 5 nodes at a time).
pub const DEFAULT_UPSCALING_SPEED: f64 = 1.0;
/// Default time a `command` provider's run may take.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Default retries of a failed `command` run.
pub const DEFAULT_COMMAND_RETRIES: u32 = 2;

/// The autoscaler's settings, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct AutoscalerSettings {
    /// How machines are created and deleted.
    pub provider: ProviderSettings,
    /// Autoscaled nodes (alive or launching) at most, all types together. Nodes started by
    /// hand do not count.
    pub max_nodes: u32,
    /// An autoscaled node with nothing placed or reserved on it for this long is removed.
    pub idle_timeout: Duration,
    /// Launching nodes at most: `max(5, upscaling_speed × autoscaled nodes alive)`.
    pub upscaling_speed: f64,
    /// A node that has not registered this long after the provider created it is given up.
    pub launch_timeout: Duration,
    /// The node types, by name (ties between equally good types go to the first name).
    pub node_types: Vec<NodeType>,
}

/// How machines are created and deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderSettings {
    /// Agents started as processes on the head's machine (`berth start --address …`).
    Local,
    /// A user's executable, run as `PROGRAM ARGS… create|delete TYPE NODE_ID`.
    Command {
        /// The program and its first arguments.
        argv: Vec<String>,
        /// A run that takes longer is killed and counts as failed.
        timeout: Duration,
        /// Failed runs are retried this many times.
        retries: u32,
    },
}

/// One node type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeType {
    /// Its name: the label `berth.io/node-group` of its nodes.
    pub name: String,
    /// Its resources by name.
    pub resources: BTreeMap<String, Quantity>,
    /// User labels.
    pub labels: Labels,
    /// Facts (default labels); `node_group` is the type's name.
    pub facts: NodeFacts,
    /// Taints, `key=value`.
    pub taints: Vec<(String, String)>,
    /// Nodes of this type kept at least, idle or not.
    pub min_nodes: u32,
    /// Nodes of this type at most.
    pub max_nodes: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeTypesFile {
    #[serde(default)]
    provider: Option<ProviderSection>,
    #[serde(default)]
    max_nodes: Option<u32>,
    #[serde(default)]
    idle_timeout_s: Option<Located<f64>>,
    #[serde(default)]
    upscaling_speed: Option<Located<f64>>,
    #[serde(default)]
    launch_timeout_s: Option<Located<f64>>,
    node_types: Located<BTreeMap<String, Located<NodeTypeEntry>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, tag = "type", rename_all = "lowercase")]
enum ProviderSection {
    Local,
    Command {
        command: Located<Vec<String>>,
        #[serde(default)]
        timeout_s: Option<Located<f64>>,
        #[serde(default)]
        retries: Option<u32>,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeTypeEntry {
    resources: Located<ResourceMap>,
    #[serde(default)]
    labels: Option<Located<LabelMap>>,
    #[serde(default)]
    taints: Option<Located<TaintMap>>,
    #[serde(default)]
    accelerator_type: Option<Located<FactValue>>,
    #[serde(default)]
    market_type: Option<Located<FactValue>>,
    #[serde(default)]
    availability_zone: Option<Located<FactValue>>,
    #[serde(default)]
    availability_region: Option<Located<FactValue>>,
    #[serde(default)]
    min_nodes: u32,
    #[serde(default)]
    max_nodes: Option<u32>,
}

/// Reads and checks the autoscaler file at `path`. A `command` program given as a relative
/// path (`./nodes.sh`) is found beside the file, wherever the head runs from.
pub fn load_autoscaler(path: &Path) -> Result<AutoscalerSettings, InputError> {
    let source = Source::read(FileKind::NodeTypes, path)?;
    let mut settings = settings(&source)?;
    if let ProviderSettings::Command { argv, .. } = &mut settings.provider {
        let program = Path::new(&argv[0]);
        if program.is_relative() && argv[0].contains('/') {
            let dir = path.parent().unwrap_or(Path::new("."));
            argv[0] = dir.join(program).display().to_string();
        }
    }
    Ok(settings)
}

/// Checks the autoscaler file's `text`; errors name `name`.
pub fn parse_autoscaler(name: &str, text: String) -> Result<AutoscalerSettings, InputError> {
    settings(&Source::from_text(FileKind::NodeTypes, name, text))
}

fn settings(source: &Source) -> Result<AutoscalerSettings, InputError> {
    let file: NodeTypesFile = source.parse()?;
    let max_nodes = file.max_nodes.unwrap_or(DEFAULT_MAX_NODES);
    let seconds = |value: &Option<Located<f64>>, field: &str, default: Duration, max: f64| {
        let Some(value) = value else { return Ok(default) };
        if !(value.value.is_finite() && value.value > 0.0 && value.value <= max) {
            return Err(source.invalid(
                field,
                format!("{} is not a number of seconds above 0 and at most {max}", value.value),
                Some(value.referenced),
            ));
        }
        Ok(Duration::from_secs_f64(value.value))
    };
    let idle_timeout =
        seconds(&file.idle_timeout_s, "idle_timeout_s", DEFAULT_IDLE_TIMEOUT, 86_400.0)?;
    let launch_timeout =
        seconds(&file.launch_timeout_s, "launch_timeout_s", DEFAULT_LAUNCH_TIMEOUT, 86_400.0)?;
    let upscaling_speed = match &file.upscaling_speed {
        None => DEFAULT_UPSCALING_SPEED,
        Some(v) if v.value.is_finite() && v.value > 0.0 && v.value <= 1000.0 => v.value,
        Some(v) => {
            return Err(source.invalid(
                "upscaling_speed",
                format!("{} is not a number above 0 and at most 1000", v.value),
                Some(v.referenced),
            ))
        }
    };
    let provider = match file.provider {
        None | Some(ProviderSection::Local) => ProviderSettings::Local,
        Some(ProviderSection::Command { command, timeout_s, retries }) => {
            if command.value.is_empty() || command.value[0].trim().is_empty() {
                return Err(source.invalid(
                    "provider.command",
                    "give the program to run, then its first arguments: [./nodes.sh]",
                    Some(command.referenced),
                ));
            }
            let timeout =
                seconds(&timeout_s, "provider.timeout_s", DEFAULT_COMMAND_TIMEOUT, 3600.0)?;
            let retries = retries.unwrap_or(DEFAULT_COMMAND_RETRIES);
            if retries > 10 {
                return Err(source.invalid(
                    "provider.retries",
                    format!("{retries} is more than 10"),
                    None,
                ));
            }
            ProviderSettings::Command { argv: command.value, timeout, retries }
        }
    };
    if file.node_types.value.is_empty() {
        return Err(source.invalid(
            "node_types",
            "give at least one node type",
            Some(file.node_types.referenced),
        ));
    }
    let at = file.node_types.referenced;
    let mut node_types = Vec::new();
    for (name, entry) in file.node_types.value {
        node_types.push(node_type(source, name, entry, max_nodes)?);
    }
    let kept: u64 = node_types.iter().map(|t| u64::from(t.min_nodes)).sum();
    if kept > u64::from(max_nodes) {
        return Err(source.invalid(
            "node_types",
            format!(
                "the types' min_nodes add up to {kept}, more than max_nodes ({max_nodes}): they \
                 could never all be kept"
            ),
            Some(at),
        ));
    }
    Ok(AutoscalerSettings {
        provider,
        max_nodes,
        idle_timeout,
        upscaling_speed,
        launch_timeout,
        node_types,
    })
}

/// Checks one type by building a node of it in an empty cluster, with the rules a node
/// registering with these values meets.
fn node_type(
    source: &Source,
    name: String,
    entry: Located<NodeTypeEntry>,
    cluster_max: u32,
) -> Result<NodeType, InputError> {
    let field = under("node_types", &name);
    let at = entry.referenced;
    let entry = entry.value;
    // The name becomes a node-ID prefix and the value of a label.
    let id = NodeId::new(&format!("{name}-1")).map_err(|_| {
        source.invalid(
            field.clone(),
            "a type name is a label value that can start a node ID: letters, digits, '-', '_' \
             and '.', starting and ending with a letter or digit, at most 50 characters",
            Some(at),
        )
    })?;
    if name.len() > 50 || berth_core::labels::validate_value("", &name).is_err() {
        return Err(source.invalid(
            field,
            "a type name is a label value: letters, digits, '-', '_' and '.', starting and \
             ending with a letter or digit, at most 50 characters",
            Some(at),
        ));
    }
    let max_nodes = entry.max_nodes.unwrap_or(cluster_max);
    if entry.min_nodes > max_nodes {
        return Err(source.invalid(
            under(&field, "min_nodes"),
            format!("{} is more than max_nodes ({max_nodes})", entry.min_nodes),
            Some(at),
        ));
    }
    let group = Located { value: FactValue(name.clone()), referenced: at };
    let node = NodeEntry {
        id: Located { value: id, referenced: at },
        resources: entry.resources,
        state: None,
        allocations: Vec::new(),
        labels: entry.labels,
        taints: entry.taints,
        accelerator_type: entry.accelerator_type,
        market_type: entry.market_type,
        node_group: Some(group),
        availability_zone: entry.availability_zone,
        availability_region: entry.availability_region,
    };
    let mut cluster = Cluster::new(ResourceRegistry::default());
    let total = resource_set(
        source,
        &mut cluster,
        &node.resources.value,
        &under(&field, "resources"),
        node.resources.referenced,
    )?;
    let spec = node_spec(source, &node, &field, total)?;
    cluster.add_node_with(spec.clone()).map_err(|err| match &err {
        berth_core::ClusterError::Label(label) => {
            let (path, location) = label_error_field(&node, &field, label);
            source.invalid(path, super::label_error_text("label", label), location)
        }
        berth_core::ClusterError::Node(node_err) => source.invalid(
            core_path(&node_err.field(), |section| under(&field, section)),
            node_err.rule(),
            Some(node.resources.referenced),
        ),
        _ => source.invalid(field.clone(), err.to_string(), Some(at)),
    })?;
    let resources =
        node.resources.value.0.iter().map(|(name, amount)| (name.0.clone(), *amount)).collect();
    Ok(NodeType {
        name,
        resources,
        labels: spec.labels,
        facts: spec.facts,
        taints: spec.taints,
        min_nodes: entry.min_nodes,
        max_nodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AutoscalerSettings, String> {
        parse_autoscaler("types.yaml", text.to_string()).map_err(|e| e.to_string())
    }

    const TWO_TYPES: &str = "
max_nodes: 6
idle_timeout_s: 30
node_types:
  cpu:
    resources: {CPU: 4}
    labels: {tier: general}
    max_nodes: 3
  gpu:
    resources: {CPU: 8, GPU: 2}
    taints: {gpu_node: 'true'}
    accelerator_type: nvidia-a100
    min_nodes: 1
";

    #[test]
    fn a_file_with_two_types_gives_both_with_their_defaults() {
        let settings = parse(TWO_TYPES).expect("valid");
        assert_eq!(settings.provider, ProviderSettings::Local);
        assert_eq!(settings.max_nodes, 6);
        assert_eq!(settings.idle_timeout, Duration::from_secs(30));
        assert_eq!(settings.launch_timeout, DEFAULT_LAUNCH_TIMEOUT);
        let [cpu, gpu] = &settings.node_types[..] else { panic!("two types") };
        assert_eq!(cpu.name, "cpu");
        assert_eq!(cpu.max_nodes, 3);
        assert_eq!(cpu.labels.get("tier"), Some("general"));
        assert_eq!(cpu.facts.node_group.as_deref(), Some("cpu"));
        assert_eq!(gpu.max_nodes, 6, "the cluster's max_nodes by default");
        assert_eq!(gpu.min_nodes, 1);
        assert_eq!(gpu.taints, [("gpu_node".to_string(), "true".to_string())]);
        assert_eq!(gpu.facts.accelerator_type.as_deref(), Some("nvidia-a100"));
        assert_eq!(gpu.resources["GPU"], Quantity::from_whole(2));
    }

    #[test]
    fn a_command_provider_has_its_program_timeout_and_retries() {
        let text = "provider: {type: command, command: [./nodes.sh, --zone, a], timeout_s: 5, retries: 1}\nnode_types: {cpu: {resources: {CPU: 1}}}\n";
        let settings = parse(text).expect("valid");
        assert_eq!(
            settings.provider,
            ProviderSettings::Command {
                argv: vec!["./nodes.sh".into(), "--zone".into(), "a".into()],
                timeout: Duration::from_secs(5),
                retries: 1
            }
        );
    }

    #[test]
    fn bad_values_name_their_field_and_rule() {
        let cases = [
            ("node_types: {}\n", "node_types: give at least one node type"),
            ("node_types: {cpu: {resources: {CPU: -1}}}\n", "node_types.cpu.resources.CPU"),
            ("node_types: {gpu: {resources: {GPU: 0.5}}}\n", "node_types.gpu.resources.GPU"),
            ("node_types: {cpu: {resources: {CPU: 1}, min_nodes: 3, max_nodes: 2}}\n", "node_types.cpu.min_nodes: 3 is more than max_nodes (2)"),
            ("max_nodes: 3\nnode_types: {a: {resources: {CPU: 1}, min_nodes: 2}, b: {resources: {CPU: 1}, min_nodes: 2}}\n", "node_types: the types' min_nodes add up to 4, more than max_nodes (3)"),
            ("node_types: {'bad name!': {resources: {CPU: 1}}}\n", "a type name is a label value"),
            ("node_types: {cpu: {resources: {CPU: 1}, node_group: x}}\n", "unknown field"),
            ("node_types: {cpu: {resources: {CPU: 1}, taints: {'bad key!': x}}}\n", "node_types.cpu.taints"),
            ("idle_timeout_s: 0\nnode_types: {cpu: {resources: {CPU: 1}}}\n", "idle_timeout_s: 0 is not a number of seconds"),
            ("upscaling_speed: -1\nnode_types: {cpu: {resources: {CPU: 1}}}\n", "upscaling_speed: -1 is not a number above 0"),
            ("provider: {type: command, command: []}\nnode_types: {cpu: {resources: {CPU: 1}}}\n", "provider.command: give the program"),
            ("provider: {type: cloud}\nnode_types: {cpu: {resources: {CPU: 1}}}\n", "provider"),
        ];
        for (text, expected) in cases {
            let err = parse(text).expect_err(text);
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}
