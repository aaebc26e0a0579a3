//! A request naming a resource no node has is accepted and infeasible with that reason (and
//! autoscaler demand with its whole shape), without the name entering the head's registry;
//! when a node that has the resource registers, it is placed there.

use berth_api::agent::agent_service_client::AgentServiceClient;
use berth_api::agent::RegisterRequest;
use berth_api::rest::{ActorCreate, ActorState};
use berth_head::{HeadConfig, RunningHead, View};
use std::time::Duration;
use tonic::transport::Channel;

async fn until(head: &RunningHead, what: &str, done: impl Fn(&View) -> bool) {
    let mut views = head.handle.subscribe();
    tokio::time::timeout(Duration::from_secs(20), views.wait_for(|v| done(v)))
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
        .expect("the head runs");
}

async fn register(head: &RunningHead, node_id: &str, resources: &[(&str, &str)]) {
    let channel =
        Channel::from_shared(format!("http://{}", head.address)).unwrap().connect().await.unwrap();
    let mut client = AgentServiceClient::new(channel);
    let mut request = tonic::Request::new(RegisterRequest {
        node_id: node_id.into(),
        address: "10.0.0.9".into(),
        resources: resources.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Default::default()
    });
    let bearer = format!("Bearer {}", head.agent_token.as_str()).parse().unwrap();
    request.metadata_mut().insert("authorization", bearer);
    client.register(request).await.expect("registered");
}

#[tokio::test]
async fn an_unknown_resource_is_infeasible_until_a_node_brings_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = HeadConfig::new(dir.path());
    config.bind = "127.0.0.1:0".parse().unwrap();
    let head = berth_head::start(config).await.unwrap();
    register(&head, "cpu-1", &[("CPU", "8")]).await;

    let actor = head
        .handle
        .create_actor(ActorCreate {
            command: "sleep".into(),
            placement: berth_api::spec::PlacementSpec::from_json(
                serde_json::json!({"resources": {"CPU": 1, "TPU": 2}}),
            )
            .unwrap(),
            ..Default::default()
        })
        .await
        .expect("accepted: a resource no node has is a reason, not bad input");
    let diagnosis = actor.diagnosis.clone().expect("it waits");
    assert!(diagnosis.infeasible, "{diagnosis:?}");
    let words = serde_json::to_string(&diagnosis).unwrap();
    assert!(words.contains(r#"no node has the resource \"TPU\" (asked 2)"#), "{words}");
    // Demand shows the whole shape, TPU included.
    let status = head.handle.view().status();
    let shapes = serde_json::to_string(&status.demand).unwrap();
    assert!(shapes.contains("TPU"), "{shapes}");

    register(&head, "tpu-1", &[("CPU", "8"), ("TPU", "4")]).await;
    until(&head, "the actor placed on the TPU node", |v| {
        v.actor(&actor.actor_id).is_some_and(|a| a.node_id.as_deref() == Some("tpu-1"))
    })
    .await;
    let placed = head.handle.view().actor(&actor.actor_id).unwrap();
    assert_eq!(placed.state, ActorState::Pending, "placed, waiting for its agent to start it");
    head.shutdown().await;
}
