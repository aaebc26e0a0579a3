//! Simulated clusters against the in-test head: registration of a mixed cluster, tasks with
//! per-node exit codes, a killed node going silent, and its restart.

mod common;

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
    let options = SimOptions { reconnect_backoff: Duration::from_millis(10), hold_tasks: true };
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
    let err = cluster.shutdown().await.unwrap_err();
    assert!(err.to_string().starts_with("2 simulated agent(s) failed"), "{err}");
}
