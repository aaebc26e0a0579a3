//! How `berth explain` prints a placement-group decision: the decision on one line, then one
//! table per alternative tried, with a row per bundle (its resources, its label selector, and
//! where it went or why it found no node), then each bundle attempt as the core recorded it:
//! a row per node with every filter's verdict and the group's ranking, as for any request.
//!
//! The core's [`GroupDecision`] carries the diagnosis of the alternatives that failed when the
//! group is pending or infeasible; when an alternative was created, the caller passes the
//! diagnosis of those tried before it (see `explain::place_group`).

use std::fmt::Write as _;

use berth_core::pipeline::explain::AttemptExplanation;
use berth_core::pipeline::group::{
    bundle_request, AlternativeDiagnosis, GroupDecision, GroupDiagnosis, GroupExplanation,
};
use berth_core::placement_group::{BundleSet, GroupSpec};
use berth_core::{AttemptDiagnosis, AttemptKind, Cluster, NodeIndex, Quantity, ResourceSet};
use comfy_table::{presets, Cell, ContentArrangement, Table};
use serde::Serialize;

use super::{
    attempt_json, attempt_table, named_amounts, node_name, selection_line, selector_text,
    AttemptJson, NamedMap, RejectedJson, TABLE_WIDTH,
};

/// `bundles` or `fallback_strategy[i]`: the group's key of alternative `i`.
fn alternative_name(alternative: usize) -> String {
    match alternative {
        0 => "bundles".to_string(),
        i => format!("fallback_strategy[{}]", i - 1),
    }
}

/// Where one bundle of an alternative went, or why it did not.
enum BundleOutcome<'d> {
    /// Reserved: the node and the instance IDs per unit-instance resource.
    Created(NodeIndex, Vec<(String, Vec<u32>)>),
    /// Found a node in a plan that failed later (nothing was reserved).
    Planned(NodeIndex),
    /// Found no node.
    Failed(&'d AttemptDiagnosis),
    /// Planning stopped before it came to this bundle.
    NotPlanned,
}

impl BundleOutcome<'_> {
    fn code(&self) -> &'static str {
        match self {
            BundleOutcome::Created(..) => "created",
            BundleOutcome::Planned(_) => "planned",
            BundleOutcome::Failed(_) => "failed",
            BundleOutcome::NotPlanned => "not_planned",
        }
    }
}

/// One alternative tried: its index and each bundle's outcome; `failed` is `None` for the
/// alternative that was created.
struct AlternativeLines<'d> {
    alternative: usize,
    failed: Option<&'d AlternativeDiagnosis>,
    bundles: Vec<BundleOutcome<'d>>,
}

/// Every alternative tried, in order: those in `tried` (which failed), then the one created.
fn alternatives<'d>(
    cluster: &Cluster,
    spec: &GroupSpec,
    decision: &GroupDecision,
    tried: &'d GroupDiagnosis,
) -> Vec<AlternativeLines<'d>> {
    let mut all: Vec<AlternativeLines<'d>> = tried
        .alternatives
        .iter()
        .map(|found| {
            let count = spec.alternatives.get(found.alternative).map_or(0, |a| a.bundles.len());
            let bundles = (0..count)
                .map(|i| {
                    if let Some((_, d)) = found.failed.iter().find(|(b, _)| *b == i) {
                        BundleOutcome::Failed(d)
                    } else if let Some((_, node)) = found.planned.iter().find(|(b, _)| *b == i) {
                        BundleOutcome::Planned(*node)
                    } else {
                        BundleOutcome::NotPlanned
                    }
                })
                .collect();
            AlternativeLines { alternative: found.alternative, failed: Some(found), bundles }
        })
        .collect();
    if let GroupDecision::Created { alternative, nodes, .. } = decision {
        let registry = cluster.registry();
        let placed = cluster.group(spec.id.as_str());
        let bundles = nodes
            .iter()
            .enumerate()
            .map(|(i, &node)| {
                let instances = placed.and_then(|g| g.bundle(i)).map_or_else(Vec::new, |ledger| {
                    ledger
                        .reserved()
                        .iter()
                        .filter(|(r, _)| registry.is_unit_instance(*r))
                        .map(|(r, _)| (registry.name(r).to_string(), ledger.instance_ids(r)))
                        .collect()
                });
                BundleOutcome::Created(node, instances)
            })
            .collect();
        all.push(AlternativeLines { alternative: *alternative, failed: None, bundles });
    }
    all
}

/// `GPU instances [0, 1]`, or nothing when the bundle holds no unit-instance resource.
fn instances_text(instances: &[(String, Vec<u32>)]) -> String {
    instances
        .iter()
        .map(|(name, ids)| {
            let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
            format!("{name} instances [{}]", ids.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

// ---------------------------------------------------------------------------------------------
// Table.

/// The decision on one line, a line about the group, then one table per alternative tried,
/// each followed by its bundle attempts.
pub fn table(
    cluster: &Cluster,
    spec: &GroupSpec,
    decision: &GroupDecision,
    tried: &GroupDiagnosis,
    explanation: &GroupExplanation,
) -> String {
    let mut out = decision_line(cluster, spec, decision);
    out.push('\n');
    let _ = write!(out, "placement group {}: {}", spec.id, spec.strategy.name());
    if !spec.name.is_empty() {
        let _ = write!(out, ", name {}", spec.name);
    }
    let _ = write!(out, ", namespace {}", spec.namespace);
    if !spec.tolerations.is_empty() {
        let _ = write!(out, ", tolerations {}", spec.tolerations);
    }
    let count = spec.alternatives.len();
    let _ = writeln!(out, ", {count} alternative{}", if count == 1 { "" } else { "s" });
    for lines in alternatives(cluster, spec, decision, tried) {
        let Some(set) = spec.alternatives.get(lines.alternative) else { continue };
        out.push('\n');
        let verdict = match lines.failed {
            None => "created".to_string(),
            Some(found) if found.could_fit_later => {
                "not reserved now; could be once work ends".to_string()
            }
            Some(_) => "not reserved; never could be".to_string(),
        };
        let _ = writeln!(
            out,
            "alternative {} ({}), {} of {count}: {verdict}",
            lines.alternative,
            alternative_name(lines.alternative),
            lines.alternative + 1,
        );
        let _ = writeln!(out, "{}", alternative_table(cluster, set, &lines));
        if let Some(note) = lines.failed.and_then(|f| f.note.as_ref()) {
            let _ = writeln!(out, "note: {note}");
        }
        let attempts = bundle_attempts(explanation, lines.alternative);
        for (n, attempt) in attempts.iter().enumerate() {
            let AttemptKind::Bundle { index } = attempt.kind else { continue };
            let Some(request) = bundle_request(cluster, spec, set, index) else { continue };
            let resources = request.resources().display(cluster.registry());
            let _ = writeln!(
                out,
                "\nbundle {index} ({resources}), planned {} of {}:",
                n + 1,
                attempts.len()
            );
            let _ = writeln!(out, "{}", attempt_table(cluster, &request, attempt));
            out.push_str(&selection_line(cluster, attempt));
            out.push('\n');
        }
    }
    out
}

/// The bundle attempts recorded for alternative `alternative`, in planning order.
fn bundle_attempts(explanation: &GroupExplanation, alternative: usize) -> &[AttemptExplanation] {
    explanation
        .alternatives
        .iter()
        .find(|a| a.alternative == alternative)
        .map_or(&[], |a| a.bundles.as_slice())
}

/// `created: alternative 1 (fallback_strategy[0]), bundle 0 on a100-2 GPU instances [0], …`,
/// or `pending: …` / `infeasible: …` with the diagnosis, its alternatives joined by `; `.
fn decision_line(cluster: &Cluster, spec: &GroupSpec, decision: &GroupDecision) -> String {
    match decision {
        GroupDecision::Created { alternative, nodes, .. } => {
            let mut line =
                format!("created: alternative {alternative} ({})", alternative_name(*alternative));
            let Some(group) = cluster.group(spec.id.as_str()) else { return line };
            let registry = cluster.registry();
            for (i, &node) in nodes.iter().enumerate() {
                let _ = write!(line, ", bundle {i} on {}", node_name(cluster, node));
                if let Some(ledger) = group.bundle(i) {
                    for (resource, _) in ledger.reserved().iter() {
                        if registry.is_unit_instance(resource) {
                            let ids: Vec<String> =
                                ledger.instance_ids(resource).iter().map(u32::to_string).collect();
                            let _ = write!(
                                line,
                                " {} instances [{}]",
                                registry.name(resource),
                                ids.join(", ")
                            );
                        }
                    }
                }
            }
            line
        }
        GroupDecision::Pending(diagnosis) => format!("pending: {}", one_line(cluster, diagnosis)),
        GroupDecision::Infeasible(diagnosis) => {
            format!("infeasible: {}", one_line(cluster, diagnosis))
        }
    }
}

/// The diagnosis on one line: per alternative, its note and each failed bundle's counts
/// (`bundles: bundle 1: 0/6 nodes can take it now: 4 labels do not match, 2 too little GPU
/// free; fallback_strategy[0]: …`).
///
/// [`GroupDiagnosis::describe`] says the same on one line per alternative, but repeats each
/// bundle's name (`bundle 1: bundle 1: …`) and, when the bundles fit one by one but not
/// together (STRICT_SPREAD's matching), counts every node as able to take the bundle; this
/// leaves those counts to the note.
fn one_line(cluster: &Cluster, diagnosis: &GroupDiagnosis) -> String {
    let parts: Vec<String> = diagnosis
        .alternatives
        .iter()
        .map(|alternative| {
            let mut items: Vec<String> = alternative.note.iter().cloned().collect();
            for (bundle, found) in &alternative.failed {
                if found.rejected.is_empty() && alternative.note.is_some() {
                    continue;
                }
                items.push(format!("bundle {bundle}: {}", failure_text(cluster, found)));
            }
            format!("{}: {}", alternative_name(alternative.alternative), items.join("; "))
        })
        .collect();
    parts.join("; ")
}

/// One row per bundle of an alternative: resources, selector (when the alternative has any),
/// and the outcome.
fn alternative_table(cluster: &Cluster, set: &BundleSet, lines: &AlternativeLines<'_>) -> Table {
    let with_selectors = !set.selectors.is_empty();
    let mut header = vec!["bundle", "resources"];
    if with_selectors {
        header.push("label selector");
    }
    header.push(if lines.failed.is_some() { "planning" } else { "reserved on" });
    let mut table = Table::new();
    table
        .load_style(presets::UTF8_FULL)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(TABLE_WIDTH)
        .set_header(header);
    let stopped_at = lines
        .bundles
        .iter()
        .enumerate()
        .find_map(|(i, outcome)| matches!(outcome, BundleOutcome::Failed(_)).then_some(i));
    // The bundles could each find a node, but not all together (the note says why).
    let together = lines.failed.is_some_and(|found| {
        found.note.is_some() && found.failed.iter().all(|(_, d)| d.rejected.is_empty())
    });
    for (i, outcome) in lines.bundles.iter().enumerate() {
        let resources = set.bundles.get(i).cloned().unwrap_or_default();
        let mut row = vec![Cell::new(i), Cell::new(resources.display(cluster.registry()))];
        if with_selectors {
            let text = set.selector(i).map_or_else(String::new, selector_text);
            row.push(Cell::new(text));
        }
        let text = match outcome {
            BundleOutcome::Failed(_) | BundleOutcome::NotPlanned if together => {
                "no node for it together with the others (see the note)".to_string()
            }
            _ => outcome_text(cluster, outcome, stopped_at),
        };
        row.push(Cell::new(text));
        table.add_row(row);
    }
    table
}

fn outcome_text(
    cluster: &Cluster,
    outcome: &BundleOutcome<'_>,
    stopped_at: Option<usize>,
) -> String {
    match outcome {
        BundleOutcome::Created(node, instances) => {
            let instances = instances_text(instances);
            if instances.is_empty() {
                node_name(cluster, *node)
            } else {
                format!("{}, {instances}", node_name(cluster, *node))
            }
        }
        BundleOutcome::Planned(node) => {
            format!("planned on {}, given back", node_name(cluster, *node))
        }
        BundleOutcome::Failed(found) if found.rejected.is_empty() => {
            found.note.clone().unwrap_or_else(|| "no node for it".to_string())
        }
        BundleOutcome::Failed(found) => failure_text(cluster, found),
        BundleOutcome::NotPlanned => match stopped_at {
            Some(b) => format!("not planned: planning stopped at bundle {b}"),
            None => "not planned".to_string(),
        },
    }
}

/// `0/7 nodes can take it now: 3 labels do not match, …` without the `bundle i: ` the core
/// puts in front.
fn failure_text(cluster: &Cluster, found: &AttemptDiagnosis) -> String {
    let text = found.describe(cluster);
    let prefix = format!("{}: ", found.kind);
    text.strip_prefix(&prefix).map_or_else(|| text.clone(), str::to_string)
}

// ---------------------------------------------------------------------------------------------
// JSON.

/// The whole explanation of a placement-group request as one pretty-printed JSON object.
pub fn json(
    cluster: &Cluster,
    spec: &GroupSpec,
    decision: &GroupDecision,
    tried: &GroupDiagnosis,
    explanation: &GroupExplanation,
) -> serde_json::Result<String> {
    let all = alternatives(cluster, spec, decision, tried);
    let diagnosis = match decision {
        GroupDecision::Created { .. } => None,
        GroupDecision::Pending(d) | GroupDecision::Infeasible(d) => Some(DiagnosisJson {
            summary: one_line(cluster, d),
            alternatives: d
                .alternatives
                .iter()
                .map(|a| alternative_diagnosis(cluster, a))
                .collect(),
        }),
    };
    let report = Report {
        placement_group: GroupJson {
            id: spec.id.to_string(),
            name: spec.name.clone(),
            namespace: spec.namespace.clone(),
            strategy: spec.strategy.name(),
            tolerations: NamedMap(
                spec.tolerations.0.expressions().map(|(k, e)| (k.to_string(), e)).collect(),
            ),
        },
        decision: decision_json(cluster, spec, decision, all.last()),
        diagnosis,
        alternatives: all
            .iter()
            .filter_map(|lines| alternative_json(cluster, spec, lines, explanation))
            .collect(),
    };
    let mut text = serde_json::to_string_pretty(&report)?;
    text.push('\n');
    Ok(text)
}

/// The outcome, with each created bundle's node and instances (`created` is the last
/// alternative tried).
fn decision_json(
    cluster: &Cluster,
    spec: &GroupSpec,
    decision: &GroupDecision,
    created: Option<&AlternativeLines<'_>>,
) -> DecisionJson {
    let GroupDecision::Created { alternative, .. } = decision else {
        return match decision {
            GroupDecision::Pending(_) => DecisionJson::Pending,
            _ => DecisionJson::Infeasible,
        };
    };
    let bundle = |(i, outcome): (usize, &BundleOutcome<'_>)| match outcome {
        BundleOutcome::Created(node, instances) => Some(CreatedBundleJson {
            bundle: i,
            node: node_name(cluster, *node),
            resources: named_amounts(cluster, &spec.alternatives[*alternative].bundles[i]),
            instances: NamedMap(instances.clone()),
        }),
        _ => None,
    };
    DecisionJson::Created {
        alternative: *alternative,
        bundles: created
            .map(|lines| lines.bundles.iter().enumerate().filter_map(bundle).collect())
            .unwrap_or_default(),
    }
}

/// One alternative tried: its outcome, each bundle's, and each bundle attempt as recorded.
fn alternative_json(
    cluster: &Cluster,
    spec: &GroupSpec,
    lines: &AlternativeLines<'_>,
    explanation: &GroupExplanation,
) -> Option<AlternativeJson> {
    let set = spec.alternatives.get(lines.alternative)?;
    let attempt = |attempt: &AttemptExplanation| {
        let AttemptKind::Bundle { index } = attempt.kind else { return None };
        let request = bundle_request(cluster, spec, set, index)?;
        Some(BundleAttemptJson { bundle: index, attempt: attempt_json(cluster, &request, attempt) })
    };
    Some(AlternativeJson {
        alternative: lines.alternative,
        name: alternative_name(lines.alternative),
        outcome: if lines.failed.is_some() { "not_reserved" } else { "created" },
        could_fit_later: lines.failed.map(|f| f.could_fit_later),
        note: lines.failed.and_then(|f| f.note.clone()),
        bundles: lines
            .bundles
            .iter()
            .enumerate()
            .map(|(i, outcome)| bundle_json(cluster, set, i, outcome))
            .collect(),
        attempts: bundle_attempts(explanation, lines.alternative)
            .iter()
            .filter_map(attempt)
            .collect(),
    })
}

/// Bundle `i` of `set` and where it went, or why not.
fn bundle_json(
    cluster: &Cluster,
    set: &BundleSet,
    i: usize,
    outcome: &BundleOutcome<'_>,
) -> BundleJson {
    BundleJson {
        bundle: i,
        resources: named_amounts(cluster, set.bundles.get(i).unwrap_or(&ResourceSet::new())),
        label_selector: set
            .selector(i)
            .map(|s| NamedMap(s.expressions().map(|(k, e)| (k.to_string(), e)).collect())),
        outcome: outcome.code(),
        node: match outcome {
            BundleOutcome::Created(node, _) | BundleOutcome::Planned(node) => {
                Some(node_name(cluster, *node))
            }
            _ => None,
        },
        instances: match outcome {
            BundleOutcome::Created(_, instances) => Some(NamedMap(instances.clone())),
            _ => None,
        },
        rejected: match outcome {
            BundleOutcome::Failed(found) => Some(rejected(cluster, found)),
            _ => None,
        },
    }
}

/// The rejected nodes of a bundle, per reason.
fn rejected(cluster: &Cluster, found: &AttemptDiagnosis) -> Vec<RejectedJson> {
    found
        .rejected
        .iter()
        .map(|(kind, nodes)| RejectedJson {
            reason: kind.code(cluster),
            text: kind.describe(cluster),
            nodes: *nodes,
        })
        .collect()
}

fn alternative_diagnosis(
    cluster: &Cluster,
    found: &AlternativeDiagnosis,
) -> AlternativeDiagnosisJson {
    AlternativeDiagnosisJson {
        alternative: found.alternative,
        planned: found
            .planned
            .iter()
            .map(|(bundle, node)| PlannedJson { bundle: *bundle, node: node_name(cluster, *node) })
            .collect(),
        failed: found
            .failed
            .iter()
            .map(|(bundle, d)| FailedJson {
                bundle: *bundle,
                nodes: d.nodes,
                rejected: rejected(cluster, d),
                note: d.note.clone(),
            })
            .collect(),
        could_fit_later: found.could_fit_later,
        note: found.note.clone(),
    }
}

#[derive(Serialize)]
struct Report {
    placement_group: GroupJson,
    decision: DecisionJson,
    /// Null when created.
    diagnosis: Option<DiagnosisJson>,
    /// Every alternative tried, in order, with each bundle's outcome.
    alternatives: Vec<AlternativeJson>,
}

#[derive(Serialize)]
struct GroupJson {
    id: String,
    name: String,
    namespace: String,
    strategy: &'static str,
    tolerations: NamedMap<String>,
}

#[derive(Serialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
enum DecisionJson {
    Created {
        /// 0: `bundles`; i: `fallback_strategy[i - 1]`.
        alternative: usize,
        bundles: Vec<CreatedBundleJson>,
    },
    Pending,
    Infeasible,
}

#[derive(Serialize)]
struct CreatedBundleJson {
    bundle: usize,
    node: String,
    resources: NamedMap<Quantity>,
    /// Instance IDs per unit-instance resource reserved (`CUDA_VISIBLE_DEVICES` for GPU).
    instances: NamedMap<Vec<u32>>,
}

#[derive(Serialize)]
struct DiagnosisJson {
    /// [`GroupDiagnosis::describe`], the alternatives joined by `; `: the decision line.
    summary: String,
    alternatives: Vec<AlternativeDiagnosisJson>,
}

#[derive(Serialize)]
struct AlternativeDiagnosisJson {
    alternative: usize,
    /// Bundles that found a node before the plan failed (nothing was reserved).
    planned: Vec<PlannedJson>,
    failed: Vec<FailedJson>,
    could_fit_later: bool,
    note: Option<String>,
}

#[derive(Serialize)]
struct PlannedJson {
    bundle: usize,
    node: String,
}

#[derive(Serialize)]
struct FailedJson {
    bundle: usize,
    /// Nodes looked at.
    nodes: u64,
    rejected: Vec<RejectedJson>,
    note: Option<String>,
}

#[derive(Serialize)]
struct AlternativeJson {
    alternative: usize,
    /// `bundles` or `fallback_strategy[i]`.
    name: String,
    /// `created` or `not_reserved`.
    outcome: &'static str,
    /// Null for the alternative created.
    could_fit_later: Option<bool>,
    note: Option<String>,
    bundles: Vec<BundleJson>,
    /// Each bundle attempt in planning order, as recorded: every node with each filter's
    /// verdict and the group's ranking (the same shape as a request's attempts).
    attempts: Vec<BundleAttemptJson>,
}

#[derive(Serialize)]
struct BundleAttemptJson {
    bundle: usize,
    #[serde(flatten)]
    attempt: AttemptJson,
}

#[derive(Serialize)]
struct BundleJson {
    bundle: usize,
    resources: NamedMap<Quantity>,
    /// Null when the alternative has no `bundle_label_selector`.
    label_selector: Option<NamedMap<String>>,
    /// `created`, `planned`, `failed` or `not_planned`.
    outcome: &'static str,
    /// Set when created or planned.
    node: Option<String>,
    /// Set when created.
    instances: Option<NamedMap<Vec<u32>>>,
    /// Set when failed: the nodes rejected per reason.
    rejected: Option<Vec<RejectedJson>>,
}
