//! `berth task submit`: run a process to completion on the cluster.

use std::io::Write;

use berth_api::rest::{Task, TaskSubmit};
use clap::{Args, Subcommand};
use serde_json::json;

use super::flags::{self, ProcessArgs};
use super::view;
use super::{api_path, json_text, write_out, HeadArgs, Output, OutputArgs};

/// The flags of `berth task`.
#[derive(Debug, Args)]
pub struct TaskArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: TaskCommand,
}

/// `berth task` commands.
#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Submit a task: a process run to completion, retried after a failure.
    ///
    /// Prints the new task's ID and state, its node and GPU instances once placed, or why it
    /// waits. The head checks the placement keys as `berth explain` does, and answers a bad
    /// one with its field (exit status 1); bad flags are exit status 2.
    #[command(after_help = "Examples:\n  \
        berth task submit --command python --arg train.py --resources GPU=1 --tolerations \
        'gpu_node=exists()'\n  \
        berth task submit --command ./etl --resources CPU=4,memory=8Gi --max-retries 0\n  \
        berth task submit --command ./shard --placement-group pg-7:1\n  \
        berth task submit --file task.yaml --arg --epochs=3")]
    Submit(SubmitArgs),
}

/// The flags of `berth task submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub process: ProcessArgs,

    /// Runs again after a failure (non-zero exit, node death); default 3.
    #[arg(long, value_name = "N")]
    pub max_retries: Option<u32>,

    #[command(flatten)]
    pub head: HeadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The body the flags (and `--file`) give.
pub fn body(args: &SubmitArgs) -> anyhow::Result<TaskSubmit> {
    let mut keys = args.process.keys()?;
    if let Some(max) = args.max_retries {
        keys.insert("max_retries".into(), max.into());
    }
    flags::body(
        args.process.file.as_deref(),
        keys,
        &[("command", "--command")],
        &[("resources", json!({}))],
    )
}

/// Runs `berth task …`.
pub fn run(args: &TaskArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    match &args.command {
        TaskCommand::Submit(args) => submit(args, out),
    }
}

fn submit(args: &SubmitArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let body = body(args)?;
    let client = args.head.client()?;
    let task: Task = client.create(&api_path(&["tasks"]), &body)?;
    let text = match args.output.output {
        Output::Json => json_text(&task)?,
        Output::Table => render(&task),
    };
    write_out(out, &text)
}

/// `task-3 RUNNING on gpu-1, GPU [0]`, then why it waits when it does.
pub fn render(task: &Task) -> String {
    view::summary_line(
        &task.task_id,
        &view::name(&task.state),
        task.node_id.as_deref(),
        &task.instances,
        task.diagnosis.as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::super::view::fixtures;
    use super::*;

    fn parse(argv: &[&str]) -> Result<SubmitArgs, clap::Error> {
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: SubmitArgs,
        }
        Wrapper::try_parse_from(std::iter::once("submit").chain(argv.iter().copied()))
            .map(|w| w.args)
    }

    #[test]
    fn flags_to_body() {
        let args =
            parse(&["--command", "train", "--resources", "GPU=1", "--max-retries", "0"]).unwrap();
        let body = body(&args).unwrap();
        assert_eq!(body.max_retries, 0);
        let resources =
            |b: &TaskSubmit| serde_json::to_value(&b.placement).unwrap()["resources"].clone();
        assert_eq!(resources(&body), json!({"GPU": 1}));
        let body = super::body(&parse(&["--command", "x"]).unwrap()).unwrap();
        assert_eq!(body.max_retries, berth_api::rest::DEFAULT_TASK_RETRIES);
        assert!(parse(&["--command", "x", "--max-retries", "-1"]).is_err());
    }

    #[test]
    fn file_with_flags_over_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("task.yaml");
        std::fs::write(&path, "command: train\nargs: [a]\nmax_retries: 5\nresources: {GPU: 1}\n")
            .unwrap();
        let args =
            parse(&["--file", path.to_str().unwrap(), "--arg", "b", "--max-retries", "1"]).unwrap();
        let body = body(&args).unwrap();
        assert_eq!((&*body.command, &*body.args), ("train", &["b".to_string()][..]));
        assert_eq!(body.max_retries, 1);
        assert_eq!(serde_json::to_value(&body.placement).unwrap()["resources"], json!({"GPU": 1}));
    }

    #[test]
    fn submitted_line() {
        let text = render(&fixtures::pending_task());
        assert!(
            text.starts_with("task-3 PENDING\npending (waiting for resources or peers): 0/2"),
            "{text}"
        );
    }
}
