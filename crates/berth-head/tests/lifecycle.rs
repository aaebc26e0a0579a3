//! The head's lifecycle through its real gRPC protocol, with a hand-driven agent: register,
//! assignment, started, exited, restart; node death by heartbeat timeout.

use std::time::Duration;

use berth_api::agent::agent_service_client::AgentServiceClient;
use berth_api::agent::{
    assignment, status_report, AssignmentsRequest, Exited, RegisterRequest, Started, StatusReport,
    StatusReports,
};
use berth_api::rest::{ActorCreate, ActorState};
use berth_head::{HeadConfig, RunningHead};
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

async fn head(dir: &std::path::Path, timeout: Duration) -> RunningHead {
    let mut config = HeadConfig::new(dir);
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.heartbeat_interval = Duration::from_millis(50);
    config.heartbeat_timeout = timeout;
    berth_head::start(config).await.expect("head starts")
}

type Intercept =
    Box<dyn FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Send>;
type Client =
    AgentServiceClient<tonic::service::interceptor::InterceptedService<Channel, Intercept>>;

async fn client(head: &RunningHead) -> Client {
    let channel =
        Channel::from_shared(format!("http://{}", head.address)).unwrap().connect().await.unwrap();
    let bearer: MetadataValue<_> = format!("Bearer {}", head.agent_token.as_str()).parse().unwrap();
    let intercept: Intercept = Box::new(move |mut r: tonic::Request<()>| {
        r.metadata_mut().insert("authorization", bearer.clone());
        Ok(r)
    });
    AgentServiceClient::with_interceptor(channel, intercept)
}

fn actor(max_restarts: i32) -> ActorCreate {
    ActorCreate {
        command: "sleep".into(),
        args: vec!["1000".into()].into(),
        placement: berth_api::spec::PlacementSpec::from_json(
            serde_json::json!({"resources": {"CPU": 1, "GPU": 0.5}}),
        )
        .unwrap(),
        max_restarts,
        ..Default::default()
    }
}

/// Opens a `Reports` stream: the sending end and the answers.
async fn open_reports(
    agent: &mut Client,
) -> (tokio::sync::mpsc::Sender<StatusReports>, tonic::Streaming<berth_api::agent::StatusReplies>) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let down = agent.reports(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap();
    (tx, down.into_inner())
}

#[tokio::test]
async fn reports_on_the_stream_are_answered_in_order_and_an_error_ends_it() {
    let dir = tempfile::tempdir().unwrap();
    let head = head(dir.path(), Duration::from_secs(30)).await;
    let mut agent = client(&head).await;
    let reply = agent
        .register(RegisterRequest {
            node_id: "n1".into(),
            resources: [("CPU".into(), "8".into()), ("GPU".into(), "1".into())].into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut assignments = agent
        .assignments(AssignmentsRequest { node_id: "n1".into(), session: reply.session })
        .await
        .unwrap()
        .into_inner();
    let created = head.handle.create_actor(actor(0)).await.unwrap();
    let start = match assignments.message().await.unwrap().unwrap().kind.unwrap() {
        assignment::Kind::Start(start) => start,
        other => panic!("expected a start, got {other:?}"),
    };
    let report = |session, attempt| StatusReport {
        node_id: "n1".into(),
        session,
        work_id: created.actor_id.to_string(),
        attempt,
        status: Some(status_report::Status::Started(Started { pid: 7 })),
    };
    // One answer per batch, one reply per report, in order: the current attempt, then a stale one.
    let (up, mut down) = open_reports(&mut agent).await;
    up.send(StatusReports { reports: vec![report(reply.session, start.attempt)] }).await.unwrap();
    let answer = down.message().await.unwrap().unwrap();
    assert_eq!(answer.replies.iter().map(|r| r.current).collect::<Vec<_>>(), [true]);
    assert_eq!(head.handle.view().actor(&created.actor_id).unwrap().state, ActorState::Alive);
    let reports =
        vec![report(reply.session, start.attempt + 1), report(reply.session, start.attempt)];
    up.send(StatusReports { reports }).await.unwrap();
    let answer = down.message().await.unwrap().unwrap();
    assert_eq!(answer.replies.iter().map(|r| r.current).collect::<Vec<_>>(), [false, true]);

    // Too many reports in one message: refused, naming the rule, and the stream ends.
    let reports = vec![report(reply.session, start.attempt); 4097];
    up.send(StatusReports { reports: reports.clone() }).await.unwrap();
    let refused = down.message().await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("at most 4096"), "{}", refused.message());
    assert!(matches!(down.message().await, Ok(None) | Err(_)));
    // The same rule for a call.
    let refused = agent.report_status(StatusReports { reports }).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);

    // An old session: register again.
    let (up, mut down) = open_reports(&mut agent).await;
    up.send(StatusReports { reports: vec![report(reply.session + 1, start.attempt)] })
        .await
        .unwrap();
    let refused = down.message().await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    head.shutdown().await;
}

#[tokio::test]
async fn actor_is_assigned_started_restarted_and_dies_after_max_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let head = head(dir.path(), Duration::from_secs(30)).await;
    let mut agent = client(&head).await;
    let reply = agent
        .register(RegisterRequest {
            node_id: "gpu-1".into(),
            address: "10.0.0.1".into(),
            resources: [("CPU".into(), "8".into()), ("GPU".into(), "2".into())].into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.node_id, "gpu-1");
    let mut stream = agent
        .assignments(AssignmentsRequest { node_id: "gpu-1".into(), session: reply.session })
        .await
        .unwrap()
        .into_inner();

    let created = head.handle.create_actor(actor(1)).await.unwrap();
    assert_eq!(created.state, ActorState::Pending);
    assert_eq!(created.node_id.as_deref(), Some("gpu-1"));
    assert_eq!(created.instances.get("GPU"), Some(&vec![0]));

    let start = match stream.message().await.unwrap().unwrap().kind.unwrap() {
        assignment::Kind::Start(start) => start,
        other => panic!("expected a start, got {other:?}"),
    };
    assert_eq!(*start.work_id, *created.actor_id);
    assert_eq!(start.instances["GPU"].ids, vec![0]);
    let report = |attempt, status| StatusReports {
        reports: vec![StatusReport {
            node_id: "gpu-1".into(),
            session: reply.session,
            work_id: created.actor_id.to_string(),
            attempt,
            status: Some(status),
        }],
    };
    let answer = agent
        .report_status(report(start.attempt, status_report::Status::Started(Started { pid: 42 })))
        .await
        .unwrap()
        .into_inner();
    assert!(answer.replies[0].current);
    assert_eq!(head.handle.view().actor(&created.actor_id).unwrap().state, ActorState::Alive);

    // It crashes: restarted (a new attempt on the only node).
    agent
        .report_status(report(
            start.attempt,
            status_report::Status::Exited(Exited { code: Some(1), signal: None }),
        ))
        .await
        .unwrap();
    let restarted = head.handle.view().actor(&created.actor_id).unwrap();
    assert_eq!(restarted.restarts, 1);
    let second = match stream.message().await.unwrap().unwrap().kind.unwrap() {
        assignment::Kind::Start(start) => start,
        other => panic!("expected a start, got {other:?}"),
    };
    assert_eq!(second.attempt, start.attempt + 1);
    // The request was built again from the spec: half a GPU again, on the same instance.
    assert_eq!(second.instances["GPU"].ids, vec![0]);
    // A late report from the first attempt is stale.
    let stale = agent
        .report_status(report(start.attempt, status_report::Status::Started(Started { pid: 1 })))
        .await
        .unwrap()
        .into_inner();
    assert!(!stale.replies[0].current);
    agent
        .report_status(report(
            second.attempt,
            status_report::Status::Exited(Exited { code: None, signal: Some(9) }),
        ))
        .await
        .unwrap();
    let dead = head.handle.view().actor(&created.actor_id).unwrap();
    assert_eq!(dead.state, ActorState::Dead);
    assert!(dead.death_reason.as_deref().unwrap().contains("signal 9"), "{:?}", dead.death_reason);
    head.shutdown().await;
}

#[tokio::test]
async fn silent_node_is_declared_dead_and_its_actor_moves() {
    let dir = tempfile::tempdir().unwrap();
    let head = head(dir.path(), Duration::from_millis(300)).await;
    let mut a = client(&head).await;
    let mut b = client(&head).await;
    let reg_a = a
        .register(RegisterRequest {
            node_id: "a".into(),
            resources: [("CPU".into(), "2".into())].into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let actor = head.handle.create_actor(actor(-1).clone_with_cpu()).await.unwrap();
    assert_eq!(actor.node_id.as_deref(), Some("a"));
    // b joins and keeps heartbeating; a never heartbeats.
    let reg_b = b
        .register(RegisterRequest {
            node_id: "b".into(),
            resources: [("CPU".into(), "2".into())].into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let beats = tokio_stream::wrappers::ReceiverStream::new(rx);
    let mut replies = b.heartbeat(beats).await.unwrap().into_inner();
    let beat = berth_api::agent::HeartbeatRequest {
        node_id: "b".into(),
        session: reg_b.session,
        usage: Default::default(),
        measured: None,
        agent_clock_ms: 0,
    };
    let mut view = head.handle.subscribe();
    let moved = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            tx.send(beat.clone()).await.unwrap();
            replies.message().await.unwrap().unwrap();
            let current = view.borrow_and_update().clone();
            if current.actor(&actor.actor_id).and_then(|a| a.node_id.clone()).as_deref()
                == Some("b")
            {
                return current;
            }
            let _ = tokio::time::timeout(Duration::from_millis(50), view.changed()).await;
        }
    })
    .await
    .expect("the actor moves to b");
    assert_eq!(moved.node("a").unwrap().state, berth_api::rest::NodeState::Dead);
    let _ = reg_a;
    head.shutdown().await;
}

trait CpuOnly {
    fn clone_with_cpu(self) -> Self;
}

impl CpuOnly for ActorCreate {
    fn clone_with_cpu(mut self) -> Self {
        self.placement =
            berth_api::spec::PlacementSpec::from_json(serde_json::json!({"resources": {"CPU": 1}}))
                .unwrap();
        self
    }
}

#[tokio::test]
async fn removing_a_group_ends_the_work_placed_in_it_and_the_work_waiting_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let head = head(dir.path(), Duration::from_secs(30)).await;
    let mut agent = client(&head).await;
    agent
        .register(RegisterRequest {
            node_id: "n1".into(),
            address: "10.0.0.1".into(),
            resources: [("CPU".into(), "8".into())].into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let group = berth_api::rest::GroupCreate {
        placement: berth_api::spec::PlacementGroupSpec::from_json(
            serde_json::json!({"bundles": [{"CPU": 1}]}),
        )
        .unwrap(),
        ..Default::default()
    };
    let group = head.handle.create_group(group).await.unwrap();
    let in_group = berth_api::spec::PlacementSpec::from_json(serde_json::json!({
        "resources": {"CPU": 1},
        "scheduling_strategy": {"type": "PLACEMENT_GROUP", "group": group.group_id},
    }))
    .unwrap();
    let member = || ActorCreate { placement: in_group.clone(), ..actor(-1) };
    // One takes the bundle's CPU; the second waits for it, and so does a task.
    let placed = head.handle.create_actor(member()).await.unwrap();
    let waiting = head.handle.create_actor(member()).await.unwrap();
    let task = berth_api::rest::TaskSubmit {
        command: "true".into(),
        placement: in_group.clone(),
        ..Default::default()
    };
    let task = head.handle.submit_task(task).await.unwrap();
    // Outside the group: not touched.
    let outside = head.handle.create_actor(actor(-1).clone_with_cpu()).await.unwrap();
    assert_eq!(placed.node_id.as_deref(), Some("n1"));
    assert_eq!((waiting.node_id.as_deref(), task.node_id.as_deref()), (None, None));

    head.handle.remove_group(&group.group_id).await.unwrap();
    let view = head.handle.view();
    for id in [&placed.actor_id, &waiting.actor_id] {
        assert_eq!(view.actor(id).unwrap().state, ActorState::Dead, "{id}");
    }
    let task = view.task(&task.task_id).unwrap();
    assert_eq!(task.state, berth_api::rest::TaskState::Cancelled);
    assert_eq!(view.actor(&outside.actor_id).unwrap().state, ActorState::Pending);
    assert!(view.status().pending.is_empty(), "{:?}", view.status().pending);
    head.shutdown().await;
}
