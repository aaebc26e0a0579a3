//! `berth pg create`: reserve bundles of resources atomically, all or none.

use std::io::Write;
use std::time::Duration;

use berth_api::rest::{Group, GroupCreate, GroupState, WaitQuery};
use clap::{Args, Subcommand};
use serde_json::{Map, Value};

use super::flags::{self, bundles, expressions, map_value, selector_list};
use super::view;
use super::{api_path, json_text, write_out, BadInput, HeadArgs, Output, OutputArgs};

/// The longest wait the head grants.
const MAX_WAIT_S: f64 = 600.0;

/// The flags of `berth pg`.
#[derive(Debug, Args)]
pub struct PgArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: PgCommand,
}

/// `berth pg` commands.
#[derive(Debug, Subcommand)]
pub enum PgCommand {
    /// Create a placement group: every bundle of one alternative is reserved, or none.
    ///
    /// Prints the group's ID and state and each bundle's node, or why it waits. With --wait,
    /// waits (up to SECONDS) until it is created; if it is not by then, prints it as it is
    /// and exits with status 1. Place actors and tasks into it with --placement-group.
    #[command(after_help = "Examples:\n  \
        berth pg create --bundles '[{\"GPU\": 1}, {\"GPU\": 1}]' --strategy STRICT_SPREAD\n  \
        berth pg create --bundles 'GPU=1,CPU=4;GPU=1,CPU=4' --name training --wait 60\n  \
        berth pg create --bundles '[{\"GPU\": 1}, {\"GPU\": 1}]' --bundle-label-selector \
        '[{\"berth.io/accelerator-type\": \"nvidia-h100\"}, {\"berth.io/accelerator-type\": \
        \"nvidia-h100\"}]' --fallback-bundles '[{\"GPU\": 1}, {\"GPU\": 1}, {\"GPU\": 1}, \
        {\"GPU\": 1}]'\n  \
        berth pg create --file pg.yaml --wait 30")]
    Create(CreateArgs),
}

/// The flags of `berth pg create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The bundles: a JSON list of resource maps (`[{"GPU": 1}, {"GPU": 1}]`), or maps
    /// separated by `;` (`GPU=1,CPU=4;GPU=1,CPU=4`). Required, here or in --file.
    #[arg(long, value_name = "BUNDLES")]
    pub bundles: Option<String>,

    /// PACK (default), SPREAD, STRICT_PACK or STRICT_SPREAD.
    #[arg(long, value_name = "STRATEGY")]
    pub strategy: Option<String>,

    /// A name for people.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,

    /// Its namespace; default `default`.
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,

    /// One label selector per bundle, as a JSON list of objects.
    #[arg(long, value_name = "SELECTORS")]
    pub bundle_label_selector: Option<String>,

    /// The taints every bundle accepts: `key=expression,...` or a JSON object.
    #[arg(long, value_name = "TOLERATIONS", allow_hyphen_values = true)]
    pub tolerations: Option<String>,

    /// An alternative set of bundles (same forms as --bundles), tried in order when the
    /// bundles cannot be reserved now; repeat for more.
    #[arg(long = "fallback-bundles", value_name = "BUNDLES")]
    pub fallback_bundles: Vec<String>,

    /// Wait up to SECONDS (at most 600) for the group to be created.
    #[arg(long, value_name = "SECONDS")]
    pub wait: Option<f64>,

    /// A YAML or JSON file holding the whole body (the REST API's GroupCreate: the request
    /// file's `placement_group` without `id`). Flags given as well replace its keys whole.
    #[arg(long, value_name = "FILE")]
    pub file: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub head: HeadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The body the flags (and `--file`) give.
pub fn body(args: &CreateArgs) -> anyhow::Result<GroupCreate> {
    let mut keys = Map::new();
    if let Some(text) = &args.bundles {
        keys.insert("bundles".into(), bundles(text)?);
    }
    for (key, value) in
        [("strategy", &args.strategy), ("name", &args.name), ("namespace", &args.namespace)]
    {
        if let Some(value) = value {
            keys.insert(key.into(), value.clone().into());
        }
    }
    if let Some(text) = &args.bundle_label_selector {
        keys.insert(
            "bundle_label_selector".into(),
            selector_list(text, "--bundle-label-selector")?,
        );
    }
    if let Some(text) = &args.tolerations {
        keys.insert("tolerations".into(), map_value(expressions(text, "--tolerations")?));
    }
    if !args.fallback_bundles.is_empty() {
        let alternatives = args
            .fallback_bundles
            .iter()
            .map(|text| {
                let mut alternative = Map::new();
                alternative.insert("bundles".into(), bundles(text)?);
                Ok(Value::Object(alternative))
            })
            .collect::<Result<Vec<_>, BadInput>>()?;
        keys.insert("fallback_strategy".into(), Value::Array(alternatives));
    }
    flags::body(args.file.as_deref(), keys, &[("bundles", "--bundles")], &[])
}

/// The wait asked for, checked.
pub fn wait(args: &CreateArgs) -> Result<Option<f64>, BadInput> {
    match args.wait {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 && s <= MAX_WAIT_S => Ok(Some(s)),
        Some(s) => Err(BadInput::new(format!(
            "--wait: {s} is not a number of seconds above 0 and at most {MAX_WAIT_S}"
        ))),
    }
}

/// Runs `berth pg …`.
pub fn run(args: &PgArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    match &args.command {
        PgCommand::Create(args) => create(args, out),
    }
}

fn create(args: &CreateArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let body = body(args)?;
    let wait = wait(args)?;
    let client = args.head.client()?;
    let mut group: Group = client.create(&api_path(&["placement_groups"]), &body)?;
    let mut failed = None;
    if let Some(seconds) = wait.filter(|_| group.state != GroupState::Created) {
        let path = api_path(&["placement_groups", &group.group_id, "wait"]);
        let query = WaitQuery { timeout_s: Some(seconds) };
        match client.get_waiting(&path, &query, Duration::from_secs_f64(seconds)) {
            Ok(created) => group = created,
            // Still printed as it was created, then the error (408 when not created in time).
            Err(err) => failed = Some(err),
        }
    }
    let text = match args.output.output {
        Output::Json => json_text(&group)?,
        Output::Table => render(&group),
    };
    write_out(out, &text)?;
    match failed {
        Some(err) => Err(err.into()),
        None => Ok(()),
    }
}

/// `pg-7 CREATED`, a line per bundle with its node, then why it waits when it does.
pub fn render(group: &Group) -> String {
    let mut text = view::summary_line(
        &group.group_id,
        &view::name(&group.state),
        None,
        &Default::default(),
        None,
    );
    let rows: Vec<Vec<String>> = group
        .bundles
        .iter()
        .map(|b| {
            let resources: Vec<String> =
                b.resources.iter().map(|(n, a)| format!("{n} {}", view::amount(n, a))).collect();
            vec![
                format!("bundle {}", b.index),
                resources.join(", "),
                b.node_id.as_deref().map_or(String::from("not reserved"), |n| format!("on {n}")),
            ]
        })
        .collect();
    text.push_str(&view::columns(&[], &rows, 2));
    if let Some(d) = &group.diagnosis {
        text.push_str(&view::diagnosis(d));
    }
    text
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde_json::json;

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
            "--bundles",
            r#"[{"GPU":1},{"GPU":1}]"#,
            "--strategy",
            "STRICT_SPREAD",
            "--name",
            "t",
            "--tolerations",
            "gpu_node=exists()",
            "--fallback-bundles",
            "GPU=1;GPU=1;GPU=1",
            "--bundle-label-selector",
            r#"[{"zone": "a"}, {"zone": "b"}]"#,
        ])
        .unwrap();
        let body = body(&args).unwrap();
        assert_eq!(
            serde_json::to_value(&body.placement).unwrap(),
            json!({
                "strategy": "STRICT_SPREAD",
                "bundles": [{"GPU": 1}, {"GPU": 1}],
                "bundle_label_selector": [{"zone": "a"}, {"zone": "b"}],
                "tolerations": {"gpu_node": "exists()"},
                "fallback_strategy": [{"bundles": [{"GPU": 1}, {"GPU": 1}, {"GPU": 1}]}],
            })
        );
    }

    #[test]
    fn bundles_are_required() {
        let err = body(&parse(&["--strategy", "PACK"]).unwrap()).unwrap_err();
        assert!(err.to_string().contains("give --bundles"), "{err}");
    }

    #[test]
    fn waits() {
        assert_eq!(wait(&parse(&["--wait", "30"]).unwrap()).unwrap(), Some(30.0));
        assert_eq!(wait(&parse(&[]).unwrap()).unwrap(), None);
        for bad in ["0", "601", "NaN", "inf"] {
            assert!(wait(&parse(&["--wait", bad]).unwrap()).is_err(), "{bad}");
        }
        // A negative wait is not even read as a value.
        assert!(parse(&["--wait", "-1"]).is_err());
    }

    #[test]
    fn created_lines() {
        let text = render(&fixtures::group());
        assert_eq!(
            text,
            "pg-7 CREATED\n  bundle 0  GPU 1  on gpu-1\n  bundle 1  GPU 1  on gpu-2\n"
        );
    }
}
