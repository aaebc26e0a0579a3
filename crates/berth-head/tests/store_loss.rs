//! What a head does when its store forgets or goes away, against real Redis and etcd servers
//! killed with SIGKILL: a store that lost acknowledged writes is refused (never two active
//! heads, never an ID handed out twice, never an agent told to stop the work it forgot), and a
//! store that is only away for a while is ridden out (writes refused with 503 meanwhile, the
//! head back by itself).

use std::time::{Duration, Instant};

use berth_api::agent::agent_service_client::AgentServiceClient;
use berth_api::agent::{RegisterRequest, RunningWork};
use berth_api::rest::ActorCreate;
use berth_head::config::StoreDurability;
use berth_head::{HeadConfig, HeadError, RunningHead, StartError, StopKind};
use berth_store::testutil::{EtcdCluster, RedisServer};
use berth_store::StoreConfig;
use tonic::transport::Channel;

/// Long enough for anything here to happen on a loaded machine; the tests wait for events,
/// this only bounds a hang.
const PATIENCE: Duration = Duration::from_secs(60);

fn config(data: &std::path::Path, store: &str) -> HeadConfig {
    let mut config = HeadConfig::new(data);
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.store = StoreConfig::parse(store).unwrap();
    config.heartbeat_interval = Duration::from_millis(100);
    config.heartbeat_timeout = Duration::from_secs(30);
    config.lease_ttl = Duration::from_secs(1);
    config
}

/// A Redis server that loses everything when killed, and a head told to run on it anyway.
fn forgetful(data: &std::path::Path, server: &RedisServer) -> HeadConfig {
    let mut config = config(data, &server.store_url("loss"));
    config.store_durability = StoreDurability::Relaxed;
    config
}

async fn agent(head: &RunningHead) -> AgentServiceClient<Channel> {
    let url = format!("http://{}", head.address);
    AgentServiceClient::new(Channel::from_shared(url).unwrap().connect().await.unwrap())
}

fn with_token<T>(head: &RunningHead, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let bearer = format!("Bearer {}", head.agent_token.as_str()).parse().unwrap();
    request.metadata_mut().insert("authorization", bearer);
    request
}

fn registration(running: &[&str]) -> RegisterRequest {
    RegisterRequest {
        node_id: "n1".into(),
        address: "127.0.0.1".into(),
        resources: [("CPU".into(), "8".into())].into(),
        running: running
            .iter()
            .map(|id| RunningWork { work_id: id.to_string(), attempt: 1 })
            .collect(),
        ..Default::default()
    }
}

fn sleeper() -> ActorCreate {
    ActorCreate {
        command: "sleep".into(),
        args: vec!["600".into()].into(),
        placement: berth_api::spec::PlacementSpec::from_json(
            serde_json::json!({"resources": {"CPU": 1}}),
        )
        .unwrap(),
        ..Default::default()
    }
}

/// `GET http://ADDRESS PATH` with `token`: the JSON answer.
async fn get_json(address: &str, token: &str, path: &str) -> serde_json::Value {
    let answer = reqwest::Client::new()
        .get(format!("http://{address}{path}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    answer.json().await.unwrap()
}

/// Waits for `stopped` with [`PATIENCE`].
async fn stop_of(head: &mut RunningHead) -> berth_head::Stop {
    tokio::time::timeout(PATIENCE, head.stopped()).await.expect("the head stopped")
}

/// Redis killed and restarted without its data under a head that had acknowledged work: the
/// head restarted on the same data directory refuses the store (its mark says more was
/// written) and never serves; a head that knows nothing (a new data directory) serves, but an
/// agent's report of work it never numbered stops it instead of that work; with
/// --accept-store-loss the loss is taken, the work stopped, and no ID is handed out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_forgot_is_refused_and_no_agent_is_told_to_stop_its_work() {
    let mut server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let data = tempfile::tempdir().unwrap();
    let head = berth_head::start(forgetful(data.path(), &server)).await.unwrap();
    let mut a = agent(&head).await;
    a.register(with_token(&head, registration(&[]))).await.unwrap();
    let mut acknowledged = Vec::new();
    for _ in 0..3 {
        acknowledged.push(head.handle.create_actor(sleeper()).await.unwrap().actor_id.to_string());
    }
    // The mark follows with the next lease renewal (a third of the ttl).
    let mark = data.path().join(berth_head::store_mark::MARK_FILE);
    let deadline = Instant::now() + PATIENCE;
    while !std::fs::read_to_string(&mark).unwrap_or_default().contains(r#""actors":3"#) {
        assert!(Instant::now() < deadline, "the mark never caught up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    head.crash().await;
    server.kill_and_restart().unwrap();

    // The same data directory remembers the store it wrote to.
    match berth_head::start(forgetful(data.path(), &server)).await {
        Err(err @ StartError::StoreBehind(_)) => {
            let message = err.to_string();
            assert!(message.contains("--accept-store-loss"), "{message}");
            assert!(message.contains("agents keep running"), "{message}");
        }
        other => panic!("a head went on over a store that lost its writes: {other:?}"),
    }

    // Accepted as it is, on the same data directory: new work is numbered after what the mark
    // says was handed out.
    let mut accepting = forgetful(data.path(), &server);
    accepting.accept_store_loss = true;
    let head = berth_head::start(accepting).await.unwrap();
    let next = head.handle.create_actor(sleeper()).await.unwrap().actor_id.to_string();
    assert!(!acknowledged.contains(&next), "{next} was handed out before");
    head.shutdown().await;
    server.kill_and_restart().unwrap();

    // A head with a new data directory cannot know, until an agent reports the lost work.
    let fresh = tempfile::tempdir().unwrap();
    let mut head = berth_head::start(forgetful(fresh.path(), &server)).await.unwrap();
    let mut a = agent(&head).await;
    let running: Vec<&str> = acknowledged.iter().map(String::as_str).collect();
    let refused = a.register(with_token(&head, registration(&running))).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().contains("never handed out"), "{}", refused.message());
    assert_eq!(stop_of(&mut head).await.kind, StopKind::StoreBehind);
    head.shutdown().await;

    // The operator accepts the loss: the work is stopped as unknown, and new work is numbered
    // after it.
    let mut accepting = forgetful(fresh.path(), &server);
    accepting.accept_store_loss = true;
    let head = berth_head::start(accepting).await.unwrap();
    let mut a = agent(&head).await;
    let reply = a.register(with_token(&head, registration(&running))).await.unwrap().into_inner();
    assert_eq!(reply.stop, acknowledged, "the lost work is stopped");
    let next = head.handle.create_actor(sleeper()).await.unwrap().actor_id.to_string();
    assert!(!acknowledged.contains(&next), "{next} was handed out before");
    head.shutdown().await;
}

/// Two heads on one Redis without persistence; the server killed with SIGKILL and restarted
/// at once, empty. Before, both heads then served under "epoch 1" and handed out the same IDs.
/// Now the active head stops (store behind) and the standby, which watched the store, refuses
/// to take it over: no head serves the forgetful store, and nothing is acknowledged on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_heads_on_a_redis_restarted_empty_never_both_serve() {
    let mut server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let (data_a, data_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut active = berth_head::start(forgetful(data_a.path(), &server)).await.unwrap();
    for _ in 0..5 {
        active.handle.create_actor(sleeper()).await.unwrap();
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let standby_address = listener.local_addr().unwrap();
    let standby = tokio::spawn(berth_head::start_on(forgetful(data_b.path(), &server), listener));
    // The standby answers as one (it polls the store, learning its history, every 200 ms).
    let client = reqwest::Client::new();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let health = client.get(format!("http://{standby_address}/healthz")).send().await;
        if let Ok(answer) = health {
            let body: serde_json::Value = answer.json().await.unwrap();
            if body["status"] == "standby" && body["active"].is_string() {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the standby never stood by");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let it poll after the writes above at least once more.
    tokio::time::sleep(Duration::from_millis(500)).await;

    server.kill_and_restart().unwrap();

    let created = active.handle.create_actor(sleeper()).await;
    assert!(matches!(created, Err(HeadError::Unavailable(_))), "acknowledged on it: {created:?}");
    assert_eq!(stop_of(&mut active).await.kind, StopKind::StoreBehind);
    match tokio::time::timeout(PATIENCE, standby).await.expect("the standby decided").unwrap() {
        Err(StartError::StoreBehind(err)) => assert!(err.is_behind(), "{err}"),
        Ok(head) => panic!("the standby serves the emptied store at {}", head.address),
        Err(other) => panic!("{other}"),
    }
    active.shutdown().await;
}

/// How long each blip test keeps its store away: longer than a few retries, well inside the
/// retry window the head is given.
const BLIP: Duration = Duration::from_secs(3);

/// The head under a store outage shorter than its retry window: a write in flight waits and is
/// acknowledged once the store is back; writes that come once the head knows are refused at
/// once with 503 naming the store; reads go on; the head resumes by itself, never stepping
/// down.
async fn rides_out(mut head: RunningHead, take_away: impl FnOnce(), bring_back: impl FnOnce()) {
    let before = head.handle.create_actor(sleeper()).await.expect("before the outage");
    take_away();
    let blip_started = Instant::now();
    let in_flight = {
        let handle = head.handle.clone();
        tokio::spawn(async move { handle.create_actor(sleeper()).await })
    };
    // Once the committer has seen the failure, later writes are refused at once.
    // Until then a write joins the one in flight: each attempt is given a moment only.
    let refusal = loop {
        let attempt = head.handle.create_actor(sleeper());
        match tokio::time::timeout(Duration::from_millis(200), attempt).await {
            Ok(Err(HeadError::Unavailable(message)))
                if message.contains("store is unavailable") =>
            {
                break message;
            }
            other => {
                assert!(blip_started.elapsed() < PATIENCE, "never refused: {other:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert!(refusal.contains("nothing was acknowledged"), "{refusal}");
    assert!(head.handle.view().actor(&before.actor_id).is_some(), "reads go on from memory");
    tokio::time::sleep(BLIP.saturating_sub(blip_started.elapsed())).await;
    bring_back();
    // The write sent right after the store went away either reached the owner before the
    // committer noticed (then it waited, and is acknowledged now) or came after (refused at
    // once): never lost, never acknowledged without the store.
    let first = tokio::time::timeout(PATIENCE, in_flight).await.expect("answered").unwrap();
    // The head finds the store back on its next commit retry (up to its longest backoff
    // later): until then a write is still refused at once, naming the store.
    let after = loop {
        match head.handle.create_actor(sleeper()).await {
            Ok(created) => break created,
            Err(HeadError::Unavailable(message)) if message.contains("store is unavailable") => {
                assert!(blip_started.elapsed() < PATIENCE, "never accepted again: {message}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(other) => panic!("writes accepted again: {other:?}"),
        }
    };
    match first {
        Ok(first) => {
            assert_ne!(first.actor_id, after.actor_id);
            assert!(head.handle.view().actor(&first.actor_id).is_some(), "acknowledged and kept");
        }
        Err(HeadError::Unavailable(message)) if message.contains("store is unavailable") => {}
        Err(other) => panic!("the write in flight: {other:?}"),
    }
    if let Ok(stop) = tokio::time::timeout(Duration::from_millis(500), head.stopped()).await {
        panic!("the head stopped: {stop:?}");
    }
    head.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_rides_out_a_redis_restart() {
    let server = std::sync::Arc::new(std::sync::Mutex::new(
        RedisServer::start_durable().unwrap_or_else(|e| panic!("{e}")),
    ));
    let data = tempfile::tempdir().unwrap();
    let url = server.lock().unwrap().store_url("blip");
    let mut config = config(data.path(), &url);
    config.store_retry = Some(PATIENCE);
    let head = berth_head::start(config).await.unwrap();
    let (down, up) = (server.clone(), server.clone());
    rides_out(
        head,
        move || down.lock().unwrap().kill().unwrap(),
        move || up.lock().unwrap().restart().unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_rides_out_an_etcd_quorum_loss() {
    let cluster = std::sync::Arc::new(std::sync::Mutex::new(
        EtcdCluster::start(3).unwrap_or_else(|e| panic!("{e}")),
    ));
    let data = tempfile::tempdir().unwrap();
    let url = cluster.lock().unwrap().store_url("blip");
    let mut config = config(data.path(), &url);
    config.store_retry = Some(PATIENCE);
    // Renewals fail during the outage too: a lease that outlives it keeps the head active.
    config.lease_ttl = Duration::from_secs(30);
    let head = berth_head::start(config).await.unwrap();
    let (down, up) = (cluster.clone(), cluster.clone());
    rides_out(
        head,
        move || {
            let mut cluster = down.lock().unwrap();
            cluster.kill(1);
            cluster.kill(2);
        },
        move || {
            let mut cluster = up.lock().unwrap();
            cluster.restart(1).unwrap();
            cluster.restart(2).unwrap();
        },
    )
    .await;
}

/// A Redis that can lose acknowledged writes (its default persistence) is refused at start,
/// naming both settings and the way to run on it anyway; with that, the head runs and says so
/// in the cluster status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_without_durable_persistence_is_refused_unless_relaxed() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let data = tempfile::tempdir().unwrap();
    let strict = config(data.path(), &server.store_url("durability"));
    match berth_head::start(strict).await {
        Err(err @ StartError::Config(_)) => {
            let message = err.to_string();
            for needed in ["appendonly", "appendfsync always", "--store-durability relaxed"] {
                assert!(message.contains(needed), "{needed}: {message}");
            }
        }
        other => panic!("a forgetful Redis accepted: {other:?}"),
    }
    let head = berth_head::start(forgetful(data.path(), &server)).await.unwrap();
    let status = head.handle.view().status();
    assert!(status.warnings.is_empty(), "the view alone knows nothing of the store");
    let answer =
        get_json(&head.address.to_string(), head.token.as_str(), "/api/v1/cluster/status").await;
    let warning = answer["warnings"][0].as_str().unwrap_or_default();
    assert!(warning.contains("durability relaxed") && warning.contains("appendonly"), "{answer}");
    head.shutdown().await;
}

/// A head whose store stays away longer than its retry window steps down instead of exiting:
/// `run` starts it again on the same socket once the store answers, and it serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_whose_store_stays_away_steps_down_and_comes_back() {
    berth_head::tls::install_crypto_provider();
    let server = std::sync::Arc::new(std::sync::Mutex::new(
        RedisServer::start_durable().unwrap_or_else(|e| panic!("{e}")),
    ));
    let data = tempfile::tempdir().unwrap();
    let mut config = config(data.path(), &server.lock().unwrap().store_url("away"));
    config.store_retry = Some(Duration::from_millis(500));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (served_tx, mut served) = tokio::sync::mpsc::unbounded_channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(berth_head::run(
        config,
        listener,
        async move {
            let _ = stopped.await;
        },
        move |head| {
            let _ = served_tx.send((head.handle.clone(), head.token.as_str().to_string()));
        },
    ));
    let (handle, _) = tokio::time::timeout(PATIENCE, served.recv()).await.unwrap().unwrap();
    handle.create_actor(sleeper()).await.expect("serving");
    server.lock().unwrap().kill().unwrap();
    // A write during the outage makes a commit wait: the window runs out and the head steps
    // down (the write is not acknowledged).
    let refused = handle.create_actor(sleeper()).await;
    assert!(matches!(refused, Err(HeadError::Unavailable(_))), "{refused:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.lock().unwrap().restart().unwrap();
    let (again, token) = tokio::time::timeout(PATIENCE, served.recv())
        .await
        .expect("it served again")
        .expect("still running");
    again.create_actor(sleeper()).await.expect("serving again");
    let health = get_json(&address.to_string(), &token, "/healthz").await;
    assert_eq!(health["status"], "ok", "{health}");
    stop.send(()).unwrap();
    running.await.unwrap().expect("a clean stop");
}
