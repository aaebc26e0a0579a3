//! `berth logs` end to end: `berth up` (a head and local nodes running real processes) in a
//! temporary data directory, an actor and a task created with the CLI, and their output read
//! back with `berth logs`, `--stream err` and `--follow`. Every wait is a bounded poll; every
//! process is ended when the test ends (the cluster's guard kills what the runners record).

#![cfg(target_os = "linux")]

mod common;
use common::cluster::{created_id, wait_for, Cluster, WAIT};

/// True when `text` has a line that is exactly `line` (the log's header line shows the
/// command, so a plain `contains` would find the command's own words).
fn has_line(text: &str, line: &str) -> bool {
    text.lines().any(|l| l == line)
}

#[test]
fn logs_of_an_actor_and_a_followed_task() {
    let cluster = Cluster::new();
    let mut up = cluster.spawn("up", &["up", "--nodes", "2", "--port", "0"]);
    cluster.wait_head(&mut up);
    wait_for("2 nodes alive", WAIT, || {
        let run = cluster.run(&["status"]);
        match run.code {
            Some(0) if run.stdout.contains("Nodes: 2 alive") => Ok(()),
            _ => Err(run.to_string()),
        }
    });

    let created = cluster.ok(&[
        "actor",
        "create",
        "--command",
        "sh",
        "--arg",
        "-c",
        "--arg",
        "echo hello-from-cli; echo oops-from-cli >&2; sleep 600",
        "--resources",
        "CPU=1",
    ]);
    let actor = created_id(&created, "actor-");
    cluster.wait_object(&actor, "is ALIVE", |a| a["state"] == "ALIVE");

    // Its output appears once the process wrote it (and the node's log stream is open).
    let out = wait_for(&format!("berth logs {actor} shows the output"), WAIT, || {
        let run = cluster.run(&["logs", &actor]);
        match run.code {
            Some(0) if has_line(&run.stdout, "hello-from-cli") => Ok(run.stdout),
            _ => Err(run.to_string()),
        }
    });
    assert!(out.starts_with(&format!("=== berth: {actor} attempt 1 starting at ")), "{out}");
    assert!(!has_line(&out, "oops-from-cli"), "{out}");
    let err = wait_for(&format!("berth logs {actor} --stream err"), WAIT, || {
        let run = cluster.run(&["logs", &actor, "--stream", "err"]);
        match run.code {
            Some(0) if has_line(&run.stdout, "oops-from-cli") => Ok(run.stdout),
            _ => Err(run.to_string()),
        }
    });
    assert!(!has_line(&err, "hello-from-cli"), "{err}");

    // A task followed from its start: the lines come as they are written, and the command
    // ends by itself once the task has finished.
    let submitted = cluster.ok(&[
        "task",
        "submit",
        "--command",
        "sh",
        "--arg",
        "-c",
        "--arg",
        "for i in 1 2 3 4 5; do echo tick$i; sleep 0.2; done",
        "--resources",
        "CPU=1",
    ]);
    let task = created_id(&submitted, "task-");
    let followed = wait_for(&format!("berth logs {task} --follow"), WAIT, || {
        // Until the task is placed and its node answers, `berth logs` says why and exits 1.
        let run = cluster.run(&["logs", &task, "--follow"]);
        match run.code {
            Some(0) => Ok(run.stdout),
            _ => Err(run.to_string()),
        }
    });
    for i in 1..=5 {
        assert!(has_line(&followed, &format!("tick{i}")), "tick{i} in:\n{followed}");
    }
    let task_json = cluster.json(&["get", &task]);
    assert_eq!(task_json["state"], "FINISHED", "{task_json}");

    // Errors: an unknown ID is the head's 404 (exit 1); a group's ID is bad input (exit 2).
    let unknown = cluster.run(&["logs", "actor-999"]).fails(1);
    assert!(unknown.contains("404") && unknown.contains("actor-999"), "{unknown}");
    let group = cluster.run(&["logs", "pg-1"]).fails(2);
    assert!(group.contains("only actors and tasks have logs"), "{group}");
    let bad = cluster.run(&["logs", "nothing"]).fails(2);
    assert!(bad.contains("not an actor, task or placement group ID"), "{bad}");
}
