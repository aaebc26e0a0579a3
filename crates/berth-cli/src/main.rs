//! `berth`, the command line of the Berth scheduler.
//!
//! Layout: this file parses the command line and maps errors to exit statuses; each command
//! lives in its own module (`explain`); `snapshot` turns the input files into core types and
//! `render` prints results.
//!
//! Exit statuses: 0 when the command did its job (for `explain`, any decision: placed, pending
//! and infeasible are all answers), 2 for bad input (command line or files; the message names
//! the file, the field and the rule), 1 when the output cannot be written.

mod explain;
mod render;
mod snapshot;

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
}

/// Bad input: same status as clap's usage errors.
const EXIT_BAD_INPUT: u8 = 2;

fn main() -> ExitCode {
    // clap prints its own usage errors and exits with status 2, and with 0 for --help.
    let cli = Cli::parse();
    let stdout = io::stdout();
    let result = match &cli.command {
        Command::Explain(args) => explain::run(args, &mut stdout.lock()),
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
