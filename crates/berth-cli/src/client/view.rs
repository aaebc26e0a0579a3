//! How the REST answers are printed for people: one-line-per-object tables (`berth list`),
//! `key: value` details with history and diagnosis (`berth get`), and the pieces they share.
//!
//! Everything here is a pure function of the answer, so it is tested on answers built from the
//! `berth_api::rest` types. Tables have no borders (as `kubectl get`), one object per line, so
//! that `grep` and `awk` work on them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use berth_api::rest::{
    Actor, Bundle, Diagnosis, Event, Group, Job, Lifetime, Node, Ownership, ResourceTable,
    StringMap, Taint, Task,
};
use berth_api::spec::PlacementSpec;
use comfy_table::{presets, CellAlignment, ContentArrangement, Table};
use serde::Serialize;
use serde_json::Value;

/// What an empty cell shows.
pub const NONE: &str = "-";

// ---------------------------------------------------------------------------------------------
// Tables.

/// A borderless table: the header (when it has a name) over the rows, columns two spaces
/// apart, every line indented by `indent` spaces, no trailing spaces. Columns whose header
/// starts with `#` are aligned right (the `#` is not shown).
pub fn columns(header: &[&str], rows: &[Vec<String>], indent: usize) -> String {
    let mut table = Table::new();
    table.load_style(presets::NOTHING).set_content_arrangement(ContentArrangement::Disabled);
    // A header of empty names only sets the alignment.
    if header.iter().any(|h| !h.trim_start_matches('#').is_empty()) {
        table.set_header(header.iter().map(|h| h.trim_start_matches('#')));
    }
    for row in rows {
        table.add_row(row);
    }
    for (i, column) in table.column_iter_mut().enumerate() {
        column.set_padding((0, 2));
        if header.get(i).is_some_and(|h| h.starts_with('#')) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    let pad = " ".repeat(indent);
    let mut out = String::new();
    for line in table.lines() {
        let line = line.trim_end();
        let _ = writeln!(out, "{pad}{line}");
    }
    out
}

/// `key: value` lines with the values lined up; a value of several lines continues under
/// itself. Empty values are left out.
#[derive(Default)]
pub struct Fields(Vec<(String, String)>);

impl Fields {
    /// Adds `key: value` (nothing when `value` is empty).
    pub fn add(&mut self, key: &str, value: impl Into<String>) -> &mut Self {
        let value = value.into();
        if !value.is_empty() {
            self.0.push((key.to_string(), value));
        }
        self
    }

    /// The lines.
    pub fn render(&self) -> String {
        let width = self.0.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0) + 2;
        let mut out = String::new();
        for (key, value) in &self.0 {
            let mut lines = value.lines();
            let first = lines.next().unwrap_or_default();
            let _ = writeln!(out, "{:width$}{first}", format!("{key}:"));
            for line in lines {
                let _ = writeln!(out, "{:width$}{line}", "");
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Values.

/// A serde enum's wire name (`ALIVE`, `PENDING`).
pub fn name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(text)) => text,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
    }
}

pub use berth_api::text::amount;

/// `CPU 2/8, GPU 1/4, memory 4Gi/32Gi`: used over total per resource.
pub fn use_text(resources: &ResourceTable) -> String {
    let parts: Vec<String> = resources
        .iter()
        .map(|(name, u)| {
            let (used, total) = (u.used.to_string(), u.total.to_string());
            format!("{name} {}/{}", amount(name, &used), amount(name, &total))
        })
        .collect();
    if parts.is_empty() {
        NONE.into()
    } else {
        parts.join(", ")
    }
}

/// A resource map as given in a body (`{"CPU": 1, "GPU": "0.5"}`): `CPU 1, GPU 0.5`.
pub fn spec_resources(resources: &impl serde::Serialize) -> String {
    match &serde_json::to_value(resources).unwrap_or_default() {
        Value::Object(map) if map.is_empty() => "nothing".into(),
        Value::Object(map) => map
            .iter()
            .map(|(name, amount)| format!("{name} {}", plain(amount)))
            .collect::<Vec<_>>()
            .join(", "),
        other => plain(other),
    }
}

/// A bundle's resources: `GPU 1, CPU 4`.
fn bundle_resources(resources: &StringMap) -> String {
    if resources.is_empty() {
        return "nothing".into();
    }
    resources.iter().map(|(n, a)| format!("{n} {}", amount(n, a))).collect::<Vec<_>>().join(", ")
}

/// Instance IDs per resource: `GPU [0, 1]`.
pub fn instances(map: &BTreeMap<String, Vec<u32>>) -> String {
    map.iter()
        .map(|(name, ids)| {
            let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
            format!("{name} [{}]", ids.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `k=v,k2=v2`.
pub fn pairs(map: &StringMap) -> String {
    map.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// A node's labels without the ones that say nothing in a list: `berth.io/node-id` (the ID
/// column) and Berth's labels left empty.
pub fn node_labels(labels: &StringMap) -> String {
    let shown: StringMap = labels
        .iter()
        .filter(|(k, v)| *k != "berth.io/node-id" && !(k.starts_with("berth.io/") && v.is_empty()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    pairs(&shown)
}

/// `gpu_node=true,berth.io/rare-GPU=true`.
pub fn taints(taints: &[Taint]) -> String {
    taints.iter().map(|t| format!("{}={}", t.key, t.value)).collect::<Vec<_>>().join(",")
}

/// A JSON value for people: strings without quotes, the rest as compact JSON.
pub fn plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// `opt`'s value, or [`NONE`].
fn or_none(opt: Option<&str>) -> String {
    opt.filter(|s| !s.is_empty()).unwrap_or(NONE).to_string()
}

/// Milliseconds since the Unix epoch as UTC: `2023-11-14 22:13:20Z`.
pub fn time(ms: u64) -> String {
    berth_api::text::utc(ms / 1000, ' ')
}

/// A command line as a shell would take it back: arguments with spaces or quotes in quotes.
pub fn command_line(command: &str, args: &[String]) -> String {
    std::iter::once(command)
        .chain(args.iter().map(String::as_str))
        .map(shell_word)
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_word(word: &str) -> String {
    let safe = !word.is_empty()
        && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if safe {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// `0.5` of `2` as a bar of `width` cells and a percentage.
pub fn bar(used: &str, total: &str, width: usize) -> (String, String) {
    let (Ok(used), Ok(total)) = (used.parse::<f64>(), total.parse::<f64>()) else {
        return (String::new(), String::new());
    };
    if total <= 0.0 {
        return ("░".repeat(width), String::new());
    }
    let share = (used / total).clamp(0.0, 1.0);
    // Any use at all shows one cell; only a full resource fills the bar.
    let mut filled = (share * width as f64).round() as usize;
    if used > 0.0 && filled == 0 {
        filled = 1;
    }
    if used < total && filled == width {
        filled = width - 1;
    }
    (
        format!("{}{}", "█".repeat(filled), "░".repeat(width - filled)),
        format!("{:.0}%", share * 100.0),
    )
}

// ---------------------------------------------------------------------------------------------
// Diagnosis and history.

/// `pending because: …` or `infeasible: …`, then the reasons with their counts.
pub fn diagnosis(diagnosis: &Diagnosis) -> String {
    let head = if diagnosis.infeasible {
        "infeasible (no node could ever take it)"
    } else {
        "pending (waiting for resources or peers)"
    };
    let mut out = format!("{head}: {}\n", diagnosis.summary);
    for hint in &diagnosis.hints {
        out.push_str(&format!("hint: {hint}\n"));
    }
    if !diagnosis.reasons.is_empty() {
        let rows: Vec<Vec<String>> = diagnosis
            .reasons
            .iter()
            .map(|r| vec![r.count.to_string(), r.text.clone(), format!("({})", r.code)])
            .collect();
        out.push_str(&columns(&[], &rows, 2));
    }
    out
}

/// One line per event: time, kind, node, message.
pub fn history(events: &[Event]) -> String {
    if events.is_empty() {
        return "  (none)\n".into();
    }
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                time(e.at_ms),
                e.kind.to_string(),
                or_none(e.node_id.as_deref()),
                e.message.to_string(),
            ]
        })
        .collect();
    columns(&["TIME", "EVENT", "NODE", "MESSAGE"], &rows, 2)
}

/// What a list row shows in its last column: why it waits, or why it ended.
fn detail(diagnosis: Option<&Diagnosis>, ended: Option<&str>) -> String {
    match (diagnosis, ended) {
        (Some(d), _) => {
            let word = if d.infeasible { "infeasible" } else { "pending" };
            format!("{word}: {}", d.summary)
        }
        (None, Some(reason)) => reason.to_string(),
        (None, None) => String::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Lists.

/// `berth list nodes`.
pub fn nodes_table(nodes: &[Node]) -> String {
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            vec![
                n.node_id.clone(),
                n.address.clone(),
                name(&n.state),
                use_text(&n.resources),
                n.actors.to_string(),
                n.tasks.to_string(),
                or_none(Some(&taints(&n.taints))),
                or_none(Some(&node_labels(&n.labels))),
            ]
        })
        .collect();
    columns(
        &[
            "NODE",
            "ADDRESS",
            "STATE",
            "RESOURCES (USED/TOTAL)",
            "#ACTORS",
            "#TASKS",
            "TAINTS",
            "LABELS",
        ],
        &rows,
        0,
    )
}

/// `berth list actors`.
pub fn actors_table(actors: &[Actor]) -> String {
    let rows: Vec<Vec<String>> = actors
        .iter()
        .map(|a| {
            vec![
                a.actor_id.to_string(),
                or_none(a.name.as_deref()),
                a.namespace.clone(),
                name(&a.state),
                or_none(a.node_id.as_deref()),
                spec_resources(&a.spec.placement.resources),
                or_none(Some(&instances(&a.instances))),
                a.restarts.to_string(),
                or_none(Some(&pairs(&a.spec.labels))),
                detail(a.diagnosis.as_deref(), a.death_reason.as_deref()),
            ]
        })
        .collect();
    columns(
        &[
            "ACTOR",
            "NAME",
            "NAMESPACE",
            "STATE",
            "NODE",
            "RESOURCES",
            "INSTANCES",
            "#RESTARTS",
            "LABELS",
            "DETAIL",
        ],
        &rows,
        0,
    )
}

/// `berth list tasks`.
pub fn tasks_table(tasks: &[Task]) -> String {
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .map(|t| {
            vec![
                t.task_id.to_string(),
                or_none(t.name.as_deref()),
                t.namespace.clone(),
                name(&t.state),
                or_none(t.node_id.as_deref()),
                spec_resources(&t.spec.placement.resources),
                or_none(Some(&instances(&t.instances))),
                t.attempts.to_string(),
                t.exit_code.map_or(NONE.to_string(), |c| c.to_string()),
                detail(t.diagnosis.as_deref(), t.failure.as_deref()),
            ]
        })
        .collect();
    columns(
        &[
            "TASK",
            "NAME",
            "NAMESPACE",
            "STATE",
            "NODE",
            "RESOURCES",
            "INSTANCES",
            "#ATTEMPTS",
            "#EXIT",
            "DETAIL",
        ],
        &rows,
        0,
    )
}

/// `GPU 1 @gpu-1; GPU 1 @gpu-2` (`@-` while a bundle has no node).
fn bundles_text(bundles: &[Bundle]) -> String {
    bundles
        .iter()
        .map(|b| format!("{} @{}", bundle_resources(&b.resources), or_none(b.node_id.as_deref())))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `berth list pgs`.
pub fn groups_table(groups: &[Group]) -> String {
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            vec![
                g.group_id.clone(),
                or_none(g.name.as_deref()),
                g.namespace.clone(),
                name(&g.state),
                g.strategy.clone(),
                bundles_text(&g.bundles),
                detail(g.diagnosis.as_ref(), None),
            ]
        })
        .collect();
    columns(&["PG", "NAME", "NAMESPACE", "STATE", "STRATEGY", "BUNDLES", "DETAIL"], &rows, 0)
}

/// `berth list jobs`.
pub fn jobs_table(jobs: &[Job]) -> String {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            vec![
                j.job_id.clone(),
                or_none(j.spec.name.as_deref()),
                name(&j.state),
                time(j.created_at_ms),
                j.ended_at_ms.map_or_else(|| NONE.to_string(), time),
                or_none(j.end_reason.as_deref()),
            ]
        })
        .collect();
    columns(&["JOB", "NAME", "STATE", "STARTED", "ENDED", "DETAIL"], &rows, 0)
}

// ---------------------------------------------------------------------------------------------
// Details.

/// Adds what an object's creation said of its job and owner.
fn ownership_fields(fields: &mut Fields, ownership: &Ownership) {
    let (job_id, owner_id) = (ownership.job_id.as_deref(), ownership.owner_id.as_deref());
    let owner = match (owner_id, job_id) {
        (Some(owner), _) => owner.to_string(),
        (None, Some(job)) => format!("the driver of {job}"),
        (None, None) => String::new(),
    };
    fields.add("job", job_id.unwrap_or_default()).add("owner", owner);
    if ownership.lifetime == Lifetime::Detached || job_id.is_some() || owner_id.is_some() {
        fields.add("lifetime", name(&ownership.lifetime));
    }
}

/// `berth get job-3`.
pub fn job_detail(job: &Job) -> String {
    let spec = &job.spec;
    let mut fields = Fields::default();
    fields
        .add("job", job.job_id.as_str())
        .add("name", spec.name.clone().unwrap_or_default())
        .add("namespace", spec.namespace.clone().unwrap_or_default())
        .add("state", name(&job.state))
        .add("lease", format!("{} ms", job.lease_ms))
        .add("created", time(job.created_at_ms))
        .add("ended", job.ended_at_ms.map(time).unwrap_or_default())
        .add("end reason", job.end_reason.clone().unwrap_or_default())
        .add("metadata", pairs(&spec.metadata));
    let mut out = fields.render();
    sections(&mut out, None, &job.history);
    out
}

/// Adds the placement keys of a create body that were given.
fn placement_fields(fields: &mut Fields, spec: &PlacementSpec) {
    fields
        .add("strategy", given(spec.scheduling_strategy.as_ref()))
        .add("label selector", given(spec.label_selector.as_ref()))
        .add("fallback", given(Some(&spec.fallback_strategy).filter(|f| !f.is_empty())))
        .add("tolerations", given(spec.tolerations.as_ref()));
}

/// An optional placement field of a spec, as [`plain`] text; empty when not given.
fn given(value: Option<&impl serde::Serialize>) -> String {
    value.and_then(|v| serde_json::to_value(v).ok()).map(|v| plain(&v)).unwrap_or_default()
}

/// The diagnosis (when waiting) and history sections.
fn sections(out: &mut String, diagnosis_of: Option<&Diagnosis>, events: &[Event]) {
    if let Some(d) = diagnosis_of {
        out.push('\n');
        out.push_str(&diagnosis(d));
    }
    out.push_str("\nhistory:\n");
    out.push_str(&history(events));
}

/// `berth get node`.
pub fn node_detail(node: &Node) -> String {
    let mut fields = Fields::default();
    fields
        .add("node", node.node_id.as_str())
        .add("address", node.address.as_str())
        .add("state", name(&node.state))
        .add("dead reason", node.dead_reason.clone().unwrap_or_default())
        .add("registered", time(node.registered_at_ms))
        .add("actors", node.actors.to_string())
        .add("tasks", node.tasks.to_string())
        .add("taints", or_none(Some(&taints(&node.taints))))
        .add(
            "labels",
            node.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("\n"),
        );
    let mut out = fields.render();
    out.push_str("\nresources:\n");
    let rows: Vec<Vec<String>> = node
        .resources
        .iter()
        .map(|(n, u)| {
            let [used, total, available] = [u.used, u.total, u.available].map(|q| q.to_string());
            vec![n.to_string(), amount(n, &used), amount(n, &total), amount(n, &available)]
        })
        .collect();
    if rows.is_empty() {
        out.push_str("  (none)\n");
    } else {
        out.push_str(&columns(&["RESOURCE", "#USED", "#TOTAL", "#AVAILABLE"], &rows, 2));
    }
    out
}

/// `berth get actor-…`.
pub fn actor_detail(actor: &Actor) -> String {
    let spec = &actor.spec;
    let mut fields = Fields::default();
    fields
        .add("actor", &*actor.actor_id)
        .add("name", actor.name.clone().unwrap_or_default())
        .add("namespace", actor.namespace.as_str())
        .add("state", name(&actor.state))
        .add("node", or_none(actor.node_id.as_deref()))
        .add("instances", instances(&actor.instances))
        .add(
            "restarts",
            format!("{} (at most {})", actor.restarts, max_restarts(spec.max_restarts)),
        )
        .add("death reason", actor.death_reason.clone().unwrap_or_default())
        .add(
            "listening",
            actor
                .endpoint
                .as_ref()
                .map(|e| format!("{} (attempt {})", e.address, e.attempt))
                .unwrap_or_default(),
        )
        .add("created", time(actor.created_at_ms));
    ownership_fields(&mut fields, &spec.ownership);
    fields
        .add("command", command_line(&spec.command, &spec.args))
        .add("env", pairs(&spec.env))
        .add("resources", spec_resources(&spec.placement.resources))
        .add("labels", pairs(&spec.labels));
    placement_fields(&mut fields, &spec.placement);
    let mut out = fields.render();
    sections(&mut out, actor.diagnosis.as_deref(), &actor.history);
    out
}

fn max_restarts(max: i32) -> String {
    if max < 0 {
        "unlimited".into()
    } else {
        max.to_string()
    }
}

/// `berth get task-…`.
pub fn task_detail(task: &Task) -> String {
    let spec = &task.spec;
    let mut fields = Fields::default();
    fields
        .add("task", &*task.task_id)
        .add("name", task.name.clone().unwrap_or_default())
        .add("namespace", task.namespace.as_str())
        .add("state", name(&task.state))
        .add("node", or_none(task.node_id.as_deref()))
        .add("instances", instances(&task.instances))
        .add("attempts", format!("{} (retries at most {})", task.attempts, spec.max_retries))
        .add("exit code", task.exit_code.map(|c| c.to_string()).unwrap_or_default())
        .add("failure", task.failure.clone().unwrap_or_default())
        .add("created", time(task.created_at_ms));
    ownership_fields(&mut fields, &spec.ownership);
    fields
        .add("command", command_line(&spec.command, &spec.args))
        .add("env", pairs(&spec.env))
        .add("resources", spec_resources(&spec.placement.resources));
    placement_fields(&mut fields, &spec.placement);
    let mut out = fields.render();
    sections(&mut out, task.diagnosis.as_deref(), &task.history);
    out
}

/// `berth get pg-…`.
pub fn group_detail(group: &Group) -> String {
    let spec = &group.spec;
    let alternative = match group.alternative {
        Some(0) => "0 (bundles)".to_string(),
        Some(i) => format!("{i} (fallback_strategy[{}])", i - 1),
        None => String::new(),
    };
    let mut fields = Fields::default();
    fields
        .add("placement group", group.group_id.as_str())
        .add("name", group.name.clone().unwrap_or_default())
        .add("namespace", group.namespace.as_str())
        .add("state", name(&group.state))
        .add("strategy", group.strategy.as_str())
        .add("alternative", alternative)
        .add("created", time(group.created_at_ms));
    ownership_fields(&mut fields, &spec.ownership);
    fields
        .add("bundle selectors", given(spec.placement.bundle_label_selector.as_ref()))
        .add("tolerations", given(spec.placement.tolerations.as_ref()))
        .add("fallback", given(Some(&spec.placement.fallback_strategy).filter(|f| !f.is_empty())));
    let mut out = fields.render();
    out.push_str("\nbundles:\n");
    let rows: Vec<Vec<String>> = group
        .bundles
        .iter()
        .map(|b| {
            vec![b.index.to_string(), bundle_resources(&b.resources), or_none(b.node_id.as_deref())]
        })
        .collect();
    out.push_str(&columns(&["#BUNDLE", "RESOURCES", "NODE"], &rows, 2));
    sections(&mut out, group.diagnosis.as_ref(), &group.history);
    out
}

/// One line for a just-created (or just-killed) object: `actor-12 PENDING`, `on gpu-2`,
/// `GPU [0]`, then the diagnosis when it waits.
pub fn summary_line(
    id: &str,
    state: &str,
    node: Option<&str>,
    instances_of: &BTreeMap<String, Vec<u32>>,
    diagnosis_of: Option<&Diagnosis>,
) -> String {
    let mut line = format!("{id} {state}");
    if let Some(node) = node {
        let _ = write!(line, " on {node}");
    }
    if !instances_of.is_empty() {
        let _ = write!(line, ", {}", instances(instances_of));
    }
    line.push('\n');
    if let Some(d) = diagnosis_of {
        line.push_str(&diagnosis(d));
    }
    line
}

#[cfg(test)]
pub mod fixtures {
    //! Answers built with the API types, as a head would send them.

    use berth_api::rest::*;
    use berth_api::spec::{PlacementGroupSpec, PlacementSpec};
    use serde_json::json;
    use std::sync::Arc;

    pub fn usage(total: &str, used: &str, available: &str) -> ResourceUse {
        let amount = |text: &str| berth_core::Quantity::parse(text).unwrap();
        ResourceUse { total: amount(total), used: amount(used), available: amount(available) }
    }

    pub fn map(pairs: &[(&str, &str)]) -> StringMap {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    pub fn gpu_diagnosis() -> Diagnosis {
        Diagnosis {
            infeasible: false,
            summary: "0/2 nodes can take it now: 1 too little GPU free, 1 untolerated taint \
                      gpu_node=true"
                .into(),
            hints: Vec::new(),
            reasons: vec![
                ReasonCount {
                    code: "insufficient_free:GPU".into(),
                    text: "too little GPU free".into(),
                    count: 1,
                },
                ReasonCount {
                    code: "untolerated_taint:gpu_node=true".into(),
                    text: "untolerated taint gpu_node=true".into(),
                    count: 1,
                },
            ],
        }
    }

    pub fn node() -> Node {
        Node {
            node_id: "gpu-1".into(),
            address: "10.0.0.3".into(),
            state: NodeState::Alive,
            labels: Arc::new(map(&[
                ("berth.io/node-id", "gpu-1"),
                ("berth.io/accelerator-type", "nvidia-a100"),
                ("berth.io/market-type", ""),
                ("team", "ml"),
            ])),
            taints: vec![Taint { key: "gpu_node".into(), value: "true".into() }],
            resources: [
                ("CPU".to_string(), usage("16", "4", "12")),
                ("GPU".to_string(), usage("4", "1.5", "2.5")),
                ("memory".to_string(), usage("68719476736", "17179869184", "51539607552")),
            ]
            .into_iter()
            .collect(),
            actors: 2,
            tasks: 1,
            registered_at_ms: 1_700_000_000_000,
            dead_reason: None,
            history: Vec::new(),
            measured: None,
        }
    }

    pub fn actor() -> Actor {
        Actor {
            endpoint: None,
            work_key: None,
            actor_id: "actor-12".into(),
            name: Some("web".into()),
            namespace: "default".into(),
            state: ActorState::Alive,
            node_id: Some("gpu-1".into()),
            instances: [("GPU".to_string(), vec![0])].into(),
            restarts: 1,
            death_reason: None,
            diagnosis: None,
            history: thin_vec::thin_vec![
                Event {
                    at_ms: 1_700_000_000_000,
                    kind: berth_api::rest::EventKind::Created,
                    node_id: None,
                    message: "".into(),
                },
                Event {
                    at_ms: 1_700_000_001_000,
                    kind: berth_api::rest::EventKind::Placed,
                    node_id: Some("gpu-1".into()),
                    message: "GPU [0]".into(),
                },
            ],
            created_at_ms: 1_700_000_000_000,
            spec: Arc::new(ActorCreate {
                name: Some("web".into()),
                command: "python".into(),
                args: vec!["serve.py".into(), "--title".into(), "hello world".into()].into(),
                labels: map(&[("app", "web")]),
                max_restarts: -1,
                placement: PlacementSpec::from_json(json!({
                    "resources": {"CPU": 1, "GPU": "0.5"},
                    "tolerations": {"gpu_node": "exists()"},
                }))
                .unwrap(),
                ..ActorCreate::default()
            }),
        }
    }

    pub fn pending_task() -> Task {
        Task {
            work_key: None,
            task_id: "task-3".into(),
            name: None,
            namespace: "default".into(),
            state: TaskState::Pending,
            node_id: None,
            instances: Default::default(),
            attempts: 0,
            exit_code: None,
            failure: None,
            diagnosis: Some(Box::new(gpu_diagnosis())),
            history: Default::default(),
            created_at_ms: 1_700_000_000_000,
            spec: Arc::new(TaskSubmit {
                command: "train".into(),
                placement: PlacementSpec::from_json(json!({"resources": {"GPU": "1"}})).unwrap(),
                max_retries: 3,
                ..TaskSubmit::default()
            }),
        }
    }

    pub fn group() -> Group {
        Group {
            idempotency_key: None,
            group_id: "pg-7".into(),
            name: Some("training".into()),
            namespace: "default".into(),
            strategy: "STRICT_SPREAD".into(),
            state: GroupState::Created,
            alternative: Some(1),
            bundles: vec![
                Bundle { index: 0, resources: map(&[("GPU", "1")]), node_id: Some("gpu-1".into()) },
                Bundle { index: 1, resources: map(&[("GPU", "1")]), node_id: Some("gpu-2".into()) },
            ],
            diagnosis: None,
            history: Default::default(),
            created_at_ms: 1_700_000_000_000,
            spec: GroupCreate {
                placement: PlacementGroupSpec::from_json(
                    json!({"bundles": [{"GPU": 1}, {"GPU": 1}]}),
                )
                .unwrap(),
                ..GroupCreate::default()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn times_are_utc() {
        assert_eq!(time(0), "1970-01-01 00:00:00Z");
        assert_eq!(time(1_700_000_000_000), "2023-11-14 22:13:20Z");
        assert_eq!(time(951_782_400_000), "2000-02-29 00:00:00Z");
        assert_eq!(time(4_107_542_399_999), "2100-02-28 23:59:59Z");
    }

    #[test]
    fn amounts() {
        assert_eq!(amount("memory", "17179869184"), "16Gi");
        assert_eq!(amount("object_store_memory", "1610612736"), "1.5Gi");
        assert_eq!(amount("memory", "512"), "512");
        assert_eq!(amount("CPU", "17179869184"), "17179869184");
        assert_eq!(amount("GPU", "0.5"), "0.5");
    }

    #[test]
    fn bars() {
        assert_eq!(bar("0", "4", 4), ("░░░░".into(), "0%".into()));
        assert_eq!(bar("2", "4", 4), ("██░░".into(), "50%".into()));
        assert_eq!(bar("4", "4", 4), ("████".into(), "100%".into()));
        // A little use shows; almost full is not full.
        assert_eq!(bar("0.01", "4", 4).0, "█░░░");
        assert_eq!(bar("3.99", "4", 4).0, "███░");
        assert_eq!(bar("0", "0", 2).0, "░░");
    }

    #[test]
    fn command_lines_quote() {
        let args = vec!["a b".to_string(), "it's".to_string(), "--x=1".to_string()];
        assert_eq!(command_line("echo", &args), r"echo 'a b' 'it'\''s' --x=1");
    }

    #[test]
    fn node_list() {
        let text = nodes_table(&[node()]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].starts_with("NODE   ADDRESS   STATE"), "{text}");
        let row = lines[1];
        for part in [
            "gpu-1",
            "10.0.0.3",
            "ALIVE",
            "CPU 4/16, GPU 1.5/4, memory 16Gi/64Gi",
            "gpu_node=true",
            "berth.io/accelerator-type=nvidia-a100,team=ml",
        ] {
            assert!(row.contains(part), "{part}: {row}");
        }
        assert!(!row.contains("node-id"), "{row}");
        assert!(!row.contains("market-type"), "{row}");
        assert!(!text.lines().any(|l| l.ends_with(' ')), "trailing spaces: {text:?}");
    }

    #[test]
    fn actor_and_task_lists() {
        let text = actors_table(&[actor()]);
        let row = text.lines().nth(1).unwrap();
        for part in ["actor-12", "web", "ALIVE", "gpu-1", "CPU 1, GPU 0.5", "GPU [0]", "app=web"] {
            assert!(row.contains(part), "{part}: {row}");
        }
        let text = tasks_table(&[pending_task()]);
        let row = text.lines().nth(1).unwrap();
        assert!(row.starts_with("task-3"), "{row}");
        for part in ["PENDING", "GPU 1", "pending: 0/2 nodes can take it now"] {
            assert!(row.contains(part), "{part}: {row}");
        }
    }

    #[test]
    fn group_list_and_detail() {
        let text = groups_table(&[group()]);
        assert!(text.contains("GPU 1 @gpu-1; GPU 1 @gpu-2"), "{text}");
        let text = group_detail(&group());
        assert!(text.contains("\nalternative:     1 (fallback_strategy[0])\n"), "{text}");
        assert!(text.contains("BUNDLE  RESOURCES  NODE"), "{text}");
    }

    #[test]
    fn actor_detail_shows_everything() {
        let text = actor_detail(&actor());
        let want = [
            "actor:       actor-12\n",
            "restarts:    1 (at most unlimited)\n",
            "created:     2023-11-14 22:13:20Z\n",
            "command:     python serve.py --title 'hello world'\n",
            "resources:   CPU 1, GPU 0.5\n",
            "tolerations: {\"gpu_node\":\"exists()\"}\n",
            "history:",
            "2023-11-14 22:13:21Z  placed   gpu-1  GPU [0]",
        ];
        for line in want {
            assert!(text.contains(line), "{line}\n{text}");
        }
    }

    #[test]
    fn task_detail_shows_diagnosis() {
        let text = task_detail(&pending_task());
        assert!(text.contains("pending (waiting for resources or peers): 0/2 nodes"), "{text}");
        assert!(
            text.contains("\n  1  too little GPU free              (insufficient_free:GPU)\n"),
            "{text}"
        );
        assert!(text.contains("history:\n  (none)"), "{text}");
        assert!(!text.contains("exit code"), "{text}");
    }

    #[test]
    fn node_detail_shows_resources() {
        let text = node_detail(&node());
        assert!(text.contains("  RESOURCE  USED  TOTAL  AVAILABLE"), "{text}");
        assert!(text.contains("\n  memory    16Gi   64Gi       48Gi\n"), "{text}");
        assert!(
            text.contains(
                "labels:     berth.io/accelerator-type=nvidia-a100\n            \
                 berth.io/market-type=\n"
            ),
            "{text}"
        );
    }
}
