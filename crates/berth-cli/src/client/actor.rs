//! `berth actor create`: start an actor on the cluster.

use std::io::Write;

use berth_api::rest::{Actor, ActorCreate};
use clap::{Args, Subcommand};
use serde_json::json;

use super::flags::{self, map_value, pairs, ProcessArgs};
use super::view;
use super::{api_path, json_text, write_out, HeadArgs, Output, OutputArgs};

/// The flags of `berth actor`.
#[derive(Debug, Args)]
pub struct ActorArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ActorCommand,
}

/// `berth actor` commands.
#[derive(Debug, Subcommand)]
pub enum ActorCommand {
    /// Create an actor: a long-running process the head places and restarts.
    ///
    /// Prints the new actor's ID and state, its node and GPU instances once placed, or why it
    /// waits. The head checks the placement keys as `berth explain` does, and answers a bad
    /// one with its field (exit status 1); bad flags are exit status 2.
    #[command(after_help = "Examples:\n  \
        berth actor create --command python --arg serve.py --resources CPU=1,GPU=0.5 \
        --labels app=web\n  \
        berth actor create --command ./worker --resources '{\"CPU\": 2}' --tolerations \
        'gpu_node=exists()' --label-selector 'zone=in(us-west1-a,us-west1-b)'\n  \
        berth actor create --command ./replica --labels app=db --strategy \
        '{\"type\": \"ACTOR_AFFINITY\", \"expressions\": [{\"key\": \"app\", \"operator\": \
        \"NOT_IN\", \"values\": [\"db\"]}]}'\n  \
        berth actor create --file actor.yaml --namespace staging")]
    Create(CreateArgs),
}

/// The flags of `berth actor create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub process: ProcessArgs,

    /// Actor labels, what other actors' affinity matches: `app=web,tier=front`, or a JSON
    /// object.
    #[arg(long, value_name = "LABELS")]
    pub labels: Option<String>,

    /// Restarts after its process or node dies; -1 for always (default 0).
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i32).range(-1..)
    )]
    pub max_restarts: Option<i32>,

    #[command(flatten)]
    pub head: HeadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The body the flags (and `--file`) give.
pub fn body(args: &CreateArgs) -> anyhow::Result<ActorCreate> {
    let mut keys = args.process.keys()?;
    if let Some(labels) = &args.labels {
        keys.insert("labels".into(), map_value(pairs(labels, "--labels")?));
    }
    if let Some(max) = args.max_restarts {
        keys.insert("max_restarts".into(), max.into());
    }
    flags::body(
        args.process.file.as_deref(),
        keys,
        &[("command", "--command")],
        &[("resources", json!({}))],
    )
}

/// Runs `berth actor …`.
pub fn run(args: &ActorArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    match &args.command {
        ActorCommand::Create(args) => create(args, out),
    }
}

fn create(args: &CreateArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let body = body(args)?;
    let client = args.head.client()?;
    let actor: Actor = client.create(&api_path(&["actors"]), &body)?;
    let text = match args.output.output {
        Output::Json => json_text(&actor)?,
        Output::Table => render(&actor),
    };
    write_out(out, &text)
}

/// `actor-12 ALIVE on gpu-1, GPU [0]`, then why it waits when it does.
pub fn render(actor: &Actor) -> String {
    view::summary_line(
        &actor.actor_id,
        &view::name(&actor.state),
        actor.node_id.as_deref(),
        &actor.instances,
        actor.diagnosis.as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::super::view::fixtures;
    use super::*;

    fn parse(argv: &[&str]) -> Result<CreateArgs, clap::Error> {
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: CreateArgs,
        }
        Wrapper::try_parse_from(std::iter::once("create").chain(argv.iter().copied()))
            .map(|w| w.args)
    }

    #[test]
    fn flags_to_body() {
        let args = parse(&[
            "--command",
            "python",
            "--arg",
            "-u",
            "--labels",
            "app=web",
            "--max-restarts",
            "-1",
            "--name",
            "web",
            "--placement-group",
            "pg-7:0",
        ])
        .unwrap();
        let body = body(&args).unwrap();
        assert_eq!(&*body.command, "python");
        assert_eq!(&*body.args, ["-u"]);
        assert_eq!(body.labels, fixtures::map(&[("app", "web")]));
        assert_eq!(body.max_restarts, -1);
        assert_eq!(body.name.as_deref(), Some("web"));
        let placement = serde_json::to_value(&body.placement).unwrap();
        assert_eq!(placement["resources"], json!({}));
        assert_eq!(
            placement["scheduling_strategy"],
            json!({"type": "PLACEMENT_GROUP", "group": "pg-7", "bundle": 0})
        );
        // The wire form leaves out what was not given.
        let wire = serde_json::to_value(&body).unwrap();
        assert!(wire.get("label_selector").is_none(), "{wire}");
    }

    #[test]
    fn bad_flags() {
        assert!(parse(&["--command", "x", "--max-restarts", "-2"]).is_err());
        assert!(parse(&["--command", "x", "--strategy", "SPREAD", "--placement-group", "pg-1"])
            .is_err());
        let err = body(&parse(&["--resources", "CPU=1"]).unwrap()).unwrap_err();
        assert!(err.to_string().contains("give --command"), "{err}");
        let err = body(&parse(&["--command", "x", "--labels", "app"]).unwrap()).unwrap_err();
        assert!(err.to_string().contains("--labels"), "{err}");
    }

    #[test]
    fn created_line() {
        assert_eq!(render(&fixtures::actor()), "actor-12 ALIVE on gpu-1, GPU [0]\n");
        let mut pending = fixtures::actor();
        pending.state = berth_api::rest::ActorState::Pending;
        pending.node_id = None;
        pending.instances.clear();
        pending.diagnosis = Some(Box::new(fixtures::gpu_diagnosis()));
        let text = render(&pending);
        assert!(text.starts_with("actor-12 PENDING\npending (waiting"), "{text}");
    }
}
