//! Standby heads on a shared store (a real `redis-server`, and a real three-member etcd
//! cluster): a second head waits while the first
//! holds the lease, says so on `/healthz` and answers 503 elsewhere; when the first dies
//! (killed, not stopped: the lease is never released) it takes over within the lease ttl and
//! a second, and the agents, given both addresses, register with it without restarting a
//! process. Every acknowledged actor is there, on the node and process it had.

use std::time::{Duration, Instant};

use berth_agent::{SimCluster, SimNode};
use berth_api::rest::{ActorCreate, ActorState};
use berth_head::{HeadConfig, RunningHead};
use berth_store::testutil::{EtcdCluster, RedisServer};
use berth_store::StoreConfig;

#[allow(dead_code)]
mod common;
use common::{process_options, until, Processes};

const TTL: Duration = Duration::from_secs(1);

fn config(store: &str, data: &std::path::Path) -> HeadConfig {
    let mut config = HeadConfig::new(data);
    config.store = StoreConfig::parse(store).unwrap();
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.heartbeat_interval = Duration::from_millis(50);
    // Longer than the takeover: the agents must not be declared dead meanwhile.
    config.heartbeat_timeout = Duration::from_secs(10);
    config.lease_ttl = TTL;
    // Each head has its own tokens in its data directory: the standby learns the active
    // head's from the store.
    config
}

async fn get(address: &str, token: &str, path: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("http://{address}{path}"))
        .bearer_auth(token)
        .send()
        .await
        .expect("the head answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_standby_takes_over_and_agents_follow_without_restarting_anything() {
    let redis = RedisServer::start_durable().expect("redis-server (scripts/test installs it)");
    // About 1 s (⅔ to 1 ttl and a poll); the bound only tells a hang from a slow machine.
    takeover(&redis.url(), Duration::from_secs(15)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_etcd_a_standby_takes_over_and_agents_follow_without_restarting_anything() {
    let etcd = EtcdCluster::start(3).expect("etcd (scripts/test installs etcd-server)");
    // etcd counts lease ttls in whole seconds, and its shortest is 1.5 election timeouts:
    // about 1.2 s here; the bound only tells a hang from a slow machine.
    takeover(&etcd.store_url("standby"), Duration::from_secs(15)).await;
}

/// Two heads on `store`; the first is killed; the second must serve within `within`.
async fn takeover(store: &str, within: Duration) {
    let (data_a, data_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first: RunningHead = berth_head::start(config(store, data_a.path())).await.unwrap();

    // The second head binds its port, finds the lease held, and stands by.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let standby_address = listener.local_addr().unwrap().to_string();
    let second_config = config(store, data_b.path());
    let second = tokio::spawn(berth_head::start_on(second_config, listener));
    let health: serde_json::Value =
        get(&standby_address, first.token.as_str(), "/healthz").await.json().await.unwrap();
    assert_eq!(health["status"], "standby", "{health}");
    // It names the active head by machine and digest, never by its data directory's path.
    let active = health["active"].as_str().unwrap();
    assert!(active.starts_with("head@") && active.contains('#'), "{health}");
    assert!(!active.contains(&data_a.path().display().to_string()), "{health}");
    let refused = get(&standby_address, first.token.as_str(), "/api/v1/nodes").await;
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("x-berth-active-head"));
    let body: serde_json::Value = refused.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("standby"), "{body}");

    // Agents that know both heads, running real processes.
    let processes = Processes(tempfile::tempdir().unwrap());
    let options = process_options(processes.0.path());
    let heads = format!("{},{standby_address}", first.address);
    let nodes =
        vec![SimNode::new("a").resource("CPU", "8"), SimNode::new("b").resource("CPU", "8")];
    let admin = first.token.as_str().to_string();
    let sim = SimCluster::start_with(&heads, first.agent_token.as_str(), nodes, options).unwrap();
    sim.wait_registered(Duration::from_secs(20)).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..6 {
        let actor = first
            .handle
            .create_actor(ActorCreate {
                name: Some(format!("svc-{i}").into()),
                command: "sleep".into(),
                args: vec!["600".into()].into(),
                placement: berth_api::spec::PlacementSpec::from_json(
                    serde_json::json!({"resources": {"CPU": 1}}),
                )
                .unwrap(),
                ..Default::default()
            })
            .await
            .unwrap();
        ids.push(actor.actor_id);
    }
    until(&first, "every actor is ALIVE", |v| {
        v.actors.values().filter(|a| a.state == ActorState::Alive).count() == ids.len()
    })
    .await;
    let before: Vec<(String, u32)> = ["a", "b"]
        .iter()
        .flat_map(|n| berth_agent::process::recorded(&processes.0.path().join(n)))
        .map(|p| (p.work_id.clone(), p.pid))
        .collect();
    assert_eq!(before.len(), ids.len(), "{before:?}");

    // The active head dies without releasing its lease.
    let killed = Instant::now();
    first.crash().await;
    let second = tokio::time::timeout(Duration::from_secs(20), second)
        .await
        .expect("the standby takes over")
        .unwrap()
        .expect("and starts");
    let takeover = killed.elapsed();
    assert!(takeover < within, "took over after {takeover:?}");
    let health: serde_json::Value =
        get(&standby_address, &admin, "/healthz").await.json().await.unwrap();
    assert_eq!(health["status"], "ok");
    // The first head's admin token works on the second.
    assert_eq!(get(&standby_address, &admin, "/api/v1/nodes").await.status(), 200);

    // Every acknowledged actor is there and stays ALIVE once the agents have registered
    // again; no process was started anew.
    until(&second, "both agents registered with the new head", |v| {
        v.nodes.values().filter(|n| n.state == berth_api::rest::NodeState::Alive).count() == 2
    })
    .await;
    until(&second, "every actor ALIVE on the new head", |v| {
        ids.iter()
            .all(|id| v.actors.values().any(|a| &a.actor_id == id && a.state == ActorState::Alive))
    })
    .await;
    let after: Vec<(String, u32)> = ["a", "b"]
        .iter()
        .flat_map(|n| berth_agent::process::recorded(&processes.0.path().join(n)))
        .map(|p| (p.work_id.clone(), p.pid))
        .collect();
    let mut sorted = (before.clone(), after.clone());
    sorted.0.sort();
    sorted.1.sort();
    assert_eq!(sorted.0, sorted.1, "the same processes, none restarted");
    let view = second.handle.view();
    for actor in view.actors.values() {
        assert_eq!(actor.restarts, 0, "{actor:?}");
    }
    println!("{store}: takeover {takeover:?} after the active head was killed (lease ttl {TTL:?})");
    sim.shutdown().await.unwrap();
    second.shutdown().await;
}
