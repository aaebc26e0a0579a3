//! `GET /api/v1/watch` on a real head with simulated agents: every change, once, in order;
//! resumed from a version (query or `Last-Event-ID`) without a gap or a repeat; filters; and
//! the errors a client can get (a version too old or too new, a bad filter).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use berth_agent::{SimCluster, SimNode};
use berth_api::rest::ActorCreate;
use berth_head::{HeadConfig, RunningHead};
use serde_json::{json, Value};

struct Fixture {
    head: RunningHead,
    _sim: SimCluster,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut config = HeadConfig::new(dir.path());
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.heartbeat_timeout = Duration::from_secs(30);
    let head = berth_head::start(config).await.unwrap();
    let nodes = vec![SimNode::new("n1").resource("CPU", "1000").label("zone", "a")];
    let sim =
        SimCluster::start(&head.address.to_string(), head.agent_token.as_str(), nodes).unwrap();
    sim.wait_registered(Duration::from_secs(20)).await.unwrap();
    Fixture { head, _sim: sim, _dir: dir }
}

/// One server-sent event.
#[derive(Clone, Debug, PartialEq)]
struct Sse {
    id: Option<u64>,
    event: String,
    data: Value,
}

/// A watch stream being read.
struct Stream {
    response: reqwest::Response,
    buffer: String,
    events: VecDeque<Sse>,
}

impl Stream {
    async fn open(
        head: &RunningHead,
        query: &str,
        last_event_id: Option<u64>,
    ) -> Result<Stream, (u16, Value)> {
        let mut request = reqwest::Client::new()
            .get(format!("http://{}/api/v1/watch{query}", head.address))
            .bearer_auth(head.token.as_str());
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id.to_string());
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        if status != 200 {
            return Err((status, response.json().await.unwrap()));
        }
        let kind = response.headers()["content-type"].to_str().unwrap().to_string();
        assert!(kind.starts_with("text/event-stream"), "{kind}");
        Ok(Stream { response, buffer: String::new(), events: VecDeque::new() })
    }

    /// The next event (keep-alive comments skipped), bounded in time.
    async fn next(&mut self) -> Sse {
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                if let Some(event) = self.events.pop_front() {
                    return event;
                }
                let chunk = self.response.chunk().await.unwrap().expect("the stream goes on");
                self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
                while let Some(end) = self.buffer.find("\n\n") {
                    let block: String = self.buffer.drain(..end + 2).collect();
                    let mut sse = Sse { id: None, event: "message".into(), data: Value::Null };
                    let mut data = String::new();
                    for line in block.lines() {
                        if let Some(v) = line.strip_prefix("id:") {
                            sse.id = Some(v.trim().parse().unwrap());
                        } else if let Some(v) = line.strip_prefix("event:") {
                            sse.event = v.trim().to_string();
                        } else if let Some(v) = line.strip_prefix("data:") {
                            data.push_str(v.trim_start());
                        }
                    }
                    if !data.is_empty() {
                        sse.data = serde_json::from_str(&data).unwrap();
                        self.events.push_back(sse);
                    }
                }
            }
        })
        .await
        .expect("an event within 20 s")
    }
}

async fn create(head: &RunningHead, labels: &[(&str, &str)]) -> String {
    let actor = head
        .handle
        .create_actor(ActorCreate {
            command: "sleep".into(),
            placement: berth_api::spec::PlacementSpec::from_json(json!({"resources": {"CPU": 1}}))
                .unwrap(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..Default::default()
        })
        .await
        .unwrap();
    actor.actor_id.to_string()
}

/// (version, type, id, state) of a change event.
fn key(event: &Sse) -> (u64, String, String, String) {
    let d = &event.data;
    let id = d["object"]["actor_id"].as_str().or(d["object"]["node_id"].as_str()).unwrap_or("");
    (
        d["version"].as_u64().unwrap(),
        d["type"].as_str().unwrap().to_string(),
        id.to_string(),
        d["object"]["state"].as_str().unwrap_or("").to_string(),
    )
}

/// Reads `stream` until every actor of `ids` has been seen ALIVE; returns the events.
async fn until_alive(stream: &mut Stream, ids: &[String]) -> Vec<Sse> {
    let mut alive: BTreeMap<String, bool> = ids.iter().map(|id| (id.clone(), false)).collect();
    let mut seen = Vec::new();
    while alive.values().any(|a| !a) {
        let event = stream.next().await;
        assert_eq!(event.event, "change", "{event:?}");
        let (_, _, id, state) = key(&event);
        if state == "ALIVE" {
            alive.insert(id, true);
        }
        seen.push(event);
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_once_in_order_and_resumed_without_a_gap() {
    let f = fixture().await;
    // Without `since`: what exists first (the node), as ADDED.
    let mut all = Stream::open(&f.head, "", None).await.unwrap();
    let first = all.next().await;
    assert_eq!(key(&first).1, "ADDED");
    assert_eq!(key(&first).2, "n1");
    assert_eq!(first.id, first.data["version"].as_u64());

    let mut actors = Stream::open(&f.head, "?kind=actor", None).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..30 {
        ids.push(create(&f.head, &[]).await);
    }
    let seen = until_alive(&mut actors, &ids).await;
    // In order, no version twice; each actor ADDED (PENDING or ALIVE) before it is MODIFIED.
    let versions: Vec<u64> = seen.iter().map(|e| key(e).0).collect();
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
    for id in &ids {
        let mine: Vec<_> = seen.iter().map(key).filter(|k| &k.2 == id).collect();
        assert_eq!(mine[0].1, "ADDED", "{id}: {mine:?}");
        assert!(mine[1..].iter().all(|k| k.1 == "MODIFIED"), "{id}: {mine:?}");
        assert_eq!(mine.last().unwrap().3, "ALIVE");
    }
    assert!(seen.iter().all(|e| e.data["kind"] == "actor"));

    // Resumed from the 10th change: exactly what came after it, by query or by header.
    let from = versions[9];
    let after: Vec<_> = seen[10..].iter().map(key).collect();
    for (query, header) in
        [(format!("?kind=actor&since={from}"), None), ("?kind=actor".into(), Some(from))]
    {
        let mut resumed = Stream::open(&f.head, &query, header).await.unwrap();
        let mut got = Vec::new();
        while got.len() < after.len() {
            got.push(key(&resumed.next().await));
        }
        assert_eq!(got, after, "{query} {header:?}");
    }

    // Errors, before any event: too old (410, list again), too new and bad filters (400).
    let (status, body) = Stream::open(&f.head, "?since=1", None).await.err().unwrap();
    assert_eq!((status, body["error"].as_str()), (410, Some("expired")), "{body}");
    let newest = versions.last().unwrap() + 1_000_000;
    let (status, body) =
        Stream::open(&f.head, &format!("?since={newest}"), None).await.err().unwrap();
    assert_eq!((status, body["field"].as_str()), (400, Some("since")), "{body}");
    for (query, field) in [("?kind=pods", "kind"), ("?label=app", "label"), ("?since=x", "since")] {
        let (status, body) = Stream::open(&f.head, query, None).await.err().unwrap();
        assert_eq!((status, body["field"].as_str()), (400, Some(field)), "{query}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_by_label_id_and_state_and_many_watchers_each_see_theirs() {
    let f = fixture().await;
    const TEAMS: usize = 50;
    let mut watchers = Vec::new();
    for team in 0..TEAMS {
        watchers.push(
            Stream::open(&f.head, &format!("?kind=actor&label=team=t{team}"), None).await.unwrap(),
        );
    }
    let mut alive_only = Stream::open(&f.head, "?kind=actor&state=alive", None).await.unwrap();
    let mut ids: Vec<Vec<String>> = vec![Vec::new(); TEAMS];
    for round in 0..4 {
        for (team, mine) in ids.iter_mut().enumerate() {
            let _ = round;
            mine.push(create(&f.head, &[("team", &format!("t{team}"))]).await);
        }
    }
    let one = ids[3][2].clone();
    let mut by_id = Stream::open(&f.head, &format!("?id={one}"), None).await.unwrap();
    for (team, watcher) in watchers.iter_mut().enumerate() {
        let seen = until_alive(watcher, &ids[team]).await;
        for event in &seen {
            assert_eq!(event.data["object"]["spec"]["labels"]["team"], format!("t{team}"));
        }
        let added = seen.iter().filter(|e| key(e).1 == "ADDED").count();
        assert_eq!(added, ids[team].len(), "each actor ADDED once: {seen:?}");
    }
    // Every ALIVE change, and nothing else.
    let total: usize = ids.iter().map(Vec::len).sum();
    let mut alive = std::collections::BTreeSet::new();
    while alive.len() < total {
        let (_, _, id, state) = key(&alive_only.next().await);
        assert_eq!(state, "ALIVE");
        alive.insert(id);
    }
    // By ID: the object as it is now, then nothing of the others.
    let now = by_id.next().await;
    assert_eq!(key(&now).2, one);
}
