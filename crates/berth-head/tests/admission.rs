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

/// `name` from `/metrics` (a counter or gauge without labels).
async fn metric(f: &Fixture, name: &str) -> f64 {
    let text = f.http.get(format!("{}/metrics", f.base)).bearer_auth(&f.token).send().await;
    let text = text.unwrap().text().await.unwrap();
    let line = text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| {
        panic!("no {name} in:\n{text}");
    });
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Reads from `stream` until the head closes it; panics if it sends anything first.
async fn closed_by_the_head(stream: &mut tokio::net::TcpStream, what: &str) {
    use tokio::io::AsyncReadExt;
    let mut buffer = [0u8; 256];
    let read = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buffer)).await;
    match read.unwrap_or_else(|_| panic!("{what}: still open")) {
        Ok(0) | Err(_) => {}
        Ok(n) => panic!("{what}: answered {:?}", String::from_utf8_lossy(&buffer[..n])),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_connections_never_keep_the_head_from_serving() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let mut config = HeadConfig::new(dir.path());
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.max_connections = 64;
    config.header_timeout = Duration::from_millis(500);
    let head = berth_head::start(config).await.unwrap();
    let token = head.token.as_str().to_string();
    let sim = SimCluster::start(
        &head.address.to_string(),
        head.agent_token.as_str(),
        vec![SimNode::new("n1").resource("CPU", "4")],
    )
    .unwrap();
    sim.wait_registered(Duration::from_secs(20)).await.unwrap();
    let base = format!("http://{}", head.address);
    let f = Fixture { head, _sim: sim, http: reqwest::Client::new(), base, token, _dir: dir };

    // 300 connections that never send a byte, then 20 that send half a request's headers:
    // far past the cap of 64. Each new one takes the place of the one idle longest.
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(tokio::net::TcpStream::connect(f.head.address).await.unwrap());
    }
    let mut slow = Vec::new();
    for _ in 0..20 {
        let mut stream = tokio::net::TcpStream::connect(f.head.address).await.unwrap();
        stream.write_all(b"POST /api/v1/tasks HTTP/1.1\r\nHost: head\r\nX-Slow: ").await.unwrap();
        slow.push(stream);
    }
    // The head still serves, a fresh connection each (reqwest's pool would keep one open).
    for _ in 0..5 {
        let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
        let status = client
            .get(format!("{}/api/v1/cluster/status", f.base))
            .bearer_auth(&f.token)
            .send()
            .await
            .unwrap();
        assert_eq!(status.status(), 200);
        let created = client
            .post(format!("{}/api/v1/tasks", f.base))
            .bearer_auth(&f.token)
            .json(&json!({"command": "true", "resources": {"CPU": 1}}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201);
    }
    assert!(metric(&f, "berth_connections").await <= 64.0);
    // Past the cap each one took an idle one's place, or (while 64 others waited for room)
    // was closed at once.
    let evicted = metric(&f, "berth_connections_evicted_total").await;
    let refused = metric(&f, "berth_connections_refused_total").await;
    assert!(evicted + refused >= 320.0 - 64.0, "{evicted} evicted, {refused} refused");
    // The first idle ones made room; the slow ones are cut off by the header timeout.
    closed_by_the_head(&mut idle[0], "the idlest connection").await;
    for (i, stream) in slow.iter_mut().enumerate() {
        closed_by_the_head(stream, &format!("slow connection {i}")).await;
    }
}

/// A 400 whose `field` is `field` and whose message holds `says`.
async fn refused(f: &Fixture, path: &str, body: Value, field: &str, says: &str) {
    let (status, answer) = f.call(Method::POST, path, Some(body)).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["field"], json!(field), "{answer}");
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(message.contains(says), "{field}: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_a_limit_or_with_a_trap_are_refused_or_hinted() {
    let f =
        fixture(vec![SimNode::new("n1").resource("CPU", "4").fact("market-type", "spot")]).await;
    let labels = |n: usize| -> Value {
        Value::Object((0..n).map(|i| (format!("k{i}"), json!("v"))).collect())
    };
    let task = |extra: Value| -> Value {
        let mut body = json!({"command": "true", "resources": {"CPU": 1}});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    // Counts past the limits, named with the limit.
    refused(&f, "/api/v1/actors", task(json!({"labels": labels(65)})), "labels", "more than 64")
        .await;
    let values: Vec<String> = (0..140_000).map(|i| format!("v{i}")).collect();
    let selector = json!({"label_selector": {"zone": format!("in({})", values.join(","))}});
    refused(&f, "/api/v1/tasks", task(selector), "label_selector.zone", "values per expression")
        .await;
    let group = json!({"bundles": vec![json!({"CPU": 0.001}); 60_000]});
    refused(&f, "/api/v1/placement_groups", group, "bundles", "bundles per placement group").await;
    // A million labels in one batch item (15 MiB): refused at the 65th.
    let batch = json!({"items": [task(json!({"labels": labels(1_000_000)}))]});
    refused(&f, "/api/v1/actors:batch", batch, "items.0.labels", "more than 64").await;
    // The dry run counts against the same limits.
    refused(&f, "/api/v1/explain", task(json!({"labels": labels(65)})), "labels", "more than 64")
        .await;

    // Traps: an amount that reads as 0, a name that displays as another.
    let (status, answer) = f
        .http
        .post(format!("{}/api/v1/tasks", f.base))
        .bearer_auth(&f.token)
        .body(r#"{"command": "true", "resources": {"CPU": 1e-400}}"#)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .map(|answer| (answer["field"].clone(), answer))
        .unwrap();
    assert_eq!(status, json!("resources.CPU"), "1e-400 reads as 0: {answer}");
    refused(&f, "/api/v1/tasks", task(json!({"name": "db\u{202e}gpj"})), "name", "U+202E").await;
    refused(&f, "/api/v1/actors", task(json!({"namespace": "a\u{200b}"})), "namespace", "U+200B")
        .await;

    // Slips accepted (a node may join) but hinted, and said without contradiction.
    let slip: Task =
        f.created("/api/v1/tasks", json!({"command": "true", "resources": {"cpu": 1}})).await;
    let why = slip.diagnosis.expect("it waits");
    assert!(
        why.summary.contains("0/1 nodes can take it now: no node has the resource"),
        "{}",
        why.summary
    );
    assert!(why.hints.iter().any(|h| h.contains("did you mean \"CPU\"")), "{:?}", why.hints);
    let prefix: Task =
        f.created("/api/v1/tasks", task(json!({"label_selector": {"market-type": "spot"}}))).await;
    let hints = prefix.diagnosis.expect("it waits").hints;
    assert!(
        hints.iter().any(|h| h.contains("label market-type; did you mean berth.io/market-type?")),
        "{hints:?}"
    );
}
