//! `berth bench`: decision speed on synthetic clusters (see `berth_sim::bench` for the method).
//!
//! Each case (a workload at a cluster size) runs in its own child process — this binary again,
//! with the hidden `--case` flag — so that its peak memory is its own and one case cannot warm
//! or pollute another's caches.

use std::io::Write;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use berth_sim::bench::{run_case, BenchOptions, BenchResult, Workload};
use clap::{Args, ValueEnum};
use comfy_table::{presets, Cell, CellAlignment, Table};

/// The flags of `berth bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// A smoke run for CI: 1k nodes and few decisions (under a minute; it must only run).
    #[arg(long)]
    pub quick: bool,

    /// Cluster sizes, comma-separated (default 1000,10000,100000; 1000 with --quick).
    #[arg(long, value_name = "N,N,…", value_delimiter = ',')]
    pub nodes: Option<Vec<usize>>,

    /// Workloads, comma-separated (default all): default, selector-tolerations,
    /// actor-anti-affinity, strict-spread-groups.
    #[arg(long, value_name = "NAME,…", value_delimiter = ',')]
    pub workload: Option<Vec<String>>,

    /// Runs per case; the median is reported (default 5; 1 with --quick).
    #[arg(long, value_name = "N")]
    pub runs: Option<usize>,

    /// Output format: `table` for people, `json` for one object per case per line.
    #[arg(long, value_enum, default_value_t = BenchOutput::Table)]
    pub output: BenchOutput,

    /// Internal: run one case (`WORKLOAD:NODES`) in this process and print its JSON.
    #[arg(long, hide = true, value_name = "WORKLOAD:NODES")]
    pub case: Option<String>,
}

/// Output formats of `berth bench`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchOutput {
    /// A table, with the targets and the baseline ratio.
    Table,
    /// One JSON object per case, per line.
    Json,
}

fn options(args: &BenchArgs) -> anyhow::Result<BenchOptions> {
    let mut options = if args.quick { BenchOptions::quick() } else { BenchOptions::full() };
    if let Some(nodes) = &args.nodes {
        if nodes.iter().any(|&n| n < 10) {
            bail!("--nodes: every size must be at least 10 (one node per zone)");
        }
        options.sizes = nodes.clone();
    }
    if let Some(names) = &args.workload {
        options.workloads = names
            .iter()
            .map(|name| {
                Workload::parse(name).with_context(|| {
                    let known: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
                    format!(
                        "--workload: unknown workload {name:?}; use one of {}",
                        known.join(", ")
                    )
                })
            })
            .collect::<anyhow::Result<_>>()?;
    }
    if let Some(runs) = args.runs {
        if runs == 0 {
            bail!("--runs: must be at least 1");
        }
        options.runs = runs;
    }
    Ok(options)
}

/// Runs the benchmark and writes the results to `out`; progress goes to stderr.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let options = options(args)?;
    if let Some(case) = &args.case {
        let (name, nodes) = case.split_once(':').context("--case: expected WORKLOAD:NODES")?;
        let workload =
            Workload::parse(name).with_context(|| format!("--case: unknown workload {name:?}"))?;
        let nodes: usize = nodes.parse().context("--case: NODES must be a number")?;
        let result = run_case(workload, nodes, &options);
        writeln!(out, "{}", serde_json::to_string(&result)?)?;
        return Ok(());
    }
    let exe = std::env::current_exe().context("cannot find this program to run the cases")?;
    let mut results = Vec::new();
    let cases = options.sizes.len() * options.workloads.len();
    for &nodes in &options.sizes {
        for &workload in &options.workloads {
            eprintln!("[{}/{cases}] {} on {nodes} nodes…", results.len() + 1, workload.name());
            let mut command = Command::new(&exe);
            command.arg("bench").arg("--case").arg(format!("{}:{nodes}", workload.name()));
            command.arg("--runs").arg(options.runs.to_string());
            if args.quick {
                command.arg("--quick");
            }
            let child = command.stdin(Stdio::null()).stderr(Stdio::inherit()).output();
            let child = child.with_context(|| format!("cannot run {}", exe.display()))?;
            if !child.status.success() {
                bail!("the case {}:{nodes} failed ({})", workload.name(), child.status);
            }
            let line = String::from_utf8_lossy(&child.stdout);
            let result: BenchResult = serde_json::from_str(line.trim()).with_context(|| {
                format!("the case {}:{nodes} printed no result", workload.name())
            })?;
            if args.output == BenchOutput::Json {
                writeln!(out, "{}", serde_json::to_string(&result)?)?;
            }
            results.push(result);
        }
    }
    if args.output == BenchOutput::Table {
        write!(out, "{}", table(&results))?;
    }
    Ok(())
}

/// The goal of each workload at 10k nodes, decisions (or groups) per second.
fn goal(workload: &str) -> Option<f64> {
    match workload {
        "default" => Some(500_000.0),
        "selector-tolerations" => Some(200_000.0),
        "actor-anti-affinity" => Some(100_000.0),
        "strict-spread-groups" => Some(50_000.0),
        _ => None,
    }
}

fn table(results: &[BenchResult]) -> String {
    let mut table = Table::new();
    table.load_style(presets::ASCII_MARKDOWN).set_header(vec![
        "workload",
        "nodes",
        "decisions/s",
        "p50 µs",
        "p99 µs",
        "baseline/s",
        "× baseline",
        "goal (10k)",
        "cluster MiB",
        "peak MiB",
    ]);
    for r in results {
        let goal = goal(&r.workload).map_or(String::new(), |g| format!("{g:.0}"));
        let cells = [
            r.workload.clone(),
            r.nodes.to_string(),
            format!("{:.0}", r.decisions_per_s),
            format!("{:.2}", r.p50_us),
            format!("{:.2}", r.p99_us),
            format!("{:.0}", r.baseline_decisions_per_s),
            format!("{:.1}", r.speedup()),
            goal,
            format!("{:.1}", r.cluster_bytes as f64 / (1 << 20) as f64),
            format!("{:.1}", r.peak_rss_bytes as f64 / (1 << 20) as f64),
        ];
        table.add_row(cells.into_iter().enumerate().map(|(i, c)| {
            let cell = Cell::new(c);
            if i >= 1 {
                cell.set_alignment(CellAlignment::Right)
            } else {
                cell
            }
        }));
    }
    format!("{table}\n")
}
