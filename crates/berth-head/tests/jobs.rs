//! Jobs and owners through a real head and simulated agents running real processes: what a
//! job's driver owns ends when the job finishes, is stopped or loses its lease; what an actor's
//! or a task's process owns ends when that process does, transitively; detached work stays;
//! ownership is checked at creation and survives a head restart.

use std::time::Duration;

use berth_agent::SimNode;
use berth_api::rest::{
    ActorCreate, ActorState, GroupCreate, GroupState, JobCreate, JobState, Lifetime, Ownership,
    TaskState, TaskSubmit, ThinStr,
};
use berth_head::HeadError;
use serde_json::json;

mod common;

use common::{cluster, until};

fn job(lease_s: f64) -> JobCreate {
    JobCreate { name: Some("driver.py".into()), lease_s: Some(lease_s), ..Default::default() }
}

fn sleeper() -> (ThinStr, Box<[String]>) {
    ("sleep".into(), vec!["600".to_string()].into())
}

fn actor(job: Option<&str>, owner: Option<&str>, lifetime: Lifetime) -> ActorCreate {
    let (command, args) = sleeper();
    ActorCreate {
        command,
        args,
        ownership: Ownership {
            job_id: job.map(ThinStr::from),
            owner_id: owner.map(ThinStr::from),
            lifetime,
        },
        placement: berth_api::spec::PlacementSpec::from_json(json!({"resources": {"CPU": 1}}))
            .unwrap(),
        ..Default::default()
    }
}

fn task(job: Option<&str>, owner: Option<&str>) -> TaskSubmit {
    let (command, args) = sleeper();
    TaskSubmit {
        command,
        args,
        ownership: Ownership {
            job_id: job.map(ThinStr::from),
            owner_id: owner.map(ThinStr::from),
            ..Default::default()
        },
        placement: berth_api::spec::PlacementSpec::from_json(json!({"resources": {"CPU": 1}}))
            .unwrap(),
        ..Default::default()
    }
}

fn group(job: Option<&str>, lifetime: Lifetime) -> GroupCreate {
    GroupCreate {
        ownership: Ownership { job_id: job.map(ThinStr::from), lifetime, ..Default::default() },
        placement: berth_api::spec::PlacementGroupSpec::from_json(json!({"bundles": [{"CPU": 1}]}))
            .unwrap(),
        ..Default::default()
    }
}

fn node() -> SimNode {
    SimNode::new("n").resource("CPU", "16")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_ends_what_its_driver_owns_and_leaves_what_is_detached() {
    let (head, _sim, _processes, _data) = cluster(vec![node()]).await;
    let h = &head.handle;
    let job = h.create_job(job(30.0)).await.unwrap();
    assert_eq!(job.state, JobState::Running);
    let j = Some(job.job_id.as_str());
    let owned = h.create_actor(actor(j, None, Lifetime::NonDetached)).await.unwrap();
    let detached = h.create_actor(actor(j, None, Lifetime::Detached)).await.unwrap();
    let no_job = h.create_actor(actor(None, None, Lifetime::NonDetached)).await.unwrap();
    let t = h.submit_task(task(j, None)).await.unwrap();
    let g = h.create_group(group(j, Lifetime::NonDetached)).await.unwrap();
    let kept_group = h.create_group(group(j, Lifetime::Detached)).await.unwrap();
    let actors = [&owned.actor_id, &detached.actor_id, &no_job.actor_id];
    until(&head, "the actors and the task run", |v| {
        actors.iter().all(|id| v.actor(id).is_some_and(|a| a.state == ActorState::Alive))
            && v.task(&t.task_id).is_some_and(|t| t.state == TaskState::Running)
    })
    .await;

    let ended = h.finish_job(&job.job_id, None).await.unwrap();
    assert_eq!(ended.state, JobState::Finished);
    assert_eq!(ended.end_reason.as_deref(), Some("its driver finished"));
    let view = h.view();
    let killed = view.actor(&owned.actor_id).unwrap();
    assert_eq!(killed.state, ActorState::Dead);
    let reason = killed.death_reason.as_deref().unwrap();
    assert!(reason.contains("its job job-1 ended (FINISHED"), "{reason}");
    assert_eq!(view.task(&t.task_id).unwrap().state, TaskState::Cancelled);
    assert_eq!(view.group(&g.group_id).unwrap().state, GroupState::Removed);
    assert_eq!(view.group(&kept_group.group_id).unwrap().state, GroupState::Created);
    assert_eq!(view.actor(&detached.actor_id).unwrap().state, ActorState::Alive);
    assert_eq!(view.actor(&no_job.actor_id).unwrap().state, ActorState::Alive);
    // The job's objects say which job they are of; lists filter by it.
    assert_eq!(view.actor(&detached.actor_id).unwrap().spec.ownership.job_id.as_deref(), j);
    let query = berth_api::rest::ListQuery { job: Some(job.job_id.clone()), ..Default::default() };
    assert_eq!(view.list_actors(&query).unwrap().total, 2);

    // Ended: nothing more joins it, and ending it again answers it as it is.
    let refused = h.create_actor(actor(j, None, Lifetime::NonDetached)).await.unwrap_err();
    assert!(
        matches!(refused, HeadError::Conflict(ref m) if m.contains("job-1 has ended")),
        "{refused:?}"
    );
    assert_eq!(h.stop_job(&job.job_id, None).await.unwrap().state, JobState::Finished);
    assert!(matches!(h.renew_job(&job.job_id).await, Err(HeadError::Conflict(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_driver_stops_renewing_is_lost_and_a_renewed_one_runs_on() {
    let (head, _sim, _processes, _data) = cluster(vec![node()]).await;
    let h = &head.handle;
    let renewed = h.create_job(job(1.0)).await.unwrap();
    let silent = h.create_job(job(1.0)).await.unwrap();
    let owned = h.create_actor(actor(Some(&silent.job_id), None, Lifetime::NonDetached)).await;
    let owned = owned.unwrap();
    // Renewed well within its lease until the silent one is lost.
    let mut lost = false;
    for _ in 0..200 {
        h.renew_job(&renewed.job_id).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        if h.view().job(&silent.job_id).unwrap().state == JobState::Lost {
            lost = true;
            break;
        }
    }
    assert!(lost, "a job renewed by nobody for 20 s is still running");
    let view = h.view();
    let job = view.job(&silent.job_id).unwrap();
    let reason = job.end_reason.as_deref().unwrap();
    assert!(reason.contains("renewed no lease") && reason.contains("lease 1000 ms"), "{reason}");
    assert_eq!(view.actor(&owned.actor_id).unwrap().state, ActorState::Dead);
    assert_eq!(view.job(&renewed.job_id).unwrap().state, JobState::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_process_owns_ends_with_it_transitively_unless_detached() {
    let (head, _sim, _processes, _data) = cluster(vec![node()]).await;
    let h = &head.handle;
    let job = h.create_job(job(30.0)).await.unwrap();
    let trainer = h.create_actor(actor(Some(&job.job_id), None, Lifetime::NonDetached)).await;
    let trainer = trainer.unwrap();
    let id = trainer.actor_id.to_string();
    until(&head, "the trainer runs", |v| {
        v.actor(&id).is_some_and(|a| a.state == ActorState::Alive)
    })
    .await;
    // Children name the trainer as owner; their job is the trainer's.
    let worker = h.create_actor(actor(None, Some(&id), Lifetime::NonDetached)).await.unwrap();
    assert_eq!(worker.spec.ownership.job_id.as_deref(), Some(job.job_id.as_str()));
    let keeper = h.create_actor(actor(None, Some(&id), Lifetime::Detached)).await.unwrap();
    let wid = worker.actor_id.to_string();
    until(&head, "the worker runs", |v| {
        v.actor(&wid).is_some_and(|a| a.state == ActorState::Alive)
    })
    .await;
    let grandchild = h.submit_task(task(None, Some(&wid))).await.unwrap();

    h.kill_actor(&id).await.unwrap();
    let view = h.view();
    let worker = view.actor(&wid).unwrap();
    assert_eq!(worker.state, ActorState::Dead);
    let reason = worker.death_reason.as_deref().unwrap();
    assert_eq!(reason, format!("its owner {id}'s process ended"));
    let grandchild = view.task(&grandchild.task_id).unwrap();
    assert_eq!(grandchild.state, TaskState::Cancelled);
    let said = &grandchild.history.last().unwrap().message;
    assert_eq!(&**said, format!("its owner {wid}'s process ended"));
    assert_ne!(view.actor(&keeper.actor_id).unwrap().state, ActorState::Dead);
    assert_eq!(view.job(&job.job_id).unwrap().state, JobState::Running);

    // A detached actor outlives its job, and what its process creates is its own: its job
    // has ended, but it may still create work naming it (and the ended job).
    let detached = h.create_actor(actor(Some(&job.job_id), None, Lifetime::Detached)).await;
    let did = detached.unwrap().actor_id.to_string();
    until(&head, "the detached actor runs", |v| {
        v.actor(&did).is_some_and(|a| a.state == ActorState::Alive)
    })
    .await;
    h.finish_job(&job.job_id, None).await.unwrap();
    let child = h.submit_task(task(Some(&job.job_id), Some(&did))).await.unwrap();
    assert_eq!(child.spec.ownership.job_id.as_deref(), Some(job.job_id.as_str()));
    assert_ne!(child.state, TaskState::Cancelled);
    // Work the driver of an ended job would own is refused.
    let err = h.submit_task(task(Some(&job.job_id), None)).await.unwrap_err();
    assert!(matches!(err, HeadError::Conflict(ref m) if m.contains("has ended")), "{err:?}");
    h.kill_actor(&did).await.unwrap();
    assert_eq!(h.view().task(&child.task_id).unwrap().state, TaskState::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_naming_a_job_or_owner_that_cannot_own_it_is_refused() {
    // No node: what is created waits, so an owner has no process.
    let (head, _sim, _processes, _data) = cluster(vec![]).await;
    let h = &head.handle;
    let field = |err: HeadError| match err {
        HeadError::Invalid { field, message } => format!("{field}: {message}"),
        other => format!("{other:?}"),
    };
    let err = h.create_actor(actor(Some("job-9"), None, Lifetime::NonDetached)).await.unwrap_err();
    assert_eq!(field(err), "job_id: no job job-9 (see GET /api/v1/jobs)");
    let err = h.submit_task(task(None, Some("actor-77"))).await.unwrap_err();
    assert_eq!(field(err), "owner_id: no actor or task actor-77; the owner is one");
    let job = h.create_job(job(30.0)).await.unwrap();
    let waiting = h.create_actor(actor(Some(&job.job_id), None, Lifetime::NonDetached)).await;
    let waiting = waiting.unwrap();
    let err = h.submit_task(task(None, Some(&waiting.actor_id))).await.unwrap_err();
    assert!(
        matches!(err, HeadError::Conflict(ref m) if m.contains("has no running process (it is PENDING)")),
        "{err:?}"
    );
    let mut detached = task(Some(&job.job_id), None);
    detached.ownership.lifetime = Lifetime::Detached;
    let err = h.submit_task(detached).await.unwrap_err();
    assert!(field(err).starts_with("lifetime: a task cannot be detached"));
    let mut body = job_named("x");
    body.lease_s = Some(0.5);
    assert_eq!(
        field(h.create_job(body).await.unwrap_err()),
        "lease_s: 0.5 is not from 1 to 86400 seconds"
    );
}

fn job_named(name: &str) -> JobCreate {
    JobCreate { name: Some(name.into()), ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_and_what_it_owns_survive_a_head_restart() {
    let data = tempfile::tempdir().unwrap();
    let mut config = berth_head::HeadConfig::new(data.path());
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.heartbeat_interval = Duration::from_millis(50);
    let head = berth_head::start(config.clone()).await.unwrap();
    let job = head.handle.create_job(job(30.0)).await.unwrap();
    let waiting = head
        .handle
        .create_actor(actor(Some(&job.job_id), None, Lifetime::NonDetached))
        .await
        .unwrap();
    head.crash().await;

    let head = berth_head::start(config).await.unwrap();
    let view = head.handle.view();
    assert_eq!(view.job(&job.job_id).unwrap().state, JobState::Running);
    head.handle.renew_job(&job.job_id).await.unwrap();
    // The next job is numbered after it, and the restored one still owns its actor.
    assert_eq!(head.handle.create_job(job_named("next")).await.unwrap().job_id, "job-2");
    head.handle.stop_job(&job.job_id, Some("done".into())).await.unwrap();
    let view = head.handle.view();
    assert_eq!(view.actor(&waiting.actor_id).unwrap().state, ActorState::Dead);
    assert_eq!(view.job(&job.job_id).unwrap().end_reason.as_deref(), Some("done"));
    head.shutdown().await;
}

/// A task whose owner has its result (`tasks:delivered`) is FINISHED when its owner ends,
/// however its process ends, never CANCELLED; one not marked is CANCELLED as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_result_reached_its_owner_finishes_when_its_owner_ends() {
    let (head, _sim, _processes, _data) = cluster(vec![node()]).await;
    let h = &head.handle;
    let job = h.create_job(job(30.0)).await.unwrap();
    let owner = h.create_actor(actor(Some(&job.job_id), None, Lifetime::NonDetached)).await;
    let id = owner.unwrap().actor_id.to_string();
    until(&head, "the owner runs", |v| v.actor(&id).is_some_and(|a| a.state == ActorState::Alive))
        .await;
    let delivered = h.submit_task(task(None, Some(&id))).await.unwrap().task_id.to_string();
    let other = h.submit_task(task(None, Some(&id))).await.unwrap().task_id.to_string();
    until(&head, "both tasks run", |v| {
        [&delivered, &other]
            .iter()
            .all(|t| v.task(t).is_some_and(|t| t.state == TaskState::Running))
    })
    .await;
    let unknown = "task-999".to_string();
    let marked = h.tasks_delivered(vec![delivered.clone(), unknown]).await.unwrap();
    assert_eq!(marked, std::slice::from_ref(&delivered));
    let err = h.tasks_delivered(Vec::new()).await.unwrap_err();
    assert!(matches!(err, HeadError::Invalid { ref field, .. } if field == "task_ids"), "{err:?}");

    h.kill_actor(&id).await.unwrap();
    let view = h.view();
    let finished = view.task(&delivered).unwrap();
    assert_eq!(finished.state, TaskState::Finished, "{:?}", finished.history);
    assert_eq!(&*finished.history.last().unwrap().message, "its result reached its owner");
    assert_eq!(view.task(&other).unwrap().state, TaskState::Cancelled);
    // Marking an ended task changes nothing.
    assert!(h.tasks_delivered(vec![delivered.clone()]).await.unwrap().is_empty());

    // One waiting to run (again) is done at once: it leaves the queue.
    let mut big = task(Some(&job.job_id), None);
    big.placement =
        berth_api::spec::PlacementSpec::from_json(json!({"resources": {"CPU": 1000}})).unwrap();
    let waiting = h.submit_task(big).await.unwrap().task_id.to_string();
    assert_eq!(h.view().task(&waiting).unwrap().state, TaskState::Pending);
    assert_eq!(
        h.tasks_delivered(vec![waiting.clone()]).await.unwrap(),
        std::slice::from_ref(&waiting)
    );
    let done = h.view().task(&waiting).unwrap();
    assert_eq!(done.state, TaskState::Finished, "{:?}", done.history);
    assert!(done.diagnosis.is_none());
    let seq: u64 = waiting.trim_start_matches("task-").parse().unwrap();
    assert!(!h.view().waiting.contains_key(&(berth_api::ObjectKind::Task, seq)));
}
