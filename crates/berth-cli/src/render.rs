//! How `berth explain` prints a decision: tables for people, one JSON object for scripts.
//!
//! Both read the same [`Explanation`] the pipeline recorded while deciding, and resolve node
//! indices and resource IDs to names through the cluster.

use std::fmt::Write as _;

use berth_core::pipeline::explain::{AttemptExplanation, Explanation, NodeExplanation};
use berth_core::pipeline::stage::Verdict;
use berth_core::{
    AttemptDiagnosis, Cluster, Decision, Diagnosis, NodeIndex, NodeState, Quantity, Reason,
};
use comfy_table::{presets, Cell, CellAlignment, ContentArrangement, Table};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

/// The width tables are laid out for, whatever the terminal: output is the same everywhere,
/// and fits the 100 columns the project's docs and terminals assume.
const TABLE_WIDTH: u16 = 100;

// ---------------------------------------------------------------------------------------------
// Table.

/// The decision on one line, then one table per attempt.
pub fn table(cluster: &Cluster, decision: &Decision, explanation: &Explanation) -> String {
    let mut out = String::new();
    out.push_str(&decision_line(cluster, decision));
    out.push('\n');
    let count = explanation.attempts.len();
    for (n, attempt) in explanation.attempts.iter().enumerate() {
        out.push('\n');
        let _ = writeln!(out, "attempt {} of {count}: {}", n + 1, attempt.kind);
        if attempt.nodes.is_empty() {
            out.push_str("the cluster has no nodes\n");
        } else {
            let _ = writeln!(out, "{}", attempt_table(cluster, attempt));
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
            line
        }
        Decision::Pending(diagnosis) => format!("pending: {}", diagnosis.describe(cluster)),
        Decision::Infeasible(diagnosis) => {
            format!("infeasible: {}", diagnosis.describe(cluster))
        }
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
fn attempt_table(cluster: &Cluster, attempt: &AttemptExplanation) -> Table {
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

    for line in &attempt.nodes {
        let mut row = vec![
            Cell::new(node_name(cluster, line.node)),
            Cell::new(node_state(cluster, line.node).map_or("removed", state_name)),
            Cell::new(filter_text(cluster, line)),
        ];
        if ranked {
            row.push(Cell::new(ranking_text(line)));
            row.push(
                Cell::new(line.total.map_or(String::new(), |t| t.to_string()))
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

/// `all ok`; or every filter's verdict, one per line (`resources_free: needs 4 CPU, has 2
/// free`); or why the candidate stage excluded the node before any filter ran.
fn filter_text(cluster: &Cluster, line: &NodeExplanation) -> String {
    if let Some(reason) = line.excluded {
        return format!("excluded: {}", reason.describe(cluster));
    }
    if line.passed() {
        return "all ok".to_string();
    }
    let lines: Vec<String> = line
        .filters
        .iter()
        .map(|(name, verdict)| match verdict {
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
    let scores = line.scores.iter().map(|s| format!("{} {}×{}", s.scorer, s.raw.get(), s.weight));
    preferences.chain(scores).collect::<Vec<_>>().join("\n")
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

/// The state as the cluster file writes it.
fn state_name(state: NodeState) -> &'static str {
    match state {
        NodeState::Alive => "alive",
        NodeState::Draining => "draining",
        NodeState::Dead => "dead",
    }
}

// ---------------------------------------------------------------------------------------------
// JSON.

/// The whole explanation as one pretty-printed JSON object, with a trailing newline.
pub fn json(
    cluster: &Cluster,
    decision: &Decision,
    explanation: &Explanation,
) -> serde_json::Result<String> {
    let registry = cluster.registry();
    let (decision_json, diagnosis) = match decision {
        Decision::Placed(allocation) => (
            DecisionJson::Placed {
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
    let report = Report {
        decision: decision_json,
        diagnosis: diagnosis.map(|d| diagnosis_json(cluster, d)),
        attempts: explanation.attempts.iter().map(|a| attempt_json(cluster, a)).collect(),
    };
    let mut text = serde_json::to_string_pretty(&report)?;
    text.push('\n');
    Ok(text)
}

/// The top-level object.
#[derive(Serialize)]
struct Report {
    decision: DecisionJson,
    /// Null when placed.
    diagnosis: Option<DiagnosisJson>,
    attempts: Vec<AttemptJson>,
}

#[derive(Serialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
enum DecisionJson {
    Placed {
        node: String,
        resources: NamedMap<Quantity>,
        /// Instance IDs per unit-instance resource taken (`CUDA_VISIBLE_DEVICES` for GPU).
        instances: NamedMap<Vec<u32>>,
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

fn diagnosis_json(cluster: &Cluster, diagnosis: &Diagnosis) -> DiagnosisJson {
    DiagnosisJson {
        summary: diagnosis.describe(cluster),
        attempts: diagnosis.attempts.iter().map(|a| attempt_diagnosis_json(cluster, a)).collect(),
    }
}

fn attempt_diagnosis_json(cluster: &Cluster, attempt: &AttemptDiagnosis) -> AttemptDiagnosisJson {
    AttemptDiagnosisJson {
        attempt: attempt.kind.to_string(),
        code: attempt.kind.code(),
        nodes: attempt.nodes,
        rejected: attempt
            .rejected
            .iter()
            .map(|(kind, nodes)| RejectedJson {
                reason: kind.code(cluster),
                text: kind.describe(cluster),
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
    shortlist: Vec<String>,
    chosen: Option<String>,
    nodes: Vec<NodeJson>,
}

#[derive(Serialize)]
struct NodeJson {
    node: String,
    state: Option<NodeState>,
    passed: bool,
    /// Set when the candidate stage ruled the node out before any filter ran.
    excluded: Option<ReasonJson>,
    filters: Vec<FilterJson>,
    /// Every reason the node was rejected, in stage order.
    rejections: Vec<ReasonJson>,
    preferences: Vec<PreferenceJson>,
    scores: Vec<ScoreJson>,
    total: Option<u64>,
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
    raw: u32,
    weight: u32,
}

fn attempt_json(cluster: &Cluster, attempt: &AttemptExplanation) -> AttemptJson {
    AttemptJson {
        attempt: attempt.kind.to_string(),
        code: attempt.kind.code(),
        shortlist: attempt.shortlist.iter().map(|&n| node_name(cluster, n)).collect(),
        chosen: attempt.chosen.map(|n| node_name(cluster, n)),
        nodes: attempt.nodes.iter().map(|line| node_json(cluster, line)).collect(),
    }
}

fn node_json(cluster: &Cluster, line: &NodeExplanation) -> NodeJson {
    let reason_json = |reason: Reason| ReasonJson {
        reason: reason.kind().code(cluster),
        text: reason.describe(cluster),
    };
    NodeJson {
        node: node_name(cluster, line.node),
        state: node_state(cluster, line.node),
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
                    text: reason.map(|r| r.describe(cluster)),
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
            .map(|s| ScoreJson { scorer: s.scorer, raw: s.raw.get(), weight: s.weight })
            .collect(),
        total: line.total,
    }
}
