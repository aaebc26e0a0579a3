//! Changing a running node over REST: labels (added, changed, removed), resource totals
//! (seed 002's dynamic resources) and rare-resource isolation (seed 004), with what waits
//! decided again, what runs left alone, and bad input named by field and rule.

use std::time::Duration;

use berth_agent::{SimCluster, SimNode};
use berth_api::rest::{Actor, ActorState, Node};
use berth_head::{HeadConfig, RunningHead, View};
use reqwest::Method;
use serde_json::{json, Value};

struct Fixture {
    head: RunningHead,
    _sim: SimCluster,
    http: reqwest::Client,
    base: String,
    token: String,
    _dir: tempfile::TempDir,
}

async fn fixture(nodes: Vec<SimNode>, rare: Option<Vec<String>>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut config = HeadConfig::new(dir.path());
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.heartbeat_interval = Duration::from_millis(50);
    config.heartbeat_timeout = Duration::from_secs(10);
    config.rare_resources = rare;
    let head = berth_head::start(config).await.unwrap();
    let token = head.token.as_str().to_string();
    let sim =
        SimCluster::start(&head.address.to_string(), head.agent_token.as_str(), nodes).unwrap();
    sim.wait_registered(Duration::from_secs(20)).await.unwrap();
    let base = format!("http://{}", head.address);
    Fixture { head, _sim: sim, http: reqwest::Client::new(), base, token, _dir: dir }
}

impl Fixture {
    async fn call(&self, method: Method, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }

    async fn ok(&self, method: Method, path: &str, body: Value) -> Node {
        let (status, body) = self.call(method, path, body).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_value(body).unwrap()
    }

    /// Asserts a 400 naming `field` (none when empty) with a message containing `rule`.
    async fn refused(&self, method: Method, path: &str, body: Value, field: &str, rule: &str) {
        let (status, answer) = self.call(method, path, body.clone()).await;
        assert_eq!(status, 400, "{body} -> {answer}");
        // A rule about the whole body names no field.
        let named = if field.is_empty() { Value::Null } else { json!(field) };
        assert_eq!(answer["field"], named, "{body} -> {answer}");
        let message = answer["message"].as_str().unwrap();
        assert!(message.contains(rule), "{body} -> {message}");
    }

    async fn actor(&self, body: Value) -> Actor {
        let (status, answer) = self.call(Method::POST, "/api/v1/actors", body).await;
        assert_eq!(status, 201, "{answer}");
        serde_json::from_value(answer).unwrap()
    }

    async fn until(&self, what: &str, done: impl Fn(&View) -> bool) {
        let mut view = self.head.handle.subscribe();
        tokio::time::timeout(Duration::from_secs(20), view.wait_for(|v| done(v)))
            .await
            .unwrap_or_else(|_| panic!("timed out waiting until {what}"))
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_set_at_run_time_place_what_waits_and_leave_what_runs() {
    let f = fixture(vec![SimNode::new("n1").resource("CPU", "4").label("zone", "a")], None).await;
    let waiting = f
        .actor(json!({"command": "x", "resources": {"CPU": 1}, "label_selector": {"tier": "gold"}}))
        .await;
    assert_eq!(waiting.state, ActorState::Pending);
    let running = f
        .actor(json!({"command": "x", "resources": {"CPU": 1}, "label_selector": {"zone": "a"}}))
        .await;
    assert_eq!(running.node_id.as_deref(), Some("n1"));

    // By ID, then by address; a value changed, a label added.
    let node = f.ok(Method::POST, "/api/v1/nodes/n1/labels", json!({"tier": "gold"})).await;
    assert_eq!(node.labels["tier"], "gold");
    let address = node.address.clone();
    let node =
        f.ok(Method::POST, &format!("/api/v1/nodes/{address}/labels"), json!({"zone": "b"})).await;
    assert_eq!((node.labels["zone"].as_str(), node.labels["tier"].as_str()), ("b", "gold"));
    let id = waiting.actor_id.clone();
    f.until("the waiting actor is placed", |v| v.actor(&id).is_some_and(|a| a.node_id.is_some()))
        .await;
    // The running one asked for zone=a; it stays (labels are not checked again once placed).
    assert_eq!(
        f.head.handle.view().actor(&running.actor_id).unwrap().node_id.as_deref(),
        Some("n1")
    );

    // Removing: a key it does not have is ignored; an override of a default brings it back.
    let node = f
        .ok(Method::POST, "/api/v1/nodes/n1/labels", json!({"berth.io/market-type": "spot"}))
        .await;
    assert_eq!(node.labels["berth.io/market-type"], "spot");
    let node = f
        .ok(
            Method::DELETE,
            "/api/v1/nodes/n1/labels",
            json!(["tier", "never-there", "berth.io/market-type"]),
        )
        .await;
    assert!(!node.labels.contains_key("tier"));
    assert!(!node.labels.contains_key("berth.io/market-type"), "no fact, so no default");
    // The label index follows: a selector on the old value no longer matches.
    let after = f
        .actor(json!({"command": "x", "resources": {"CPU": 1}, "label_selector": {"tier": "gold"}}))
        .await;
    assert_eq!(after.state, ActorState::Pending);

    // Bad input, named.
    let path = "/api/v1/nodes/n1/labels";
    f.refused(Method::POST, path, json!({"bad key!": "v"}), "bad key!", "").await;
    f.refused(Method::POST, path, json!({"berth.io/node-id": "x"}), "berth.io/node-id", "").await;
    f.refused(Method::POST, path, json!({"k": "v".repeat(64)}), "k", "").await;
    f.refused(Method::POST, path, json!({}), "", "at least one label").await;
    f.refused(Method::DELETE, path, json!([]), "", "at least one label key").await;
    let (status, _) = f.call(Method::POST, "/api/v1/nodes/ghost/labels", json!({"a": "b"})).await;
    assert_eq!(status, 404);
    let (status, answer) = f.call(Method::POST, path, json!(["not", "a", "map"])).await;
    assert_eq!(status, 400, "{answer}");
    // Nothing of a refused change was applied.
    assert!(!f.head.handle.view().node("n1").unwrap().labels.contains_key("k"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_set_at_run_time_add_change_and_delete_capacity() {
    let f = fixture(vec![SimNode::new("g1").resource("CPU", "8").resource("GPU", "4")], None).await;
    let path = "/api/v1/nodes/g1/resources";
    // A custom resource that no node has: the actor waits until one does.
    let waiting = f.actor(json!({"command": "x", "resources": {"my_res": 2}})).await;
    assert_eq!(waiting.state, ActorState::Pending);
    let node = f.ok(Method::PUT, path, json!({"my_res": "2"})).await;
    assert_eq!(node.resources["my_res"].total.to_string(), "2");
    let id = waiting.actor_id.clone();
    f.until("the actor needing my_res is placed", |v| {
        v.actor(&id).is_some_and(|a| a.node_id.as_deref() == Some("g1"))
    })
    .await;

    // GPUs shrink from the highest instance: an actor holding GPU 0 keeps it.
    let gpu = f.actor(json!({"command": "x", "resources": {"GPU": 1}})).await;
    assert_eq!(gpu.instances["GPU"], [0]);
    let node = f.ok(Method::PUT, path, json!({"GPU": "2", "CPU": "16"})).await;
    assert_eq!(node.resources["GPU"].total.to_string(), "2");
    assert_eq!(node.resources["GPU"].available.to_string(), "1");
    assert_eq!(node.resources["CPU"].total.to_string(), "16");
    let next = f.actor(json!({"command": "x", "resources": {"GPU": 1}})).await;
    assert_eq!(next.instances["GPU"], [1]);
    let none_left = f.actor(json!({"command": "x", "resources": {"GPU": 1}})).await;
    assert_eq!(none_left.state, ActorState::Pending);

    // Delete with 0; a total below what runs leaves nothing free, and the work stays.
    let node = f.ok(Method::PUT, path, json!({"my_res": "0", "GPU": "1"})).await;
    assert!(node.resources.get("my_res").is_none(), "{:?}", node.resources);
    assert_eq!(node.resources["GPU"].available.to_string(), "0");
    let view = f.head.handle.view();
    for id in [&waiting.actor_id, &gpu.actor_id, &next.actor_id] {
        let actor = view.actor(id).unwrap();
        assert_eq!(actor.node_id.as_deref(), Some("g1"), "it stays: {actor:?}");
        assert_ne!(actor.state, ActorState::Dead);
    }

    // Bad input, named, and nothing applied.
    f.refused(Method::PUT, path, json!({"GPU": "1.5"}), "GPU", "whole").await;
    f.refused(Method::PUT, path, json!({"CPU": "-1"}), "CPU", "").await;
    f.refused(Method::PUT, path, json!({"CPU": "lots"}), "CPU", "").await;
    f.refused(Method::PUT, path, json!({"berth.io/x": "1"}), "berth.io/x", "Berth's own").await;
    f.refused(Method::PUT, path, json!({"TPU": "0"}), "TPU", "no resource TPU to delete").await;
    f.refused(Method::PUT, path, json!({"bad name!": "1"}), "bad name!", "").await;
    f.refused(Method::PUT, path, json!({"CPU": "4", "GPU": "0.5"}), "GPU", "whole").await;
    f.refused(Method::PUT, path, json!({"CPU": "4", "GPU": "5000"}), "GPU", "over the 4096").await;
    f.refused(Method::PUT, path, json!({}), "", "at least one resource").await;
    assert_eq!(f.head.handle.view().node("g1").unwrap().resources["CPU"].total.to_string(), "16");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rare_resource_isolation_taints_the_nodes_that_have_the_resource() {
    let nodes = vec![
        SimNode::new("cpu").resource("CPU", "8"),
        SimNode::new("gpu").resource("CPU", "8").resource("GPU", "1"),
    ];
    let f = fixture(nodes, Some(vec!["GPU".into(), "my_res".into()])).await;
    let view = f.head.handle.view();
    assert_eq!(view.status().rare_resources, ["GPU", "my_res"]);
    let taints = |node: &str| -> Vec<String> {
        let view = f.head.handle.view();
        view.node(node).unwrap().taints.iter().map(|t| format!("{}={}", t.key, t.value)).collect()
    };
    assert_eq!(taints("gpu"), ["berth.io/rare-GPU=true"]);
    assert!(taints("cpu").is_empty());
    // CPU work stays off the GPU node; GPU work goes there.
    for _ in 0..3 {
        let cpu_only = f.actor(json!({"command": "x", "resources": {"CPU": 1}})).await;
        assert_eq!(cpu_only.node_id.as_deref(), Some("cpu"));
    }
    let gpu = f.actor(json!({"command": "x", "resources": {"GPU": 1}})).await;
    assert_eq!(gpu.node_id.as_deref(), Some("gpu"));
    // A node given the rare resource at run time is tainted at once, and untainted when it
    // loses it.
    f.ok(Method::PUT, "/api/v1/nodes/cpu/resources", json!({"my_res": "1"})).await;
    assert_eq!(taints("cpu"), ["berth.io/rare-my_res=true"]);
    f.ok(Method::PUT, "/api/v1/nodes/cpu/resources", json!({"my_res": "0"})).await;
    assert!(taints("cpu").is_empty());
    // The isolation taint is Berth's: it cannot be removed by hand.
    let (status, _) = f
        .call(Method::DELETE, "/api/v1/nodes/gpu/taints", json!({"berth.io/rare-GPU": "true"}))
        .await;
    assert_eq!(status, 200, "removing a taint the user never set is a no-op");
    assert_eq!(taints("gpu"), ["berth.io/rare-GPU=true"]);
}

#[tokio::test]
async fn a_bad_rare_resource_name_stops_the_head_from_starting() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = HeadConfig::new(dir.path());
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.rare_resources = Some(vec!["bad name!".into()]);
    let Err(err) = berth_head::start(config).await else { panic!("a bad name is refused") };
    assert!(err.to_string().contains("rare-resource isolation"), "{err}");
}

/// Registers `node_id` over the agent protocol, as an agent (re)starting does.
async fn register(
    head: &RunningHead,
    node_id: &str,
    resources: &[(&str, &str)],
) -> Result<(), tonic::Status> {
    let address = format!("http://{}", head.address);
    let channel = tonic::transport::Channel::from_shared(address).unwrap().connect().await.unwrap();
    let mut client = berth_api::agent::agent_service_client::AgentServiceClient::new(channel);
    let mut request = tonic::Request::new(berth_api::agent::RegisterRequest {
        node_id: node_id.into(),
        address: "10.0.0.9".into(),
        resources: resources.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Default::default()
    });
    let bearer = format!("Bearer {}", head.agent_token.as_str()).parse().unwrap();
    request.metadata_mut().insert("authorization", bearer);
    client.register(request).await.map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_registering_again_reports_what_changed_on_its_machine() {
    let f = fixture(vec![], None).await;
    register(&f.head, "m1", &[("CPU", "8"), ("GPU", "4")]).await.unwrap();
    f.ok(Method::PUT, "/api/v1/nodes/m1/resources", json!({"CPU": "16", "my_res": "2"})).await;
    let totals = |f: &Fixture| -> Vec<(String, String)> {
        let view = f.head.handle.view();
        let node = view.node("m1").unwrap();
        node.resources.iter().map(|(k, u)| (k.to_string(), u.total.to_string())).collect()
    };
    let pairs = |items: &[(&str, &str)]| -> Vec<(String, String)> {
        items.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    // The agent comes back with two GPUs fewer: GPU follows; CPU (which it reports as before)
    // and my_res keep their run-time totals.
    register(&f.head, "m1", &[("CPU", "8"), ("GPU", "2")]).await.unwrap();
    assert_eq!(totals(&f), pairs(&[("CPU", "16"), ("GPU", "2"), ("my_res", "2")]));
    // Now its CPU changed too, and the GPUs are gone.
    register(&f.head, "m1", &[("CPU", "4")]).await.unwrap();
    assert_eq!(totals(&f), pairs(&[("CPU", "4"), ("my_res", "2")]));
    // A registration that is bad input is refused, and changes nothing.
    let err = register(&f.head, "m1", &[("CPU", "4"), ("GPU", "1.5")]).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("resources.GPU"), "{err:?}");
    assert_eq!(totals(&f), pairs(&[("CPU", "4"), ("my_res", "2")]));
}
