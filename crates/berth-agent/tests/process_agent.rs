//! An agent with a `ProcessRunner` against the in-test head over real gRPC: a real process
//! started and reported, and an agent restart that adopts what the previous agent left
//! running (announced at registration) or reports what died meanwhile. No sleeps: every wait
//! is bounded and on observable state.

#![cfg(target_os = "linux")]

mod common;
mod runner_dir;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use berth_agent::{Agent, AgentConfig, AgentHandle, ProcessOptions, ProcessRunner, Runner};
use berth_api::agent::{
    assignment, status_report::Status, Assignment, Exited, RunningWork, Start, StatusReport,
    WorkKind,
};
use common::{stop, TestHead, TOKEN, WAIT};
use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use runner_dir::RunnerDir;

fn config(head: &TestHead, node_id: Option<&str>) -> AgentConfig {
    let mut config = AgentConfig::new(head.address(), TOKEN);
    config.node_id = node_id.map(str::to_string);
    config.reconnect_backoff = Duration::from_millis(10);
    config
}

fn runner(dir: &Path) -> Arc<ProcessRunner> {
    Arc::new(ProcessRunner::new(dir.to_path_buf(), ProcessOptions::default()).unwrap())
}

fn assign(work_id: &str, attempt: u32, kind: WorkKind, command: &str, args: &[&str]) -> Assignment {
    Assignment {
        kind: Some(assignment::Kind::Start(Start {
            work_id: work_id.into(),
            attempt,
            kind: kind as i32,
            command: command.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            ..Start::default()
        })),
    }
}

/// Waits for the agent's `n`-th registration and its assignments stream: its node ID.
async fn ready(head: &TestHead, handle: &AgentHandle, n: u64) -> String {
    let status =
        handle.wait_for(WAIT, |s| s.registrations >= n && s.is_registered()).await.unwrap();
    let node_id = status.node_id.unwrap();
    head.assignments_open(&node_id, status.session.unwrap()).await;
    node_id
}

/// Waits until the head holds `n` reports of `work_id`: them.
async fn reports(head: &TestHead, work_id: &str, n: usize) -> Vec<StatusReport> {
    head.wait(&format!("{n} reports of {work_id}"), |log| {
        let reports = log.reports_of(work_id);
        (reports.len() >= n).then(|| reports.into_iter().cloned().collect())
    })
    .await
}

fn pid_of(report: &StatusReport) -> u32 {
    match report.status {
        Some(Status::Started(ref started)) if started.pid > 0 => started.pid,
        ref other => panic!("expected Started with a PID, got {other:?}"),
    }
}

fn exited(code: Option<i32>, signal: Option<i32>) -> Option<Status> {
    Some(Status::Exited(Exited { code, signal }))
}

/// Waits until process group `pgid` is gone (zombies reaped too).
async fn group_gone(pgid: u32) {
    let gone = tokio::time::timeout(WAIT, async {
        while killpg(Pid::from_raw(pgid as i32), None) != Err(Errno::ESRCH) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "process group {pgid} still exists after {WAIT:?}");
}

#[tokio::test]
async fn the_head_sees_a_real_process_start_and_exit() {
    let head = TestHead::start().await;
    let dir = RunnerDir::new();
    let runner = runner(dir.path());
    // No node ID configured: the head gives one, and the process sees it.
    let handle = Agent::new(config(&head, None), runner.clone()).unwrap().spawn();
    let node_id = ready(&head, &handle, 1).await;

    let script = "echo hi; echo node=$BERTH_NODE_ID";
    head.assign(&node_id, assign("task-1", 1, WorkKind::Task, "sh", &["-c", script]));
    let reports = reports(&head, "task-1", 2).await;
    pid_of(&reports[0]);
    assert_eq!(reports[1].status, exited(Some(0), None));
    assert!(reports.iter().all(|r| r.attempt == 1 && r.node_id == node_id));
    let out = std::fs::read_to_string(runner.log_paths("task-1").0).unwrap();
    assert!(out.lines().any(|l| l == "hi"), "{out}");
    assert!(out.lines().any(|l| l == format!("node={node_id}")), "{out}");

    // A command that does not exist: FailedToStart reaches the head, nothing else.
    head.assign(&node_id, assign("task-2", 1, WorkKind::Task, "no-such-command-here", &[]));
    let reports = self::reports(&head, "task-2", 1).await;
    match &reports[0].status {
        Some(Status::FailedToStart(failed)) => {
            assert!(failed.error.contains("No such file or directory"), "{}", failed.error)
        }
        other => panic!("expected FailedToStart, got {other:?}"),
    }
    handle.stop().await.unwrap();
}

#[tokio::test]
async fn a_restarted_agent_announces_what_it_adopted_and_the_head_can_stop_it() {
    let head = TestHead::start().await;
    let dir = RunnerDir::new();
    let first = runner(dir.path());
    let handle = Agent::new(config(&head, Some("n1")), first.clone()).unwrap().spawn();
    ready(&head, &handle, 1).await;
    head.assign("n1", assign("actor-1", 1, WorkKind::Actor, "sleep", &["1000"]));
    let pid = pid_of(&reports(&head, "actor-1", 1).await[0]);

    // The agent stops (Ctrl-C): its process keeps running.
    handle.stop().await.unwrap();
    drop(first);
    assert!(killpg(Pid::from_raw(pid as i32), None).is_ok(), "the process outlives its agent");

    // A new agent on the same directory announces it; the head keeps it, then stops it.
    let second = runner(dir.path());
    let handle = Agent::new(config(&head, Some("n1")), second.clone()).unwrap().spawn();
    let registration = head.registration("n1", 2).await;
    assert_eq!(
        registration.request.running,
        vec![RunningWork { work_id: "actor-1".into(), attempt: 1 }]
    );
    ready(&head, &handle, 1).await;
    head.assign("n1", stop("actor-1", 1));
    let reports = reports(&head, "actor-1", 2).await;
    assert_eq!(reports[1].status, exited(None, Some(15)));
    assert!(second.running().is_empty());
    group_gone(pid).await;
    handle.stop().await.unwrap();
}

#[tokio::test]
async fn work_that_died_while_no_agent_ran_is_reported_exited() {
    let head = TestHead::start().await;
    let dir = RunnerDir::new();
    let first = runner(dir.path());
    let handle = Agent::new(config(&head, Some("n1")), first.clone()).unwrap().spawn();
    ready(&head, &handle, 1).await;
    head.assign("n1", assign("actor-1", 1, WorkKind::Actor, "sleep", &["1000"]));
    let pid = pid_of(&reports(&head, "actor-1", 1).await[0]);
    handle.stop().await.unwrap();
    drop(first);

    // It dies while no agent runs.
    killpg(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
    group_gone(pid).await;

    let handle = Agent::new(config(&head, Some("n1")), runner(dir.path())).unwrap().spawn();
    let registration = head.registration("n1", 2).await;
    assert!(registration.request.running.is_empty());
    let reports = reports(&head, "actor-1", 2).await;
    assert_eq!(reports[1].status, exited(None, None));
    assert_eq!(reports[1].session, registration.session);
    handle.stop().await.unwrap();
}

/// With a keeper, the agent's registration and every heartbeat the head answers renew the
/// node's lease: the lease file runs from the clock the last answered beat carried, for the
/// head's timeout (the default 30 s here: the in-test head names none) less its margin.
#[tokio::test]
async fn answered_heartbeats_renew_the_nodes_lease() {
    let head = TestHead::start().await;
    let dir = RunnerDir::new();
    let keeper = ["sh", "-c", "cat >/dev/null", "keeper"].iter().map(|a| a.into()).collect();
    let options = ProcessOptions { keeper: Some(keeper), ..ProcessOptions::default() };
    let runner = Arc::new(ProcessRunner::new(dir.path().to_path_buf(), options).unwrap());
    let handle = Agent::new(config(&head, Some("n1")), runner).unwrap().spawn();
    ready(&head, &handle, 1).await;
    // Two beats answered after the registration: the lease runs from the later one's clock.
    let beats = head.log().heartbeats.get("n1").copied().unwrap_or(0);
    let sent = head
        .wait("two more answered heartbeats", |log| {
            let beat = log.last_heartbeat.get("n1")?;
            (log.heartbeats.get("n1").copied().unwrap_or(0) >= beats + 2)
                .then_some(beat.agent_clock_ms)
        })
        .await;
    assert!(sent > 0, "beats carry the agent's clock");
    let renewed = head
        .wait("the lease runs from an answered beat", |_| {
            let lease = berth_agent::lease::read(dir.path())?;
            (lease.acked_ms >= sent).then_some(lease)
        })
        .await;
    assert_eq!(renewed.timeout_ms, 30_000);
    assert_eq!(renewed.expires_ms, renewed.acked_ms + 28_000);
    assert!(renewed.acked_ms <= berth_agent::lease::clock_ms());
    handle.stop().await.unwrap();
}
