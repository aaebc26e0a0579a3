//! # berth-sim: placement quality by trace replay
//!
//! Replays the Alibaba GPU trace v2023 ("openb", `../shared/traces/openb`) through Berth's
//! scheduler the way the FGD paper (Weng et al., "Beware of Fragmentation", USENIX ATC '23)
//! evaluates schedulers, so that Berth's numbers stand beside the paper's. `berth sim openb`
//! is the command; this crate is everything under it, without I/O beyond the files it is
//! told to read and write.
//!
//! ## Layout
//!
//! - [`trace`]: the CSV files, read and checked row by row (errors name file, line, column,
//!   rule).
//! - [`convert`]: rows as Berth's types: nodes labelled `berth.io/accelerator-type=<model>`
//!   with GPUs as unit instances, pods as requests (`gpu_spec` becomes a label selector).
//! - [`shapes`]: the typical shapes (the most frequent, covering 95% of pods).
//! - [`workload`]: the arrival order: shuffled by a seeded RNG, filled with clones (or cut) to
//!   130% of the cluster's GPUs.
//! - [`replay`](mod@replay): one run: `berth_core::Scheduler` places each pod once; a pod that fails is
//!   dropped; nothing departs.
//! - [`metrics`]: allocation and fragmentation after every pod, bucket means, means and
//!   standard deviations over seeds.
//! - [`policy`]: the policies (built-in and profile files).
//! - [`run`]: every (trace, policy, seed) on a pool of threads.
//! - [`report`], [`plot`]: CSV, JSON lines, the summary table; SVG and PNG.
//! - [`published`]: the FGD authors' own results (`fgd_published_alloc.csv`), printed beside
//!   Berth's.
//! - [`locate`]: the trace folder and file names.
//! - [`bench`](mod@bench): `berth bench`, decision speed on synthetic clusters of 1k–100k nodes beside a
//!   naive baseline.
//!
//! ## Key decisions
//!
//! - The replay drives the same [`berth_core::Scheduler`] the head will use; the policies are
//!   profiles. Nothing here decides where a pod goes.
//! - Determinism: each run's arrival order comes from `ChaCha8Rng::seed_from_u64(seed)` and
//!   the scheduler's choices from stream 1 of the same seed, so a seed gives the same numbers
//!   on any number of threads, and every policy sees the same arrival order.
//! - The fragmentation metric is computed with the core's own measure
//!   ([`berth_core::pipeline::scorers::fragmentation::ShapeTable`]), kept up to date node by
//!   node (only the node a pod lands on changes), exactly, in integers.

#![warn(missing_docs)]

pub mod bench;
pub mod convert;
pub mod locate;
pub mod metrics;
pub mod plot;
pub mod policy;
pub mod published;
pub mod replay;
pub mod report;
pub mod run;
pub mod shapes;
pub mod synthetic;
pub mod trace;
pub mod workload;

pub use metrics::{Point, RunMetrics, Stat};
pub use policy::Policy;
pub use replay::{replay, Scenario};
pub use run::{Curve, Plan};
pub use trace::{read_nodes, read_pods, NodeRow, PodRow, TraceError};
