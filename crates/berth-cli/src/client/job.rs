//! `berth job stop JOB`: stop a job, and with it what it owns.

use std::io::Write;

use berth_api::rest::{Job, JobEnd};
use clap::{Args, Subcommand};

use super::view;
use super::{api_path, json_text, write_out, BadInput, HeadArgs, ObjectKind, Output, OutputArgs};

/// The flags of `berth job`.
#[derive(Debug, Args)]
pub struct JobArgs {
    #[command(subcommand)]
    pub action: JobAction,
    #[command(flatten)]
    pub head: HeadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// What to do with a job.
#[derive(Debug, Subcommand)]
pub enum JobAction {
    /// Stop a running job: it is STOPPED, and its non-detached actors are killed, its tasks
    /// cancelled and its placement groups removed, with what they own in turn. A job that has
    /// ended is printed as it is.
    Stop {
        /// The job's ID (`job-3`), from `berth list jobs`.
        #[arg(value_name = "JOB_ID")]
        id: String,
        /// Why, for the job's history and what it owned.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
}

/// Runs the action and prints the job after it.
pub fn run(args: &JobArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    match &args.action {
        JobAction::Stop { id, reason } => {
            if ObjectKind::parse(id).map(|(kind, _)| kind) != Some(ObjectKind::Job) {
                return Err(BadInput::new(format!("{id:?} is not a job ID (job-3)")).into());
            }
            let client = args.head.client()?;
            let body = JobEnd { reason: reason.clone() };
            let job: Job = client.post(&api_path(&["jobs", id, "stop"]), Some(&body))?;
            let text = match args.output.output {
                Output::Json => json_text(&job)?,
                Output::Table => view::job_detail(&job),
            };
            write_out(out, &text)
        }
    }
}
