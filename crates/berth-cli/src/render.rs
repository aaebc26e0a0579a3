//! How `berth explain` prints a decision: tables for people, one JSON object for scripts.
//!
//! Both read the same [`Explanation`] the pipeline recorded while deciding, and resolve node
//! indices and resource IDs to names through the cluster. Placement-group requests are printed
//! by [`group`]; requests into a group's bundles and actor affinity are here.

pub mod group;

use std::fmt::Write as _;

use berth_core::actor_index::widen;
use berth_core::actors::{AffinityExpression, MatchMode};
use berth_core::cluster::AllocationSource;
use berth_core::diagnosis::{alternative_suffix, ANY_EXPRESSION};
use berth_core::pipeline::explain::{
    AttemptExplanation, BundleVerdict, Explanation, NodeExplanation,
};
use berth_core::pipeline::filters::TaintsTolerated;
use berth_core::pipeline::stage::{points_text, Filter, Score, Verdict};
use berth_core::placement_group::PlacedGroup;
use berth_core::request::GroupPlacement;
use berth_core::selector::LabelSelector;
use berth_core::{
    AttemptDiagnosis, AttemptKind, Cluster, Decision, Diagnosis, NodeIndex, NodeSet, NodeState,
    Quantity, Reason, ReasonKind, Request, ResourceSet, Strategy,
};
use comfy_table::{presets, Cell, CellAlignment, ContentArrangement, Table};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

/// The width tables are laid out for, whatever the terminal: output is the same everywhere,
/// and fits the 100 columns the project's docs and terminals assume.
const TABLE_WIDTH: u16 = 100;

// ---------------------------------------------------------------------------------------------
// Table.

/// The decision on one line, then one table per attempt. `group` is the placement group a
/// PLACEMENT_GROUP request goes into, as it was before the decision (`None` when the request
/// has another strategy, or the group is not reserved).
pub fn table(
    cluster: &Cluster,
    request: &Request,
    decision: &Decision,
    explanation: &Explanation,
    group: Option<&PlacedGroup>,
) -> String {
    let mut out = String::new();
    out.push_str(&decision_line(cluster, decision));
    out.push('\n');
    if let Some(actor) = request.actor() {
        let labels = if actor.labels.is_empty() {
            "no labels".to_string()
        } else {
            format!("labels {}", actor.labels)
        };
        let _ = writeln!(out, "actor {}, namespace {}, {labels}", actor.id, actor.namespace);
    }
    let count = explanation.attempts.len();
    for (n, attempt) in explanation.attempts.iter().enumerate() {
        out.push('\n');
        out.push_str(&attempt_heading(request, attempt, n + 1, count));
        if let Strategy::PlacementGroup(target) = request.strategy() {
            out.push_str(&bundle_table(cluster, &attempt.bundles, target, group));
            continue;
        }
        if attempt.nodes.is_empty() {
            out.push_str("the cluster has no nodes\n");
        } else {
            let _ = writeln!(out, "{}", attempt_table(cluster, request, attempt));
        }
        out.push_str(&selection_line(cluster, attempt));
        out.push('\n');
    }
    out
}

/// `placed on gpu-2, GPU instances [0]`, or `pending: …` / `infeasible: …` with the diagnosis.
fn decision_line(cluster: &Cluster, decision: &Decision) -> String {
    let registry = cluster.registry();
    match decision {
        Decision::Placed(allocation) => {
            let mut line = format!("placed on {}", node_name(cluster, allocation.node()));
            for (resource, ids) in allocation.instances() {
                let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
                let _ =
                    write!(line, ", {} instances [{}]", registry.name(resource), ids.join(", "));
            }
            if let AllocationSource::Bundle { group, bundle } = allocation.source() {
                let _ = write!(line, ", in bundle {bundle} of placement group {group}");
            }
            line
        }
        Decision::Pending(diagnosis) => format!("pending: {}", diagnosis.describe(cluster)),
        Decision::Infeasible(diagnosis) => {
            format!("infeasible: {}", diagnosis.describe(cluster))
        }
    }
}

/// `attempt 1 of 2: DEFAULT with label_selector {instance_type: m5.16xlarge}`: the attempt, and
/// the label selectors in force in it (the alternative's, and NODE_LABEL's `hard` and `soft`).
/// On one line when it fits [`TABLE_WIDTH`], else one selector per line.
fn attempt_heading(
    request: &Request,
    attempt: &AttemptExplanation,
    n: usize,
    count: usize,
) -> String {
    let title = format!(
        "attempt {n} of {count}: {}{}",
        attempt.kind,
        alternative_suffix(attempt.alternative)
    );
    let mut parts: Vec<(String, String)> = Vec::new();
    if let Some(selector) = alternative_selector(request, attempt) {
        parts.push((String::new(), selector_text(selector)));
    }
    if let (AttemptKind::NodeLabel, Strategy::NodeLabel(node_label)) =
        (&attempt.kind, request.strategy())
    {
        for (name, selector) in [("hard", &node_label.hard), ("soft", &node_label.soft)] {
            if !selector.is_empty() {
                parts.push((name.to_string(), selector_text(selector)));
            }
        }
    }
    let one_line: Vec<String> = parts
        .iter()
        .map(|(name, text)| if name.is_empty() { text.clone() } else { format!("{name} {text}") })
        .collect();
    let line = if one_line.is_empty() {
        title.clone()
    } else {
        format!("{title} {}", one_line.join(", "))
    };
    let mut out = if line.chars().count() <= usize::from(TABLE_WIDTH) {
        format!("{line}\n")
    } else {
        let mut out = format!("{title}\n");
        for (name, text) in parts {
            let name = if name.is_empty() { alternative_name(attempt.alternative) } else { name };
            let _ = writeln!(out, "  {name}: {text}");
        }
        out
    };
    if let (AttemptKind::ActorAffinity, Strategy::ActorAffinity(affinity)) =
        (&attempt.kind, request.strategy())
    {
        for (i, expression) in affinity.expressions.iter().enumerate() {
            let _ = writeln!(out, "  expression {i}: {expression}");
        }
        if affinity.match_mode == MatchMode::Any {
            out.push_str("  match any: at least one hard expression must hold\n");
        }
    }
    out
}

/// The selector of the attempt's label alternative (`label_selector` or a fallback), if the
/// request has selectors.
fn alternative_selector<'r>(
    request: &'r Request,
    attempt: &AttemptExplanation,
) -> Option<&'r LabelSelector> {
    attempt.alternative.and_then(|i| request.alternative(i))
}

/// `label_selector` or `fallback_strategy[i]`, the request's key of a label alternative.
fn alternative_name(alternative: Option<usize>) -> String {
    match alternative {
        None | Some(0) => "label_selector".to_string(),
        Some(i) => format!("fallback_strategy[{}]", i - 1),
    }
}

/// `{zone: in(a,b)}`; the empty selector, which every node matches, as `{} (any node)`.
fn selector_text(selector: &LabelSelector) -> String {
    if selector.is_empty() {
        "{} (any node)".to_string()
    } else {
        selector.to_string()
    }
}

/// What the selection stage did with the nodes that passed.
fn selection_line(cluster: &Cluster, attempt: &AttemptExplanation) -> String {
    let names: Vec<String> =
        attempt.shortlist.iter().map(|&node| node_name(cluster, node)).collect();
    match attempt.chosen {
        Some(chosen) => {
            format!("shortlist: {}; chosen: {}", names.join(", "), node_name(cluster, chosen))
        }
        None => "no node passed every filter; none chosen".to_string(),
    }
}

/// One row per node: state, each filter's verdict, preferences and scores, total, pick.
///
/// Stage answers are stacked inside a cell, one line each, rather than given a column each:
/// with a column per filter, preference and scorer the table would not fit 100 columns.
fn attempt_table(cluster: &Cluster, request: &Request, attempt: &AttemptExplanation) -> Table {
    // Attempts that do not rank (SPREAD, RANDOM, one affinity node) have no preference or score
    // on any node; their columns would be empty, so they are left out.
    let ranked = attempt.nodes.iter().any(|n| !n.preferences.is_empty() || !n.scores.is_empty());

    let mut header = vec!["node", "state", "filters"];
    if ranked {
        header.extend(["preferences and scores", "total"]);
    }
    header.push("pick");

    let mut table = Table::new();
    table
        .load_style(presets::UTF8_FULL)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(TABLE_WIDTH)
        .set_header(header);

    let keys = selector_keys(request, attempt);
    for line in &attempt.nodes {
        let mut row = vec![
            Cell::new(node_name(cluster, line.node)),
            Cell::new(node_state(cluster, line.node).map_or("removed", state_name)),
            Cell::new(filter_text(cluster, request, line, &keys)),
        ];
        if ranked {
            row.push(Cell::new(ranking_text(line)));
            row.push(
                Cell::new(line.total.map_or(String::new(), points_text))
                    .set_alignment(CellAlignment::Right),
            );
        }
        let pick = if attempt.chosen == Some(line.node) {
            "chosen"
        } else if attempt.shortlist.contains(&line.node) {
            "shortlist"
        } else {
            ""
        };
        row.push(Cell::new(pick));
        table.add_row(row);
    }
    table
}

/// The keys of the label selectors in force in `attempt`, in order, each once.
fn selector_keys<'r>(request: &'r Request, attempt: &AttemptExplanation) -> Vec<&'r str> {
    let mut keys: Vec<&str> = Vec::new();
    let hard = match (&attempt.kind, request.strategy()) {
        (AttemptKind::NodeLabel, Strategy::NodeLabel(node_label)) => Some(&node_label.hard),
        _ => None,
    };
    for selector in alternative_selector(request, attempt).into_iter().chain(hard) {
        for (key, _) in selector.iter() {
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    keys
}

/// `all ok`; or every filter's verdict, one per line (`resources_free: needs 4 CPU, has 2
/// free`); or why the candidate stage excluded the node before any filter ran.
///
/// Labels and taints are shown where they decided something, rather than in a column of their
/// own (a node has six default labels, and a column of taints such as `berth.io/rare-GPU=true`
/// would squeeze the table past readability at 100 columns): a node excluded because its labels
/// do not match shows its values of the selectors' `keys` (`zone=a`, or `zone absent`), and a
/// node whose taints were all tolerated lists them (`tolerated: gpu_node=true`); an untolerated
/// taint is named by the taint filter's reason. The JSON lists every label and taint.
fn filter_text(
    cluster: &Cluster,
    request: &Request,
    line: &NodeExplanation,
    keys: &[&str],
) -> String {
    if let Some(reason) = line.excluded {
        let mut text = format!("excluded: {}", reason_text(cluster, request, line.node, reason));
        if let Reason::ActorAffinity(i) = reason {
            for context in expression_context(cluster, request, line.node, i) {
                let _ = write!(text, "\n{context}");
            }
        }
        if reason == Reason::LabelMismatch {
            if let Some(node) = cluster.node(line.node) {
                for key in keys {
                    match node.labels().get(key) {
                        Some(value) => {
                            let _ = write!(text, "\n{key}={value}");
                        }
                        None => {
                            let _ = write!(text, "\n{key} absent");
                        }
                    }
                }
            }
        }
        return text;
    }
    let taints: Vec<String> =
        node_taints(cluster, line.node).iter().map(|(k, v)| format!("{k}={v}")).collect();
    let tolerated =
        if taints.is_empty() { String::new() } else { format!("tolerated: {}", taints.join(", ")) };
    if line.passed() {
        return if tolerated.is_empty() {
            "all ok".to_string()
        } else {
            format!("all ok\n{tolerated}")
        };
    }
    let lines: Vec<String> = line
        .filters
        .iter()
        .map(|(name, verdict)| match verdict {
            Verdict::Fit if *name == TaintsTolerated.name() && !tolerated.is_empty() => {
                format!("{name}: ok, {tolerated}")
            }
            Verdict::Fit => format!("{name}: ok"),
            Verdict::Unfit(reason) => format!("{name}: {}", reason.describe(cluster)),
        })
        .collect();
    lines.join("\n")
}

/// Preferences (`avoid_gpu_nodes: yes`) then scores (`hybrid_utilization 100×1`, raw score ×
/// weight), one per line; empty for a node that was not ranked.
fn ranking_text(line: &NodeExplanation) -> String {
    let preferences = line
        .preferences
        .iter()
        .map(|(name, preferred)| format!("{name}: {}", if *preferred { "yes" } else { "no" }));
    let scores = line.scores.iter().map(|s| format!("{} {}×{}", s.scorer, s.raw, s.weight));
    preferences.chain(scores).collect::<Vec<_>>().join("\n")
}

// ---------------------------------------------------------------------------------------------
// Actor affinity: the expression and the actors behind a reason.

/// The sentence for `reason` on `node`. The core says "hard actor affinity expression 0
/// fails" and "kept away by a placed actor's anti-affinity"; this names the expression and the
/// placed actors that keep the request away.
fn reason_text(cluster: &Cluster, request: &Request, node: NodeIndex, reason: Reason) -> String {
    match reason {
        Reason::ActorAffinity(ANY_EXPRESSION) => {
            "no hard actor affinity expression holds (match any)".to_string()
        }
        Reason::ActorAffinity(i) => match expression(request, i) {
            Some(expression) => format!("expression {i} ({expression}) does not hold"),
            None => reason.describe(cluster),
        },
        Reason::AntiAffinityGuard => {
            let guards = guards(cluster, request, node);
            if guards.is_empty() {
                reason.describe(cluster)
            } else {
                format!("kept away by the anti-affinity of {}", guards.join(", "))
            }
        }
        _ => reason.describe(cluster),
    }
}

/// Expression `i` of the request's ACTOR_AFFINITY strategy.
fn expression(request: &Request, i: u16) -> Option<&AffinityExpression> {
    match request.strategy() {
        Strategy::ActorAffinity(affinity) => affinity.expressions.get(usize::from(i)),
        _ => None,
    }
}

/// The nodes that count as "here" for `expression` on `node`: the node, or with a topology
/// key every node with the same value of it (none when the node lacks the label).
fn domain(cluster: &Cluster, expression: &AffinityExpression, node: NodeIndex) -> NodeSet {
    let only: NodeSet = std::iter::once(node).collect();
    widen(cluster.label_index(), expression.topology_key.as_deref(), &only)
}

/// What made expression `i` fail on `node`, one line each: for `NOT_IN` and
/// `DOES_NOT_EXIST`, the actors it names in the node's domain (`web-1: app=web`, or
/// `web-1 on node-a2: app=web` across a zone); for `IN` and `EXISTS`, that none is there.
fn expression_context(
    cluster: &Cluster,
    request: &Request,
    node: NodeIndex,
    i: u16,
) -> Vec<String> {
    let Some(expression) = expression(request, i) else { return Vec::new() };
    let scope = match &expression.topology_key {
        None => "here".to_string(),
        Some(key) => match cluster.node(node).and_then(|n| n.labels().get(key)) {
            Some(value) => format!("in {key}={value}"),
            None => return vec![format!("the node has no {key} label")],
        },
    };
    let actors = cluster.actors();
    let mut named: Vec<String> = Vec::new();
    for other in domain(cluster, expression, node).iter() {
        for id in placed_before(cluster, request, other) {
            let Some(actor) = actors.get(id) else { continue };
            if actor.namespace() != request.namespace() || !actor.is_named_by(expression) {
                continue;
            }
            let value = actor.label(&expression.key).unwrap_or_default();
            let place = if other == node {
                String::new()
            } else {
                format!(" on {}", node_name(cluster, other))
            };
            named.push(format!("{id}{place}: {}={value}", expression.key));
        }
    }
    if expression.operator.is_positive() {
        vec![format!("no matching actor of namespace {} {scope}", request.namespace())]
    } else {
        named
    }
}

/// The IDs of the actors on `node` before the decision, in placement order: `cluster` is the
/// cluster after it, which records the request's own actor where it was placed.
fn placed_before<'c>(
    cluster: &'c Cluster,
    request: &Request,
    node: NodeIndex,
) -> impl Iterator<Item = &'c str> + 'c {
    let own = request.actor().map(|a| a.id.clone());
    cluster
        .actors()
        .actors_on(node)
        .iter()
        .filter(move |id| Some(*id) != own.as_ref())
        .map(|id| id.as_str())
}

/// The placed actors whose hard anti-affinity keeps the request's actor off `node`, with the
/// expression: `solo-1 (berth.io/actor-id DOES_NOT_EXIST)`.
fn guards(cluster: &Cluster, request: &Request, node: NodeIndex) -> Vec<String> {
    let Some(actor) = request.actor() else { return Vec::new() };
    let labels = actor.placed_labels();
    let mut found: Vec<String> = Vec::new();
    // Not the request's own actor: `cluster` is the cluster after the decision.
    let placed =
        cluster.actors().iter().filter(|a| a.namespace() == actor.namespace && *a.id() != actor.id);
    for placed in placed {
        for expression in &placed.affinity().expressions {
            let guards = !expression.soft
                && !expression.operator.is_positive()
                && expression.names_actor(&labels)
                && domain(cluster, expression, placed.node()).contains(node);
            if guards {
                found.push(format!("{} ({expression})", placed.id()));
            }
        }
    }
    found.sort();
    found
}

// ---------------------------------------------------------------------------------------------
// Requests into a placement group: one row per bundle.

/// How one bundle of the target group fared.
struct BundleLine {
    bundle: usize,
    node: Option<NodeIndex>,
    reserved: ResourceSet,
    free: ResourceSet,
    instances: Vec<(String, Vec<u32>)>,
    /// `chosen`, `not_tried`, `not_targeted`, `lost`, or a reason.
    verdict: BundleVerdict,
}

/// Every bundle of `group` (as it was before the decision) with the verdict the core's bundle
/// stage recorded for it (`verdicts`, in index order).
fn bundle_lines(
    cluster: &Cluster,
    verdicts: &[BundleVerdict],
    group: &PlacedGroup,
) -> Vec<BundleLine> {
    let registry = cluster.registry();
    let set = group.bundle_set();
    (0..group.bundles.len())
        .map(|i| {
            let ledger = group.bundle(i);
            let instances = ledger.map_or_else(Vec::new, |ledger| {
                ledger
                    .reserved()
                    .iter()
                    .filter(|(r, _)| registry.is_unit_instance(*r))
                    .map(|(r, _)| (registry.name(r).to_string(), ledger.instance_ids(r)))
                    .collect()
            });
            BundleLine {
                bundle: i,
                node: ledger.map(|l| l.node),
                reserved: ledger.map_or_else(
                    || set.bundles.get(i).cloned().unwrap_or_default(),
                    |l| l.reserved().clone(),
                ),
                free: ledger.map_or_else(ResourceSet::new, |l| l.available().clone()),
                instances,
                verdict: verdicts.get(i).copied().unwrap_or(BundleVerdict::NotTried),
            }
        })
        .collect()
}

/// The bundle table of a request into a placement group, and the line under it.
fn bundle_table(
    cluster: &Cluster,
    verdicts: &[BundleVerdict],
    target: &GroupPlacement,
    group: Option<&PlacedGroup>,
) -> String {
    let Some(group) = group else {
        return format!(
            "placement group {} is not reserved in the cluster; the request waits for it\n",
            target.group
        );
    };
    let registry = cluster.registry();
    let mut table = Table::new();
    table
        .load_style(presets::UTF8_FULL)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(TABLE_WIDTH)
        .set_header(vec!["bundle", "node", "reserved", "free", "instances", "verdict"]);
    for line in bundle_lines(cluster, verdicts, group) {
        let instances: Vec<String> =
            line.instances.iter().map(|(name, ids)| format!("{name} {ids:?}")).collect();
        table.add_row(vec![
            Cell::new(line.bundle),
            Cell::new(line.node.map_or_else(|| "-".to_string(), |n| node_name(cluster, n))),
            Cell::new(line.reserved.display(registry)),
            Cell::new(line.free.display(registry)),
            Cell::new(instances.join("\n")),
            Cell::new(bundle_verdict_text(cluster, &line.verdict)),
        ]);
    }
    format!("{table}\n")
}

fn bundle_verdict_text(cluster: &Cluster, verdict: &BundleVerdict) -> String {
    match verdict {
        BundleVerdict::Chosen => "chosen".to_string(),
        BundleVerdict::Unfit(reason) => reason.describe(cluster),
        BundleVerdict::Lost => "lost with its node; waits to be re-planned".to_string(),
        BundleVerdict::NotTargeted => "not the bundle asked for".to_string(),
        BundleVerdict::NotTried => "not tried".to_string(),
    }
}

/// The stable code of a bundle verdict, for the JSON.
fn bundle_verdict_code(cluster: &Cluster, verdict: &BundleVerdict) -> String {
    match verdict {
        BundleVerdict::Chosen => "chosen".to_string(),
        BundleVerdict::Unfit(reason) => reason.kind().code(cluster),
        BundleVerdict::Lost => "lost".to_string(),
        BundleVerdict::NotTargeted => "not_targeted".to_string(),
        BundleVerdict::NotTried => "not_tried".to_string(),
    }
}

fn node_name(cluster: &Cluster, node: NodeIndex) -> String {
    match cluster.node(node) {
        Some(n) => n.id().to_string(),
        // Only a removed node has no entry; explain never removes nodes.
        None => format!("#{}", node.0),
    }
}

fn node_state(cluster: &Cluster, node: NodeIndex) -> Option<NodeState> {
    cluster.node(node).map(|n| n.state())
}

/// The node's taints, automatic ones included, as `(key, value)`.
fn node_taints(cluster: &Cluster, node: NodeIndex) -> Vec<(String, String)> {
    let Some(n) = cluster.node(node) else {
        return Vec::new();
    };
    n.taints()
        .iter()
        .map(|&id| {
            let taint = cluster.taint(id);
            (taint.key.clone(), taint.value.clone())
        })
        .collect()
}

/// The node's labels, default ones included, sorted by key.
fn node_labels(cluster: &Cluster, node: NodeIndex) -> Vec<(String, String)> {
    cluster.node(node).map_or_else(Vec::new, |n| {
        n.labels().iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    })
}

/// The state as the cluster file writes it.
fn state_name(state: NodeState) -> &'static str {
    match state {
        NodeState::Alive => "alive",
        NodeState::Draining => "draining",
        NodeState::Suspect => "suspect",
        NodeState::Dead => "dead",
    }
}

// ---------------------------------------------------------------------------------------------
// JSON.

/// The whole explanation as one pretty-printed JSON object, with a trailing newline. `group`
/// as for [`table`].
pub fn json(
    cluster: &Cluster,
    request: &Request,
    decision: &Decision,
    explanation: &Explanation,
    group: Option<&PlacedGroup>,
) -> serde_json::Result<String> {
    let registry = cluster.registry();
    let (decision_json, diagnosis) = match decision {
        Decision::Placed(allocation) => (
            DecisionJson::Placed {
                bundle: match allocation.source() {
                    AllocationSource::Node => None,
                    AllocationSource::Bundle { group, bundle } => {
                        Some(BundleRefJson { group: group.to_string(), bundle: *bundle })
                    }
                },
                node: node_name(cluster, allocation.node()),
                resources: NamedMap(
                    allocation
                        .resources()
                        .iter()
                        .map(|(id, amount)| (registry.name(id).to_string(), amount))
                        .collect(),
                ),
                instances: NamedMap(
                    allocation
                        .instances()
                        .map(|(id, ids)| (registry.name(id).to_string(), ids))
                        .collect(),
                ),
            },
            None,
        ),
        Decision::Pending(diagnosis) => (DecisionJson::Pending, Some(diagnosis)),
        Decision::Infeasible(diagnosis) => (DecisionJson::Infeasible, Some(diagnosis)),
    };
    let mut bundles = match (request.strategy(), group) {
        (Strategy::PlacementGroup(_), Some(group)) => Some(
            bundle_lines(
                cluster,
                explanation.attempts.first().map_or(&[][..], |a| &a.bundles),
                group,
            )
            .iter()
            .map(|line| bundle_line_json(cluster, line))
            .collect(),
        ),
        _ => None,
    };
    let report = Report {
        actor: request.actor().map(|actor| ActorJson {
            id: actor.id.to_string(),
            namespace: actor.namespace.clone(),
            labels: NamedMap(
                actor.labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ),
        }),
        decision: decision_json,
        diagnosis: diagnosis.map(|d| diagnosis_json(cluster, request, d)),
        attempts: explanation
            .attempts
            .iter()
            .map(|a| {
                let mut attempt = attempt_json(cluster, request, a);
                if let AttemptKind::PlacementGroup { .. } = a.kind {
                    attempt.bundles = bundles.take();
                }
                attempt
            })
            .collect(),
    };
    let mut text = serde_json::to_string_pretty(&report)?;
    text.push('\n');
    Ok(text)
}

/// The top-level object.
#[derive(Serialize)]
struct Report {
    /// The actor the request places; left out for a task.
    #[serde(skip_serializing_if = "Option::is_none")]
    actor: Option<ActorJson>,
    decision: DecisionJson,
    /// Null when placed.
    diagnosis: Option<DiagnosisJson>,
    attempts: Vec<AttemptJson>,
}

#[derive(Serialize)]
struct ActorJson {
    id: String,
    namespace: String,
    /// Its own labels (`berth.io/actor-id` is added once placed).
    labels: NamedMap<String>,
}

/// The bundle a request placed into a placement group took from.
#[derive(Serialize)]
struct BundleRefJson {
    group: String,
    bundle: usize,
}

#[derive(Serialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
enum DecisionJson {
    Placed {
        node: String,
        resources: NamedMap<Quantity>,
        /// Instance IDs per unit-instance resource taken (`CUDA_VISIBLE_DEVICES` for GPU).
        instances: NamedMap<Vec<u32>>,
        /// Set when the resources came from a placement group's bundle; left out otherwise.
        #[serde(skip_serializing_if = "Option::is_none")]
        bundle: Option<BundleRefJson>,
    },
    Pending,
    Infeasible,
}

/// A JSON object keyed by name, in the order given (resource ID order), where a
/// `serde_json::Map` would sort the keys.
struct NamedMap<V>(Vec<(String, V)>);

impl<V: Serialize> Serialize for NamedMap<V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

#[derive(Serialize)]
struct DiagnosisJson {
    /// [`Diagnosis::describe`]: the same sentence the table prints.
    summary: String,
    attempts: Vec<AttemptDiagnosisJson>,
}

#[derive(Serialize)]
struct AttemptDiagnosisJson {
    /// The attempt in words: `soft node affinity to cpu-3`.
    attempt: String,
    /// [`berth_core::AttemptKind::code`], stable for scripts: `soft_node_affinity`.
    code: &'static str,
    /// The label alternative in force: null (the request has no selectors), 0
    /// (`label_selector`) or i (`fallback_strategy[i - 1]`).
    alternative: Option<usize>,
    nodes: u64,
    rejected: Vec<RejectedJson>,
    could_fit_later: bool,
    note: Option<String>,
}

#[derive(Serialize)]
struct RejectedJson {
    /// [`berth_core::ReasonKind::code`], stable for scripts: `insufficient_total:GPU`.
    reason: String,
    text: String,
    nodes: u64,
}

fn diagnosis_json(cluster: &Cluster, request: &Request, diagnosis: &Diagnosis) -> DiagnosisJson {
    DiagnosisJson {
        summary: diagnosis.describe(cluster),
        attempts: diagnosis
            .attempts
            .iter()
            .map(|a| attempt_diagnosis_json(cluster, request, a))
            .collect(),
    }
}

/// The phrase for a count of nodes rejected for `kind`; actor affinity names its expression.
fn kind_text(cluster: &Cluster, request: &Request, kind: ReasonKind) -> String {
    match kind {
        ReasonKind::ActorAffinity(i) if i != ANY_EXPRESSION => match expression(request, i) {
            Some(expression) => format!("hard actor affinity expression {i} ({expression}) fails"),
            None => kind.describe(cluster),
        },
        _ => kind.describe(cluster),
    }
}

fn attempt_diagnosis_json(
    cluster: &Cluster,
    request: &Request,
    attempt: &AttemptDiagnosis,
) -> AttemptDiagnosisJson {
    AttemptDiagnosisJson {
        attempt: attempt.kind.to_string(),
        code: attempt.kind.code(),
        alternative: attempt.alternative,
        nodes: attempt.nodes,
        rejected: attempt
            .rejected
            .iter()
            .map(|(kind, nodes)| RejectedJson {
                reason: kind.code(cluster),
                text: kind_text(cluster, request, *kind),
                nodes: *nodes,
            })
            .collect(),
        could_fit_later: attempt.could_fit_later,
        note: attempt.note.clone(),
    }
}

#[derive(Serialize)]
struct AttemptJson {
    /// The attempt in words: `soft node affinity to cpu-3`.
    attempt: String,
    /// [`berth_core::AttemptKind::code`], stable for scripts: `soft_node_affinity`.
    code: &'static str,
    /// As in [`AttemptDiagnosisJson::alternative`].
    alternative: Option<usize>,
    /// The selector of that alternative, key → expression (canonical text); null when
    /// `alternative` is.
    label_selector: Option<NamedMap<String>>,
    shortlist: Vec<String>,
    chosen: Option<String>,
    nodes: Vec<NodeJson>,
    /// A request into a placement group: each bundle of the group, as it was before the
    /// decision, and how it fared. Left out for other attempts.
    #[serde(skip_serializing_if = "Option::is_none")]
    bundles: Option<Vec<BundleLineJson>>,
}

#[derive(Serialize)]
struct BundleLineJson {
    bundle: usize,
    /// Null when the bundle was lost with its node.
    node: Option<String>,
    reserved: NamedMap<Quantity>,
    free: NamedMap<Quantity>,
    instances: NamedMap<Vec<u32>>,
    /// `chosen`, `not_tried`, `not_targeted`, `lost`, or a reason code such as
    /// `insufficient_available:GPU`.
    verdict: String,
    text: String,
}

fn bundle_line_json(cluster: &Cluster, line: &BundleLine) -> BundleLineJson {
    BundleLineJson {
        bundle: line.bundle,
        node: line.node.map(|n| node_name(cluster, n)),
        reserved: named_amounts(cluster, &line.reserved),
        free: named_amounts(cluster, &line.free),
        instances: NamedMap(line.instances.clone()),
        verdict: bundle_verdict_code(cluster, &line.verdict),
        text: bundle_verdict_text(cluster, &line.verdict),
    }
}

/// A resource set as a JSON object of name to amount, in resource ID order.
fn named_amounts(cluster: &Cluster, set: &ResourceSet) -> NamedMap<Quantity> {
    let registry = cluster.registry();
    NamedMap(set.iter().map(|(id, amount)| (registry.name(id).to_string(), amount)).collect())
}

#[derive(Serialize)]
struct NodeJson {
    node: String,
    state: Option<NodeState>,
    /// Every label, defaults included, sorted by key.
    labels: NamedMap<String>,
    /// Every taint, rare-resource ones included.
    taints: NamedMap<String>,
    /// The IDs of the actors placed on the node before the decision, every namespace, in
    /// placement order.
    actors: Vec<String>,
    passed: bool,
    /// Set when the candidate stage ruled the node out before any filter ran.
    excluded: Option<ReasonJson>,
    filters: Vec<FilterJson>,
    /// Every reason the node was rejected, in stage order.
    rejections: Vec<ReasonJson>,
    preferences: Vec<PreferenceJson>,
    scores: Vec<ScoreJson>,
    /// Σ weight × score, in points (as `raw`).
    total: Option<serde_json::Number>,
}

/// A reason as a stable code and the sentence the table shows.
#[derive(Serialize)]
struct ReasonJson {
    reason: String,
    text: String,
}

#[derive(Serialize)]
struct FilterJson {
    filter: &'static str,
    passed: bool,
    /// Code of the reason when not passed.
    reason: Option<String>,
    /// Sentence of the reason when not passed.
    text: Option<String>,
}

#[derive(Serialize)]
struct PreferenceJson {
    preference: &'static str,
    preferred: bool,
}

#[derive(Serialize)]
struct ScoreJson {
    scorer: &'static str,
    /// Points, exact to a millionth: a whole number, or a decimal such as 46.666667.
    raw: serde_json::Number,
    weight: u32,
}

/// Millionths of a point as a JSON number of points: `50`, `46.666667`.
fn points_json(micros: u64) -> serde_json::Number {
    let unit = u64::from(Score::UNIT);
    if micros.is_multiple_of(unit) {
        return serde_json::Number::from(micros / unit);
    }
    // The shortest decimal that reads back as this f64 is the six-decimal text itself.
    serde_json::Number::from_f64(micros as f64 / unit as f64)
        .unwrap_or_else(|| serde_json::Number::from(micros / unit))
}

fn attempt_json(cluster: &Cluster, request: &Request, attempt: &AttemptExplanation) -> AttemptJson {
    AttemptJson {
        attempt: attempt.kind.to_string(),
        code: attempt.kind.code(),
        alternative: attempt.alternative,
        label_selector: alternative_selector(request, attempt).map(|selector| {
            NamedMap(selector.expressions().map(|(k, e)| (k.to_string(), e)).collect())
        }),
        shortlist: attempt.shortlist.iter().map(|&n| node_name(cluster, n)).collect(),
        chosen: attempt.chosen.map(|n| node_name(cluster, n)),
        nodes: attempt.nodes.iter().map(|line| node_json(cluster, request, line)).collect(),
        bundles: None,
    }
}

fn node_json(cluster: &Cluster, request: &Request, line: &NodeExplanation) -> NodeJson {
    let reason_json = |reason: Reason| ReasonJson {
        reason: reason.kind().code(cluster),
        text: reason_text(cluster, request, line.node, reason),
    };
    NodeJson {
        node: node_name(cluster, line.node),
        state: node_state(cluster, line.node),
        labels: NamedMap(node_labels(cluster, line.node)),
        taints: NamedMap(node_taints(cluster, line.node)),
        actors: placed_before(cluster, request, line.node).map(str::to_string).collect(),
        passed: line.passed(),
        excluded: line.excluded.map(reason_json),
        filters: line
            .filters
            .iter()
            .map(|(name, verdict)| {
                let reason = match verdict {
                    Verdict::Fit => None,
                    Verdict::Unfit(reason) => Some(reason),
                };
                FilterJson {
                    filter: name,
                    passed: reason.is_none(),
                    reason: reason.map(|r| r.kind().code(cluster)),
                    text: reason.map(|r| reason_text(cluster, request, line.node, *r)),
                }
            })
            .collect(),
        rejections: line.reasons().map(reason_json).collect(),
        preferences: line
            .preferences
            .iter()
            .map(|&(preference, preferred)| PreferenceJson { preference, preferred })
            .collect(),
        scores: line
            .scores
            .iter()
            .map(|s| ScoreJson {
                scorer: s.scorer,
                raw: points_json(u64::from(s.raw.micros())),
                weight: s.weight,
            })
            .collect(),
        total: line.total.map(points_json),
    }
}
