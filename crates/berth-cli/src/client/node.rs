//! `berth node set-resources NODE NAME=AMOUNT…`: change a running node's resource totals
//! (seed 002's dynamic resources).

use std::io::Write;

use berth_api::rest::{Node, ResourcesBody};
use clap::{Args, Subcommand};

use super::flags::pairs;
use super::view;
use super::{api_path, json_text, write_out, BadInput, HeadArgs, Output, OutputArgs};

/// `berth node …`.
#[derive(Debug, Args)]
pub struct NodeArgs {
    #[command(subcommand)]
    pub command: NodeCommand,
}

/// What `berth node` does.
#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Set resource totals of a running node: add a custom resource, change an amount, or
    /// delete one with 0. Other resources stay; GPUs shrink from the highest instance; work
    /// already running stays (a total below what it holds leaves nothing free until it ends).
    ///
    /// Exit status: 0; 2 for a malformed change; 1 when the head cannot be reached or answers
    /// an error (400 names the resource and the rule, 404 an unknown node).
    #[command(after_help = "Examples:\n  \
        berth node set-resources gpu-1 GPU=2\n  \
        berth node set-resources gpu-1 my_resource=4 memory=64Gi\n  \
        berth node set-resources 10.0.0.3 my_resource=0")]
    SetResources(SetResourcesArgs),
}

/// The flags of `berth node set-resources`.
#[derive(Debug, Args)]
pub struct SetResourcesArgs {
    /// The node, by ID or IP address.
    #[arg(value_name = "NODE")]
    pub node: String,

    /// `NAME=AMOUNT` (amounts as in requests: 4, 0.5, 16Gi); `NAME=0` deletes the resource.
    #[arg(value_name = "NAME=AMOUNT", required = true)]
    pub resources: Vec<String>,

    #[command(flatten)]
    pub head: HeadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Reads `NAME=AMOUNT` items; a name given twice with two amounts is an error.
pub fn resources(items: &[String]) -> Result<ResourcesBody, BadInput> {
    let mut body = ResourcesBody::default();
    for item in items {
        for (name, amount) in pairs(item, "NAME=AMOUNT")? {
            match body.0.get(&name) {
                Some(old) if *old != amount => {
                    return Err(BadInput::new(format!(
                        "{name} is given twice, as {old:?} and {amount:?}"
                    )))
                }
                _ => {
                    body.0.insert(name, amount);
                }
            }
        }
    }
    if body.0.is_empty() {
        return Err(BadInput::new("no resource given; expected NAME=AMOUNT"));
    }
    Ok(body)
}

/// Runs `berth node …`.
pub fn run(args: &NodeArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    match &args.command {
        NodeCommand::SetResources(args) => {
            let body = resources(&args.resources)?;
            let client = args.head.client()?;
            let node: Node = client.put(&api_path(&["nodes", &args.node, "resources"]), &body)?;
            let text = match args.output.output {
                Output::Json => json_text(&node)?,
                Output::Table => render(&node),
            };
            write_out(out, &text)
        }
    }
}

/// `node gpu-1 (10.0.0.3) resources (used/total): CPU 2/16, GPU 1/4`.
pub fn render(node: &Node) -> String {
    format!(
        "node {} ({}) resources (used/total): {}\n",
        node.node_id,
        node.address,
        view::use_text(&node.resources)
    )
}

#[cfg(test)]
mod tests {
    use super::super::view::fixtures;
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn items_and_their_errors() {
        let body = resources(&strings(&["GPU=2", "my_res=0,memory=16Gi"])).unwrap();
        assert_eq!(body.0, fixtures::map(&[("GPU", "2"), ("memory", "16Gi"), ("my_res", "0")]));
        for (items, want) in [
            (&["GPU"][..], "not KEY=VALUE"),
            (&["GPU=1", "GPU=2"][..], "GPU is given twice"),
            (&[""][..], "no resource given"),
        ] {
            let err = resources(&strings(items)).unwrap_err();
            assert!(err.0.contains(want), "{items:?}: {err}");
        }
    }

    #[test]
    fn shows_the_resources_after() {
        let text = render(&fixtures::node());
        assert!(text.starts_with("node gpu-1 (10.0.0.3) resources (used/total): "), "{text}");
    }
}
