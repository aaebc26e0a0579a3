//! The commands that talk to a running head over its REST API, through `berth_client`.
//!
//! Layout: this module holds what those commands share: the flags that say where the head is
//! ([`HeadArgs`], which become a [`berth_client::Overrides`]; the resolution order is
//! `berth_client`'s), `--output`, [`BadInput`], and the helpers that print. Each command group
//! has its own module: [`status`], [`list`], [`get`], [`explain`] (the live modes of `berth
//! explain`), [`taint`], [`actor`], [`task`], [`pg`] and [`kill`]. Flag parsing shared by them
//! is in `flags`, printing in `view`.
//!
//! Exit statuses: bad command-line input caught here ([`BadInput`], a
//! [`berth_client::SetupError`], or an unreadable `--file`) is 2; a head that cannot be reached
//! or answers an error ([`ClientError`]) is 1.

pub mod actor;
pub mod autoscaler;
pub mod drain;
pub mod explain;
mod flags;
pub mod get;
pub mod job;
pub mod kill;
pub mod label;
pub mod list;
pub mod logs;
pub mod node;
pub mod pg;
pub mod status;
pub mod taint;
pub mod task;
pub mod token;
mod view;
pub mod watch;

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use berth_client::{Endpoint, Overrides, SetupError};
use clap::{Args, ValueEnum};
use serde::Serialize;
use thiserror::Error;

pub use berth_client::{api_path, Client, ClientError, NO_BODY};

// ---------------------------------------------------------------------------------------------
// Flags every command that talks to a head has.

/// Where the head is: `--address` and `--data-dir`.
#[derive(Clone, Debug, Default, Args)]
pub struct HeadArgs {
    /// The head's address, HOST:PORT, or https://HOST:PORT for a head serving TLS (then
    /// --ca is needed). Several, comma-separated, for a head with standbys: the first whose
    /// head is active is used.
    ///
    /// Default: $BERTH_ADDRESS, else the address the running head wrote in
    /// DATA_DIR/head-address, else 127.0.0.1:8780. A port-less HOST gets port 8780.
    #[arg(long, value_name = "HOST:PORT", global = true)]
    pub address: Option<String>,

    /// The CA certificate (PEM) that signed the head's certificate, for an https:// head: the
    /// CLI trusts that CA and no other [default: $BERTH_CA].
    #[arg(long, value_name = "FILE", global = true, env = "BERTH_CA")]
    pub ca: Option<PathBuf>,

    /// The data directory, where the cluster token (`token`) and the running head's address
    /// (`head-address`) are read.
    ///
    /// Default: $BERTH_DATA_DIR, else ~/.berth. $BERTH_TOKEN, when set, wins over the token
    /// file.
    #[arg(long, value_name = "DIR", global = true)]
    pub data_dir: Option<PathBuf>,
}

impl From<&HeadArgs> for Overrides {
    fn from(args: &HeadArgs) -> Overrides {
        Overrides {
            address: args.address.clone(),
            ca: args.ca.clone(),
            data_dir: args.data_dir.clone(),
        }
    }
}

impl HeadArgs {
    /// The client of the head these flags and the process environment name (with several
    /// addresses, the active one's).
    pub fn client(&self) -> Result<Client, BadInput> {
        Ok(Endpoint::from_process(&self.into())?.client()?)
    }
}

/// Output formats of the commands that talk to a head.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Tables and short lines for people.
    #[default]
    Table,
    /// The head's answer as JSON (pretty-printed), for scripts.
    Json,
}

/// `--output`, for the commands that have no other flag of that name.
#[derive(Clone, Debug, Default, Args)]
pub struct OutputArgs {
    /// Output format: `table` for people, `json` (the head's answer as it is) for scripts.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
}

// ---------------------------------------------------------------------------------------------
// Errors.

/// Bad command-line input, caught before anything is sent: exit status 2.
#[derive(Debug, Error)]
#[error("{0}")]
pub struct BadInput(pub String);

impl BadInput {
    /// A `BadInput` with `message`.
    pub fn new(message: impl Into<String>) -> BadInput {
        BadInput(message.into())
    }
}

impl From<SetupError> for BadInput {
    fn from(err: SetupError) -> BadInput {
        BadInput(err.0)
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers of the commands.

/// Writes `text` to `out` and flushes.
fn write_out(out: &mut dyn Write, text: &str) -> anyhow::Result<()> {
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).context("cannot write the output")
}

/// `value` as pretty JSON, with a final newline.
fn json_text<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<String> {
    let mut text = serde_json::to_string_pretty(value).context("cannot print the answer")?;
    text.push('\n');
    Ok(text)
}

pub use berth_api::ObjectKind;

/// The kind of object `id` names, by its prefix, or a message saying what IDs look like.
pub fn object_kind(id: &str) -> Result<ObjectKind, BadInput> {
    ObjectKind::of_prefix(id).ok_or_else(|| {
        BadInput::new(format!(
            "{id:?} is not an actor, task or placement group ID (actor-12, task-3, pg-7); \
             for a node, use `berth get node ID`"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_that_names_no_object_says_what_ids_look_like() {
        assert_eq!(object_kind("pg-7").unwrap(), ObjectKind::Group);
        assert!(object_kind("gpu-1").unwrap_err().0.contains("berth get node"));
    }
}
