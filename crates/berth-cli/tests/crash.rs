//! Real crashes of the head process: a `berth start --head` under concurrent creations kills
//! itself with SIGKILL at a chosen place of its commit path (the `failpoints` feature, which
//! these tests turn on: `berth-head/src/failpoint.rs`), then a new head process starts on the
//! same data directory and store. Every ID a client was answered 201 for must exist exactly
//! once, and no ID may be handed out again, whatever the place and the store.
//!
//! The places: before a cycle's commit (an answer sent before its commit would be lost there),
//! after the commit and before the answers (durable, unanswered), and halfway through applying
//! a batch. The stores: the embedded one (redb), Redis with the persistence the head requires
//! (`appendonly yes`, `appendfsync always`) and a three-member etcd cluster.
//!
//! The failed-commit path: the head stalls just before a commit, the Redis under it is killed
//! meanwhile, so that commit fails until the retry window runs out; its callers get 503, the
//! head steps down, and once Redis is back (from its append-only file) it serves again with
//! everything it acknowledged.
//!
//! The load: four clients (single actors, single tasks, placement groups, batches of 16
//! actors), each recording the IDs it was answered, until the head is gone. The work asks for
//! more CPU than the one agent has (8 of its 4), so it stays PENDING and nothing runs.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use berth_store::testutil::{EtcdCluster, RedisServer};
use serde_json::{json, Value};

mod common;
use common::cluster::{free_port, wait_for, Cluster, Daemon, WAIT};

/// Where the head stores its state.
enum Store {
    Embedded,
    Redis(RedisServer),
    Etcd(EtcdCluster),
}

impl Store {
    fn redis() -> Store {
        Store::Redis(
            RedisServer::start_durable()
                .unwrap_or_else(|e| panic!("redis-server (scripts/test installs it): {e}")),
        )
    }

    fn etcd() -> Store {
        Store::Etcd(
            EtcdCluster::start(3)
                .unwrap_or_else(|e| panic!("etcd (scripts/test installs etcd-server): {e}")),
        )
    }

    /// The head's `--store` flag, if not the embedded store.
    fn flag(&self, prefix: &str) -> Option<String> {
        match self {
            Store::Embedded => None,
            Store::Redis(server) => Some(server.store_url(prefix)),
            Store::Etcd(cluster) => Some(cluster.store_url(prefix)),
        }
    }
}

/// A head process on a fixed port (its agent finds it again after a restart), with
/// `BERTH_FAILPOINTS` set to `failpoints` when given.
fn head(
    cluster: &Cluster,
    port: u16,
    store: &Store,
    failpoints: Option<&str>,
    extra: &[&str],
) -> Daemon {
    let port = port.to_string();
    // Each test cluster its own namespace of the store.
    let prefix = cluster.data_dir().parent().and_then(|p| p.file_name()).expect("a temp dir");
    let prefix: String =
        prefix.to_string_lossy().chars().filter(char::is_ascii_alphanumeric).collect();
    let url = store.flag(&prefix);
    let mut args = vec!["start", "--head", "--port", &port];
    if let Some(url) = &url {
        args.extend(["--store", url]);
    }
    args.extend_from_slice(extra);
    let mut command = cluster.command(&args);
    match failpoints {
        Some(spec) => command.env("BERTH_FAILPOINTS", spec),
        None => command.env_remove("BERTH_FAILPOINTS"),
    };
    let mut daemon = cluster.spawn_command("head", command);
    cluster.wait_head(&mut daemon);
    if failpoints.is_some() {
        assert!(
            daemon.log().contains("BERTH_FAILPOINTS: armed"),
            "the head armed no failpoint: this berth binary was built without berth-head's \
             `failpoints` feature (cargo test -p berth-cli builds it with; a concurrent \
             `cargo build` replaces it)\n{}",
            daemon.log()
        );
    }
    daemon
}

/// What the clients were answered.
#[derive(Default)]
struct Acknowledged {
    /// Every ID answered with 201 (a batch item's too), in the order answered.
    ids: Vec<String>,
    /// Requests that failed (the head gone, or 503 while its store was away).
    failed: usize,
}

/// The creation each client sends, and where its answer holds the new IDs.
#[derive(Clone, Copy, Debug)]
enum Client {
    Actor,
    Task,
    Group,
    ActorBatch,
}

impl Client {
    const ALL: [Client; 4] = [Client::Actor, Client::Task, Client::Group, Client::ActorBatch];

    /// More CPU than the cluster's one agent has (8 of 4): accepted, PENDING, never started.
    fn request(self) -> (&'static str, Value) {
        let actor = json!({"command": "sleep", "args": ["600"], "resources": {"CPU": 8}});
        match self {
            Client::Actor => ("/api/v1/actors", actor),
            Client::Task => ("/api/v1/tasks", json!({"command": "true", "resources": {"CPU": 8}})),
            Client::Group => ("/api/v1/placement_groups", json!({"bundles": [{"CPU": 8}]})),
            Client::ActorBatch => {
                ("/api/v1/actors:batch", json!({"items": vec![actor; BATCH_ITEMS]}))
            }
        }
    }

    /// The IDs an answer with `status` holds.
    fn created(self, status: u16, answer: &Value) -> Vec<String> {
        let id = |object: &Value| {
            ["actor_id", "task_id", "group_id"]
                .iter()
                .find_map(|key| object[key].as_str())
                .unwrap_or_else(|| panic!("no ID in {object}"))
                .to_string()
        };
        match (self, status) {
            (Client::ActorBatch, 200) => answer["items"]
                .as_array()
                .unwrap_or_else(|| panic!("no items: {answer}"))
                .iter()
                .filter(|item| item["status"] == 201)
                .map(|item| id(&item["created"]))
                .collect(),
            (Client::ActorBatch, _) => Vec::new(),
            (_, 201) => vec![id(answer)],
            _ => Vec::new(),
        }
    }
}

/// An HTTP client (reqwest is built without a default TLS provider: the CLI installs one).
fn http() -> reqwest::blocking::Client {
    berth_client::install_crypto_provider();
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("an HTTP client")
}

/// Actors per batch request.
const BATCH_ITEMS: usize = 16;

/// How long a load lasts at most, whatever happens.
const LOAD_BOUND: Duration = Duration::from_secs(60);

/// Runs the four clients against `address` until `stop` is set, until each has seen the head
/// refuse connections `gone_after` times in a row (it died), or for [`LOAD_BOUND`]. Returns
/// what they were answered.
fn load(address: &str, token: &str, stop: &AtomicBool, gone_after: usize) -> Acknowledged {
    let started = std::time::Instant::now();
    let seen = Mutex::new(Acknowledged::default());
    thread::scope(|scope| {
        for client in Client::ALL {
            let seen = &seen;
            scope.spawn(move || {
                let http = http();
                let (path, body) = client.request();
                let url = format!("http://{address}{path}");
                let mut refused_in_a_row = 0;
                while !stop.load(Ordering::Relaxed)
                    && refused_in_a_row < gone_after
                    && started.elapsed() < LOAD_BOUND
                {
                    let answer = http.post(&url).bearer_auth(token).json(&body).send();
                    let answer = answer.and_then(|r| {
                        let status = r.status().as_u16();
                        r.json::<Value>().map(|v| (status, v))
                    });
                    let mut seen = seen.lock().unwrap();
                    match answer {
                        Ok((status, value)) => {
                            refused_in_a_row = 0;
                            let ids = client.created(status, &value);
                            if ids.is_empty() {
                                assert!(status == 503, "{client:?}: {status} {value}");
                                seen.failed += 1;
                            }
                            seen.ids.extend(ids);
                        }
                        Err(err) => {
                            seen.failed += 1;
                            if err.is_connect() {
                                refused_in_a_row += 1;
                                drop(seen);
                                thread::sleep(Duration::from_millis(20));
                            }
                        }
                    }
                }
            });
        }
    });
    seen.into_inner().unwrap()
}

/// Every actor, task and group ID the head lists, with how many times each is listed.
fn listed(address: &str, token: &str) -> BTreeMap<String, usize> {
    try_listed(address, token).unwrap_or_else(|e| panic!("{e}"))
}

/// [`listed`], or why the head did not answer.
fn try_listed(address: &str, token: &str) -> Result<BTreeMap<String, usize>, String> {
    let http = http();
    let mut all = BTreeMap::new();
    for (path, key) in
        [("actors", "actor_id"), ("tasks", "task_id"), ("placement_groups", "group_id")]
    {
        let url = format!("http://{address}/api/v1/{path}?limit=100000");
        let list: Value = http
            .get(&url)
            .bearer_auth(token)
            .send()
            .and_then(|r| r.error_for_status())
            .and_then(|r| r.json())
            .map_err(|e| format!("GET {url}: {e}"))?;
        let items = list["items"].as_array().ok_or(format!("no items: {list}"))?;
        assert_eq!(list["total"].as_u64(), Some(items.len() as u64), "all of {path} listed");
        for item in items {
            let id = item[key].as_str().unwrap_or_else(|| panic!("no {key}: {item}"));
            *all.entry(id.to_string()).or_insert(0) += 1;
        }
    }
    Ok(all)
}

/// IDs answered more than once: handed out twice.
fn repeated(ids: &[String]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    ids.iter().filter(|id| !seen.insert(id.as_str())).cloned().collect()
}

/// One crash: a head on `store` armed with `failpoints` dies of its SIGKILL under the load; a
/// new head on the same data directory and store must list every acknowledged ID exactly
/// once, and the IDs it hands out next must be new. Returns the figures for the report.
fn crash_at(store: &Store, failpoints: &str) -> String {
    let cluster = Cluster::new();
    let port = free_port();
    let mut first = head(&cluster, port, store, Some(failpoints), &[]);
    let address = format!("127.0.0.1:{port}");
    let token = std::fs::read_to_string(cluster.file("token")).expect("the admin token");
    let token = token.trim();
    let agent_token = std::fs::read_to_string(cluster.file("agent-token")).expect("agent token");
    let _agent = cluster.agent_of(&address, "n1", agent_token.trim());
    cluster.wait_node("n1", "ALIVE");

    let stop = AtomicBool::new(false);
    let before = load(&address, token, &stop, 25);
    let status = first.wait_exit(WAIT);
    assert_eq!(
        status.signal(),
        Some(9),
        "the head died of its armed SIGKILL ({failpoints}), not otherwise: {status}\n{}",
        first.log()
    );
    assert!(first.log().contains("failpoint: killing the head"), "{}", first.log());
    assert!(!before.ids.is_empty(), "{failpoints}: something was acknowledged before the crash");

    let mut second = head(&cluster, port, store, None, &[]);
    let listed_now = listed(&address, token);
    let lost: Vec<&String> = before.ids.iter().filter(|id| !listed_now.contains_key(*id)).collect();
    assert_eq!(lost.len(), 0, "{failpoints}: acknowledged, then lost in the crash: {lost:?}");
    let twice: Vec<&String> =
        listed_now.iter().filter(|(_, n)| **n > 1).map(|(id, _)| id).collect();
    assert_eq!(twice.len(), 0, "{failpoints}: listed more than once: {twice:?}");
    assert_eq!(repeated(&before.ids).len(), 0, "{failpoints}: answered twice");
    let node = cluster.wait_node("n1", "ALIVE");
    assert_eq!(cluster.nodes().len(), 1, "one node, once: {node}");

    // The new head numbers after everything the old one may have handed out.
    let stop_after = AtomicBool::new(false);
    let after = thread::scope(|scope| {
        let load = scope.spawn(|| load(&address, token, &stop_after, 25));
        wait_for("creations on the new head", WAIT, || {
            let n = listed(&address, token).len();
            (n >= listed_now.len() + 2 * Client::ALL.len())
                .then_some(())
                .ok_or(format!("{n} objects"))
        });
        stop_after.store(true, Ordering::Relaxed);
        load.join().expect("the load after the restart")
    });
    let all: Vec<String> = before.ids.iter().chain(&after.ids).cloned().collect();
    assert_eq!(repeated(&all), Vec::<String>::new(), "{failpoints}: an ID handed out again");
    let reused: Vec<&String> = after.ids.iter().filter(|id| listed_now.contains_key(*id)).collect();
    assert_eq!(reused.len(), 0, "{failpoints}: IDs of objects that existed: {reused:?}");
    second.assert_running();
    format!(
        "{failpoints}: {} acknowledged before the SIGKILL, 0 lost, 0 twice; {} listed after the \
         restart ({} committed unanswered or unacknowledged); {} new IDs after, none reused",
        before.ids.len(),
        listed_now.len(),
        listed_now.len() - before.ids.len(),
        after.ids.len()
    )
}

/// The places, armed after enough commits (or batches) that a load is under way.
/// The kill comes 200 ms after the place is reached, the rest of the head running meanwhile:
/// an answer sent too early would reach its client, and then be found lost.
const PLACES: [&str; 3] = [
    "commit-before=40*off->return(kill:200)",
    "commit-after=40*off->return(kill:200)",
    "batch-mid=6*off->return(kill:200)",
];

fn crashes_lose_nothing(store: &Store, name: &str) {
    for place in PLACES {
        let report = crash_at(store, place);
        println!("{name}: {report}");
    }
}

#[test]
fn a_head_killed_anywhere_in_its_commit_path_loses_nothing_on_the_embedded_store() {
    crashes_lose_nothing(&Store::Embedded, "embedded");
}

#[test]
fn a_head_killed_anywhere_in_its_commit_path_loses_nothing_on_redis() {
    crashes_lose_nothing(&Store::redis(), "redis");
}

#[test]
fn a_head_killed_anywhere_in_its_commit_path_loses_nothing_on_etcd() {
    crashes_lose_nothing(&Store::etcd(), "etcd");
}

/// The failed-commit path with a real store failure: the head stalls just before a commit,
/// Redis is killed meanwhile, the commit fails for the whole retry window (1 s), its callers
/// get 503, and the head steps down; Redis comes back from its append-only file and the head
/// serves again by itself, with everything it acknowledged and nothing it refused.
#[test]
fn a_commit_that_fails_is_never_acknowledged_and_the_head_serves_again() {
    let mut store = Store::redis();
    let cluster = Cluster::new();
    let port = free_port();
    let stall = "commit-before=30*off->return(stall:1500)";
    let mut head = head(&cluster, port, &store, Some(stall), &["--store-retry", "1"]);
    let address = format!("127.0.0.1:{port}");
    let token = std::fs::read_to_string(cluster.file("token")).expect("the admin token");
    let token = token.trim().to_string();

    let stop = AtomicBool::new(false);
    let seen = thread::scope(|scope| {
        let load = scope.spawn(|| load(&address, &token, &stop, usize::MAX));
        wait_for("the head stalls before a commit", WAIT, || {
            head.assert_running();
            let log = head.log();
            log.contains("failpoint: stalling here").then_some(()).ok_or(log)
        });
        let Store::Redis(server) = &mut store else { unreachable!() };
        server.kill().expect("kill redis-server");
        wait_for("the head steps down", WAIT, || {
            head.assert_running();
            let log = head.log();
            log.contains("stepping down").then_some(()).ok_or(log)
        });
        server.restart().expect("redis-server again, from its append-only file");
        wait_for("the head serves again", WAIT, || {
            head.assert_running();
            let log = head.log();
            (log.matches("head serving").count() >= 2).then_some(()).ok_or(log)
        });
        stop.store(true, Ordering::Relaxed);
        load.join().expect("the load")
    });
    assert!(seen.failed > 0, "some creations were refused while the store was away");
    let log = head.log();
    assert!(log.contains("store commit failed"), "{log}");
    let listed_now =
        wait_for("the head lists its objects again", WAIT, || try_listed(&address, &token));
    let lost: Vec<&String> = seen.ids.iter().filter(|id| !listed_now.contains_key(*id)).collect();
    assert_eq!(lost.len(), 0, "acknowledged, then lost: {lost:?}");
    assert_eq!(repeated(&seen.ids).len(), 0, "an ID answered twice");
    println!(
        "failed commit: {} acknowledged, {} refused while Redis was away, 0 lost; {} listed \
         after the head served again",
        seen.ids.len(),
        seen.failed,
        listed_now.len()
    );
}
