//! Berth's wire formats, shared by the head, the agent and the `berth` command line.
//!
//! - [`spec`]: the request and cluster file formats (`docs/file-formats.md`) and their
//!   conversion into core types. A REST body that creates an actor, a task or a placement group
//!   is a request document in this format, so `berth explain`, the CLI and the REST API accept
//!   exactly the same thing and reject it with the same field paths.
//! - [`limits`]: the most of each kind of thing (labels, bundles, batch items…) one request
//!   may hold.
//! - [`ObjectKind`]: actor, task or placement group, the kinds an ID names.
//! - [`local`]: the data directory, token and address files a local head shares with the CLI.
//! - [`rest`]: the REST API's bodies and answers (serde + OpenAPI schemas).
//! - [`text`]: how times are shown to people (CLI, dashboard, log headers).
//! - [`agent`]: the agent protocol, generated from `proto/agent.proto`, and [`codec`], the
//!   codec it travels with.

#![warn(missing_docs)]

pub mod codec;
pub mod limits;
pub mod local;
mod object_kind;
pub mod rest;
pub mod spec;
pub mod text;

/// The agent protocol (gRPC), generated from `proto/agent.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod agent {
    tonic::include_proto!("berth.agent.v1");
}

pub use object_kind::ObjectKind;
