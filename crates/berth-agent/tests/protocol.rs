//! The agent against an in-test head over real gRPC on 127.0.0.1: registration, heartbeats,
//! assignments, status reports, re-registration and refusal. No sleeps: every wait is bounded
//! and on observable state (the head's log or the agent's status).

mod common;

use std::sync::Arc;
use std::time::Duration;

use berth_agent::{AckRunner, Agent, AgentConfig, AgentError, AgentHandle, Runner};
use berth_api::agent::{status_report::Status, Exited, RunningWork, Started, WorkKind};
use common::{start, stop, TestHead, TOKEN, WAIT};

fn config(head: &TestHead) -> AgentConfig {
    let mut config = AgentConfig::new(head.address(), TOKEN);
    config.reconnect_backoff = Duration::from_millis(10);
    config
}

fn spawn(config: AgentConfig, runner: Arc<AckRunner>) -> AgentHandle {
    Agent::new(config, runner).unwrap().spawn()
}

fn started() -> Option<Status> {
    Some(Status::Started(Started { pid: 0 }))
}

fn exited(code: Option<i32>, signal: Option<i32>) -> Option<Status> {
    Some(Status::Exited(Exited { code, signal }))
}

/// Waits for the agent to register and its assignments stream to open: (node ID, session).
async fn ready(head: &TestHead, handle: &AgentHandle, n: u64) -> (String, u64) {
    let status =
        handle.wait_for(WAIT, |s| s.registrations >= n && s.is_registered()).await.unwrap();
    let (node_id, session) = (status.node_id.unwrap(), status.session.unwrap());
    head.assignments_open(&node_id, session).await;
    (node_id, session)
}

#[tokio::test]
async fn registers_with_its_description_and_token_then_heartbeats() {
    let head = TestHead::start().await;
    let mut config = AgentConfig::new(format!("http://{}", head.address()), TOKEN);
    config.address = "10.0.0.9".into();
    config.resources.insert("CPU".into(), "8".into());
    config.resources.insert("GPU".into(), "2".into());
    config.resources.insert("memory".into(), "32Gi".into());
    config.labels.insert("team".into(), "ml".into());
    config.labels_file = Some("tier: gold\n".into());
    config.taints.insert("dedicated".into(), "ml".into());
    config.facts.insert("accelerator-type".into(), "nvidia-a100".into());
    let handle = spawn(config, Arc::new(AckRunner::new()));

    // No node ID configured: the head chooses.
    let registration = head.registration("node-1", 1).await;
    assert_eq!(registration.authorization.as_deref(), Some("Bearer s3cret"));
    let request = &registration.request;
    assert_eq!(request.node_id, "");
    assert_eq!(request.address, "10.0.0.9");
    assert_eq!(request.resources.len(), 3);
    assert_eq!(request.resources["GPU"], "2");
    assert_eq!(request.resources["memory"], "32Gi");
    assert_eq!(request.labels["team"], "ml");
    assert_eq!(request.labels_file, "tier: gold\n");
    assert_eq!(request.taints.len(), 1);
    assert_eq!(
        (request.taints[0].key.as_str(), request.taints[0].value.as_str()),
        ("dedicated", "ml")
    );
    assert_eq!(request.facts["accelerator-type"], "nvidia-a100");
    assert!(request.running.is_empty());

    let status = handle.wait_registered(WAIT).await.unwrap();
    assert_eq!(status.node_id.as_deref(), Some("node-1"));
    assert_eq!(status.session, Some(registration.session));

    // Heartbeats keep coming, naming the session.
    let beat = head
        .wait("three heartbeats", |log| {
            (log.heartbeats.get("node-1").copied().unwrap_or(0) >= 3)
                .then(|| log.last_heartbeat["node-1"].clone())
        })
        .await;
    assert_eq!(beat.session, registration.session);

    handle.stop().await.unwrap();
    head.wait("the heartbeat stream to end", |log| {
        log.heartbeat_streams_ended.contains(&"node-1".to_string()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_task_reports_started_then_its_exit_code() {
    let head = TestHead::start().await;
    let mut config = config(&head);
    config.node_id = Some("n1".into());
    let handle = spawn(config, Arc::new(AckRunner::new().task_exit_code(3)));
    let (node_id, session) = ready(&head, &handle, 1).await;
    assert_eq!(node_id, "n1");

    head.assign("n1", start("task-1", 1, WorkKind::Task));
    let reports = head
        .wait("two reports of task-1", |log| {
            let reports = log.reports_of("task-1");
            (reports.len() >= 2).then(|| reports.into_iter().cloned().collect::<Vec<_>>())
        })
        .await;
    assert_eq!(reports[0].status, started());
    assert_eq!(reports[1].status, exited(Some(3), None));
    for report in &reports {
        assert_eq!((report.node_id.as_str(), report.session, report.attempt), ("n1", session, 1));
    }
    handle.stop().await.unwrap();
}

/// Assigns `count` tasks to a fresh agent and waits for both reports of each: the head's log.
async fn run_tasks(head: &TestHead, count: usize) -> common::Log {
    let handle = spawn(config(head), Arc::new(AckRunner::new()));
    let (node_id, _) = ready(head, &handle, 1).await;
    for i in 0..count {
        head.assign(&node_id, start(&format!("task-{i}"), 1, WorkKind::Task));
    }
    let log = head
        .wait("every task's two reports", |log| {
            (log.reports.len() >= 2 * count).then(|| log.clone())
        })
        .await;
    handle.stop().await.unwrap();
    log
}

#[tokio::test]
async fn reports_travel_on_one_stream_per_session() {
    let head = TestHead::start().await;
    let log = run_tasks(&head, 20).await;
    assert_eq!((log.report_streams, log.report_calls), (1, 0));
    for i in 0..20 {
        let statuses: Vec<_> =
            log.reports_of(&format!("task-{i}")).iter().map(|r| r.status.clone()).collect();
        assert_eq!(statuses, [started(), exited(Some(0), None)], "task-{i}");
    }
}

#[tokio::test]
async fn a_head_without_the_report_stream_gets_report_calls() {
    let head = TestHead::start().await;
    head.without_report_stream();
    let log = run_tasks(&head, 20).await;
    assert_eq!(log.report_streams, 0);
    assert!(log.report_calls >= 1, "{log:?}");
    assert_eq!(log.reports.len(), 40);
}

#[tokio::test]
async fn an_actor_runs_until_stopped() {
    let head = TestHead::start().await;
    let runner = Arc::new(AckRunner::new());
    let handle = spawn(config(&head), runner.clone());
    let (node_id, _) = ready(&head, &handle, 1).await;

    head.assign(&node_id, start("actor-1", 2, WorkKind::Actor));
    head.wait("actor-1 started", |log| (!log.reports_of("actor-1").is_empty()).then_some(())).await;
    assert_eq!(runner.running(), vec![RunningWork { work_id: "actor-1".into(), attempt: 2 }]);

    head.assign(&node_id, stop("actor-1", 2));
    let report = head
        .wait("actor-1 exited", |log| log.reports_of("actor-1").get(1).map(|r| (*r).clone()))
        .await;
    assert_eq!(report.status, exited(None, Some(15)));
    assert!(runner.running().is_empty());
    handle.stop().await.unwrap();
}

#[tokio::test]
async fn a_stale_attempt_is_stopped() {
    let head = TestHead::start().await;
    let runner = Arc::new(AckRunner::new());
    let handle = spawn(config(&head), runner.clone());
    let (node_id, _) = ready(&head, &handle, 1).await;

    head.mark_stale("moved");
    head.assign(&node_id, start("moved", 1, WorkKind::Actor));
    // Started is answered `current: false`: the agent stops the work, which reports its exit.
    let reports = head
        .wait("the stale attempt's exit", |log| {
            let reports = log.reports_of("moved");
            (reports.len() >= 2).then(|| reports.into_iter().cloned().collect::<Vec<_>>())
        })
        .await;
    assert_eq!(reports[0].status, started());
    assert_eq!(reports[1].status, exited(None, Some(15)));
    assert!(!runner.is_running("moved"));
    handle.stop().await.unwrap();
}

#[tokio::test]
async fn work_announced_at_registration_is_stopped_when_the_head_says_so() {
    let head = TestHead::start().await;
    let runner = Arc::new(AckRunner::new());
    runner.adopt("old", 4);
    runner.adopt("kept", 1);
    head.stop_on_register("old");
    let mut config = config(&head);
    config.node_id = Some("n1".into());
    let handle = spawn(config, runner.clone());

    let registration = head.registration("n1", 1).await;
    let mut running = registration.request.running.clone();
    running.sort_by(|a, b| a.work_id.cmp(&b.work_id));
    assert_eq!(
        running,
        vec![
            RunningWork { work_id: "kept".into(), attempt: 1 },
            RunningWork { work_id: "old".into(), attempt: 4 }
        ]
    );
    assert_eq!(registration.stop, vec!["old".to_string()]);
    let report =
        head.wait("old's exit", |log| log.reports_of("old").first().map(|r| (*r).clone())).await;
    assert_eq!((report.attempt, report.session), (4, registration.session));
    assert_eq!(report.status, exited(None, Some(15)));
    assert_eq!(runner.running(), vec![RunningWork { work_id: "kept".into(), attempt: 1 }]);
    handle.stop().await.unwrap();
}

#[tokio::test]
async fn failed_precondition_makes_the_agent_register_again_under_its_id() {
    let head = TestHead::start().await;
    let runner = Arc::new(AckRunner::new());
    let handle = spawn(config(&head), runner.clone());
    let (node_id, first) = ready(&head, &handle, 1).await;
    assert_eq!(node_id, "node-1");
    head.assign(&node_id, start("a", 1, WorkKind::Actor));
    head.wait("a started", |log| (!log.reports_of("a").is_empty()).then_some(())).await;

    head.expire(&node_id);
    let again = head.registration(&node_id, 2).await;
    assert_eq!(again.request.node_id, "node-1", "the agent keeps the ID the head gave");
    assert_ne!(again.session, first);
    assert_eq!(again.request.running, vec![RunningWork { work_id: "a".into(), attempt: 1 }]);

    // The new session works: assignments flow again.
    let (_, second) = ready(&head, &handle, 2).await;
    assert_eq!(second, again.session);
    head.assign(&node_id, start("b", 1, WorkKind::Task));
    let report =
        head.wait("b exited", |log| log.reports_of("b").get(1).map(|r| (*r).clone())).await;
    assert_eq!((report.session, report.status.clone()), (second, exited(Some(0), None)));
    assert_eq!(handle.status().registrations, 2);
    handle.stop().await.unwrap();
}

#[tokio::test]
async fn the_end_of_the_assignments_stream_makes_the_agent_register_again() {
    let head = TestHead::start().await;
    let handle = spawn(config(&head), Arc::new(AckRunner::new()));
    let (node_id, _) = ready(&head, &handle, 1).await;
    head.end_assignments(&node_id);
    head.registration(&node_id, 2).await;
    ready(&head, &handle, 2).await;
    handle.stop().await.unwrap();
}

#[tokio::test]
async fn an_unavailable_head_is_retried() {
    let head = TestHead::start().await;
    head.fail_registers(2);
    let handle = spawn(config(&head), Arc::new(AckRunner::new()));
    let status = handle.wait_registered(WAIT).await.unwrap();
    assert_eq!(status.registrations, 1);
    assert_eq!(head.log().refused_registrations, 2);
    handle.stop().await.unwrap();
}

#[tokio::test]
async fn a_report_refused_for_an_old_session_is_sent_again_after_registering() {
    let head = TestHead::start().await;
    let handle = spawn(config(&head), Arc::new(AckRunner::new().task_exit_code(9)));
    let (node_id, first) = ready(&head, &handle, 1).await;

    head.expire_on_next_report();
    head.assign(&node_id, start("t", 5, WorkKind::Task));
    let reports = head
        .wait("t's two reports", |log| {
            let reports = log.reports_of("t");
            (reports.len() >= 2).then(|| reports.into_iter().cloned().collect::<Vec<_>>())
        })
        .await;
    let log = head.log();
    // Reports travel in batches: the refused call held the start, and maybe the exit too.
    assert!(matches!(log.refused_reports.len(), 1 | 2), "{:?}", log.refused_reports);
    assert_eq!(log.refused_reports[0].session, first);
    assert_eq!(log.refused_reports[0].status, started());
    // Nothing lost, order kept, under the new session.
    assert_eq!(reports[0].status, started());
    assert_eq!(reports[1].status, exited(Some(9), None));
    let second = log.registrations_of(&node_id)[1].session;
    assert!(reports.iter().all(|r| r.session == second && r.attempt == 5));
    handle.stop().await.unwrap();
}

#[tokio::test]
async fn a_wrong_token_is_a_fatal_error() {
    let head = TestHead::start().await;
    let mut config = config(&head);
    config.token = "wrong".into();
    let (_shutdown, rx) = tokio::sync::watch::channel(false);
    let result = tokio::time::timeout(WAIT, Agent::run(config, Arc::new(AckRunner::new()), rx))
        .await
        .expect("the agent gives up on a refused token");
    let err = result.unwrap_err();
    assert!(matches!(err, AgentError::Unauthenticated { call: "Register", .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("refused the token") && text.contains(&head.address()), "{text}");
    assert!(head.log().registrations.is_empty());
}

#[tokio::test]
async fn a_wrong_token_is_visible_in_the_status_of_a_spawned_agent() {
    let head = TestHead::start().await;
    let mut config = config(&head);
    config.token = "wrong".into();
    let handle = spawn(config, Arc::new(AckRunner::new()));
    let err = handle.wait_registered(WAIT).await.unwrap_err();
    assert!(err.to_string().contains("refused the token"), "{err}");
    assert!(matches!(handle.stop().await, Err(AgentError::Unauthenticated { .. })));
}

#[tokio::test]
async fn shutdown_ends_the_run() {
    let head = TestHead::start().await;
    let (tx, rx) = tokio::sync::watch::channel(false);
    let mut config = config(&head);
    config.node_id = Some("n1".into());
    let run = tokio::spawn(Agent::run(config, Arc::new(AckRunner::new()), rx));
    head.registration("n1", 1).await;
    tx.send(true).unwrap();
    tokio::time::timeout(WAIT, run).await.expect("stops").unwrap().unwrap();
}
