//! `berth get ID` and `berth get node ID|IP`: every field of one object, with its history and,
//! when it waits, why.

use std::io::Write;

use berth_api::rest::{Actor, Group, Job, Node, Task};
use clap::Args;

use super::view;
use super::{
    api_path, json_text, object_kind, write_out, BadInput, HeadArgs, ObjectKind, Output, OutputArgs,
};

/// The flags of `berth get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// An actor, task, placement group or job ID (`actor-12`, `task-3`, `pg-7`, `job-2`); or
    /// `node` followed by a node's ID or IP address.
    #[arg(value_name = "ID", num_args = 1..=2, required = true)]
    pub id: Vec<String>,

    /// Then print each change to it as it happens (one line each; `--output json`: the
    /// head's change events), until Ctrl-C.
    #[arg(long)]
    pub watch: bool,

    #[command(flatten)]
    pub head: HeadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// What `berth get` fetches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A node, by ID or IP.
    Node(String),
    /// An actor, task or placement group.
    Object(ObjectKind, String),
}

/// Reads the positional arguments: `ID`, `node ID|IP`, or `actor|task|pg ID` (the kind must
/// agree with the ID's prefix).
pub fn target(words: &[String]) -> Result<Target, BadInput> {
    match words {
        [id] if is_node_word(id) => {
            Err(BadInput::new("which node? `berth get node ID` (or the node's IP address)"))
        }
        [id] => Ok(Target::Object(object_kind(id)?, id.clone())),
        [kind, id] if is_node_word(kind) => Ok(Target::Node(id.clone())),
        [kind, id] => {
            let said = match kind.to_ascii_lowercase().as_str() {
                "actor" | "actors" => ObjectKind::Actor,
                "task" | "tasks" => ObjectKind::Task,
                "pg" | "pgs" | "placement-group" | "placement_group" => ObjectKind::Group,
                "job" | "jobs" => ObjectKind::Job,
                _ => {
                    return Err(BadInput::new(format!(
                        "{kind:?} is not a kind: use node, actor, task, pg or job"
                    )))
                }
            };
            let by_prefix = object_kind(id)?;
            if said != by_prefix {
                return Err(BadInput::new(format!(
                    "`{kind} {id}`: {id} is a {} ID",
                    by_prefix.noun()
                )));
            }
            Ok(Target::Object(by_prefix, id.clone()))
        }
        _ => Err(BadInput::new("give one ID, or `node` and a node's ID or IP")),
    }
}

fn is_node_word(word: &str) -> bool {
    word.eq_ignore_ascii_case("node") || word.eq_ignore_ascii_case("nodes")
}

/// Fetches and prints.
pub fn run(args: &GetArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let target = target(&args.id)?;
    let client = args.head.client()?;
    if args.watch {
        let (kind, id) = match &target {
            Target::Node(node) => ("node", node.clone()),
            Target::Object(ObjectKind::Actor, id) => ("actor", id.clone()),
            Target::Object(ObjectKind::Task, id) => ("task", id.clone()),
            Target::Object(ObjectKind::Group, id) => ("placement_group", id.clone()),
            Target::Object(ObjectKind::Job, id) => ("job", id.clone()),
        };
        // A node named by its IP: the change stream knows IDs.
        let id = if kind == "node" {
            client.get::<Node>(&api_path(&["nodes", &id]))?.node_id
        } else {
            id
        };
        let query = berth_api::rest::WatchQuery {
            kind: Some(kind.into()),
            id: Some(id),
            ..Default::default()
        };
        return super::watch::follow(&client, query, args.output.output, out);
    }
    let json = args.output.output == Output::Json;
    let text = match target {
        Target::Node(node) => {
            let node: Node = client.get(&api_path(&["nodes", &node]))?;
            if json {
                json_text(&node)?
            } else {
                view::node_detail(&node)
            }
        }
        Target::Object(kind, id) => {
            let path = api_path(&[kind.collection(), &id]);
            match kind {
                ObjectKind::Actor => {
                    let actor: Actor = client.get(&path)?;
                    if json {
                        json_text(&actor)?
                    } else {
                        view::actor_detail(&actor)
                    }
                }
                ObjectKind::Task => {
                    let task: Task = client.get(&path)?;
                    if json {
                        json_text(&task)?
                    } else {
                        view::task_detail(&task)
                    }
                }
                ObjectKind::Group => {
                    let group: Group = client.get(&path)?;
                    if json {
                        json_text(&group)?
                    } else {
                        view::group_detail(&group)
                    }
                }
                ObjectKind::Job => {
                    let job: Job = client.get(&path)?;
                    if json {
                        json_text(&job)?
                    } else {
                        view::job_detail(&job)
                    }
                }
            }
        }
    };
    write_out(out, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn targets() {
        assert_eq!(
            target(&words(&["actor-12"])).unwrap(),
            Target::Object(ObjectKind::Actor, "actor-12".into())
        );
        assert_eq!(
            target(&words(&["pg-7"])).unwrap(),
            Target::Object(ObjectKind::Group, "pg-7".into())
        );
        assert_eq!(target(&words(&["node", "10.0.0.3"])).unwrap(), Target::Node("10.0.0.3".into()));
        assert_eq!(target(&words(&["NODE", "gpu-1"])).unwrap(), Target::Node("gpu-1".into()));
        assert_eq!(
            target(&words(&["task", "task-3"])).unwrap(),
            Target::Object(ObjectKind::Task, "task-3".into())
        );
        for (bad, want) in [
            (&["gpu-1"][..], "berth get node"),
            (&["node"][..], "which node"),
            (&["actor", "task-3"][..], "task-3 is a task ID"),
            (&["thing", "x"][..], "not a kind"),
        ] {
            let err = target(&words(bad)).unwrap_err();
            assert!(err.0.contains(want), "{bad:?}: {err}");
        }
    }
}
