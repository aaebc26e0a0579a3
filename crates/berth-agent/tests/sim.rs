//! Simulated clusters against the in-test head: registration of a mixed cluster, tasks with
//! per-node exit codes, a killed node going silent, and its restart.

mod common;
mod runner_dir;

use std::collections::BTreeSet;
use std::time::Duration;

use berth_agent::{SimCluster, SimNode, SimOptions};
use berth_api::agent::{status_report::Status, Exited, RunningWork, WorkKind};
use common::{start, TestHead, TOKEN, WAIT};

#[tokio::test]
async fn a_mixed_cluster_registers_as_described() {
    let head = TestHead::start().await;
    let nodes = SimNode::mix(24, 42);
    let cluster = SimCluster::start(&head.address(), TOKEN, nodes.clone()).unwrap();
    cluster.wait_registered(WAIT).await.unwrap();
    assert_eq!(cluster.len(), 24);

    let log = head.log();
    let registered: BTreeSet<&str> = log.registrations.iter().map(|r| r.node_id.as_str()).collect();
    assert_eq!(registered, cluster.node_ids().collect());
    for node in &nodes {
        let registration = log.registrations_of(&node.node_id)[0];
        let request = &registration.request;
        assert_eq!(registration.authorization.as_deref(), Some("Bearer s3cret"));
        assert_eq!(request.node_id, node.node_id);
        assert_eq!(request.address, node.address);
        assert_eq!(request.resources, node.resources.clone().into_iter().collect());
        assert_eq!(request.labels, node.labels.clone().into_iter().collect());
        assert_eq!(request.facts, node.facts.clone().into_iter().collect());
        let taints: BTreeSet<(String, String)> =
            request.taints.iter().map(|t| (t.key.clone(), t.value.clone())).collect();
        assert_eq!(taints, node.taints.clone().into_iter().collect());
    }
    cluster.shutdown().await.unwrap();
}

#[tokio::test]
async fn tasks_exit_with_their_nodes_code() {
    let head = TestHead::start().await;
    let nodes =
        vec![SimNode::new("ok").resource("CPU", "4"), SimNode::new("bad").task_exit_code(2)];
    let cluster = SimCluster::start(&head.address(), TOKEN, nodes).unwrap();
    cluster.wait_registered(WAIT).await.unwrap();
    for (node_id, work_id) in [("ok", "t-ok"), ("bad", "t-bad")] {
        let session = cluster.status(node_id).unwrap().session.unwrap();
        head.assignments_open(node_id, session).await;
        head.assign(node_id, start(work_id, 1, WorkKind::Task));
    }
    for (work_id, code) in [("t-ok", 0), ("t-bad", 2)] {
        let report =
            head.wait(work_id, |log| log.reports_of(work_id).get(1).map(|r| (*r).clone())).await;
        assert_eq!(report.status, Some(Status::Exited(Exited { code: Some(code), signal: None })));
    }
    cluster.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_killed_node_goes_silent_and_a_restart_brings_it_back_with_its_work() {
    let head = TestHead::start().await;
    let options = SimOptions {
        reconnect_backoff: Duration::from_millis(10),
        hold_tasks: true,
        ..SimOptions::default()
    };
    let mut cluster =
        SimCluster::start_with(&head.address(), TOKEN, SimNode::mix(4, 1), options).unwrap();
    cluster.wait_registered(WAIT).await.unwrap();
    let victim = "sim-00002";
    let session = cluster.status(victim).unwrap().session.unwrap();
    head.assignments_open(victim, session).await;
    head.assign(victim, start("held", 1, WorkKind::Task));
    head.wait("held started", |log| (!log.reports_of("held").is_empty()).then_some(())).await;

    cluster.kill(victim).await.unwrap();
    assert!(!cluster.is_alive(victim));
    assert!(!cluster.status(victim).unwrap().is_registered());
    head.wait("the victim's heartbeat stream to drop", |log| {
        log.heartbeat_streams_ended.iter().any(|n| n == victim).then_some(())
    })
    .await;
    // The others are unaffected.
    cluster.wait_registered(WAIT).await.unwrap();
    assert_eq!(head.log().registrations.len(), 4);

    cluster.restart(victim).await.unwrap();
    cluster.wait_registered(WAIT).await.unwrap();
    let again = head.registration(victim, 2).await;
    assert_eq!(again.request.running, vec![RunningWork { work_id: "held".into(), attempt: 1 }]);

    cluster.restart_empty(victim).await.unwrap();
    let third = head.registration(victim, 3).await;
    assert!(third.request.running.is_empty());
    cluster.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_wrong_token_fails_the_wait_and_the_shutdown() {
    let head = TestHead::start().await;
    let cluster = SimCluster::start(&head.address(), "wrong", SimNode::mix(2, 5)).unwrap();
    let err = cluster.wait_registered(WAIT).await.unwrap_err();
    assert!(err.to_string().contains("refused the token"), "{err}");
    // The wait fails at the first refusal; each agent stops at its own (one asked to stop
    // before its refusal arrives stops without an error).
    cluster.wait_until(WAIT, |_, status| status.stopped).await.unwrap();
    let err = cluster.shutdown().await.unwrap_err();
    assert!(err.to_string().starts_with("2 simulated agent(s) failed"), "{err}");
}

/// `berth up`'s set-up: simulated nodes running real processes, each node in its own directory;
/// an agent restarted in-process keeps (and reports on) its processes; shutting the cluster
/// down ends them.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn process_runners_run_real_processes_and_shutdown_stops_them() {
    use berth_agent::{Runner, RunnerKind};
    use berth_api::agent::{assignment, Assignment, Start};
    use nix::errno::Errno;
    use nix::sys::signal::{killpg, Signal};
    use nix::unistd::Pid;

    fn sh(work_id: &str, script: &str) -> Assignment {
        let start = Start {
            work_id: work_id.into(),
            attempt: 1,
            kind: WorkKind::Actor as i32,
            command: "sh".into(),
            args: vec!["-c".into(), script.into()],
            ..Start::default()
        };
        Assignment { kind: Some(assignment::Kind::Start(start)) }
    }

    /// Polls `check` until it holds, for at most WAIT.
    async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
        let waited = tokio::time::timeout(WAIT, async {
            while !check() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        assert!(waited.await.is_ok(), "not within {WAIT:?}: {what}");
    }

    let head = TestHead::start().await;
    let root = runner_dir::RunnerDir::new();
    let options = SimOptions {
        reconnect_backoff: Duration::from_millis(10),
        runner: RunnerKind::Process {
            root: root.path().to_path_buf(),
            grace: Duration::from_secs(5),
            keeper: None,
        },
        ..SimOptions::default()
    };
    let nodes = vec![SimNode::new("p1"), SimNode::new("p2")];
    let mut cluster = SimCluster::start_with(&head.address(), TOKEN, nodes, options).unwrap();
    cluster.wait_registered(WAIT).await.unwrap();
    assert!(cluster.runner("p1").is_none(), "not an AckRunner");
    let runner = cluster.process_runner("p1").unwrap();
    assert_eq!(runner.work_dir(), root.path().join("p1"));
    assert!(root.path().join("p2/state.json").exists(), "every node has its directory");

    let session = cluster.status("p1").unwrap().session.unwrap();
    head.assignments_open("p1", session).await;
    head.assign("p1", sh("actor-1", "echo node=$BERTH_NODE_ID; exec sleep 1000"));
    let started = |work_id: &'static str| {
        let head = &head;
        async move {
            let report = head
                .wait(work_id, |log| log.reports_of(work_id).first().map(|r| (*r).clone()))
                .await;
            match report.status {
                Some(Status::Started(started)) => started.pid,
                other => panic!("{work_id}: expected Started, got {other:?}"),
            }
        }
    };
    let first = started("actor-1").await;
    assert_eq!(runner.running(), vec![RunningWork { work_id: "actor-1".into(), attempt: 1 }]);
    let out_path = runner.log_paths("actor-1").0;
    eventually("the actor's log shows BERTH_NODE_ID=p1", || {
        let out = std::fs::read_to_string(&out_path).unwrap_or_default();
        out.lines().any(|l| l == "node=p1")
    })
    .await;

    // The agent restarts in-process: the process keeps running and is announced again; when
    // it then ends, the new agent reports it.
    cluster.restart("p1").await.unwrap();
    let again = head.registration("p1", 2).await;
    assert_eq!(again.request.running, vec![RunningWork { work_id: "actor-1".into(), attempt: 1 }]);
    killpg(Pid::from_raw(first as i32), Signal::SIGKILL).unwrap();
    let exit = head
        .wait("actor-1 exited", |log| log.reports_of("actor-1").get(1).map(|r| (*r).clone()))
        .await;
    assert_eq!(exit.status, Some(Status::Exited(Exited { code: None, signal: Some(9) })));
    assert_eq!(exit.session, again.session);

    head.assignments_open("p1", again.session).await;
    head.assign("p1", sh("actor-2", "exec sleep 1000"));
    let second = started("actor-2").await;

    cluster.shutdown().await.unwrap();
    eventually("the process is gone after the shutdown", || {
        killpg(Pid::from_raw(second as i32), None) == Err(Errno::ESRCH)
    })
    .await;
}
