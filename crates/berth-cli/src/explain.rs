//! `berth explain`: one decision on a cluster snapshot, with every stage's answer per node.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use berth_core::Scheduler;
use clap::{Args, ValueEnum};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::render;
use crate::snapshot::{self, ClusterSnapshot};

/// The flags of `berth explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The cluster snapshot (YAML or JSON).
    ///
    /// Scheduler settings, the nodes with their resources and state, and the work already
    /// running on them. The format is in docs/file-formats.md.
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,

    /// The request to place (YAML or JSON).
    ///
    /// Its resources, scheduling strategy (DEFAULT, SPREAD, RANDOM or node affinity) and
    /// optional preferred node. The format is in docs/file-formats.md.
    #[arg(long, value_name = "FILE")]
    pub request: PathBuf,

    /// Seed of the random choices; the same files and seed give the same output.
    ///
    /// DEFAULT picks at random among the best-scored top k nodes, RANDOM among all nodes that
    /// can take the request; the seed makes the pick repeatable.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,

    /// Output format: `table` for people, `json` for scripts.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// Output formats of `berth explain`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// The decision on one line, then a table per attempt with one row per node.
    Table,
    /// One JSON object: decision, diagnosis and every attempt's per-node records.
    Json,
}

/// Loads the files, decides once and writes the explanation to `out`.
///
/// Bad input comes back as a [`snapshot::InputError`] inside the `anyhow::Error`, so that the
/// caller can tell it (exit status 2) from a failure to write the output.
pub fn run(args: &ExplainArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let ClusterSnapshot { mut cluster, config } = snapshot::load_cluster(&args.cluster)?;
    let request = snapshot::load_request(&args.request, &mut cluster)?;
    let mut scheduler = Scheduler::new(config);
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let (decision, explanation) = scheduler.place_explained(&mut cluster, &request, &mut rng);
    let text = match args.output {
        Output::Table => render::table(&cluster, &decision, &explanation),
        Output::Json => render::json(&cluster, &decision, &explanation)?,
    };
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).context("cannot write the output")?;
    Ok(())
}
