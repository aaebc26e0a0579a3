//! `berth`, the command line of the Berth scheduler.
//!
//! Layout: this file parses the command line and maps errors to exit statuses; the offline
//! commands live in their own modules (`explain`, `validate`, `sim`, `bench`), the long-running
//! ones (`up`, `start`, `stop`) in `daemon`, with `logging` for their logs. The input files are
//! read into core types by `berth_api::spec`, and `render` prints results. The commands that
//! talk to a running head (`status`, `list`, `get`, `taint`, `label`, `node`, `actor`, `task`,
//! `pg`, `kill`, `drain`, `autoscaler`, `token`, `logs`, and `explain` with an ID or without
//! `--cluster`) are under `client`; the REST client they share is the `berth-client` crate.
//!
//! Exit statuses: 0 when the command did its job (for `explain`, any decision: placed, pending
//! and infeasible are all answers), 2 for bad input (command line or files; the message names
//! the file, the field and the rule), 1 when the output cannot be written, the head cannot be
//! reached, or the head answers an error (4xx, 5xx). `validate` follows grep instead: 1 is
//! "valid, but the node does not satisfy it", and every error is 2.

mod bench;
mod client;
mod daemon;
mod explain;
mod logging;
mod render;
mod sim;
mod validate;

/// mimalloc instead of glibc's malloc: see Cargo.toml.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::{self, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use berth_api::spec::InputError;

/// Berth: a label-aware cluster scheduler.
#[derive(Debug, Parser)]
#[command(name = "berth", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Explain where a request goes on a cluster snapshot, node by node; or ask a running head
    /// why something is where it is.
    ///
    /// Offline (--cluster FILE --request FILE): loads a cluster snapshot and one request, runs
    /// the scheduler's decision once and prints the decision (placed, pending or infeasible,
    /// with the diagnosis) and, for every node, each filter's verdict and reason, its
    /// preferences, each scorer's raw score and weight, its total, and which nodes were
    /// shortlisted and chosen.
    ///
    /// Live: with an ID (`berth explain actor-12`), the head says where it is or why it
    /// waits, with the reasons; with --request FILE alone, the head dry-runs the request on
    /// its cluster as it is now (nothing is reserved).
    ///
    /// Exit status: 0 for any decision; 2 for bad input (a file that cannot be read, malformed
    /// YAML, an invalid field), with a message on stderr naming the file, the field and the
    /// rule; 1 when the head cannot be reached or answers an error.
    #[command(after_help = "Examples:\n  \
        berth explain --cluster examples/cluster.yaml --request examples/actor.yaml\n  \
        berth explain actor-12\n  \
        berth explain --request examples/actor.yaml --output json")]
    Explain(explain::ExplainArgs),

    /// Show the cluster at a glance: nodes, resources used, work by state, what waits and why.
    ///
    /// As `ray status`: nodes by state, each resource's use over its total (alive and
    /// draining nodes), actors, tasks and placement groups by state, the pending ones with
    /// their diagnosis, and the demand by shape (what an autoscaler would add nodes for).
    /// Exit status: 0; 1 when the head cannot be reached or answers an error.
    #[command(
        after_help = "Examples:\n  berth status\n  berth status --address 10.0.0.1:8780\n  \
                            berth status --output json"
    )]
    Status(client::status::StatusArgs),

    /// List nodes, actors, tasks or placement groups, one per line.
    ///
    /// Filters combine (AND) and are applied by the head. Exit status: 0 (even when nothing
    /// matches); 2 for a filter that does not apply; 1 when the head cannot be reached or
    /// answers an error.
    #[command(
        after_help = "Examples:\n  berth list nodes\n  berth list nodes --state draining\n  \
                            berth list actors --label app=web --namespace ml\n  \
                            berth list tasks --node gpu-1 --state RUNNING --limit 20\n  \
                            berth list pgs --output json"
    )]
    List(client::list::ListArgs),

    /// Show one actor, task, placement group or node with every field, its history and, when
    /// it waits, why.
    ///
    /// The kind follows from the ID's prefix (`actor-`, `task-`, `pg-`); a node is `node`
    /// and its ID or IP. Exit status: 0; 2 for an ID of no known kind; 1 when the head cannot
    /// be reached or answers an error (404 for an unknown ID).
    #[command(after_help = "Examples:\n  berth get actor-12\n  berth get pg-7 --output json\n  \
                            berth get node gpu-1\n  berth get node 10.0.0.3")]
    Get(client::get::GetArgs),

    /// Add or remove taints of a running node (keep work off it, or let it back).
    ///
    /// A node's taints keep away every request that does not tolerate them
    /// (`--tolerations`). Prints the node's taints after the change. Exit status: 0; 2 for
    /// bad flags; 1 when the head cannot be reached or answers an error.
    #[command(after_help = "Examples:\n  \
        berth taint --node-id gpu-1 --append gpu_node=true\n  \
        berth taint --node-ip 10.0.0.3 --append '{\"memory-pressure\": \"high\"}'\n  \
        berth taint --node-id gpu-1 --remove memory-pressure=high\n  \
        berth taint --node-ip 10.0.0.3 --delete '{\"gpu_node\": \"true\"}'")]
    Taint(client::taint::TaintArgs),

    /// Set or remove labels of a running node: `key=value` sets, `key-` removes.
    ///
    /// Work waiting for the labels is placed; work already running stays where it is.
    /// Removing a label that overrode a `berth.io/` default brings the default back. Prints
    /// the node's labels after. Exit status: 0; 2 for a malformed change; 1 when the head
    /// cannot be reached or answers an error (400 names the label and the rule).
    #[command(after_help = "Examples:\n  \
        berth label gpu-1 zone=us-west4-a tier=gold\n  \
        berth label 10.0.0.3 tier-")]
    Label(client::label::LabelArgs),

    /// Change a running node: `berth node set-resources NODE NAME=AMOUNT…`.
    Node(client::node::NodeArgs),

    /// Create actors on the running head.
    Actor(client::actor::ActorArgs),

    /// Submit tasks to the running head.
    Task(client::task::TaskArgs),

    /// Create placement groups on the running head.
    #[command(alias = "placement-group")]
    Pg(client::pg::PgArgs),

    /// The autoscaler: its node types and nodes (`status`), and what it would launch and why
    /// (`plan`, live or on a cluster file).
    Autoscaler(client::autoscaler::AutoscalerArgs),

    /// Drain a node: no new work goes there and its actors move elsewhere (tasks finish).
    ///
    /// Exit status: 0; 1 when the head cannot be reached or answers an error (404 for an
    /// unknown node, 409 for a dead one).
    #[command(after_help = "Examples:\n  berth drain gpu-1\n  berth drain 10.0.0.3")]
    Drain(client::drain::DrainArgs),

    /// End a node's drain: it takes new work again, and waiting work is decided again (a node
    /// that is not draining is left as it is).
    ///
    /// Exit status: 0; 1 when the head cannot be reached or answers an error (404 for an
    /// unknown node, 409 for a dead one).
    #[command(after_help = "Examples:\n  berth undrain gpu-1")]
    Undrain(client::drain::DrainArgs),

    /// List, create and revoke the head's tokens (an admin token is needed).
    ///
    /// Roles: admin (the REST API and dashboard, tokens included), read (GETs and dry runs),
    /// agent (the agent protocol only: a machine joins with it). A new token's secret is
    /// printed once; the head keeps only its hash. Exit status: 0; 2 for bad flags; 1 when
    /// the head cannot be reached or answers an error (403 without an admin token, 404 for
    /// an unknown ID, 409 for the first-start tokens, which are rotated by deleting their
    /// file and restarting the head).
    #[command(after_help = "Examples:\n  berth token list\n  \
        berth token create --role read --name grafana\n  \
        berth token create --role agent --name rack-7\n  berth token revoke tok-3f2a9c1e")]
    Token(client::token::TokenArgs),

    /// Print an actor's or task's output (stdout, or stderr with --stream err), read on its
    /// node and streamed through the head.
    ///
    /// The log holds every attempt's output, each after a `=== berth: …` header line. With
    /// --follow, new output is printed as it is written, until Ctrl-C (or until the work ends
    /// for good). Exit status: 0; 2 for an ID of no actor or task; 1 when the head cannot be
    /// reached or answers an error (404 for an unknown ID, 409 when the work was never placed
    /// or its node is dead or unreachable), or when the answer breaks off.
    #[command(
        after_help = "Examples:\n  berth logs actor-12\n  berth logs task-3 --stream err\n  \
                            berth logs actor-12 --follow"
    )]
    Logs(client::logs::LogsArgs),

    /// Start a head (`--head`) or an agent that joins one (`--address HOST:PORT`).
    ///
    /// Runs in the foreground until Ctrl-C, SIGTERM or `berth stop`. The head creates the
    /// cluster token on its first start (DATA_DIR/token, mode 0600) and prints how to pass it;
    /// it listens on 127.0.0.1 unless --bind says otherwise. An agent registers the machine's
    /// CPUs and memory (flags override), its GPUs, labels and taints, heartbeats, and
    /// runs the work the head assigns as processes (left running for the next agent on exit).
    #[command(after_help = "Examples:\n  \
        berth start --head\n  \
        berth start --head --bind 0.0.0.0 --port 8780 --store redis://10.0.0.9:6379\n  \
        berth start --address 10.0.0.1:8780 --num-gpus 2 --labels zone=a --taints gpu_node=true\n  \
        berth start --head --bind 0.0.0.0 --tls-cert head.pem --tls-key head.key\n  \
        berth start --address https://10.0.0.1:8780 --ca ca.pem")]
    Start(Box<daemon::StartArgs>),

    /// Start a local cluster: a head and N local nodes (a mix of CPU and GPU nodes, zones,
    /// and a taint), in the foreground. Prints the dashboard URL and the token.
    #[command(after_help = "Examples:\n  berth up\n  berth up --nodes 20 --port 9000\n  \
                            berth up --config examples/local/nodes.yaml")]
    Up(daemon::UpArgs),

    /// Stop the `berth start` or `berth up` running with this data directory.
    Stop(daemon::StopArgs),

    /// The node's keeper, started by an agent beside itself (not for users): kills the
    /// processes of the agent directory DIR when the node's lease with the head runs out.
    #[command(hide = true)]
    Keeper(daemon::KeeperArgs),

    /// Stop a job (a driver's session), and with it what it owns.
    ///
    /// Its actors that are not detached are killed, its tasks cancelled and its placement
    /// groups removed, and what those own in turn. Exit status: 0; 2 for bad flags or an ID
    /// of no job; 1 when the head cannot be reached or answers an error (404 for an unknown
    /// job).
    #[command(after_help = "Examples:
  berth list jobs
  berth job stop job-3
  \
        berth job stop job-3 --reason \"superseded by job-4\"")]
    Job(client::job::JobArgs),

    /// Kill an actor, cancel a task, remove a placement group or stop a job, by ID.
    ///
    /// Prints its state after. Exit status: 0; 2 for an ID of no known kind; 1 when the head
    /// cannot be reached or answers an error.
    #[command(
        after_help = "Examples:\n  berth kill actor-12\n  berth kill task-3\n  berth kill pg-7\n  \
                      berth kill job-3"
    )]
    Kill(client::kill::KillArgs),

    /// Check node labels, label selectors and tolerations as Berth reads them.
    ///
    /// `labels` prints labels normalised; `selector` and `tolerations` print the normalised
    /// expressions and, given a node's labels or taints, whether the node satisfies them.
    ///
    /// Exit status, as grep's: 0 valid (and satisfied by the node, if one is given); 1 valid
    /// but not satisfied by the node; 2 invalid, with a message on stderr naming the key or
    /// value and the rule (or the output could not be written).
    Validate(validate::ValidateArgs),

    /// Replay a trace through the scheduler and measure placement quality.
    ///
    /// `berth sim openb` replays the Alibaba GPU trace v2023 as the FGD paper evaluates
    /// schedulers: several policies and seeds, in parallel; writes a summary table (or JSON
    /// lines), a CSV and a plot. Exit status: 0 done, 2 bad input, 1 when the results cannot
    /// be written.
    Sim(sim::SimArgs),

    /// Measure how fast the scheduler decides, on synthetic clusters of 1k to 100k nodes.
    ///
    /// Six workloads (plain DEFAULT requests, label selectors with tolerations, hard actor
    /// anti-affinity with 100,000 actors placed, STRICT_SPREAD placement groups, the
    /// fragmentation profile on a GPU mix, soft actor affinity with 100,000 actors placed),
    /// each at every size, on one core, beside a naive linear-scan baseline run in the same
    /// process.
    /// Prints decisions/s (median of several runs), p50/p99 latency and memory. `--quick` is a
    /// smoke run for CI (under a minute); the full run takes several minutes.
    Bench(bench::BenchArgs),
}

/// Bad input: same status as clap's usage errors.
const EXIT_BAD_INPUT: u8 = 2;

fn main() -> ExitCode {
    // clap prints its own usage errors and exits with status 2, and with 0 for --help.
    let cli = Cli::parse();
    // reqwest (every client here, the benchmarks' too) needs a rustls provider even for HTTP.
    berth_client::install_crypto_provider();
    let stdout = io::stdout();
    let result = match &cli.command {
        Command::Explain(args) => explain::run(args, &mut stdout.lock()),
        Command::Bench(args) => bench::run(args, &mut stdout.lock()),
        Command::Sim(args) => return sim::main(args),
        Command::Status(args) => client::status::run(args, &mut stdout.lock()),
        Command::List(args) => client::list::run(args, &mut stdout.lock()),
        Command::Get(args) => client::get::run(args, &mut stdout.lock()),
        Command::Taint(args) => client::taint::run(args, &mut stdout.lock()),
        Command::Label(args) => client::label::run(args, &mut stdout.lock()),
        Command::Node(args) => client::node::run(args, &mut stdout.lock()),
        Command::Actor(args) => client::actor::run(args, &mut stdout.lock()),
        Command::Task(args) => client::task::run(args, &mut stdout.lock()),
        Command::Pg(args) => client::pg::run(args, &mut stdout.lock()),
        Command::Kill(args) => client::kill::run(args, &mut stdout.lock()),
        Command::Job(args) => client::job::run(args, &mut stdout.lock()),
        Command::Drain(args) => client::drain::run(args, &mut stdout.lock()),
        Command::Undrain(args) => client::drain::undrain(args, &mut stdout.lock()),
        Command::Autoscaler(args) => client::autoscaler::run(args, &mut stdout.lock()),
        Command::Token(args) => client::token::run(args, &mut stdout.lock()),
        Command::Logs(args) => client::logs::run(args, &mut stdout.lock()),
        Command::Start(args) => daemon::start(args),
        Command::Up(args) => daemon::up(args),
        Command::Stop(args) => daemon::stop(args),
        Command::Keeper(args) => daemon::keeper(args),
        // 1 means "not satisfied" here, so every error is 2, as grep's are.
        Command::Validate(args) => {
            return match validate::run(args, &mut stdout.lock()) {
                Ok(verdict) => ExitCode::from(verdict.status()),
                Err(err) => {
                    report(&err);
                    ExitCode::from(EXIT_BAD_INPUT)
                }
            };
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => report(&err),
    }
}

/// Prints `err` on stderr and picks the exit status. Never panics, even when stderr is closed.
fn report(err: &anyhow::Error) -> ExitCode {
    let mut stderr = io::stderr().lock();
    if let Some(input) = err.downcast_ref::<InputError>() {
        let _ = writeln!(stderr, "error: {input}");
        if let Some(snippet) = input.snippet() {
            let _ = write!(stderr, "{snippet}");
        }
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    if let Some(bad) = err.downcast_ref::<client::BadInput>() {
        let _ = writeln!(stderr, "error: {bad}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    if let Some(bad) = err.downcast_ref::<berth_client::SetupError>() {
        let _ = writeln!(stderr, "error: {bad}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    // A reader that went away (`berth explain … | head`) is not an error worth a message.
    let broken_pipe = err
        .chain()
        .filter_map(|cause| cause.downcast_ref::<io::Error>())
        .any(|io| io.kind() == io::ErrorKind::BrokenPipe);
    if broken_pipe {
        return ExitCode::SUCCESS;
    }
    let _ = writeln!(stderr, "error: {err:#}");
    ExitCode::FAILURE
}
