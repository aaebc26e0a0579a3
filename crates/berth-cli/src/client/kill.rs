//! `berth kill ID`: kill an actor, cancel a task, remove a placement group, or stop a job.

use std::io::Write;

use berth_api::rest::{Actor, Group, Job, Task};
use clap::Args;

use super::view;
use super::{
    api_path, json_text, object_kind, write_out, HeadArgs, ObjectKind, Output, OutputArgs, NO_BODY,
};

/// The flags of `berth kill`.
#[derive(Debug, Args)]
pub struct KillArgs {
    /// What to stop: an actor (killed for good, no restart), a task (cancelled), a placement
    /// group (removed, its reservations freed) or a job (stopped, with what it owns), by ID:
    /// `actor-12`, `task-3`, `pg-7`, `job-2`.
    #[arg(value_name = "ID")]
    pub id: String,

    #[command(flatten)]
    pub head: HeadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The call `berth kill` makes for `kind`: method and path.
pub fn call(kind: ObjectKind, id: &str) -> (&'static str, String) {
    match kind {
        ObjectKind::Actor => ("DELETE", api_path(&["actors", id])),
        ObjectKind::Task => ("POST", api_path(&["tasks", id, "cancel"])),
        ObjectKind::Group => ("DELETE", api_path(&["placement_groups", id])),
        ObjectKind::Job => ("POST", api_path(&["jobs", id, "stop"])),
    }
}

/// Stops the object and prints its state after.
pub fn run(args: &KillArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let kind = object_kind(&args.id)?;
    let client = args.head.client()?;
    let (_, path) = call(kind, &args.id);
    let json = args.output.output == Output::Json;
    let text = match kind {
        ObjectKind::Actor => {
            let actor: Actor = client.delete(&path, NO_BODY)?;
            if json {
                json_text(&actor)?
            } else {
                line("killed", &actor.actor_id, &view::name(&actor.state))
            }
        }
        ObjectKind::Task => {
            let task: Task = client.post(&path, NO_BODY)?;
            if json {
                json_text(&task)?
            } else {
                line("cancelled", &task.task_id, &view::name(&task.state))
            }
        }
        ObjectKind::Group => {
            let group: Group = client.delete(&path, NO_BODY)?;
            if json {
                json_text(&group)?
            } else {
                line("removed", &group.group_id, &view::name(&group.state))
            }
        }
        ObjectKind::Job => {
            let job: Job = client.post(&path, NO_BODY)?;
            if json {
                json_text(&job)?
            } else {
                line("stopped", &job.job_id, &view::name(&job.state))
            }
        }
    };
    write_out(out, &text)
}

/// `actor-12 DEAD (killed)`.
fn line(verb: &str, id: &str, state: &str) -> String {
    format!("{id} {state} ({verb})\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_by_kind() {
        assert_eq!(call(ObjectKind::Actor, "actor-1"), ("DELETE", "/api/v1/actors/actor-1".into()));
        assert_eq!(
            call(ObjectKind::Task, "task-2"),
            ("POST", "/api/v1/tasks/task-2/cancel".into())
        );
        assert_eq!(
            call(ObjectKind::Group, "pg-3"),
            ("DELETE", "/api/v1/placement_groups/pg-3".into())
        );
        assert_eq!(line("killed", "actor-1", "DEAD"), "actor-1 DEAD (killed)\n");
    }
}
