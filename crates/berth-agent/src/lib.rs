//! Berth's node daemon, protocol side: an [`Agent`] registers a machine with the head,
//! heartbeats, follows its assignments and reports what happened to each attempt; a
//! [`Runner`] executes the assignments.
//!
//! Layout (one file per concept):
//!
//! - [`config`]: [`AgentConfig`], validated at the edge with the head's own rules
//!   (`berth-core` quantities and label syntax), errors naming the field.
//! - [`runner`]: the [`Runner`] trait, the [`Events`] sink runners report through, and
//!   [`AckRunner`], which runs nothing and acknowledges everything (the process runner comes
//!   later and plugs in behind the same trait).
//! - [`agent`]: the session loop. Register, then heartbeats, assignments and status reports
//!   concurrently in one task; any failure or stream end means "register again after the
//!   backoff", forever, except a refused token or a refused registration, which are returned.
//! - [`sim`]: many in-process agents with [`AckRunner`]s speaking the real protocol to a real
//!   head ([`SimCluster`], [`SimNode::mix`]), for the head's tests and for benchmarks.
//!
//! Decisions:
//!
//! - The three parts of a session run in one `select!` rather than as spawned tasks, so ending a
//!   session (or aborting the agent, as [`SimCluster::kill`] does) drops every stream at once
//!   and nothing of an old session outlives it.
//! - Runner events go through one unbounded channel for the agent's whole life; a report leaves
//!   the queue only once the head answered it, so reconnections never lose an exit.
//! - Each session gets a fresh lazy gRPC channel: no broken connection is reused, and an
//!   unreachable head just fails the registration, which is retried.
//! - State is observable, not slept on: [`Agent::status`] / [`AgentHandle::subscribe`] publish
//!   an [`AgentStatus`] (node ID, session, registration count, last error) through a `watch`
//!   channel, which bounded waits use.

#![warn(missing_docs)]

pub mod agent;
pub mod config;
pub mod runner;
pub mod sim;

pub use agent::{Agent, AgentError, AgentHandle, AgentStatus, WaitError};
pub use config::{AgentConfig, ConfigError};
pub use runner::{AckRunner, Events, Runner, WorkEvent, WorkStatus};
pub use sim::{SimCluster, SimError, SimNode, SimOptions};
