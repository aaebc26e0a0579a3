//! `berth explain`: one decision on a cluster snapshot, with every stage's answer per node.
//!
//! That is the offline mode (`--cluster FILE --request FILE`). With an ID, or with `--request`
//! alone, the command asks a running head instead (`crate::client::explain`).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use berth_core::pipeline::group::GroupDecision;
use berth_core::placement_group::GroupSpec;
use berth_core::{Cluster, Profile, Scheduler, SchedulerConfig, Strategy};
use clap::{ArgGroup, Args, ValueEnum};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::client::{self, HeadArgs};
use crate::render;
use berth_api::spec::{
    self as snapshot, ClusterSnapshot, FileKind, InputError, Invalid, LoadedRequest,
};

/// The flags of `berth explain`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("what").required(true).args(["id", "request"])))]
pub struct ExplainArgs {
    /// An actor, task or placement group of the running head (`actor-12`, `task-3`, `pg-7`):
    /// asks the head why it is where it is, or why it waits.
    #[arg(value_name = "ID", conflicts_with_all = ["cluster", "request"])]
    pub id: Option<String>,

    /// The cluster snapshot (YAML or JSON), to explain offline.
    ///
    /// Scheduler settings, the nodes with their resources and state, and the work already
    /// running on them. The format is in docs/file-formats.md. Without it, --request is
    /// dry-run on the running head's cluster (nothing is reserved).
    #[arg(long, value_name = "FILE", requires = "request")]
    pub cluster: Option<PathBuf>,

    /// The request to place (YAML or JSON).
    ///
    /// An actor or task: its resources, scheduling strategy (DEFAULT, SPREAD, RANDOM, node
    /// affinity, node labels, actor affinity, or into a placement group), label selectors and
    /// the actor's labels. Or a placement group: its bundles, strategy and fallbacks. The
    /// format is in docs/file-formats.md.
    #[arg(long, value_name = "FILE")]
    pub request: Option<PathBuf>,

    /// A scheduler profile (YAML), offline only: which scorers rank nodes, with which
    /// weights, and which extra filters run.
    ///
    /// Without it, nodes are ranked by the hybrid pack-then-spread score alone. A profile
    /// replaces that with what it lists: hybridWeight, ResourceStrategyFit (resources packed
    /// or spread, resourceStrategyFitWeight) and scarce-resource avoidance (sra: retention,
    /// proportional). The format is in docs/file-formats.md.
    #[arg(long, value_name = "FILE", requires = "cluster")]
    pub profile: Option<PathBuf>,

    /// Seed of the random choices, offline only; the same files and seed give the same
    /// output.
    ///
    /// DEFAULT picks at random among the best-scored top k nodes, RANDOM among all nodes that
    /// can take the request; the seed makes the pick repeatable.
    #[arg(long, value_name = "N", default_value_t = 0, requires = "cluster")]
    pub seed: u64,

    /// Output format: `table` for people, `json` for scripts.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = Output::Table)]
    pub output: Output,

    /// Where the head is, for the live modes (ID, or --request without --cluster).
    #[command(flatten)]
    pub head: HeadArgs,
}

/// Output formats of `berth explain`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// The decision on one line, then a table per attempt with one row per node (live: the
    /// head's answer and the reasons).
    Table,
    /// One JSON object: decision, diagnosis and every attempt's per-node records (live: the
    /// head's answer as it is).
    Json,
}

/// Loads the files, decides once and writes the explanation to `out`.
///
/// Bad input comes back as a [`snapshot::InputError`] inside the `anyhow::Error`, so that the
/// caller can tell it (exit status 2) from a failure to write the output.
///
/// Without `--cluster`, the head answers instead ([`client::explain::run`]).
pub fn run(args: &ExplainArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let (Some(cluster_path), Some(request_path)) = (&args.cluster, &args.request) else {
        return client::explain::run(args, out);
    };
    let ClusterSnapshot { mut cluster, mut config } = snapshot::load_cluster(cluster_path)?;
    if let Some(path) = &args.profile {
        config.profile = load_profile(path)?;
    }
    let request = match snapshot::load_request(request_path, &cluster)? {
        LoadedRequest::Request(request) => request,
        LoadedRequest::Group(spec) => return place_group(args, cluster, config, &spec, out),
    };
    // A request into a placement group is shown against the group's bundles as they were.
    let group = match request.strategy() {
        Strategy::PlacementGroup(target) => cluster.group(target.group.as_str()).cloned(),
        _ => None,
    };
    let mut scheduler = Scheduler::new(config);
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let (decision, explanation) = scheduler.place_explained(&mut cluster, &request, &mut rng);
    let text = match args.output {
        Output::Table => render::table(&cluster, &request, &decision, &explanation, group.as_ref()),
        Output::Json => render::json(&cluster, &request, &decision, &explanation, group.as_ref())?,
    };
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).context("cannot write the output")?;
    Ok(())
}

/// Places a placement group and writes the explanation: the decision, then every alternative
/// tried.
fn place_group(
    args: &ExplainArgs,
    mut cluster: Cluster,
    config: SchedulerConfig,
    spec: &GroupSpec,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let (decision, explanation) = Scheduler::new(config).place_group_explained(&mut cluster, spec);
    // Every alternative tried, as the decision recorded it.
    let tried = match &decision {
        GroupDecision::Pending(diagnosis) | GroupDecision::Infeasible(diagnosis) => diagnosis,
        GroupDecision::Created { tried, .. } => tried,
    }
    .clone();
    let text = match args.output {
        Output::Table => render::group::table(&cluster, spec, &decision, &tried, &explanation),
        Output::Json => render::group::json(&cluster, spec, &decision, &tried, &explanation)?,
    };
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).context("cannot write the output")?;
    Ok(())
}

/// Reads the profile file at `path`; `berth_api::spec::profile` checks it and names the
/// key and the rule, which become an [`InputError`] like those of the other files.
fn load_profile(path: &Path) -> Result<Profile, InputError> {
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Read {
        kind: FileKind::Profile,
        path: path.to_path_buf(),
        source,
    })?;
    berth_api::spec::profile::parse_profile(&text).map_err(|err| {
        let line_text = err.location.and_then(|(line, _)| {
            let index = usize::try_from(line).ok()?.checked_sub(1)?;
            text.lines().nth(index).map(str::to_string)
        });
        InputError::Invalid(Box::new(Invalid {
            kind: FileKind::Profile,
            path: path.to_path_buf(),
            field: err.key,
            message: err.rule,
            location: err.location,
            line_text,
        }))
    })
}
