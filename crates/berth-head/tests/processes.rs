//! Real processes through the whole stack: a real head, simulated agents whose runners start
//! real commands. The environment a process sees, a process killed with SIGKILL (restarted and
//! counted), a task that fails (retried, then FAILED), a command that cannot start.

use std::path::Path;
use std::time::Duration;

use berth_agent::SimNode;
use berth_api::rest::{ActorCreate, ActorState, TaskState, TaskSubmit};
use serde_json::json;

mod common;

use common::{cluster, until};

/// The text of a work's stdout log on `node`.
fn log(root: &Path, node: &str, work: &str) -> String {
    std::fs::read_to_string(root.join(node).join("logs").join(format!("{work}.out")))
        .unwrap_or_default()
}

/// The PID `node`'s runner records for `work` (its state file and journal).
fn recorded_pid(root: &Path, node: &str, work: &str) -> Option<i32> {
    berth_agent::process::recorded(&root.join(node))
        .into_iter()
        .find(|p| p.work_id == work)
        .map(|p| p.pid as i32)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_see_their_gpus_restart_when_killed_and_tasks_fail_after_retries() {
    let gpu = SimNode::new("gpu").resource("CPU", "8").resource("GPU", "4");
    let (head, sim, processes, _data) = cluster(vec![gpu]).await;
    let root = processes.0.path().to_path_buf();

    // Two half-GPU actors share one device; a whole-GPU actor gets its own.
    let env = "echo gpus=$CUDA_VISIBLE_DEVICES id=$BERTH_ACTOR_ID node=$BERTH_NODE_ID; sleep 600";
    let mut ids = Vec::new();
    for gpus in [0.5, 0.5, 1.0] {
        let actor = head
            .handle
            .create_actor(ActorCreate {
                command: "sh".into(),
                args: vec!["-c".into(), env.into()].into(),
                placement: berth_api::spec::PlacementSpec::from_json(
                    json!({"resources": {"GPU": gpus}}),
                )
                .unwrap(),
                max_restarts: 1,
                ..Default::default()
            })
            .await
            .unwrap();
        ids.push(actor.actor_id);
    }
    until(&head, "all three run", |v| {
        ids.iter().all(|id| v.actor(id).is_some_and(|a| a.state == ActorState::Alive))
    })
    .await;
    let view = head.handle.view();
    for id in &ids {
        let instances = view.actor(id).unwrap().instances["GPU"].clone();
        let want = format!(
            "gpus={} id={id} node=gpu",
            instances.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !log(&root, "gpu", id).contains(&want) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(log(&root, "gpu", id).contains(&want), "{id}: {}", log(&root, "gpu", id));
    }
    assert_eq!(view.actor(&ids[0]).unwrap().instances, view.actor(&ids[1]).unwrap().instances);

    // SIGKILL of an actor's process: restarted (a new attempt), counted.
    let pid = recorded_pid(&root, "gpu", &ids[2]).expect("recorded");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL)
        .unwrap();
    until(&head, "the killed actor is back", |v| {
        v.actor(&ids[2]).is_some_and(|a| a.restarts == 1 && a.state == ActorState::Alive)
    })
    .await;
    let history = head.handle.view().actor(&ids[2]).unwrap().history.clone();
    assert!(history.iter().any(|e| e.message.contains("signal 9")), "{history:?}");

    // A task that exits 1: run twice (max_retries 1), then FAILED with its code.
    let task = head
        .handle
        .submit_task(TaskSubmit {
            command: "sh".into(),
            args: vec!["-c".into(), "exit 1".into()].into(),
            placement: berth_api::spec::PlacementSpec::from_json(json!({"resources": {"CPU": 1}}))
                .unwrap(),
            max_retries: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    until(&head, "the task failed", |v| {
        v.task(&task.task_id).is_some_and(|t| t.state == TaskState::Failed)
    })
    .await;
    let failed = head.handle.view().task(&task.task_id).unwrap();
    assert_eq!((failed.attempts, failed.exit_code), (2, Some(1)));

    // A command that does not exist: a start failure with the OS error, no crash loop.
    let missing = head
        .handle
        .create_actor(ActorCreate {
            command: "/no/such/program".into(),
            placement: berth_api::spec::PlacementSpec::from_json(json!({"resources": {"CPU": 1}}))
                .unwrap(),
            max_restarts: 5,
            ..Default::default()
        })
        .await
        .unwrap();
    until(&head, "the missing program is dead", |v| {
        v.actor(&missing.actor_id).is_some_and(|a| a.state == ActorState::Dead)
    })
    .await;
    let dead = head.handle.view().actor(&missing.actor_id).unwrap();
    assert_eq!(dead.restarts, 0);
    let reason = dead.death_reason.clone().unwrap();
    assert!(reason.contains("failed to start") && reason.contains("No such file"), "{reason}");

    sim.shutdown().await.unwrap();
    head.shutdown().await;
}
