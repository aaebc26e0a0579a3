//! `berth bench`: decision speed on synthetic clusters (see `berth_sim::bench` for the method);
//! `berth bench api`: the head's speed through its REST API (its own module tree: `bench/api.rs`
//! and `bench/api/`); `berth bench retention` and `berth bench failover`.
//!
//! Each case (a workload at a cluster size) runs in its own child process — this binary again,
//! with the hidden `--case` flag — so that its peak memory is its own and one case cannot warm
//! or pollute another's caches.

mod api;
mod failover;
mod retention;

use std::io::Write;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use berth_sim::bench::{run_case, BenchOptions, BenchResult, Workload};
use clap::{Args, ValueEnum};
use comfy_table::{presets, Cell, CellAlignment, Table};

/// What to measure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Suite {
    /// Scheduling decisions in the core, on synthetic clusters of 1k to 100k nodes.
    #[default]
    Decisions,
    /// The head through its REST API: durable actor creations/s, 10,000 actors ALIVE,
    /// placement groups/s, batched creations/s, creations while 1,000 clients watch, and
    /// 100,000 actors ALIVE on 1,000 nodes with the memory they take (a real head, simulated
    /// agents in a process of their own, an HTTP client; the last phase's head in a process of
    /// its own too; three runs, each figure the median's, about a minute on two cores).
    Api,
    /// A head's memory and restart time after many finished tasks, with and without
    /// forgetting them (`--tasks`, default 1,000,000; 20,000 with --quick).
    Retention,
    /// A standby head taking over from an active head killed with SIGKILL, on `--store`
    /// (Redis or etcd), with `--actors` actors (default 5,000) in it: the seconds until the
    /// standby serves, until every node registered again, and until the first creation is
    /// acknowledged, per round (`--runs`, default 3).
    Failover,
}

/// The flags of `berth bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to measure: `decisions` (default), `api`, `retention` or `failover`.
    #[arg(value_enum, default_value_t = Suite::Decisions)]
    pub suite: Suite,

    /// api: actors created in the throughput phase (default 20000; 2000 with --quick);
    /// failover: actors in the store (default 5000; 500 with --quick).
    #[arg(long, value_name = "N")]
    pub actors: Option<usize>,

    /// failover: the store both heads share (`redis://HOST:PORT/DB?prefix=NAME` with the
    /// persistence the head requires, or `etcd://HOST:PORT,…?prefix=NAME`). Use a prefix of its
    /// own: the bench writes there.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,

    /// failover: the heads' `--lease-ttl`, seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
    pub lease_ttl: f64,

    /// api: placement groups created (default 5000; 500 with --quick).
    #[arg(long, value_name = "N")]
    pub groups: Option<usize>,

    /// retention: tasks created and finished (default 1000000; 20000 with --quick).
    #[arg(long, value_name = "N")]
    pub tasks: Option<usize>,

    /// api: concurrent HTTP connections (default 64).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub concurrency: usize,

    /// api: the heads' assignment window in milliseconds, as `berth start --head
    /// --assignment-window` (0 to 1000; default the head's, 10).
    #[arg(
        long,
        value_name = "MS",
        default_value_t = crate::daemon::DEFAULT_ASSIGNMENT_WINDOW_MS,
        allow_negative_numbers = true
    )]
    pub assignment_window: u64,

    /// A smoke run for CI: 1k nodes and few decisions (under a minute; it must only run).
    #[arg(long)]
    pub quick: bool,

    /// Cluster sizes, comma-separated (default 1000,10000,100000; 1000 with --quick);
    /// failover: the simulated nodes (default 20).
    #[arg(long, value_name = "N,N,…", value_delimiter = ',')]
    pub nodes: Option<Vec<usize>>,

    /// Workloads, comma-separated (default all): default, selector-tolerations,
    /// actor-anti-affinity, strict-spread-groups, fragmentation-gpu, soft-actor-affinity.
    #[arg(long, value_name = "NAME,…", value_delimiter = ',')]
    pub workload: Option<Vec<String>>,

    /// Runs per case, the median reported (default 5; 1 with --quick); `api`: full runs, each
    /// figure the median run's (default 3; 1 with --quick); `failover`: takeovers (default 3;
    /// 1 with --quick).
    #[arg(long, value_name = "N")]
    pub runs: Option<usize>,

    /// Output format: `table` for people, `json` for one object per case per line.
    #[arg(long, value_enum, default_value_t = BenchOutput::Table)]
    pub output: BenchOutput,

    /// Internal: run one case (`WORKLOAD:NODES`; `scale:ACTORS:NODES:BATCH` for `bench api`,
    /// its phase 6) in this process and print its JSON.
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

/// Has mimalloc (the process's allocator, see `main.rs`) return the pages it holds free now
/// instead of after its purge delay.
pub(crate) fn release_free_memory() {
    // SAFETY: `mi_collect` takes no pointers; it only walks the allocator's own state.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

fn options(args: &BenchArgs) -> anyhow::Result<BenchOptions> {
    let mut options = if args.quick { BenchOptions::quick() } else { BenchOptions::full() };
    options.release_free_memory = release_free_memory;
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
    match args.suite {
        Suite::Api => return api::command(args, out),
        Suite::Retention => return run_retention(args, out),
        Suite::Failover => return run_failover(args, out),
        Suite::Decisions => {}
    }
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
        // Set from the first measurement (1,633/s, p50 173 µs, 83% of it one scan of every
        // node per decision): a tenth of DEFAULT's goal, as the profile evaluates the FGD
        // measure four times per node it visits.
        "fragmentation-gpu" => Some(50_000.0),
        // Set from the first measurement (16,164/s): the anti-affinity workload's goal, with
        // the same 100,000 actors placed.
        "soft-actor-affinity" => Some(100_000.0),
        _ => None,
    }
}

/// A row whose first cell names the case and whose other cells are figures (right-aligned).
fn figures_row(cells: impl IntoIterator<Item = String>) -> Vec<Cell> {
    cells
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let cell = Cell::new(c);
            if i >= 1 {
                cell.set_alignment(CellAlignment::Right)
            } else {
                cell
            }
        })
        .collect()
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
        table.add_row(figures_row(cells));
    }
    format!("{table}\n")
}

/// `berth bench failover`.
fn run_failover(args: &BenchArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let Some(store) = args.store.clone() else {
        bail!(
            "bench failover needs --store: a Redis (appendonly yes, appendfsync always) or etcd \
             URL both heads can share, with a prefix of its own"
        );
    };
    if !(args.lease_ttl.is_finite() && (0.5..=3600.0).contains(&args.lease_ttl)) {
        bail!("--lease-ttl: {} is not between 0.5 and 3600 seconds", args.lease_ttl);
    }
    let settings = failover::FailoverBench {
        store,
        actors: args.actors.unwrap_or(if args.quick { 500 } else { 5_000 }),
        nodes: args.nodes.as_ref().and_then(|n| n.first().copied()).unwrap_or(20),
        rounds: args.runs.unwrap_or(if args.quick { 1 } else { 3 }),
        lease_ttl: args.lease_ttl,
    };
    let rounds = failover::run(&settings, &mut |step| eprintln!("{step}…"))?;
    if args.output == BenchOutput::Json {
        for round in &rounds {
            writeln!(out, "{}", serde_json::to_string(round)?)?;
        }
        return Ok(());
    }
    writeln!(
        out,
        "A standby taking over from a head killed with SIGKILL: {} actors on {} nodes, \
         --lease-ttl {} s; seconds from the kill.",
        settings.actors, settings.nodes, settings.lease_ttl
    )?;
    let mut table = Table::new();
    table.load_style(presets::ASCII_MARKDOWN).set_header(vec![
        "round",
        "standby serves",
        "agents registered",
        "first creation acknowledged",
    ]);
    let row = |name: String, serving: f64, agents: f64, first: f64| {
        vec![
            Cell::new(name),
            Cell::new(format!("{serving:.2}")).set_alignment(CellAlignment::Right),
            Cell::new(format!("{agents:.2}")).set_alignment(CellAlignment::Right),
            Cell::new(format!("{first:.2}")).set_alignment(CellAlignment::Right),
        ]
    };
    for r in &rounds {
        table.add_row(row(r.round.to_string(), r.serving_s, r.agents_s, r.first_creation_s));
    }
    table.add_row(row(
        "median".into(),
        failover::median(rounds.iter().map(|r| r.serving_s).collect()),
        failover::median(rounds.iter().map(|r| r.agents_s).collect()),
        failover::median(rounds.iter().map(|r| r.first_creation_s).collect()),
    ));
    writeln!(out, "{table}")?;
    Ok(())
}

/// `berth bench retention`.
fn run_retention(args: &BenchArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let tasks = args.tasks.unwrap_or(if args.quick { 20_000 } else { 1_000_000 });
    if let Some(case) = &args.case {
        let result = retention::run_case(case, tasks)?;
        writeln!(out, "{}", serde_json::to_string(&result)?)?;
        return Ok(());
    }
    let results = retention::run(tasks, &mut |step| eprintln!("{step}…"))?;
    if args.output == BenchOutput::Json {
        for result in &results {
            writeln!(out, "{}", serde_json::to_string(result)?)?;
        }
        return Ok(());
    }
    let mib = |bytes: u64| format!("{:.1}", bytes as f64 / (1 << 20) as f64);
    let mut table = Table::new();
    table.load_style(presets::ASCII_MARKDOWN).set_header(vec![
        "policy",
        "tasks",
        "kept",
        "fill s",
        "head MiB",
        "fill peak MiB",
        "restart s",
        "restarted RSS MiB",
        "store MiB",
    ]);
    for r in &results {
        let cells = [
            r.policy.clone(),
            r.tasks.to_string(),
            r.kept.to_string(),
            format!("{:.1}", r.fill_s),
            mib(r.head_bytes),
            mib(r.fill_peak_bytes),
            format!("{:.2}", r.restart_s),
            mib(r.restart_rss_bytes),
            mib(r.store_bytes),
        ];
        table.add_row(figures_row(cells));
    }
    writeln!(out, "{table}")?;
    Ok(())
}
