//! `berth logs ID [--stream out|err] [--follow]`: an actor's or task's output, read on its node
//! and streamed through the head (`GET /api/v1/logs/{id}`), printed as it comes.
//!
//! Without `--follow` the answer ends with the log as it is now; each read of it waits at most
//! the usual answer time. With `--follow` the answer stays open and nothing times out: new
//! output is printed as it is written, until Ctrl-C (or until the work ends for good, which
//! the head says by ending the answer).

use std::io::{self, Read, Write};

use anyhow::Context;
use berth_api::rest::{LogStream, LogsQuery};
use clap::{Args, ValueEnum};
use reqwest::blocking::Response;

use super::{api_path, object_kind, BadInput, HeadArgs, ObjectKind};

/// The bytes read from the answer at a time.
const BUFFER: usize = 64 * 1024;

/// Which output to print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum StreamArg {
    /// Standard output.
    #[default]
    Out,
    /// Standard error.
    Err,
}

/// The flags of `berth logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The actor's or task's ID (`actor-12`, `task-3`).
    #[arg(value_name = "ID")]
    pub id: String,

    /// Which output: `out` (standard output) or `err` (standard error).
    #[arg(long, value_name = "STREAM", value_enum, default_value_t = StreamArg::Out)]
    pub stream: StreamArg,

    /// Keep printing new output as it is written, until Ctrl-C (or the work ends for good).
    #[arg(long, short = 'f')]
    pub follow: bool,

    /// Start at this byte of the log (default: the beginning).
    #[arg(long, value_name = "BYTES")]
    pub offset: Option<u64>,

    #[command(flatten)]
    pub head: HeadArgs,
}

/// Prints the log as the head streams it.
pub fn run(args: &LogsArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    if object_kind(&args.id)? == ObjectKind::Group {
        return Err(BadInput::new(format!(
            "{} is a placement group: only actors and tasks have logs",
            args.id
        ))
        .into());
    }
    let client = args.head.client()?;
    let query = LogsQuery {
        stream: Some(match args.stream {
            StreamArg::Out => LogStream::Out,
            StreamArg::Err => LogStream::Err,
        }),
        follow: Some(args.follow),
        offset: args.offset,
    };
    let path = api_path(&["logs", &args.id]);
    let response = client.get_streamed(&path, &query, args.follow)?;
    copy(response, out).with_context(|| format!("the log of {} was cut", args.id))
}

/// Copies the answer to `out` as it arrives, flushing each piece.
fn copy(mut response: Response, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut buffer = vec![0; BUFFER];
    loop {
        let n = match response.read(&mut buffer) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err).context("the head's answer broke off"),
        };
        out.write_all(&buffer[..n])
            .and_then(|()| out.flush())
            .context("cannot write the output")?;
    }
}
