//! `berth`, the command line of the Berth scheduler.
//!
//! Layout: this file parses the command line and maps errors to exit statuses; each command
//! lives in its own module (`explain`, `validate`); `snapshot` turns the input files into core
//! types and `render` prints results.
//!
//! Exit statuses: 0 when the command did its job (for `explain`, any decision: placed, pending
//! and infeasible are all answers), 2 for bad input (command line or files; the message names
//! the file, the field and the rule), 1 when the output cannot be written. `validate` follows
//! grep instead: 1 is "valid, but the node does not satisfy it", and every error is 2.

mod bench;
mod explain;
mod render;
mod sim;
mod snapshot;
mod validate;

use std::io::{self, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use snapshot::InputError;

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
    /// Explain where a request goes on a cluster snapshot, node by node.
    ///
    /// Loads a cluster snapshot and one request, runs the scheduler's decision once and prints
    /// the decision (placed, pending or infeasible, with the diagnosis) and, for every node,
    /// each filter's verdict and reason, its preferences, each scorer's raw score and weight,
    /// its total, and which nodes were shortlisted and chosen.
    ///
    /// Exit status: 0 for any decision; 2 for bad input (a file that cannot be read, malformed
    /// YAML, an invalid field), with a message on stderr naming the file, the field and the
    /// rule.
    Explain(explain::ExplainArgs),

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
    /// Four workloads (plain DEFAULT requests, label selectors with tolerations, hard actor
    /// anti-affinity with 100,000 actors placed, STRICT_SPREAD placement groups), each at
    /// every size, on one core, beside a naive linear-scan baseline run in the same process.
    /// Prints decisions/s (median of several runs), p50/p99 latency and memory. `--quick` is a
    /// smoke run for CI (under a minute); the full run takes several minutes.
    Bench(bench::BenchArgs),
}

/// Bad input: same status as clap's usage errors.
const EXIT_BAD_INPUT: u8 = 2;

fn main() -> ExitCode {
    // clap prints its own usage errors and exits with status 2, and with 0 for --help.
    let cli = Cli::parse();
    let stdout = io::stdout();
    let result = match &cli.command {
        Command::Explain(args) => explain::run(args, &mut stdout.lock()),
        Command::Bench(args) => bench::run(args, &mut stdout.lock()),
        Command::Sim(args) => return sim::main(args),
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
