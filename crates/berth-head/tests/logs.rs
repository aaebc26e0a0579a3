//! `GET /api/v1/logs/{id}` end to end: a real head on port 0, simulated agents running real
//! processes (`RunnerKind::Process`) and one without processes (`RunnerKind::Ack`), a real
//! HTTP client. An actor's stdout and stderr, a followed log read as it grows, a finished
//! task, and every error answer (400, 401, 404, 409).
//!
//! Every wait is bounded and on observable state (the published view, or the answer itself);
//! every process the runners started is killed when a test ends, passing or failing.

#![cfg(target_os = "linux")]

use std::sync::Arc;
use std::time::Duration;

use berth_agent::{RunnerKind, SimCluster, SimNode, SimOptions};
use berth_api::rest::{Actor, ActorState, ApiError, ErrorKind, NodeState, TaskState};
use berth_head::{HeadConfig, RunningHead, View};
use serde_json::{json, Value};

/// The longest any wait lasts.
const WAIT: Duration = Duration::from_secs(30);

/// The runners' directories; killing what they record when dropped (runners never kill on drop,
/// so a failing test would otherwise leave its `sleep 600` behind).
struct Processes(tempfile::TempDir);

impl Drop for Processes {
    fn drop(&mut self) {
        for entry in std::fs::read_dir(self.0.path()).into_iter().flatten().flatten() {
            berth_agent::process::kill_recorded(&entry.path());
        }
    }
}

struct Fixture {
    head: RunningHead,
    /// Nodes `p1` (and `p2`) running processes, labelled `runs=processes`.
    processes: SimCluster,
    /// Node `a1`, without processes (an `AckRunner`), labelled `runs=nothing`.
    ack: SimCluster,
    http: reqwest::Client,
    base: String,
    token: String,
    _dirs: (tempfile::TempDir, Processes),
}

async fn fixture(process_nodes: &[&str]) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let runners = Processes(tempfile::tempdir().unwrap());
    let mut config = HeadConfig::new(dir.path());
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.heartbeat_interval = Duration::from_millis(50);
    config.heartbeat_timeout = Duration::from_millis(600);
    let head = berth_head::start(config).await.unwrap();
    let token = head.token.as_str().to_string();
    let address = head.address.to_string();
    let nodes = process_nodes
        .iter()
        .map(|id| SimNode::new(*id).resource("CPU", "4").label("runs", "processes"))
        .collect();
    let options = SimOptions {
        runner: RunnerKind::Process {
            root: runners.0.path().to_path_buf(),
            grace: Duration::from_secs(2),
            keeper: None,
        },
        ..SimOptions::default()
    };
    let agent_token = head.agent_token.as_str().to_string();
    let processes = SimCluster::start_with(&address, &agent_token, nodes, options).unwrap();
    let ack_nodes = vec![SimNode::new("a1").resource("CPU", "4").label("runs", "nothing")];
    let ack = SimCluster::start(&address, &agent_token, ack_nodes).unwrap();
    processes.wait_registered(WAIT).await.unwrap();
    ack.wait_registered(WAIT).await.unwrap();
    let base = format!("http://{}", head.address);
    Fixture {
        head,
        processes,
        ack,
        http: reqwest::Client::new(),
        base,
        token,
        _dirs: (dir, runners),
    }
}

/// An actor body running `script` with `sh -c` on a node labelled `runs=<runs>`.
fn shell_actor(script: &str, runs: &str) -> Value {
    json!({
        "command": "sh",
        "args": ["-c", script],
        "resources": {"CPU": 1},
        "label_selector": {"runs": runs},
    })
}

/// A reply: status, content type, body text.
struct Reply {
    status: u16,
    content_type: String,
    text: String,
}

impl Reply {
    fn error(&self) -> ApiError {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not an ApiError ({e}): {} {}", self.status, self.text))
    }
}

impl Fixture {
    async fn post(&self, path: &str, body: Value) -> Value {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 201, "POST {path}");
        response.json().await.unwrap()
    }

    async fn get(&self, path: &str) -> Reply {
        let response = tokio::time::timeout(
            WAIT,
            self.http.get(format!("{}{path}", self.base)).bearer_auth(&self.token).send(),
        )
        .await
        .unwrap_or_else(|_| panic!("GET {path} did not answer within {WAIT:?}"))
        .unwrap();
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let text = tokio::time::timeout(WAIT, response.text())
            .await
            .unwrap_or_else(|_| panic!("GET {path}: the body did not end within {WAIT:?}"))
            .unwrap();
        Reply { status, content_type, text }
    }

    /// Asks for `path` until `done` holds on the reply (bounded): the output is written by the
    /// process some time after it started, and a new agent's log stream opens just after it
    /// registers.
    async fn get_until(&self, path: &str, done: impl Fn(&Reply) -> bool) -> Reply {
        let start = tokio::time::Instant::now();
        loop {
            let reply = self.get(path).await;
            if done(&reply) {
                return reply;
            }
            if start.elapsed() > WAIT {
                panic!("GET {path}: still {} {}", reply.status, reply.text);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (bounded) until `done` holds on the published view.
    async fn until(&self, what: &str, done: impl Fn(&View) -> bool) -> Arc<View> {
        let mut view = self.head.handle.subscribe();
        tokio::time::timeout(WAIT, async {
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

    async fn alive(&self, id: &str) -> Arc<Actor> {
        let view = self
            .until(&format!("{id} is ALIVE"), |v| {
                v.actor(id).is_some_and(|a| a.state == ActorState::Alive)
            })
            .await;
        view.actor(id).unwrap()
    }

    async fn shutdown(self) {
        self.processes.shutdown().await.unwrap();
        self.ack.shutdown().await.unwrap();
        self.head.shutdown().await;
    }
}

/// True when `text` has a line that is exactly `line`.
fn has_line(text: &str, line: &str) -> bool {
    text.lines().any(|l| l == line)
}

fn id_of(actor: &Value) -> String {
    actor["actor_id"].as_str().expect("an actor ID").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actors_stdout_and_stderr_come_from_its_node() {
    let f = fixture(&["p1"]).await;
    let actor = f
        .post("/api/v1/actors", shell_actor("echo hello; echo oops >&2; sleep 600", "processes"))
        .await;
    let id = id_of(&actor);
    assert_eq!(f.alive(&id).await.node_id.as_deref(), Some("p1"));

    let out = f
        .get_until(&format!("/api/v1/logs/{id}"), |r| r.status == 200 && r.text.contains("hello"))
        .await;
    assert!(out.content_type.starts_with("text/plain"), "{}", out.content_type);
    assert!(
        out.text.starts_with(&format!("=== berth: {id} attempt 1 starting at ")),
        "{}",
        out.text
    );
    // (The header line shows the command, `echo oops` included: look at whole lines.)
    assert!(!has_line(&out.text, "oops"), "{}", out.text);
    let err = f
        .get_until(&format!("/api/v1/logs/{id}?stream=err"), |r| {
            r.status == 200 && has_line(&r.text, "oops")
        })
        .await;
    assert!(!has_line(&err.text, "hello"), "{}", err.text);
    // `stream=out` is the default; an offset skips what was read already.
    let at = out.text.find("\nhello\n").unwrap() + 1;
    let tail = f.get(&format!("/api/v1/logs/{id}?stream=out&follow=false&offset={at}")).await;
    assert_eq!((tail.status, tail.text.as_str()), (200, "hello\n"));
    let beyond = f.get(&format!("/api/v1/logs/{id}?offset=1000000")).await;
    assert_eq!((beyond.status, beyond.text.as_str()), (200, ""));
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_log_streams_new_lines_as_they_are_written() {
    let f = fixture(&["p1"]).await;
    let script = "i=0; while true; do echo line$i; i=$((i+1)); sleep 0.1; done";
    let id = id_of(&f.post("/api/v1/actors", shell_actor(script, "processes")).await);
    f.alive(&id).await;
    // Wait until the agent serves (its first lines are there), then follow from the start.
    f.get_until(&format!("/api/v1/logs/{id}"), |r| r.status == 200).await;
    let mut response = f
        .http
        .get(format!("{}/api/v1/logs/{id}?follow=true", f.base))
        .bearer_auth(&f.token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["berth-node-id"], "p1");
    let mut text = String::new();
    let want: Vec<String> = (0..=5).map(|i| format!("line{i}\n")).collect();
    tokio::time::timeout(WAIT, async {
        while !want.iter().all(|line| text.contains(line.as_str())) {
            let chunk = response.chunk().await.unwrap().expect("the followed answer stays open");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("line0 to line5 did not all come within {WAIT:?}:\n{text}"));
    let positions: Vec<usize> = want.iter().map(|line| text.find(line.as_str()).unwrap()).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "out of order:\n{text}");
    // Still open: more lines keep coming.
    let more = tokio::time::timeout(WAIT, response.chunk()).await.unwrap().unwrap();
    assert!(more.is_some_and(|c| !c.is_empty()));

    // The actor is killed: the followed answer reads what is left and ends by itself.
    let killed = f
        .http
        .delete(format!("{}/api/v1/actors/{id}", f.base))
        .bearer_auth(&f.token)
        .send()
        .await
        .unwrap();
    assert_eq!(killed.status().as_u16(), 200);
    tokio::time::timeout(WAIT, async { while response.chunk().await.unwrap().is_some() {} })
        .await
        .expect("the followed answer ends once the actor is dead");
    // A DEAD actor's log is still there (its node is alive), and following it just reads it.
    let after = f.get(&format!("/api/v1/logs/{id}?follow=true")).await;
    assert_eq!(after.status, 200);
    assert!(after.text.contains("line5\n"), "{}", after.text);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_task_keeps_its_output() {
    let f = fixture(&["p1"]).await;
    let body = json!({
        "command": "sh",
        "args": ["-c", "echo done-output; echo done-error >&2"],
        "resources": {"CPU": 1},
        "label_selector": {"runs": "processes"},
    });
    let task = f.post("/api/v1/tasks", body).await;
    let id = task["task_id"].as_str().unwrap().to_string();
    f.until(&format!("{id} is FINISHED"), |v| {
        v.task(&id).is_some_and(|t| t.state == TaskState::Finished)
    })
    .await;
    let out = f.get_until(&format!("/api/v1/logs/{id}?follow=true"), |r| r.status == 200).await;
    assert!(
        has_line(&out.text, "done-output") && !has_line(&out.text, "done-error"),
        "{}",
        out.text
    );
    let err = f.get(&format!("/api/v1/logs/{id}?stream=err")).await;
    assert!(
        has_line(&err.text, "done-error") && !has_line(&err.text, "done-output"),
        "{}",
        err.text
    );
    assert!(
        err.text.contains(&format!("=== berth: {id} attempt 1 exited with code 0")),
        "{}",
        err.text
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_unknown_ids_and_missing_tokens_are_refused() {
    let f = fixture(&["p1"]).await;
    let id = id_of(&f.post("/api/v1/actors", shell_actor("sleep 600", "processes")).await);
    f.alive(&id).await;
    for (query, field) in [
        ("stream=xx", "stream"),
        ("follow=yes", "follow"),
        ("offset=-1", "offset"),
        ("offset=x", "offset"),
    ] {
        let reply = f.get(&format!("/api/v1/logs/{id}?{query}")).await;
        assert_eq!(reply.status, 400, "{query}: {}", reply.text);
        let error = reply.error();
        assert_eq!(error.error, ErrorKind::Invalid);
        assert_eq!(error.field.as_deref(), Some(field), "{query}: {}", reply.text);
    }
    for unknown in ["actor-999", "task-1", "nothing", "actor-01"] {
        let reply = f.get(&format!("/api/v1/logs/{unknown}")).await;
        assert_eq!(reply.status, 404, "{unknown}: {}", reply.text);
        assert_eq!(reply.error().error, ErrorKind::NotFound);
    }
    let group = f.get("/api/v1/logs/pg-1").await;
    assert_eq!(group.status, 400, "{}", group.text);
    assert!(group.error().message.contains("only actors and tasks have logs"), "{}", group.text);
    for token in [None, Some("wrong")] {
        let mut request = f.http.get(format!("{}/api/v1/logs/{id}", f.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), 401, "{token:?}");
        let body: ApiError = response.json().await.unwrap();
        assert_eq!(body.error, ErrorKind::Unauthorized);
    }
    // The route is in the OpenAPI document, with its query parameters.
    let doc: Value = serde_json::from_str(&f.get("/api/v1/openapi.json").await.text).unwrap();
    let operation = &doc["paths"]["/api/v1/logs/{id}"]["get"];
    let params: Vec<&str> = operation["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(params, ["id", "stream", "follow", "offset"]);
    assert!(operation["responses"]["200"]["content"]["text/plain"].is_object(), "{operation}");
    assert!(operation["responses"]["401"].is_object() && operation["security"].is_array());
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_without_reachable_logs_is_a_conflict_saying_why() {
    let mut f = fixture(&["p1"]).await;
    // On a node that runs no processes: its agent keeps no logs.
    let on_ack = id_of(&f.post("/api/v1/actors", shell_actor("sleep 600", "nothing")).await);
    assert_eq!(f.alive(&on_ack).await.node_id.as_deref(), Some("a1"));
    let reply =
        f.get_until(&format!("/api/v1/logs/{on_ack}"), |r| r.text.contains("keeps no logs")).await;
    assert_eq!(reply.status, 409, "{}", reply.text);
    let error = reply.error();
    assert_eq!(error.error, ErrorKind::Conflict);
    assert!(error.message.contains("node a1"), "{}", error.message);

    // Never placed: no node has 64 CPUs.
    let mut body = shell_actor("sleep 600", "processes");
    body["resources"] = json!({"CPU": 64});
    let pending = id_of(&f.post("/api/v1/actors", body).await);
    let reply = f.get(&format!("/api/v1/logs/{pending}")).await;
    assert_eq!(reply.status, 409, "{}", reply.text);
    assert!(reply.error().message.contains("never placed"), "{}", reply.text);

    // Its node died: the actor waits to restart, its log stays on the dead machine.
    let on_p1 =
        id_of(&f.post("/api/v1/actors", shell_actor("echo hi; sleep 600", "processes")).await);
    f.alive(&on_p1).await;
    f.get_until(&format!("/api/v1/logs/{on_p1}"), |r| r.status == 200 && r.text.contains("hi"))
        .await;
    f.processes.kill("p1").await.unwrap();
    f.until("p1 is DEAD", |v| v.node("p1").is_some_and(|n| n.state == NodeState::Dead)).await;
    let reply = f.get(&format!("/api/v1/logs/{on_p1}")).await;
    assert_eq!(reply.status, 409, "{}", reply.text);
    let message = reply.error().message;
    assert!(message.contains("node p1") && message.contains("DEAD"), "{message}");
    // The node comes back (its process still runs): the log is readable again.
    f.processes.restart("p1").await.unwrap();
    f.get_until(&format!("/api/v1/logs/{on_p1}"), |r| r.status == 200 && r.text.contains("hi"))
        .await;
    f.shutdown().await;
}
