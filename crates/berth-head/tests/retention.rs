//! Finished objects are forgotten after their time or beyond their count, in memory and in the
//! store, the lists say how many were, and IDs never repeat after a restart.
//!
//! No agent is needed: with no node, actors, tasks and groups wait, and killing, cancelling or
//! removing them finishes them.

use std::time::Duration;

use berth_api::rest::{ActorCreate, GroupCreate, ListQuery, TaskState, TaskSubmit};
use berth_head::config::Retention;
use berth_head::{HeadConfig, RunningHead, View};

const WAIT: Duration = Duration::from_secs(20);

fn config(dir: &std::path::Path, keep_for: Duration, keep_count: usize) -> HeadConfig {
    let mut config = HeadConfig::new(dir);
    config.bind = "127.0.0.1:0".parse().unwrap();
    // Cycles run at least this often, so what is due is dropped promptly.
    config.heartbeat_interval = Duration::from_millis(20);
    config.retention = Retention { keep_for, keep_count };
    config
}

async fn boot(config: &HeadConfig) -> RunningHead {
    berth_head::start(config.clone()).await.expect("head starts")
}

/// Waits until the published view satisfies `done`.
async fn until(head: &RunningHead, what: &str, done: impl Fn(&View) -> bool) {
    let mut views = head.handle.subscribe();
    tokio::time::timeout(WAIT, views.wait_for(|v| done(v)))
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
        .expect("the head runs");
}

fn task() -> TaskSubmit {
    TaskSubmit {
        command: "true".into(),
        placement: berth_api::spec::PlacementSpec::from_json(
            serde_json::json!({"resources": {"CPU": 1}}),
        )
        .unwrap(),
        ..Default::default()
    }
}

fn actor() -> ActorCreate {
    ActorCreate {
        command: "sleep".into(),
        placement: berth_api::spec::PlacementSpec::from_json(
            serde_json::json!({"resources": {"CPU": 1}}),
        )
        .unwrap(),
        ..Default::default()
    }
}

/// Submits `n` tasks and cancels them all; returns their IDs.
async fn finished_tasks(head: &RunningHead, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..n {
        let t = head.handle.submit_task(task()).await.unwrap();
        assert_eq!(t.state, TaskState::Pending, "no node: it waits");
        assert_eq!(head.handle.cancel_task(&t.task_id).await.unwrap().state, TaskState::Cancelled);
        ids.push(t.task_id.to_string());
    }
    ids
}

#[tokio::test]
async fn finished_objects_beyond_the_count_are_forgotten_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), Duration::from_secs(3600), 2);
    let head = boot(&config).await;
    let tasks = finished_tasks(&head, 5).await;
    for i in 0..3 {
        let name = Some(format!("a{i}").into());
        let body = ActorCreate { name, ..actor() };
        let actor = head.handle.create_actor(body).await.unwrap();
        head.handle.kill_actor(&actor.actor_id).await.unwrap();
        let bundles = serde_json::json!({"bundles": [{"CPU": 1}]});
        let placement = berth_api::spec::PlacementGroupSpec::from_json(bundles).unwrap();
        let body = GroupCreate { placement, ..Default::default() };
        let group = head.handle.create_group(body).await.unwrap();
        head.handle.remove_group(&group.group_id).await.unwrap();
    }
    // Work that has not finished is never forgotten.
    let waiting = head.handle.submit_task(task()).await.unwrap();

    until(&head, "two of each kind kept", |v| {
        v.tasks.len() == 3 && v.actors.len() == 2 && v.groups.len() == 2
    })
    .await;
    let view = head.handle.view();
    let kept: Vec<String> = view.tasks.values().map(|t| t.task_id.to_string()).collect();
    assert_eq!(kept, [tasks[3].clone(), tasks[4].clone(), waiting.task_id.to_string()]);
    let list = view.list_tasks(&ListQuery::default()).unwrap();
    let forgotten = list.forgotten.expect("tasks say what was forgotten");
    assert_eq!(
        (forgotten.dropped, forgotten.keep_finished, forgotten.keep_finished_s),
        (3, 2, 3600)
    );
    assert_eq!(view.list_actors(&ListQuery::default()).unwrap().forgotten.unwrap().dropped, 1);
    assert_eq!(view.list_groups(&ListQuery::default()).unwrap().forgotten.unwrap().dropped, 1);
    assert!(view.list_nodes(&ListQuery::default()).unwrap().forgotten.is_none());
    assert!(view.task(&tasks[0]).is_none(), "the oldest finished task is gone");
    // The forgotten actor's name is free, and so is a kept dead one's (as before).
    let body = ActorCreate { name: Some("a0".into()), ..actor() };
    head.handle.create_actor(body).await.expect("a forgotten actor's name can be used again");
    // A crash: what the view showed was durable before it was shown.
    head.crash().await;

    // The store forgot them too: a restart reloads only what was kept, and counts the rest.
    let head = boot(&config).await;
    let view = head.handle.view();
    let kept: Vec<String> = view.tasks.values().map(|t| t.task_id.to_string()).collect();
    assert_eq!(kept, [tasks[3].clone(), tasks[4].clone(), waiting.task_id.to_string()]);
    assert_eq!(view.list_tasks(&ListQuery::default()).unwrap().forgotten.unwrap().dropped, 3);
    assert_eq!(view.actors.len(), 3, "two dead actors kept and the new one");
    head.shutdown().await;
}

#[tokio::test]
async fn ids_never_repeat_when_every_finished_object_was_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), Duration::from_secs(3600), 0);
    let head = boot(&config).await;
    let tasks = finished_tasks(&head, 3).await;
    until(&head, "every finished task forgotten", |v| v.tasks.is_empty()).await;
    // A crash: what the view showed was durable before it was shown.
    head.crash().await;

    let head = boot(&config).await;
    assert!(head.handle.view().tasks.is_empty());
    let next = head.handle.submit_task(task()).await.unwrap();
    assert_eq!(&*next.task_id, "task-4", "after {tasks:?}, IDs go on");
    head.shutdown().await;
}

#[tokio::test]
async fn finished_objects_past_their_time_are_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let head = boot(&config(dir.path(), Duration::ZERO, 1000)).await;
    let done = finished_tasks(&head, 2).await;
    let waiting = head.handle.submit_task(task()).await.unwrap();
    until(&head, "expired tasks forgotten", |v| v.tasks.len() == 1).await;
    let view = head.handle.view();
    assert!(done.iter().all(|id| view.task(id).is_none()));
    assert_eq!(view.task(&waiting.task_id).unwrap().state, TaskState::Pending);
    head.shutdown().await;
}

#[tokio::test]
async fn a_restart_forgets_what_expired_while_the_head_was_down() {
    let dir = tempfile::tempdir().unwrap();
    let head = boot(&config(dir.path(), Duration::from_secs(3600), 1000)).await;
    let done = finished_tasks(&head, 2).await;
    // A crash: what the view showed was durable before it was shown.
    head.crash().await;

    // Restarted with a shorter time: both finished more than 0 s ago.
    let head = boot(&config(dir.path(), Duration::ZERO, 1000)).await;
    let view = head.handle.view();
    assert!(done.iter().all(|id| view.task(id).is_none()), "forgotten before serving");
    assert_eq!(view.list_tasks(&ListQuery::default()).unwrap().forgotten.unwrap().dropped, 2);
    head.shutdown().await;
}
