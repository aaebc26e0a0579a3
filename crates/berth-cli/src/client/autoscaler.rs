//! `berth autoscaler status` and `berth autoscaler plan`: what the autoscaler runs and why,
//! and what it would launch.

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use berth_api::rest::{AutoscalerPlan, AutoscalerStatus, PlanItem};
use berth_api::spec::node_types::load_autoscaler;
use berth_api::spec::{load_cluster, load_request, LoadedRequest};
use berth_autoscaler::{Fleet, Want};
use clap::{Args, Subcommand};

use super::view::{columns, pairs, time};
use super::{api_path, json_text, write_out, BadInput, HeadArgs, Output, OutputArgs};

/// `berth autoscaler …`.
#[derive(Debug, Args)]
pub struct AutoscalerArgs {
    #[command(subcommand)]
    pub command: AutoscalerCommand,
}

/// What `berth autoscaler` does.
#[derive(Debug, Subcommand)]
pub enum AutoscalerCommand {
    /// The node types and their nodes (alive, launching, idle), the last plan and the latest
    /// decisions with why.
    ///
    /// Exit status: 0; 1 when the head cannot be reached or answers an error.
    #[command(after_help = "Examples:\n  berth autoscaler status\n  \
                            berth autoscaler status --output json")]
    Status(StatusArgs),

    /// A dry run: which node types would be launched for what waits, and why, per item.
    ///
    /// Live (no --cluster): the head plans for what waits on it now, with its node types, or
    /// with those of --autoscaler FILE. Offline (--cluster FILE --request FILE…): plans for
    /// the requests on the cluster file, with the node types of --autoscaler FILE. Exit
    /// status: 0 for any plan; 2 for bad input; 1 when the head cannot be reached or answers
    /// an error.
    #[command(after_help = "Examples:\n  berth autoscaler plan\n  \
        berth autoscaler plan --autoscaler examples/autoscaler/types.yaml\n  \
        berth autoscaler plan --autoscaler examples/autoscaler/types.yaml \\\n    \
        --cluster examples/cluster.yaml --request examples/pg-strict-spread.yaml")]
    Plan(PlanArgs),
}

/// The flags of `berth autoscaler status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub head: HeadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The flags of `berth autoscaler plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// An autoscaler file: plan with its node types (needed offline).
    #[arg(long, value_name = "FILE")]
    pub autoscaler: Option<PathBuf>,
    /// Plan offline on this cluster file instead of asking the head.
    #[arg(long, value_name = "FILE", requires = "autoscaler", requires = "request")]
    pub cluster: Option<PathBuf>,
    /// A request file to plan for (offline; repeat for several, in order).
    #[arg(long, value_name = "FILE", requires = "cluster")]
    pub request: Vec<PathBuf>,
    #[command(flatten)]
    pub head: HeadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Runs `berth autoscaler …`.
pub fn run(args: &AutoscalerArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    match &args.command {
        AutoscalerCommand::Status(args) => {
            let client = args.head.client()?;
            let status: AutoscalerStatus = client.get(&api_path(&["autoscaler"]))?;
            let text = match args.output.output {
                Output::Table => render_status(&status),
                Output::Json => json_text(&status)?,
            };
            write_out(out, &text)
        }
        AutoscalerCommand::Plan(args) => {
            let plan = match &args.cluster {
                Some(cluster) => offline(args, cluster)?,
                None => live(args)?,
            };
            let text = match args.output.output {
                Output::Table => render_plan(&plan),
                Output::Json => json_text(&plan)?,
            };
            write_out(out, &text)
        }
    }
}

fn live(args: &PlanArgs) -> anyhow::Result<AutoscalerPlan> {
    // Checked here first, so a bad file is reported with its line, as offline.
    let body = match &args.autoscaler {
        None => None,
        Some(path) => {
            load_autoscaler(path)?;
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let value: serde_json::Value = serde_saphyr::from_str(&text)
                .map_err(|e| BadInput::new(format!("{}: {e}", path.display())))?;
            Some(value)
        }
    };
    let client = args.head.client()?;
    Ok(client.post(&api_path(&["autoscaler", "plan"]), body.as_ref())?)
}

fn offline(args: &PlanArgs, cluster: &std::path::Path) -> anyhow::Result<AutoscalerPlan> {
    let path = args.autoscaler.as_ref().expect("clap requires --autoscaler with --cluster");
    let settings = load_autoscaler(path)?;
    let snapshot = load_cluster(cluster)?;
    let mut loaded = Vec::new();
    for request in &args.request {
        loaded.push((request.display().to_string(), load_request(request, &snapshot.cluster)?));
    }
    let wants: Vec<Want<'_>> = loaded
        .iter()
        .map(|(key, l)| match l {
            LoadedRequest::Request(request) => Want::Request { key, request },
            LoadedRequest::Group(spec) => Want::Group { key, spec },
        })
        .collect();
    let plan = berth_autoscaler::plan(
        &snapshot.cluster,
        &snapshot.config,
        &settings,
        &Fleet::default(),
        &wants,
    );
    Ok(berth_autoscaler::answer(&plan, 0))
}

/// The status for people.
pub fn render_status(status: &AutoscalerStatus) -> String {
    if !status.enabled {
        return "The head runs without an autoscaler (start it with --autoscaler FILE).\n"
            .to_string();
    }
    let mut out = format!(
        "Autoscaler: {} provider; at most {} nodes; idle nodes removed after {} s; \
         launch timeout {} s; upscaling speed {}\n\n",
        status.provider,
        status.max_nodes,
        status.idle_timeout_s,
        status.launch_timeout_s,
        status.upscaling_speed
    );
    let rows: Vec<Vec<String>> = status
        .node_types
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                pairs(&t.resources),
                or_dash(pairs(&t.taints)),
                format!("{}..{}", t.min_nodes, t.max_nodes),
                t.alive.to_string(),
                t.launching.to_string(),
                t.idle.to_string(),
            ]
        })
        .collect();
    out.push_str(&columns(
        &["TYPE", "RESOURCES", "TAINTS", "NODES", "ALIVE", "LAUNCHING", "IDLE"],
        &rows,
        0,
    ));
    if !status.nodes.is_empty() {
        out.push_str("\nNodes:\n");
        let rows: Vec<Vec<String>> = status
            .nodes
            .iter()
            .map(|n| {
                vec![
                    n.node_id.clone(),
                    n.node_type.clone(),
                    n.state.clone(),
                    time(n.launched_at_ms),
                    n.idle_since_ms.map(time).unwrap_or_else(|| "-".into()),
                ]
            })
            .collect();
        out.push_str(&columns(&["NODE", "TYPE", "STATE", "LAUNCHED", "IDLE SINCE"], &rows, 2));
    }
    match &status.last_plan {
        Some(plan) => {
            out.push('\n');
            out.push_str(&render_plan(plan));
        }
        None => out.push_str("\nNothing waits: no plan.\n"),
    }
    if !status.decisions.is_empty() {
        out.push_str("\nLatest decisions:\n");
        for d in &status.decisions {
            let reason =
                if d.reason.is_empty() { String::new() } else { format!(": {}", d.reason) };
            let _ = writeln!(
                out,
                "  {} {} {} ({}){reason}",
                time(d.at_ms),
                d.action,
                d.node_id,
                d.node_type
            );
        }
    }
    if !status.counters.is_empty() {
        let counts: Vec<String> = status.counters.iter().map(|(k, v)| format!("{v} {k}")).collect();
        let _ = writeln!(out, "\nSince the head started: {}", counts.join(", "));
    }
    out
}

/// A plan for people: the launches, then one line per waiting item.
pub fn render_plan(plan: &AutoscalerPlan) -> String {
    let list = |m: &std::collections::BTreeMap<String, u32>| {
        m.iter().map(|(t, n)| format!("{n} × {t}")).collect::<Vec<_>>().join(", ")
    };
    let mut out = String::new();
    if plan.launch.is_empty() {
        out.push_str("Plan: launch nothing\n");
    } else {
        let _ = writeln!(out, "Plan: launch {}", list(&plan.launch));
    }
    if !plan.deferred.is_empty() {
        let _ = writeln!(out, "  then, beyond upscaling_speed: {}", list(&plan.deferred));
    }
    for item in &plan.items {
        let _ = writeln!(out, "  {}: {}", item.id, item_text(item));
    }
    let hidden = plan.items_total.saturating_sub(plan.items.len() as u64);
    if hidden > 0 {
        let _ = writeln!(out, "  … and {hidden} more");
    }
    out
}

fn item_text(item: &PlanItem) -> String {
    let target = item.target.clone().unwrap_or_default();
    match item.verdict.as_str() {
        "fits" => format!("fits on {target} ({})", item.detail.join("; ")),
        "launch" => {
            let n = item.nodes.unwrap_or(1);
            format!("launch {n} × {target}")
        }
        "limited" => format!("{target} would take it, but {}", item.detail.join("; ")),
        "unservable" => {
            let mut text = "no node type can take it:".to_string();
            for line in &item.detail {
                text.push_str("\n      ");
                text.push_str(line);
            }
            text
        }
        _ => item.detail.join("; "),
    }
}

fn or_dash(text: String) -> String {
    if text.is_empty() {
        "-".into()
    } else {
        text
    }
}
