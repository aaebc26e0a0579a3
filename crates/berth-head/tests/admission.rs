//! What one request may cost the head: a placement group that waits is planned again only
//! when room for it could exist, so it never holds up creations, agents or running work.

use std::time::Duration;

use berth_agent::{SimCluster, SimNode};
use berth_api::rest::{Actor, ActorState, Group, GroupState, Node, Task};
use berth_head::{HeadConfig, RunningHead};
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

async fn fixture(nodes: Vec<SimNode>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut config = HeadConfig::new(dir.path());
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.heartbeat_interval = Duration::from_millis(50);
    config.heartbeat_timeout = Duration::from_secs(10);
    config.limits.set(berth_api::limits::Limit::Bundles, 20_000);
    let head = berth_head::start(config).await.unwrap();
    let token = head.token.as_str().to_string();
    let sim =
        SimCluster::start(&head.address.to_string(), head.agent_token.as_str(), nodes).unwrap();
    sim.wait_registered(Duration::from_secs(20)).await.unwrap();
    let base = format!("http://{}", head.address);
    Fixture { head, _sim: sim, http: reqwest::Client::new(), base, token, _dir: dir }
}

impl Fixture {
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request =
            self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    async fn created<T: serde::de::DeserializeOwned>(&self, path: &str, body: Value) -> T {
        let (status, answer) = self.call(Method::POST, path, Some(body)).await;
        assert_eq!(status, 201, "{answer}");
        serde_json::from_value(answer).unwrap()
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        let (status, answer) = self.call(Method::GET, path, None).await;
        assert_eq!(status, 200, "{answer}");
        serde_json::from_value(answer).unwrap()
    }

    /// `berth_group_bundles_ranked_total`, read from `/metrics`.
    async fn bundles_ranked(&self) -> u64 {
        let text = self
            .http
            .get(format!("{}/metrics", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("berth_group_bundles_ranked_total "))
            .unwrap_or_else(|| panic!("no bundles-ranked counter in:\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    async fn until(&self, what: &str, done: impl Fn(&berth_head::View) -> bool) {
        let mut view = self.head.handle.subscribe();
        tokio::time::timeout(Duration::from_secs(30), view.wait_for(|v| done(v)))
            .await
            .unwrap_or_else(|_| panic!("timed out waiting until {what}"))
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_waiting_group_costs_nothing_until_room_for_it_could_exist() {
    let f = fixture(vec![
        SimNode::new("n1").resource("CPU", "64"),
        SimNode::new("n2").resource("CPU", "64"),
    ])
    .await;
    let nodes_before: Vec<Node> = f.get::<berth_api::rest::List<Node>>("/api/v1/nodes").await.items;
    let mut actors = Vec::new();
    for _ in 0..4 {
        let actor: Actor = f
            .created("/api/v1/actors", json!({"command": "sleep", "resources": {"CPU": 10}}))
            .await;
        actors.push(actor.actor_id.to_string());
    }
    f.until("the actors run", |v| {
        v.actors.values().filter(|a| a.state == ActorState::Alive).count() == 4
    })
    .await;

    // 20,000 bundles, 100 CPUs in all: the cluster has 128, 40 of them busy.
    let bundles = vec![json!({"CPU": 0.005}); 20_000];
    let group: Group = f
        .created("/api/v1/placement_groups", json!({"bundles": bundles, "strategy": "PACK"}))
        .await;
    assert_eq!(group.state, GroupState::Pending);
    let why = serde_json::to_string(&group.diagnosis).unwrap();
    assert!(why.contains("ask for 100 CPU in all; the alive nodes have 88 free together"), "{why}");
    let ranked = f.bundles_ranked().await;

    // Work comes and goes, and a node's labels change: none of it makes room for 100 CPUs.
    let mut tasks = Vec::new();
    for i in 0..60 {
        let task: Task =
            f.created("/api/v1/tasks", json!({"command": "true", "resources": {"CPU": 1}})).await;
        tasks.push(task.task_id.to_string());
        if i % 10 == 0 {
            let (status, answer) = f
                .call(
                    Method::POST,
                    "/api/v1/nodes/n1/labels",
                    Some(json!({"round": i.to_string()})),
                )
                .await;
            assert_eq!(status, 200, "{answer}");
        }
    }
    f.until("every task ended", |v| {
        tasks.iter().all(|id| v.task(id).is_some_and(|t| t.state.is_final()))
    })
    .await;
    assert_eq!(f.bundles_ranked().await, ranked, "the waiting group was planned again");
    let group: Group = f.get(&format!("/api/v1/placement_groups/{}", group.group_id)).await;
    assert_eq!(group.state, GroupState::Pending);
    for id in &actors {
        let actor: Actor = f.get(&format!("/api/v1/actors/{id}")).await;
        assert_eq!((actor.state, actor.restarts), (ActorState::Alive, 0), "{id}");
    }
    let nodes_after: Vec<Node> = f.get::<berth_api::rest::List<Node>>("/api/v1/nodes").await.items;
    let sessions = |nodes: &[Node]| -> Vec<(String, u64)> {
        nodes.iter().map(|n| (n.node_id.clone(), n.registered_at_ms)).collect()
    };
    assert_eq!(sessions(&nodes_after), sessions(&nodes_before), "an agent registered again");

    // Two actors end: 108 CPUs free, and the group is reserved.
    for id in &actors[..2] {
        let (status, answer) = f.call(Method::DELETE, &format!("/api/v1/actors/{id}"), None).await;
        assert!(status < 300, "{answer}");
    }
    let id = group.group_id.clone();
    f.until("the group is reserved", |v| {
        v.groups.values().any(|g| g.group_id == id && g.state == GroupState::Created)
    })
    .await;
    assert!(f.bundles_ranked().await >= ranked + 20_000, "reserving it planned every bundle");
}
