//! A head killed and restarted on the same store loses no accepted object: actors (with their
//! placement and GPU instances), groups, tasks, node labels, taints and resources changed at run
//! time, and the rare-resource isolation it was started with. Run on the embedded store and on
//! a real `redis-server`.

use berth_api::spec::{PlacementGroupSpec, PlacementSpec};
use std::time::Duration;

use berth_api::agent::agent_service_client::AgentServiceClient;
use berth_api::agent::{
    assignment, status_report, AssignmentsRequest, RegisterRequest, RunningWork, Started,
    StatusReport, StatusReports, Taint,
};
use berth_api::rest::{ActorCreate, ActorState, GroupCreate, GroupState, ListQuery, TaskSubmit};
use berth_core::Quantity;
use berth_head::{HeadConfig, RunningHead};
use berth_store::StoreConfig;
use tonic::transport::Channel;

async fn boot(config: &HeadConfig) -> RunningHead {
    berth_head::start(config.clone()).await.expect("head starts")
}

async fn agent(head: &RunningHead) -> AgentServiceClient<Channel> {
    let channel =
        Channel::from_shared(format!("http://{}", head.address)).unwrap().connect().await.unwrap();
    AgentServiceClient::new(channel)
}

fn with_token<T>(head: &RunningHead, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let bearer = format!("Bearer {}", head.agent_token.as_str()).parse().unwrap();
    request.metadata_mut().insert("authorization", bearer);
    request
}

fn registration() -> RegisterRequest {
    RegisterRequest {
        node_id: "gpu-1".into(),
        address: "10.0.0.7".into(),
        resources: [("CPU".into(), "16".into()), ("GPU".into(), "4".into())].into(),
        labels: [("team".into(), "ml".into())].into(),
        facts: [("accelerator-type".into(), "nvidia-a100".into())].into(),
        taints: vec![Taint { key: "dedicated".into(), value: "ml".into() }],
        ..Default::default()
    }
}

async fn survives_a_crash(config: HeadConfig) {
    let mut first = config.clone();
    first.rare_resources = Some(vec!["GPU".into()]);
    let head = boot(&first).await;
    let mut a = agent(&head).await;
    let reg = a.register(with_token(&head, registration())).await.unwrap().into_inner();
    let mut stream = a
        .assignments(with_token(
            &head,
            AssignmentsRequest { node_id: "gpu-1".into(), session: reg.session },
        ))
        .await
        .unwrap()
        .into_inner();
    let tolerate = serde_json::json!({"dedicated": "ml"});
    let actor = head
        .handle
        .create_actor(ActorCreate {
            name: Some("trainer".into()),
            command: "train".into(),
            placement: PlacementSpec::from_json(
                serde_json::json!({"resources": {"GPU": 2}, "tolerations": tolerate}),
            )
            .unwrap(),
            labels: [("app".into(), "train".into())].into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let group = head
        .handle
        .create_group(GroupCreate {
            placement: PlacementGroupSpec::from_json(serde_json::json!({
                "bundles": [{"GPU": 1}, {"GPU": 1}],
                "tolerations": tolerate,
            }))
            .unwrap(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(group.state, GroupState::Created);
    let waiting = head
        .handle
        .submit_task(TaskSubmit {
            command: "big".into(),
            placement: berth_api::spec::PlacementSpec::from_json(
                serde_json::json!({"resources": {"GPU": 8}}),
            )
            .unwrap(),
            ..Default::default()
        })
        .await
        .unwrap();
    head.handle
        .add_taints("10.0.0.7", [("maintenance".into(), "soon".into())].into())
        .await
        .unwrap();
    head.handle.set_labels("gpu-1", [("tier".into(), "gold".into())].into()).await.unwrap();
    head.handle.set_resources("gpu-1", [("my_res".into(), "3".into())].into()).await.unwrap();
    let start = match stream.message().await.unwrap().unwrap().kind.unwrap() {
        assignment::Kind::Start(s) => s,
        other => panic!("{other:?}"),
    };
    a.report_status(with_token(
        &head,
        StatusReports {
            reports: vec![StatusReport {
                node_id: "gpu-1".into(),
                session: reg.session,
                work_id: actor.actor_id.to_string(),
                attempt: start.attempt,
                status: Some(status_report::Status::Started(Started { pid: 7 })),
            }],
        },
    ))
    .await
    .unwrap();
    let before = head.handle.view();
    head.crash().await;

    // Started without the flag: the isolation it had is kept.
    let head = boot(&config).await;
    let after = head.handle.view();
    let node = after.node("gpu-1").expect("the node is back");
    assert_eq!(node.labels.get("team").map(String::as_str), Some("ml"));
    assert_eq!(node.labels.get("tier").map(String::as_str), Some("gold"));
    assert_eq!(node.resources["my_res"].total, Quantity::from_whole(3));
    assert!(node.taints.iter().any(|t| t.key == "berth.io/rare-GPU"), "{:?}", node.taints);
    assert_eq!(after.status().rare_resources, ["GPU"]);
    assert_eq!(
        node.labels.get("berth.io/accelerator-type").map(String::as_str),
        Some("nvidia-a100")
    );
    let taints: Vec<_> = node.taints.iter().map(|t| format!("{}={}", t.key, t.value)).collect();
    assert!(
        taints.contains(&"dedicated=ml".to_string())
            && taints.contains(&"maintenance=soon".to_string()),
        "{taints:?}"
    );
    let restored = after.actor(&actor.actor_id).expect("the actor is back");
    assert_eq!(restored.state, ActorState::Alive);
    assert_eq!(restored.instances, before.actor(&actor.actor_id).unwrap().instances);
    assert_eq!(after.group(&group.group_id).unwrap().state, GroupState::Created);
    assert_eq!(after.task(&waiting.task_id).unwrap().state, berth_api::rest::TaskState::Pending);
    assert_eq!(
        node.resources["GPU"].available,
        Quantity::ZERO,
        "2 for the actor + 2 for the group, 4 in all"
    );
    // New IDs do not reuse old ones.
    let next = head
        .handle
        .create_actor(ActorCreate {
            command: "x".into(),
            placement: PlacementSpec::from_json(
                serde_json::json!({"resources": {"CPU": 1}, "tolerations": tolerate}),
            )
            .unwrap(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_ne!(next.actor_id, actor.actor_id);
    // A name in use stays in use.
    let taken = head
        .handle
        .create_actor(ActorCreate {
            name: Some("trainer".into()),
            command: "x".into(),
            placement: berth_api::spec::PlacementSpec::from_json(
                serde_json::json!({"resources": {"CPU": 1}}),
            )
            .unwrap(),
            ..Default::default()
        })
        .await;
    assert!(matches!(taken, Err(berth_head::HeadError::Conflict(_))), "{taken:?}");

    // The agent comes back with what it runs: nothing is restarted, nothing stopped.
    let mut a = agent(&head).await;
    let mut again = registration();
    again.running =
        vec![RunningWork { work_id: actor.actor_id.to_string(), attempt: start.attempt }];
    let reg = a.register(with_token(&head, again)).await.unwrap().into_inner();
    assert!(reg.stop.is_empty(), "{:?}", reg.stop);
    let list = head
        .handle
        .view()
        .list_actors(&ListQuery { state: Some("alive".into()), ..Default::default() })
        .unwrap();
    assert_eq!(list.total, 1);
    assert_eq!(head.handle.view().actor(&actor.actor_id).unwrap().restarts, 0);
    head.shutdown().await;
}

fn config(dir: &std::path::Path) -> HeadConfig {
    let mut config = HeadConfig::new(dir);
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.heartbeat_interval = Duration::from_millis(100);
    config.heartbeat_timeout = Duration::from_secs(30);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_store_keeps_everything_across_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    survives_a_crash(config(dir.path())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_keeps_everything_across_a_crash() {
    let server = berth_store::testutil::RedisServer::start_durable()
        .expect("redis-server (scripts/test installs it)");
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.store = StoreConfig::parse(&server.store_url("restart")).unwrap();
    survives_a_crash(config).await;
}

/// A creation whose answer a crash cut off, sent again with its idempotency key to the head
/// started after it, answers with the object the first one made: one actor, one task, one
/// group, whatever reached the head before the crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_retried_after_a_crash_is_made_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let keyed_actor = || ActorCreate {
        command: "sleep".into(),
        placement: berth_api::spec::PlacementSpec::from_json(
            serde_json::json!({"resources": {"CPU": 1}}),
        )
        .unwrap(),
        idempotency_key: Some("retry-1".into()),
        ..Default::default()
    };
    let keyed_task = || TaskSubmit {
        command: "true".into(),
        placement: berth_api::spec::PlacementSpec::from_json(
            serde_json::json!({"resources": {"CPU": 1}}),
        )
        .unwrap(),
        idempotency_key: Some("retry-1".into()),
        ..Default::default()
    };
    let keyed_group = || GroupCreate {
        placement: PlacementGroupSpec::from_json(serde_json::json!({"bundles": [{"CPU": 1}]}))
            .unwrap(),
        idempotency_key: Some("retry-1".into()),
        ..Default::default()
    };
    let head = boot(&config).await;
    let actor = head.handle.create_actor(keyed_actor()).await.unwrap();
    let task = head.handle.submit_task(keyed_task()).await.unwrap();
    let group = head.handle.create_group(keyed_group()).await.unwrap();
    head.crash().await;

    let head = boot(&config).await;
    let again = head.handle.create_actor(keyed_actor()).await.unwrap();
    assert_eq!(again.actor_id, actor.actor_id);
    assert_eq!(head.handle.submit_task(keyed_task()).await.unwrap().task_id, task.task_id);
    assert_eq!(head.handle.create_group(keyed_group()).await.unwrap().group_id, group.group_id);
    let view = head.handle.view();
    let all = ListQuery::default();
    assert_eq!(view.list_actors(&all).unwrap().total, 1);
    assert_eq!(view.list_tasks(&all).unwrap().total, 1);
    assert_eq!(view.list_groups(&all).unwrap().total, 1);
    // Another key is another creation.
    let other = ActorCreate { idempotency_key: Some("retry-2".into()), ..keyed_actor() };
    assert_ne!(head.handle.create_actor(other).await.unwrap().actor_id, actor.actor_id);
    head.shutdown().await;
}

/// A node's drain, its end (undrain) and its history are kept with the node's record: a head
/// crashed and started again on the same data directory shows the node as it was left
/// (draining, then undrained) with every event it had, at the same times, and an undrain
/// made by the restarted head survives the next crash too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undrain_and_node_history_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let kinds = |node: &berth_api::rest::Node| -> Vec<String> {
        node.history.iter().map(|e| e.kind.clone()).collect()
    };

    let head = boot(&config).await;
    let mut a = agent(&head).await;
    a.register(with_token(&head, registration())).await.unwrap();
    head.handle.drain_node("gpu-1").await.unwrap();
    let undrained = head.handle.undrain_node("gpu-1").await.unwrap();
    assert_eq!(undrained.state, berth_api::rest::NodeState::Alive);
    head.handle.add_taints("gpu-1", [("maintenance".into(), "soon".into())].into()).await.unwrap();
    head.handle.set_labels("gpu-1", [("tier".into(), "gold".into())].into()).await.unwrap();
    let drained = head.handle.drain_node("gpu-1").await.unwrap();
    let before = drained.history.clone();
    assert_eq!(
        kinds(&drained),
        ["registered", "draining", "undrained", "taints_added", "labels_changed", "draining"]
    );
    head.crash().await;

    // Back as it was left: draining, with the same history (what the restart adds comes
    // after it).
    let head = boot(&config).await;
    let node = head.handle.view().node("gpu-1").expect("the node is back");
    assert_eq!(node.state, berth_api::rest::NodeState::Draining);
    assert_eq!(node.history[..before.len()], before[..], "{:#?}", node.history);
    // The restarted head ends the drain; that survives the next crash.
    let undrained = head.handle.undrain_node("gpu-1").await.unwrap();
    assert_eq!(undrained.state, berth_api::rest::NodeState::Alive);
    let before = undrained.history.clone();
    assert_eq!(before.last().map(|e| e.kind.as_str()), Some("undrained"));
    head.crash().await;

    let head = boot(&config).await;
    let node = head.handle.view().node("gpu-1").expect("the node is back");
    assert_eq!(node.state, berth_api::rest::NodeState::Alive);
    assert_eq!(node.history[..before.len()], before[..], "{:#?}", node.history);
    head.shutdown().await;
}
