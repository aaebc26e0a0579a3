//! `berth status`: the cluster at a glance, as `ray status` shows it.

use std::fmt::Write as _;
use std::io::Write;

use berth_api::rest::{ClusterStatus, Demand, StringCounts};
use clap::Args;

use super::view::{self, amount, bar, columns};
use super::{api_path, json_text, write_out, HeadArgs, Output, OutputArgs};

/// The flags of `berth status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub head: HeadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Asks the head for the cluster's status and prints it.
pub fn run(args: &StatusArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = args.head.client()?;
    let status: ClusterStatus = client.get(&api_path(&["cluster", "status"]))?;
    let text = match args.output.output {
        Output::Table => render(client.address(), &status),
        Output::Json => json_text(&status)?,
    };
    write_out(out, &text)
}

/// Width of the usage bars.
const BAR_WIDTH: usize = 20;

/// States in the order they happen; others (from a newer head) after them.
const ACTOR_STATES: &[&str] = &["PENDING", "ALIVE", "RESTARTING", "DEAD"];
const TASK_STATES: &[&str] = &["PENDING", "RUNNING", "FINISHED", "FAILED", "CANCELLED"];
const GROUP_STATES: &[&str] = &["PENDING", "CREATED", "RESCHEDULING", "REMOVED"];

/// The status for people.
pub fn render(address: &str, status: &ClusterStatus) -> String {
    let mut out = format!("Berth cluster at {address}\n\n");
    let n = &status.nodes;
    for warning in &status.warnings {
        let _ = writeln!(out, "WARNING: {warning}");
    }
    if !status.warnings.is_empty() {
        out.push('\n');
    }
    // Suspect nodes are named only when there are some: it is rare, and worth the eye.
    let suspect = match n.suspect {
        0 => String::new(),
        s => format!(", {s} suspect (heartbeats late)"),
    };
    let _ = writeln!(
        out,
        "Nodes: {} alive, {} draining{suspect}, {} dead",
        n.alive, n.draining, n.dead
    );
    if !status.rare_resources.is_empty() {
        let names = status.rare_resources.join(", ");
        let _ = writeln!(
            out,
            "Rare-resource isolation: {names} (their nodes take only work that asks for them)"
        );
    }

    out.push_str("\nResources (alive and draining nodes):\n");
    if status.resources.is_empty() {
        out.push_str("  (none)\n");
    } else {
        let rows: Vec<Vec<String>> = status
            .resources
            .iter()
            .map(|(name, u)| {
                let (used, total) = (u.used.to_string(), u.total.to_string());
                let (bar, share) = bar(&used, &total, BAR_WIDTH);
                vec![
                    name.clone(),
                    format!("{}/{}", amount(name, &used), amount(name, &total)),
                    bar,
                    share,
                ]
            })
            .collect();
        out.push_str(&columns(&["", "#", "", "#"], &rows, 2));
    }

    out.push('\n');
    let _ = writeln!(out, "Actors: {}", counts(&status.actors, ACTOR_STATES));
    let _ = writeln!(out, "Tasks: {}", counts(&status.tasks, TASK_STATES));
    let _ = writeln!(out, "Placement groups: {}", counts(&status.placement_groups, GROUP_STATES));

    if status.pending_total > 0 || !status.pending.is_empty() {
        let shown = status.pending.len() as u64;
        let total = status.pending_total.max(shown);
        if shown < total {
            let _ = writeln!(out, "\nPending ({total}, oldest {shown} shown):");
        } else {
            let _ = writeln!(out, "\nPending ({total}):");
        }
        let rows: Vec<Vec<String>> = status
            .pending
            .iter()
            .map(|p| {
                let word = if p.diagnosis.infeasible { "infeasible" } else { "waiting" };
                vec![p.id.clone(), kind_text(&p.kind), word.into(), p.diagnosis.summary.clone()]
            })
            .collect();
        out.push_str(&columns(&[], &rows, 2));
    }

    if !status.demand.is_empty() {
        out.push_str("\nDemand (what the waiting requests ask for, by shape):\n");
        let rows: Vec<Vec<String>> = status.demand.iter().map(demand_row).collect();
        out.push_str(&columns(
            &["#COUNT", "#INFEASIBLE", "SHAPE", "LABEL SELECTOR", "TOLERATIONS"],
            &rows,
            2,
        ));
    }
    out
}

/// `3 ALIVE, 1 PENDING` in the order of `order`; `none` when empty.
fn counts(counts: &StringCounts, order: &[&str]) -> String {
    let mut known: Vec<(&str, u64)> =
        order.iter().filter_map(|state| counts.get(*state).map(|count| (*state, *count))).collect();
    known.extend(
        counts
            .iter()
            .filter(|(state, _)| !order.contains(&state.as_str()))
            .map(|(state, count)| (state.as_str(), *count)),
    );
    let parts: Vec<String> = known
        .into_iter()
        .filter(|(_, count)| *count > 0)
        .map(|(state, count)| format!("{count} {state}"))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn kind_text(kind: &str) -> String {
    match kind {
        "placement_group" => "placement group".into(),
        other => other.into(),
    }
}

fn demand_row(demand: &Demand) -> Vec<String> {
    let shape: Vec<String> =
        demand.shape.iter().map(|(name, a)| format!("{name} {}", amount(name, a))).collect();
    let or_none = |text: String| if text.is_empty() { view::NONE.to_string() } else { text };
    vec![
        demand.count.to_string(),
        demand.infeasible.to_string(),
        or_none(shape.join(", ")),
        or_none(view::pairs(&demand.label_selector)),
        or_none(view::pairs(&demand.tolerations)),
    ]
}

#[cfg(test)]
mod tests {
    use berth_api::rest::{NodeCounts, PendingItem};

    use super::super::view::fixtures::*;
    use super::*;

    fn status() -> ClusterStatus {
        ClusterStatus {
            nodes: NodeCounts { alive: 3, draining: 1, suspect: 0, dead: 0 },
            resources: [
                ("CPU".to_string(), usage("32", "8", "24")),
                ("GPU".to_string(), usage("4", "4", "0")),
                ("memory".to_string(), usage("137438953472", "34359738368", "103079215104")),
            ]
            .into(),
            actors: [("ALIVE".to_string(), 5), ("PENDING".to_string(), 2), ("DEAD".to_string(), 0)]
                .into(),
            tasks: [("FINISHED".to_string(), 10), ("RUNNING".to_string(), 3)].into(),
            placement_groups: Default::default(),
            pending: vec![PendingItem {
                kind: "task".into(),
                id: "task-3".into(),
                diagnosis: gpu_diagnosis(),
            }],
            pending_total: 2,
            demand: vec![Demand {
                shape: map(&[("GPU", "1")]),
                label_selector: map(&[("zone", "in(a,b)")]),
                tolerations: Default::default(),
                count: 2,
                infeasible: 0,
            }],
            rare_resources: vec!["GPU".into()],
            warnings: Vec::new(),
        }
    }

    #[test]
    fn renders_like_ray_status() {
        let text = render("127.0.0.1:8780", &status());
        let want = [
            "Berth cluster at 127.0.0.1:8780\n",
            "Nodes: 3 alive, 1 draining, 0 dead\n",
            "Rare-resource isolation: GPU (their nodes take only work that asks for them)\n",
            "  CPU           8/32  █████░░░░░░░░░░░░░░░   25%\n",
            "  GPU            4/4  ████████████████████  100%\n",
            "  memory  32Gi/128Gi  █████░░░░░░░░░░░░░░░   25%\n",
            "Actors: 2 PENDING, 5 ALIVE\n",
            "Tasks: 3 RUNNING, 10 FINISHED\n",
            "Placement groups: none\n",
            "Pending (2, oldest 1 shown):\n",
            "  task-3  task  waiting  0/2 nodes can take it now: 1 too little GPU free",
            "COUNT  INFEASIBLE  SHAPE  LABEL SELECTOR  TOLERATIONS\n",
            "      2           0  GPU 1  zone=in(a,b)    -\n",
        ];
        for part in want {
            assert!(text.contains(part), "{part:?}\n{text}");
        }
    }

    #[test]
    fn empty_cluster() {
        let text = render("h:1", &ClusterStatus::default());
        assert!(text.contains("Nodes: 0 alive, 0 draining, 0 dead"), "{text}");
        assert!(text.contains("Resources (alive and draining nodes):\n  (none)"), "{text}");
        assert!(!text.contains("Pending"), "{text}");
        assert!(!text.contains("Demand"), "{text}");
        assert!(!text.contains("Rare-resource"), "{text}");
    }
}
