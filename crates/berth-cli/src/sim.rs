//! `berth sim`: replay traces through the scheduler and measure placement quality.
//!
//! `berth sim openb` replays the Alibaba GPU trace v2023 as the FGD paper does (see the
//! `berth-sim` crate): every policy with every seed, in parallel, with a progress bar on
//! stderr when it is a terminal; then the summary table (or JSON lines) on stdout, and the CSV
//! and the plots (SVG and PNG) in `--out`.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use berth_sim::locate::{self, Search};
use berth_sim::{plot, report, Curve, Plan, Policy, Scenario};
use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The flags of `berth sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    #[command(subcommand)]
    pub command: SimCommand,
}

/// The traces `berth sim` replays.
#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Replay the Alibaba GPU trace v2023 ("openb") as the FGD paper evaluates schedulers.
    ///
    /// The cluster is a node list (default: the 1213 GPU nodes), each node labelled with its
    /// GPU model. Pods arrive once each in an order shuffled by the seed, filled with clones to
    /// 130% of the cluster's GPUs; each is placed or dropped and never leaves. After every pod
    /// the GPU allocation ratio and the fragmentation are measured; they are averaged per
    /// whole percent of arrived workload (k) and over seeds.
    ///
    /// Writes the summary table (allocation at k = 80, 90, 100, 110, 130 per policy; then, when
    /// the trace folder has fgd_published_alloc.csv, every trace at k = 100 beside FGD's
    /// published mean and the last policy's difference to it) or, with --output json, one JSON
    /// object per trace and policy to stdout (with `fgd` and `vs_fgd` where FGD published the
    /// trace); and openb.csv plus a plot
    /// per trace (openb-<trace>.svg and .png) to --out. Exit status: 0 done, 2 bad input, 1
    /// when the results cannot be written.
    Openb(OpenbArgs),
}

/// The flags of `berth sim openb`.
#[derive(Debug, Args)]
pub struct OpenbArgs {
    /// Pod lists: a name in the trace folder (`default` is openb_pod_list_default.csv),
    /// `all` for every one, or a path to a CSV of the same format (5 or 11 columns).
    /// Several may be given, separated by commas.
    #[arg(long, value_name = "NAME|PATH", value_delimiter = ',', default_value = "default")]
    pub trace: Vec<String>,

    /// The node list: a name in the trace folder (`gpu_node`, `all_node`) or a path.
    #[arg(long, value_name = "NAME|PATH", default_value = locate::DEFAULT_NODES)]
    pub nodes: String,

    /// The trace folder. Default: $BERTH_TRACES, else shared/traces/openb in the nearest
    /// parent of the current directory (or of the binary) that has one.
    #[arg(long, value_name = "DIR")]
    pub traces_dir: Option<PathBuf>,

    /// Built-in policies, separated by commas: random, best-fit, most-allocated-gpu,
    /// default (Berth's hybrid policy), fragmentation (Berth's best profile here).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "random,best-fit,most-allocated-gpu,default,fragmentation"
    )]
    pub policy: Vec<String>,

    /// A scheduler profile (YAML) to run as one more policy, named after the file; may be
    /// given several times. A fragmentation scorer with `shapes: observed` gets the trace's
    /// typical shapes.
    #[arg(long, value_name = "FILE")]
    pub profile: Vec<PathBuf>,

    /// The seeds: `A..B` (both included) or a list `A,B,C`.
    #[arg(long, value_name = "SEEDS", default_value = "42..51")]
    pub seeds: String,

    /// Replays run at once. Default: the number of cores.
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,

    /// Where the CSV and the plots go (created if missing).
    #[arg(long, value_name = "DIR", default_value = "sim-results")]
    pub out: PathBuf,

    /// What goes to stdout: the summary `table`, or `json` lines for scripts.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// Output formats of `berth sim openb`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// The summary table.
    Table,
    /// One JSON object per trace and policy, each on its own line.
    Json,
}

/// Why `berth sim` stopped: bad input (status 2) or anything else (status 1).
enum Failure {
    Input(String),
    Output(String),
}

/// Runs `berth sim` and maps its failures to exit statuses.
pub fn main(args: &SimArgs) -> ExitCode {
    let SimCommand::Openb(args) = &args.command;
    let failure = match openb(args) {
        Ok(()) => return ExitCode::SUCCESS,
        Err(failure) => failure,
    };
    let (message, status) = match failure {
        Failure::Input(message) => (message, 2),
        Failure::Output(message) => (message, 1),
    };
    let _ = writeln!(io::stderr().lock(), "error: {message}");
    ExitCode::from(status)
}

fn openb(args: &OpenbArgs) -> Result<(), Failure> {
    let seeds =
        parse_seeds(&args.seeds).map_err(|rule| Failure::Input(format!("--seeds: {rule}")))?;
    let policies = policies(args)?;
    let (scenarios, dir) = scenarios(args)?;
    // FGD's published results, when the trace folder has them: printed beside Berth's.
    let published = match dir.as_deref() {
        Some(dir) => berth_sim::published::Published::in_dir(dir).map_err(Failure::Input)?,
        None => None,
    };
    let plan = Plan::new(&scenarios, &policies, &seeds);
    let threads = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let bar = ProgressBar::with_draw_target(Some(plan.total_pods()), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{elapsed_precise} [{bar:40}] {percent:>3}% {human_pos}/{human_len} pods, eta {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    let started = Instant::now();
    let curves = plan.run(threads, &|done| bar.inc(done)).map_err(Failure::Input)?;
    bar.finish_and_clear();
    let elapsed = started.elapsed().as_secs_f64();
    let written = write_files(&args.out, &curves)?;
    let text = match args.output {
        Output::Table => match &published {
            Some(published) => {
                format!("{}\n{}", report::table(&curves), report::versus_fgd(&curves, published))
            }
            None => report::table(&curves),
        },
        Output::Json => report::json_lines(&curves, published.as_ref()),
    };
    let mut stdout = io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Err(err) if err.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
        Err(err) => return Err(Failure::Output(format!("cannot write the output: {err}"))),
        Ok(()) => {}
    }
    let replays = scenarios.len() * policies.len() * seeds.len();
    let _ = writeln!(
        io::stderr().lock(),
        "{replays} replays ({} pods) in {elapsed:.1} s on {threads} thread{}; wrote {}",
        plan.total_pods(),
        if threads == 1 { "" } else { "s" },
        written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    );
    Ok(())
}

/// `A..B` (both included) or `A,B,C`: at least one seed, none twice.
fn parse_seeds(text: &str) -> Result<Vec<u64>, String> {
    let number = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map_err(|_| format!("{:?} is not a seed (a whole number)", s.trim()))
    };
    let seeds: Vec<u64> = match text.split_once("..") {
        Some((from, to)) => {
            let (from, to) = (number(from)?, number(to.trim_start_matches('='))?);
            if from > to {
                return Err(format!("{text:?} is empty: the first seed is above the last"));
            }
            if to - from >= 10_000 {
                return Err(format!("{text:?} is too many seeds; at most 10000"));
            }
            (from..=to).collect()
        }
        None => text.split(',').map(number).collect::<Result<_, _>>()?,
    };
    for (i, seed) in seeds.iter().enumerate() {
        if seeds[..i].contains(seed) {
            return Err(format!("seed {seed} is given twice"));
        }
    }
    Ok(seeds)
}

fn policies(args: &OpenbArgs) -> Result<Vec<Policy>, Failure> {
    let mut policies: Vec<Policy> = Vec::new();
    for name in args.policy.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        let policy = Policy::built_in(name).ok_or_else(|| {
            Failure::Input(format!(
                "--policy {name}: unknown policy; the built-in ones are {} (use --profile FILE \
                 for a profile file)",
                berth_sim::policy::BUILT_IN.join(", ")
            ))
        })?;
        policies.push(policy);
    }
    for path in &args.profile {
        let text = std::fs::read_to_string(path)
            .map_err(|err| Failure::Input(format!("profile file {}: {err}", path.display())))?;
        let profile = berth_api::spec::profile::parse_profile(&text).map_err(|err| {
            let at =
                err.location.map_or(String::new(), |(line, column)| format!(":{line}:{column}"));
            Failure::Input(format!("profile file {}{at}: {err}", path.display()))
        })?;
        let name = path.file_stem().map_or("profile".into(), |s| s.to_string_lossy().into_owned());
        policies.push(Policy::from_profile(&name, profile));
    }
    for (i, policy) in policies.iter().enumerate() {
        if policies[..i].iter().any(|p| p.name == policy.name) {
            return Err(Failure::Input(format!("policy {} is given twice", policy.name)));
        }
    }
    if policies.is_empty() {
        return Err(Failure::Input("no policy: give --policy or --profile".to_string()));
    }
    Ok(policies)
}

/// The scenarios, and the trace folder when one was needed.
fn scenarios(args: &OpenbArgs) -> Result<(Vec<Scenario>, Option<PathBuf>), Failure> {
    let needs_dir = args.trace.iter().any(|t| !locate::is_path(t)) || !locate::is_path(&args.nodes);
    let dir = if needs_dir {
        let search = Search {
            flag: args.traces_dir.as_deref(),
            env: std::env::var_os(locate::ENV).map(PathBuf::from),
            cwd: std::env::current_dir().ok(),
            exe: std::env::current_exe().ok(),
        };
        Some(locate::traces_dir(&search).map_err(Failure::Input)?)
    } else {
        None
    };
    let (_, nodes_path) = locate::node_list(dir.as_deref(), &args.nodes).map_err(Failure::Input)?;
    let nodes = berth_sim::read_nodes(&nodes_path).map_err(|e| Failure::Input(e.to_string()))?;
    let mut names: Vec<String> = Vec::new();
    for value in args.trace.iter().map(|t| t.trim()).filter(|t| !t.is_empty()) {
        match (value, dir.as_deref()) {
            ("all", Some(dir)) => names.extend(locate::all_pod_lists(dir).map_err(Failure::Input)?),
            _ => names.push(value.to_string()),
        }
    }
    let mut scenarios: Vec<Scenario> = Vec::new();
    for value in names {
        let (name, path) = locate::pod_list(dir.as_deref(), &value).map_err(Failure::Input)?;
        if scenarios.iter().any(|s| s.name == name) {
            return Err(Failure::Input(format!("--trace {name} is given twice")));
        }
        let pods = berth_sim::read_pods(&path).map_err(|e| Failure::Input(e.to_string()))?;
        scenarios.push(Scenario::new(&name, &nodes, pods).map_err(Failure::Input)?);
    }
    if scenarios.is_empty() {
        return Err(Failure::Input("--trace: no trace given".to_string()));
    }
    Ok((scenarios, dir))
}

/// Writes `openb.csv` and a plot per trace into `out`; returns the paths written.
fn write_files(out: &Path, curves: &[Curve]) -> Result<Vec<PathBuf>, Failure> {
    let fail = |path: &Path, err: String| Failure::Output(format!("{}: {err}", path.display()));
    std::fs::create_dir_all(out).map_err(|err| fail(out, err.to_string()))?;
    let csv_path = out.join("openb.csv");
    let file = std::fs::File::create(&csv_path).map_err(|err| fail(&csv_path, err.to_string()))?;
    report::write_csv(curves, io::BufWriter::new(file))
        .map_err(|err| fail(&csv_path, err.to_string()))?;
    let mut written = vec![csv_path];
    let mut traces: Vec<&str> = Vec::new();
    for curve in curves {
        if !traces.contains(&curve.trace.as_str()) {
            traces.push(&curve.trace);
        }
    }
    for trace in traces {
        let of_trace: Vec<&Curve> = curves.iter().filter(|c| c.trace == trace).collect();
        let svg = out.join(format!("openb-{trace}.svg"));
        let png = out.join(format!("openb-{trace}.png"));
        plot::write(trace, &of_trace, &svg, &png).map_err(Failure::Output)?;
        written.push(svg);
        written.push(png);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::parse_seeds;

    #[test]
    fn seeds_as_ranges_and_lists() {
        assert_eq!(parse_seeds("42..51").unwrap(), (42..=51).collect::<Vec<_>>());
        assert_eq!(parse_seeds("42..=43").unwrap(), [42, 43]);
        assert_eq!(parse_seeds("7").unwrap(), [7]);
        assert_eq!(parse_seeds("1, 5,3").unwrap(), [1, 5, 3]);
        for (bad, rule) in [
            ("5..4", "the first seed is above the last"),
            ("x", "\"x\" is not a seed"),
            ("1,1", "seed 1 is given twice"),
            ("1,", "\"\" is not a seed"),
        ] {
            assert!(parse_seeds(bad).unwrap_err().contains(rule), "{bad}");
        }
    }
}
