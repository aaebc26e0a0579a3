//! `berth drain NODE`: no new work on a node; its actors move elsewhere. `berth undrain
//! NODE` ends that.

use std::io::Write;

use berth_api::rest::Node;
use clap::Args;

use super::view;
use super::{api_path, json_text, write_out, HeadArgs, Output, OutputArgs, NO_BODY};

/// The flags of `berth drain` and `berth undrain`.
#[derive(Debug, Args)]
pub struct DrainArgs {
    /// The node, by ID or IP address.
    #[arg(value_name = "NODE")]
    pub node: String,

    #[command(flatten)]
    pub head: HeadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Drains the node and prints its state after.
pub fn run(args: &DrainArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = args.head.client()?;
    let node: Node = client.post(&api_path(&["nodes", &args.node, "drain"]), NO_BODY)?;
    let text = if args.output.output == Output::Json {
        json_text(&node)?
    } else {
        format!(
            "{} {} ({} actors, {} tasks left; its actors are being moved)\n",
            node.node_id,
            view::name(&node.state),
            node.actors,
            node.tasks
        )
    };
    write_out(out, &text)
}

/// Ends the node's drain and prints its state after.
pub fn undrain(args: &DrainArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = args.head.client()?;
    let node: Node = client.post(&api_path(&["nodes", &args.node, "undrain"]), NO_BODY)?;
    let text = if args.output.output == Output::Json {
        json_text(&node)?
    } else {
        format!("{} {} (it takes new work again)\n", node.node_id, view::name(&node.state))
    };
    write_out(out, &text)
}
