//! `berth taint`: add or remove a node's taints while it runs (seed 004's `ray taint`).

use std::io::Write;
use std::net::IpAddr;

use berth_api::rest::{Node, TaintsBody};
use clap::{ArgGroup, Args};

use super::flags::pairs;
use super::view;
use super::{api_path, json_text, write_out, BadInput, HeadArgs, Output, OutputArgs};

/// The flags of `berth taint`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("node").required(true).args(["node_id", "node_ip"])))]
#[command(group(ArgGroup::new("change").required(true).args(["append", "remove"])))]
pub struct TaintArgs {
    /// The node, by its ID.
    #[arg(long, value_name = "ID")]
    pub node_id: Option<String>,

    /// The node, by its IP address.
    #[arg(long, value_name = "IP")]
    pub node_ip: Option<String>,

    /// Taints to add: `key=value[,key=value]`, or a JSON object (`{"gpu_node": "true"}`);
    /// repeat for more.
    #[arg(long, value_name = "TAINTS", alias = "apend")]
    pub append: Vec<String>,

    /// Taints to remove, in the same forms (`--delete` is the same flag).
    #[arg(long, value_name = "TAINTS", visible_alias = "delete")]
    pub remove: Vec<String>,

    #[command(flatten)]
    pub head: HeadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// What `berth taint` does: the node (its ID or IP, as the path takes either), whether it
/// adds, and the taints.
#[derive(Debug, PartialEq, Eq)]
pub struct Change {
    /// The node's ID or IP.
    pub node: String,
    /// True to add, false to remove.
    pub append: bool,
    /// The taints.
    pub taints: TaintsBody,
}

/// Reads the flags. Several `--append` (or `--remove`) values are merged; a key given twice
/// with two values is an error.
pub fn change(args: &TaintArgs) -> Result<Change, BadInput> {
    let node = match (&args.node_id, &args.node_ip) {
        (Some(id), _) if id.trim().is_empty() => return Err(BadInput::new("--node-id is empty")),
        (Some(id), _) => id.trim().to_string(),
        (None, Some(ip)) => {
            let ip: IpAddr = ip
                .trim()
                .parse()
                .map_err(|_| BadInput::new(format!("--node-ip: {ip:?} is not an IP address")))?;
            ip.to_string()
        }
        (None, None) => return Err(BadInput::new("give --node-id or --node-ip")),
    };
    let (append, values, flag) = if args.append.is_empty() {
        (false, &args.remove, "--remove")
    } else {
        (true, &args.append, "--append")
    };
    let mut taints = TaintsBody::default();
    for value in values {
        for (key, value) in pairs(value, flag)? {
            match taints.0.get(&key) {
                Some(old) if *old != value => {
                    return Err(BadInput::new(format!(
                        "{flag}: {key} is given twice, as {old:?} and {value:?}"
                    )))
                }
                _ => {
                    taints.0.insert(key, value);
                }
            }
        }
    }
    if taints.0.is_empty() {
        return Err(BadInput::new(format!("{flag}: no taint given; expected key=value")));
    }
    Ok(Change { node, append, taints })
}

/// Sends the change and prints the node's taints as they are now.
pub fn run(args: &TaintArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let change = change(args)?;
    let client = args.head.client()?;
    let path = api_path(&["nodes", &change.node, "taints"]);
    let node: Node = if change.append {
        client.post(&path, Some(&change.taints))?
    } else {
        client.delete(&path, Some(&change.taints))?
    };
    let text = match args.output.output {
        Output::Json => json_text(&node)?,
        Output::Table => render(&node),
    };
    write_out(out, &text)
}

/// `node gpu-1 (10.0.0.3) taints: gpu_node=true`.
pub fn render(node: &Node) -> String {
    let taints = view::taints(&node.taints);
    let taints = if taints.is_empty() { "none".to_string() } else { taints };
    format!("node {} ({}) taints: {taints}\n", node.node_id, node.address)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::super::view::fixtures;
    use super::*;

    fn parse(argv: &[&str]) -> Result<TaintArgs, clap::Error> {
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: TaintArgs,
        }
        Wrapper::try_parse_from(std::iter::once("taint").chain(argv.iter().copied()))
            .map(|w| w.args)
    }

    fn taints(pairs: &[(&str, &str)]) -> TaintsBody {
        TaintsBody(fixtures::map(pairs))
    }

    #[test]
    fn the_seeds_forms() {
        let cases: &[(&[&str], Change)] = &[
            (
                &["--node-id", "n1", "--append", "gpu_node=true"],
                Change { node: "n1".into(), append: true, taints: taints(&[("gpu_node", "true")]) },
            ),
            (
                &["--node-id", "n1", "--append", r#"{"gpu_node":"true"}"#],
                Change { node: "n1".into(), append: true, taints: taints(&[("gpu_node", "true")]) },
            ),
            (
                // Seed 004 spells it `--apend`.
                &["--node-id", "n1", "--apend", r#"{"memory-pressure":"high"}"#],
                Change {
                    node: "n1".into(),
                    append: true,
                    taints: taints(&[("memory-pressure", "high")]),
                },
            ),
            (
                &["--node-ip", "10.0.0.3", "--delete", "a=1,b=2"],
                Change {
                    node: "10.0.0.3".into(),
                    append: false,
                    taints: taints(&[("a", "1"), ("b", "2")]),
                },
            ),
            (
                &["--node-ip", "::1", "--remove", "a=1", "--remove", "b=2"],
                Change {
                    node: "::1".into(),
                    append: false,
                    taints: taints(&[("a", "1"), ("b", "2")]),
                },
            ),
        ];
        for (argv, want) in cases {
            assert_eq!(&change(&parse(argv).unwrap()).unwrap(), want, "{argv:?}");
        }
    }

    #[test]
    fn bad_forms() {
        // Usage errors (clap): no node, no change, both changes, both nodes.
        for argv in [
            &["--append", "a=1"][..],
            &["--node-id", "n1"][..],
            &["--node-id", "n1", "--append", "a=1", "--remove", "b=2"][..],
            &["--node-id", "n1", "--node-ip", "10.0.0.1", "--append", "a=1"][..],
        ] {
            assert!(parse(argv).is_err(), "{argv:?}");
        }
        // Bad values.
        for (argv, want) in [
            (&["--node-ip", "gpu-1", "--append", "a=1"][..], "not an IP address"),
            (&["--node-id", "n1", "--append", "gpu_node"][..], "not KEY=VALUE"),
            (&["--node-id", "n1", "--append", ""][..], "no taint given"),
            (&["--node-id", "n1", "--append", "a=1", "--append", "a=2"][..], "given twice"),
            (&["--node-id", " ", "--append", "a=1"][..], "--node-id is empty"),
        ] {
            let err = change(&parse(argv).unwrap()).unwrap_err();
            assert!(err.0.contains(want), "{argv:?}: {err}");
        }
    }

    #[test]
    fn shows_the_taints_after() {
        assert_eq!(render(&fixtures::node()), "node gpu-1 (10.0.0.3) taints: gpu_node=true\n");
        let mut node = fixtures::node();
        node.taints.clear();
        assert!(render(&node).ends_with("taints: none\n"));
    }
}
