//! Berth's node daemon, protocol side: an [`Agent`] registers a machine with the head,
//! heartbeats, follows its assignments and reports what happened to each attempt; a
//! [`Runner`] executes the assignments.
//!
//! Layout (one file per concept):
//!
//! - [`config`]: [`AgentConfig`], validated at the edge with the head's own rules
//!   (`berth-core` quantities and label syntax), errors naming the field.
//! - [`runner`]: the [`Runner`] trait, the [`Events`] sink runners report through, and
//!   [`AckRunner`], which runs nothing and acknowledges everything.
//! - [`agent`]: the session loop. Register, then heartbeats, assignments and status reports
//!   concurrently; any failure or stream end means "register again after the backoff",
//!   forever, except a refused token or a refused registration, which are returned. The
//!   heartbeats and the connection run on a thread of their own (the agents' lane) and the
//!   runner is called from blocking threads, so no start, however slow, delays a heartbeat.
//! - [`process`] (Unix): [`ProcessRunner`], which runs each attempt as a process in its own
//!   process group, with logs, `CUDA_VISIBLE_DEVICES` from the GPU instances, SIGTERM then
//!   SIGKILL on stop, and re-adoption of its processes by the next agent (`state.json` and
//!   its journal).
//! - [`lease`]: the node's lease with the head (renewed by every answered heartbeat) and the
//!   keeper, a process beside the agent that kills the node's processes when the lease runs
//!   out, before the head can declare the node dead: at most one live attempt per actor.
//! - [`measure`]: what the machine and each running attempt use (CPU, memory), read from
//!   `/proc` at the heartbeat's pace by runners that run processes ([`Runner::measure`]).
//! - [`sim`]: many in-process agents speaking the real protocol to a real head
//!   ([`SimCluster`], [`SimNode::mix`]), with [`AckRunner`]s for the head's tests and for
//!   benchmarks, or [`ProcessRunner`]s for `berth up` ([`RunnerKind`]).
//!
//! Decisions:
//!
//! - The four parts of a session (heartbeats, assignments, reports, logs) run in one `select!`
//!   (the heartbeats as a task on the lane, aborted when the `select!` is dropped), so ending a
//!   session (or aborting the agent, as [`SimCluster::kill`] does) drops every stream at once
//!   and nothing of an old session outlives it.
//! - Assignments are queued and applied in order on a blocking thread; what a lost session
//!   did not apply is dropped (the head sends it again), so registering again never waits for
//!   a backlog of starts.
//! - Runner events go through one unbounded channel for the agent's whole life; a report leaves
//!   the queue only once the head answered it, so reconnections never lose an exit.
//! - Each session gets a fresh lazy gRPC channel: no broken connection is reused, and an
//!   unreachable head just fails the registration, which is retried.
//! - State is observable, not slept on: [`Agent::status`] / [`AgentHandle::subscribe`] publish
//!   an [`AgentStatus`] (node ID, session, registration count, last error) through a `watch`
//!   channel, which bounded waits use.
//! - Processes outlive their agent (no `kill_on_drop`; own process group, so a terminal's
//!   Ctrl-C does not reach them) for as long as the node's lease: an agent stopped with Ctrl-C
//!   or SIGTERM leaves them running and the next agent on the same directory adopts them; the
//!   keeper stops them if none comes in time. Only an owner that runs the agents
//!   in-process and ends with them (`berth up`, through [`SimCluster::shutdown`]) stops them.
//! - DESIGN.md lists `kill_on_drop` for agent processes; it is deliberately not used, since it
//!   would make every agent restart (an upgrade, a crash) kill the cluster's work.

#![warn(missing_docs)]

pub mod agent;
pub mod config;
pub mod discover;
pub mod gpus;
pub mod lease;
pub mod measure;
#[cfg(unix)]
pub mod process;
pub mod runner;
pub mod sim;

pub use agent::{Agent, AgentError, AgentHandle, AgentStatus, WaitError};
pub use config::{AgentConfig, ConfigError};
#[cfg(unix)]
pub use process::{ProcessError, ProcessOptions, ProcessRunner};
pub use runner::{AckRunner, Events, Runner, WorkEvent, WorkStatus};
pub use sim::{RunnerKind, SimCluster, SimError, SimNode, SimOptions};
