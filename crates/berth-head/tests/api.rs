//! The REST API end to end: a real head on port 0, simulated agents speaking the real agent
//! protocol, and a real HTTP client. Success and error paths of every endpoint, the token,
//! taints, drain, and node death.

use std::time::Duration;

use berth_agent::{SimCluster, SimNode};
use berth_api::rest::{
    Actor, ApiError, ClusterStatus, DryRun, ErrorKind, Explanation, Group, List, Node, Task,
};
use berth_head::{HeadConfig, RunningHead, View};
use serde_json::{json, Value};

struct Fixture {
    head: RunningHead,
    sim: SimCluster,
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
    config.heartbeat_timeout = Duration::from_millis(600);
    let head = berth_head::start(config).await.unwrap();
    let token = head.token.as_str().to_string();
    let sim =
        SimCluster::start(&head.address.to_string(), head.agent_token.as_str(), nodes).unwrap();
    sim.wait_registered(Duration::from_secs(20)).await.unwrap();
    let base = format!("http://{}", head.address);
    Fixture { head, sim, http: reqwest::Client::new(), base, token, _dir: dir }
}

fn cpu(id: &str, cpus: &str) -> SimNode {
    SimNode::new(id).resource("CPU", cpus)
}

impl Fixture {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
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

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// Waits (bounded) until `done` holds on the published view.
    async fn until(&self, what: &str, done: impl Fn(&View) -> bool) -> std::sync::Arc<View> {
        let mut view = self.head.handle.subscribe();
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let current = view.borrow_and_update().clone();
                if done(&current) {
                    return current;
                }
                view.changed().await.unwrap();
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting until {what}"))
    }
}

fn of<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_but_healthz_needs_the_token() {
    let f = fixture(vec![cpu("n1", "4")]).await;
    let routes = [
        ("GET", "/metrics"),
        ("GET", "/api/v1/openapi.json"),
        ("GET", "/api/v1/cluster/status"),
        ("GET", "/api/v1/watch"),
        ("GET", "/api/v1/nodes"),
        ("GET", "/api/v1/nodes/n1"),
        ("POST", "/api/v1/nodes/n1/drain"),
        ("POST", "/api/v1/nodes/n1/taints"),
        ("DELETE", "/api/v1/nodes/n1/taints"),
        ("POST", "/api/v1/actors"),
        ("GET", "/api/v1/actors"),
        ("GET", "/api/v1/actors/actor-1"),
        ("DELETE", "/api/v1/actors/actor-1"),
        ("POST", "/api/v1/tasks"),
        ("GET", "/api/v1/tasks"),
        ("GET", "/api/v1/tasks/task-1"),
        ("POST", "/api/v1/tasks/task-1/cancel"),
        ("POST", "/api/v1/placement_groups"),
        ("GET", "/api/v1/placement_groups"),
        ("GET", "/api/v1/placement_groups/pg-1"),
        ("DELETE", "/api/v1/placement_groups/pg-1"),
        ("GET", "/api/v1/placement_groups/pg-1/wait"),
        ("GET", "/api/v1/explain/actor-1"),
        ("POST", "/api/v1/explain"),
    ];
    for (method, path) in routes {
        for token in [None, Some("wrong")] {
            let mut request = f.http.request(method.parse().unwrap(), format!("{}{path}", f.base));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            if method != "GET" {
                request = request.json(&json!({"command": "x", "resources": {"CPU": 1}, "bundles": [{"CPU": 1}], "gpu": "true"}));
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status().as_u16(), 401, "{method} {path} with {token:?}");
            let body: ApiError = response.json().await.unwrap();
            assert_eq!(body.error, ErrorKind::Unauthorized);
        }
    }
    // Nothing changed.
    let view = f.head.handle.view();
    assert!(view.actors.is_empty() && view.tasks.is_empty() && view.groups.is_empty());
    assert_eq!(view.node("n1").unwrap().state, berth_api::rest::NodeState::Alive);
    assert!(view.node("n1").unwrap().taints.is_empty());
    let health = f.http.get(format!("{}/healthz", f.base)).send().await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    // The agent protocol refuses a wrong token too.
    let mut config = berth_agent::AgentConfig::new(f.head.address.to_string(), "wrong");
    config.resources.insert("CPU".into(), "1".into());
    let agent = berth_agent::Agent::new(config, std::sync::Arc::new(berth_agent::AckRunner::new()))
        .unwrap();
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    let refused =
        tokio::time::timeout(Duration::from_secs(20), agent.run_until(stop_rx)).await.unwrap();
    assert!(matches!(refused, Err(berth_agent::AgentError::Unauthenticated { .. })), "{refused:?}");
    f.sim.shutdown().await.unwrap();
    f.head.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actors_tasks_and_groups_through_rest() {
    let f = fixture(vec![cpu("n1", "4"), cpu("n2", "4").task_exit_code(0)]).await;
    // Create: 201, then ALIVE once the agent started it.
    let (status, body) = f
        .post("/api/v1/actors", json!({"name": "web", "command": "serve", "resources": {"CPU": 1}, "labels": {"app": "web"}}))
        .await;
    assert_eq!(status, 201, "{body}");
    let actor: Actor = of(body);
    f.until("the actor is alive", |v| {
        v.actor(&actor.actor_id).is_some_and(|a| a.state == berth_api::rest::ActorState::Alive)
    })
    .await;
    let (status, body) = f.get(&format!("/api/v1/actors/{}", actor.actor_id)).await;
    assert_eq!(status, 200);
    let got: Actor = of(body);
    assert_eq!(
        got.history.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
        ["created", "placed", "started"]
    );
    // A second live actor with the same name: 409.
    let (status, body) = f
        .post("/api/v1/actors", json!({"name": "web", "command": "serve", "resources": {"CPU": 1}}))
        .await;
    assert_eq!(status, 409, "{body}");
    // Lists and filters.
    let (_, body) = f.get("/api/v1/actors?state=alive&label=app=web").await;
    let list: List<Actor> = of(body);
    assert_eq!(list.total, 1);
    let (status, body) = f.get("/api/v1/actors?state=sleeping").await;
    assert_eq!((status, body["field"].as_str()), (400, Some("state")));
    let (_, body) = f.get("/api/v1/nodes?label=berth.io/node-id=n2").await;
    assert_eq!(of::<List<Node>>(body).items[0].node_id, "n2");
    // Invalid bodies: 400 naming the field; nothing reaches the state.
    for (bad, field) in [
        (json!({"command": "x", "resources": {"CPU": -1}}), "resources.CPU"),
        (json!({"command": "x", "resources": {"GPU": 1.5}}), "resources.GPU"),
        (
            json!({"command": "x", "resources": {"CPU": 1}, "label_selector": {"zone": "in("}}),
            "label_selector.zone",
        ),
        (json!({"command": "x", "resources": {"CPU": 1}, "labels": {"bad key!": "v"}}), "labels"),
        (json!({"command": "", "resources": {"CPU": 1}}), "command"),
        (
            json!({"command": "x", "resources": {"CPU": 1}, "scheduling_strategy": "NEAREST"}),
            "scheduling_strategy",
        ),
        (json!({"command": "x", "resources": {"CPU": 1}, "max_restarts": -2}), "max_restarts"),
        (json!({"command": "x"}), "resources"),
    ] {
        let (status, body) = f.post("/api/v1/actors", bad.clone()).await;
        assert_eq!(status, 400, "{bad} → {body}");
        let error: ApiError = of(body);
        assert!(error.field.as_deref().unwrap_or("").starts_with(field), "{bad}: {error:?}");
    }
    assert_eq!(f.head.handle.view().actors.len(), 1);
    // Unknown IDs: 404.
    for path in [
        "/api/v1/actors/actor-999",
        "/api/v1/tasks/task-9",
        "/api/v1/placement_groups/pg-9",
        "/api/v1/nodes/nope",
        "/api/v1/explain/actor-77",
        "/api/v1/actors/banana",
    ] {
        let (status, body) = f.get(path).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    let (status, _) = f.call(reqwest::Method::DELETE, "/api/v1/actors/actor-999", None).await;
    assert_eq!(status, 404);

    // Tasks run to completion (the simulated agent exits 0).
    let (status, body) = f
        .post("/api/v1/tasks", json!({"command": "echo", "args": ["hi"], "resources": {"CPU": 1}}))
        .await;
    assert_eq!(status, 201, "{body}");
    let task: Task = of(body);
    f.until("the task finished", |v| {
        v.task(&task.task_id).is_some_and(|t| t.state == berth_api::rest::TaskState::Finished)
    })
    .await;
    let (status, _) = f.post(&format!("/api/v1/tasks/{}/cancel", task.task_id), json!({})).await;
    assert_eq!(status, 409, "a finished task cannot be cancelled");
    // A task that can never fit waits as infeasible, with the reason; cancel works.
    let (_, body) =
        f.post("/api/v1/tasks", json!({"command": "big", "resources": {"CPU": 64}})).await;
    let big: Task = of(body);
    let (_, body) = f.get(&format!("/api/v1/explain/{}", big.task_id)).await;
    let why: Explanation = of(body);
    let diagnosis = why.diagnosis.expect("waiting");
    assert!(diagnosis.infeasible);
    assert_eq!(diagnosis.reasons[0].code, "insufficient_total:CPU");
    let (_, body) = f.get("/api/v1/cluster/status").await;
    let status_now: ClusterStatus = of(body);
    assert_eq!(status_now.pending_total, 1);
    assert_eq!(status_now.demand[0].shape.get("CPU").map(String::as_str), Some("64"));
    assert_eq!(status_now.demand[0].infeasible, 1);
    let (status, body) = f.post(&format!("/api/v1/tasks/{}/cancel", big.task_id), json!({})).await;
    assert_eq!((status, body["state"].as_str()), (200, Some("CANCELLED")));

    // Dry run: nothing is reserved.
    let (status, body) = f.post("/api/v1/explain", json!({"resources": {"CPU": 2}})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(of::<DryRun>(body).outcome, "placed");
    let (status, body) = f.post("/api/v1/explain", json!({"resources": {"CPU": "lots"}})).await;
    assert_eq!((status, body["field"].as_str()), (400, Some("resources.CPU")));

    // Placement groups: create, wait, a task inside, remove.
    let (status, body) = f
        .post(
            "/api/v1/placement_groups",
            json!({"strategy": "STRICT_SPREAD", "bundles": [{"CPU": 1}, {"CPU": 1}]}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let group: Group = of(body);
    let (status, body) =
        f.get(&format!("/api/v1/placement_groups/{}/wait?timeout_s=5", group.group_id)).await;
    assert_eq!((status, body["state"].as_str()), (200, Some("CREATED")));
    let nodes: Vec<&str> = body["bundles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["node_id"].as_str().unwrap())
        .collect();
    assert_ne!(nodes[0], nodes[1]);
    // The reservation shows on the nodes at once.
    let status_now: ClusterStatus = of(f.get("/api/v1/cluster/status").await.1);
    let used: f64 = status_now.resources["CPU"].used.to_f64();
    assert!(used >= 3.0, "1 actor + 2 bundles: {used}");
    let (status, body) = f
        .post(
            "/api/v1/placement_groups",
            json!({"strategy": "STRICT_SPREAD", "bundles": [{"CPU": 1}, {"CPU": 1}, {"CPU": 1}]}),
        )
        .await;
    assert_eq!(status, 201);
    let three: Group = of(body);
    let (status, body) =
        f.get(&format!("/api/v1/placement_groups/{}/wait?timeout_s=0.2", three.group_id)).await;
    assert_eq!((status, body["error"].as_str()), (408, Some("timeout")));
    let (status, body) = f.post("/api/v1/placement_groups", json!({"bundles": []})).await;
    assert_eq!((status, body["field"].as_str()), (400, Some("bundles")), "{body}");
    let (status, body) = f
        .post("/api/v1/actors", json!({"command": "in-group", "resources": {"CPU": 1}, "scheduling_strategy": {"type": "PLACEMENT_GROUP", "group": group.group_id, "bundle": 1}}))
        .await;
    assert_eq!(status, 201, "{body}");
    let inside: Actor = of(body);
    assert_eq!(inside.node_id.as_deref(), Some(nodes[1]));
    let (status, body) = f
        .call(
            reqwest::Method::DELETE,
            &format!("/api/v1/placement_groups/{}", group.group_id),
            None,
        )
        .await;
    assert_eq!((status, body["state"].as_str()), (200, Some("REMOVED")));
    let view = f
        .until("the actor inside is dead", |v| {
            v.actor(&inside.actor_id).is_some_and(|a| a.state == berth_api::rest::ActorState::Dead)
        })
        .await;
    assert!(view.actor(&inside.actor_id).unwrap().death_reason.is_some());

    // Kill.
    let (status, body) =
        f.call(reqwest::Method::DELETE, &format!("/api/v1/actors/{}", actor.actor_id), None).await;
    assert_eq!((status, body["state"].as_str()), (200, Some("DEAD")));
    // Metrics and the OpenAPI document.
    let (status, body) = f.get("/api/v1/openapi.json").await;
    assert_eq!(status, 200);
    assert!(body["paths"]["/api/v1/actors"].is_object());
    let metrics = f
        .http
        .get(format!("{}/metrics", f.base))
        .bearer_auth(&f.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for family in [
        "berth_decisions_total",
        "berth_decision_seconds",
        "berth_pending",
        "berth_nodes",
        "berth_store_commit_seconds",
        "berth_owner_cycle_seconds",
        "berth_owner_commands_total",
    ] {
        assert!(metrics.contains(family), "{family} missing from /metrics");
    }
    // Counted from the view when scraped: both nodes alive, the infeasible task cancelled.
    for sample in [
        "berth_nodes{state=\"alive\"} 2",
        "berth_nodes{state=\"dead\"} 0",
        "berth_pending{kind=\"task\",waiting=\"infeasible\"} 0",
    ] {
        assert!(metrics.contains(sample), "{sample} missing from /metrics:\n{metrics}");
    }
    f.sim.shutdown().await.unwrap();
    f.head.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taints_keep_work_off_and_their_removal_wakes_it() {
    let f = fixture(vec![cpu("only", "2").taint("x", "y")]).await;
    let node = f.head.handle.view().node("only").unwrap();
    assert_eq!(node.taints.len(), 1, "the agent's static taint");
    // By address too (seed 004's --node-ip).
    let address = node.address.clone();
    let (status, body) =
        f.post(&format!("/api/v1/nodes/{address}/taints"), json!({"gpu_node": "true"})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) =
        f.call(reqwest::Method::DELETE, "/api/v1/nodes/only/taints", Some(json!({"x": "y"}))).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = f.post("/api/v1/nodes/only/taints", json!({"bad key!": "v"})).await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = f.post("/api/v1/nodes/ghost/taints", json!({"a": "b"})).await;
    assert_eq!(status, 404);
    // A new actor without the toleration waits, with the taint as its reason.
    let (_, body) =
        f.post("/api/v1/actors", json!({"command": "x", "resources": {"CPU": 1}})).await;
    let waiting: Actor = of(body);
    assert_eq!(waiting.state, berth_api::rest::ActorState::Pending);
    let diagnosis = waiting.diagnosis.expect("waits");
    assert!(
        diagnosis.reasons.iter().any(|r| r.code == "untolerated_taint:gpu_node=true"),
        "{diagnosis:?}"
    );
    // One that tolerates it goes there.
    let (_, body) = f.post("/api/v1/actors", json!({"command": "x", "resources": {"CPU": 1}, "tolerations": {"gpu_node": "exists()"}})).await;
    assert_eq!(of::<Actor>(body).node_id.as_deref(), Some("only"));
    // Removing the taint places the waiting one.
    let (status, _) = f
        .call(
            reqwest::Method::DELETE,
            "/api/v1/nodes/only/taints",
            Some(json!({"gpu_node": "true"})),
        )
        .await;
    assert_eq!(status, 200);
    f.until("the waiting actor is placed", |v| {
        v.actor(&waiting.actor_id).is_some_and(|a| a.node_id.as_deref() == Some("only"))
    })
    .await;
    f.sim.shutdown().await.unwrap();
    f.head.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_s_actors_move_and_a_drained_node_empties() {
    let mut f = fixture(vec![cpu("a", "4"), cpu("b", "4"), cpu("c", "4")]).await;
    let mut on_a = Vec::new();
    for _ in 0..3 {
        let (_, body) = f
            .post("/api/v1/actors", json!({"command": "x", "resources": {"CPU": 1}, "max_restarts": 3, "scheduling_strategy": {"type": "NODE_AFFINITY", "node_id": "a", "soft": true}}))
            .await;
        on_a.push(of::<Actor>(body));
    }
    assert!(on_a.iter().all(|a| a.node_id.as_deref() == Some("a")));
    f.until("all alive", |v| {
        on_a.iter().all(|a| {
            v.actor(&a.actor_id).is_some_and(|a| a.state == berth_api::rest::ActorState::Alive)
        })
    })
    .await;
    f.sim.kill("a").await.unwrap();
    let view = f
        .until("a is dead and its actors alive elsewhere", |v| {
            v.node("a").is_some_and(|n| n.state == berth_api::rest::NodeState::Dead)
                && on_a.iter().all(|a| {
                    v.actor(&a.actor_id).is_some_and(|a| {
                        a.state == berth_api::rest::ActorState::Alive
                            && a.node_id.as_deref() != Some("a")
                    })
                })
        })
        .await;
    assert!(on_a.iter().all(|a| view.actor(&a.actor_id).unwrap().restarts == 1));
    let dead = view.node("a").unwrap();
    assert_eq!((dead.resources["CPU"].used.to_string().as_str(), dead.actors), ("0", 0));
    assert!(dead.dead_reason.as_deref().unwrap().contains("heartbeat"), "{:?}", dead.dead_reason);
    // Drain b: its actors move to c, not counted as restarts; nothing new goes to b.
    let on_b: Vec<String> = view
        .actors
        .values()
        .filter(|a| a.node_id.as_deref() == Some("b"))
        .map(|a| a.actor_id.to_string())
        .collect();
    let (status, body) = f.post("/api/v1/nodes/b/drain", json!({})).await;
    assert_eq!((status, body["state"].as_str()), (200, Some("DRAINING")));
    let view = f
        .until("b is empty", |v| {
            v.actors.values().all(|a| a.node_id.as_deref() != Some("b"))
                && on_b.iter().all(|id| {
                    v.actor(id).is_some_and(|a| a.state == berth_api::rest::ActorState::Alive)
                })
        })
        .await;
    assert_eq!(
        view.actors.values().filter(|a| a.state == berth_api::rest::ActorState::Alive).count(),
        3
    );
    let (_, body) =
        f.post("/api/v1/actors", json!({"command": "x", "resources": {"CPU": 1}})).await;
    assert_eq!(of::<Actor>(body).node_id.as_deref(), Some("c"));
    let (status, _) = f.post("/api/v1/nodes/a/drain", json!({})).await;
    assert_eq!(status, 409, "a dead node cannot be drained");
    f.sim.shutdown().await.unwrap();
    f.head.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_follow_their_peers() {
    let f = fixture(vec![cpu("n1", "4"), cpu("n2", "4")]).await;
    let (_, body) = f
        .post("/api/v1/actors", json!({"command": "db", "resources": {"CPU": 1}, "labels": {"app": "db"}, "scheduling_strategy": {"type": "NODE_AFFINITY", "node_id": "n1"}}))
        .await;
    let db: Actor = of(body);
    let follower = json!({
        "command": "cache", "resources": {"CPU": 1},
        "scheduling_strategy": {"type": "ACTOR_AFFINITY", "on_peer_moved": "follow",
            "expressions": [{"key": "app", "operator": "IN", "values": ["db"]}]}
    });
    let (status, body) = f.post("/api/v1/actors", follower).await;
    assert_eq!(status, 201, "{body}");
    let cache: Actor = of(body);
    assert_eq!(cache.node_id.as_deref(), Some("n1"));
    // The peer goes away: the follower is stopped and waits for a peer.
    let (status, _) =
        f.call(reqwest::Method::DELETE, &format!("/api/v1/actors/{}", db.actor_id), None).await;
    assert_eq!(status, 200);
    let view = f
        .until("the follower waits", |v| {
            v.actor(&cache.actor_id)
                .is_some_and(|a| a.state == berth_api::rest::ActorState::Restarting)
        })
        .await;
    let waiting = view.actor(&cache.actor_id).unwrap();
    assert!(
        waiting.history.iter().any(|e| e.message.contains("on_peer_moved")),
        "{:?}",
        waiting.history
    );
    assert!(waiting
        .diagnosis
        .as_ref()
        .unwrap()
        .reasons
        .iter()
        .any(|r| r.code.starts_with("actor_affinity")));
    // A new peer on n2: the follower joins it there.
    let (_, body) = f
        .post("/api/v1/actors", json!({"command": "db", "resources": {"CPU": 1}, "labels": {"app": "db"}, "scheduling_strategy": {"type": "NODE_AFFINITY", "node_id": "n2"}}))
        .await;
    assert_eq!(of::<Actor>(body).node_id.as_deref(), Some("n2"));
    f.until("the follower runs next to the new peer", |v| {
        v.actor(&cache.actor_id).is_some_and(|a| {
            a.node_id.as_deref() == Some("n2") && a.state == berth_api::rest::ActorState::Alive
        })
    })
    .await;
    f.sim.shutdown().await.unwrap();
    f.head.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_reconnect_to_a_restarted_head_and_nothing_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = HeadConfig::new(dir.path());
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.heartbeat_interval = Duration::from_millis(50);
    config.heartbeat_timeout = Duration::from_secs(5);
    let head = berth_head::start(config.clone()).await.unwrap();
    let agent_token = head.agent_token.as_str().to_string();
    // Restart on the same port, so the agents find the new head where the old one was.
    config.bind = head.address;
    let sim = SimCluster::start(
        &head.address.to_string(),
        &agent_token,
        vec![cpu("a", "4"), cpu("b", "4")],
    )
    .unwrap();
    sim.wait_registered(Duration::from_secs(20)).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(
            head.handle
                .create_actor(berth_api::rest::ActorCreate {
                    command: "x".into(),
                    placement: berth_api::spec::PlacementSpec::from_json(
                        json!({"resources": {"CPU": 1}}),
                    )
                    .unwrap(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .actor_id,
        );
    }
    let alive = |v: &View| {
        ids.iter()
            .all(|id| v.actor(id).is_some_and(|a| a.state == berth_api::rest::ActorState::Alive))
    };
    let mut view = head.handle.subscribe();
    tokio::time::timeout(Duration::from_secs(20), async {
        while !alive(&view.borrow_and_update().clone()) {
            view.changed().await.unwrap();
        }
    })
    .await
    .expect("all alive");
    let sessions: Vec<u64> =
        ["a", "b"].iter().map(|n| sim.status(n).unwrap().registrations).collect();
    head.crash().await;
    let head = berth_head::start(config).await.unwrap();
    // The agents register again (their streams broke) and report what they run.
    sim.wait_until(Duration::from_secs(20), |node, status| {
        let before = if node == "a" { sessions[0] } else { sessions[1] };
        status.registrations > before && status.session.is_some()
    })
    .await
    .unwrap();
    let view = head.handle.view();
    for id in &ids {
        let actor = view.actor(id).unwrap();
        assert_eq!((actor.state, actor.restarts), (berth_api::rest::ActorState::Alive, 0), "{id}");
    }
    assert!(view.nodes.values().all(|n| n.state == berth_api::rest::NodeState::Alive));
    sim.shutdown().await.unwrap();
    head.shutdown().await;
}
