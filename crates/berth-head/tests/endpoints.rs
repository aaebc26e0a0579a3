//! What the SDKs' worker runtimes need from the head, end to end with real processes: the
//! work key reaches the process (and only it), an actor's process registers where it
//! listens, callers find the current attempt's endpoint (waiting for a restart), and a
//! driver waits for many tasks with one call.

use berth_agent::{SimCluster, SimNode};
use berth_api::rest::ActorState;
use berth_head::RunningHead;
use reqwest::Method;
use serde_json::{json, Value};

mod common;

struct Cluster {
    head: RunningHead,
    _sim: SimCluster,
    _processes: common::Processes,
    _data: tempfile::TempDir,
    http: reqwest::Client,
    base: String,
}

async fn cluster() -> Cluster {
    let (head, sim, processes, data) =
        common::cluster(vec![SimNode::new("n1").resource("CPU", "8")]).await;
    let base = format!("http://{}", head.address);
    Cluster {
        head,
        _sim: sim,
        _processes: processes,
        _data: data,
        http: reqwest::Client::new(),
        base,
    }
}

impl Cluster {
    async fn call(
        &self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if !token.is_empty() {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let token = self.head.token.as_str().to_string();
        self.call(method, path, &token, body).await
    }
}

/// A process that registers `127.0.0.1:4<attempt>` with its own environment, then exits
/// (attempt 1, so the head restarts it) or stays (later attempts).
const REGISTERS: &str = r#"
import json, os, sys, time, urllib.request
attempt = int(os.environ["BERTH_ATTEMPT"])
url = os.environ["BERTH_ADDRESS"] + "/api/v1/actors/" + os.environ["BERTH_ACTOR_ID"] + "/endpoint"
body = json.dumps({"attempt": attempt, "address": "127.0.0.1:4%d" % attempt}).encode()
request = urllib.request.Request(url, data=body, method="PUT", headers={
    "Authorization": "Bearer " + os.environ["BERTH_WORK_KEY"],
    "Content-Type": "application/json"})
urllib.request.urlopen(request).read()
if attempt == 1:
    sys.exit(3)
time.sleep(600)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_process_registers_and_callers_follow_it_across_a_restart() {
    let c = cluster().await;
    let (status, created) = c
        .admin(
            Method::POST,
            "/api/v1/actors",
            Some(json!({"command": "python3", "args": ["-c", REGISTERS], "max_restarts": 1, "resources": {}})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["actor_id"].as_str().unwrap().to_string();
    let key = created["work_key"].as_str().expect("the creator gets the work key").to_string();
    assert_eq!(key.len(), 64);
    let (_, read) = c.admin(Method::GET, &format!("/api/v1/actors/{id}"), None).await;
    assert!(read.get("work_key").is_none(), "later reads never show the key: {read}");
    assert!(!read.to_string().contains(&key), "nor anywhere else: {read}");

    // The first attempt registers (with the key its agent gave it) and exits; the second
    // registers too. A caller asking for a later attempt than 1 waits for the second.
    let path = format!("/api/v1/actors/{id}/endpoint");
    let (status, second) =
        c.admin(Method::GET, &format!("{path}?after_attempt=1&timeout_s=30"), None).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["endpoint"], json!({"address": "127.0.0.1:42", "attempt": 2}));
    assert_eq!(second["state"], "ALIVE");
    assert_eq!(second["work_key"], key.as_str());
    let (_, actor) = c.admin(Method::GET, &format!("/api/v1/actors/{id}"), None).await;
    assert_eq!(actor["restarts"], 1);
    assert_eq!(actor["endpoint"]["address"], "127.0.0.1:42");
    let listened = actor["history"].as_array().unwrap().iter().filter(|e| e["kind"] == "listening");
    assert_eq!(listened.count(), 2, "{actor}");

    // Only the current attempt's process may register, with the actor's key.
    let register = |attempt: u32, address: &str| json!({"attempt": attempt, "address": address});
    let (status, body) = c.call(Method::PUT, &path, &key, Some(register(1, "127.0.0.1:41"))).await;
    assert_eq!((status, body["error"].as_str()), (409, Some("conflict")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("that is attempt 2"), "{body}");
    let (status, body) = c.call(Method::PUT, &path, "", Some(register(2, "127.0.0.1:9"))).await;
    assert_eq!(status, 401, "{body}");
    assert!(body["message"].as_str().unwrap().contains("BERTH_WORK_KEY"), "{body}");
    let admin_token = c.head.token.as_str().to_string();
    let (status, _) =
        c.call(Method::PUT, &path, &admin_token, Some(register(2, "127.0.0.1:9"))).await;
    assert_eq!(status, 401, "an admin token is not the actor's key");
    for (address, field) in
        [("nowhere", "address"), ("127.0.0.1:0", "address"), ("a b:80", "address")]
    {
        let (status, body) = c.call(Method::PUT, &path, &key, Some(register(2, address))).await;
        assert_eq!((status, body["field"].as_str()), (400, Some(field)), "{address}: {body}");
    }
    let (status, body) = c
        .call(Method::PUT, &path, &key, Some(json!({"attempt": 2, "address": "h:1", "x": 1})))
        .await;
    assert_eq!(status, 400, "unknown fields are refused: {body}");

    // A read token may read the actor but not its key.
    let (status, made) = c
        .admin(Method::POST, "/api/v1/tokens", Some(json!({"name": "viewer", "role": "read"})))
        .await;
    assert_eq!(status, 201, "{made}");
    let read_token = made["secret"].as_str().unwrap().to_string();
    let (status, body) = c.call(Method::GET, &path, &read_token, None).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        c.call(Method::GET, &format!("/api/v1/actors/{id}"), &read_token, None).await.0,
        200
    );

    // Killed: a caller waiting for a later attempt hears that it is dead, without an endpoint.
    let (status, _) = c.admin(Method::DELETE, &format!("/api/v1/actors/{id}"), None).await;
    assert_eq!(status, 200);
    let (status, dead) =
        c.admin(Method::GET, &format!("{path}?after_attempt=2&timeout_s=30"), None).await;
    assert_eq!(status, 200, "{dead}");
    assert_eq!(dead["state"], "DEAD");
    assert!(dead.get("endpoint").is_none(), "{dead}");
    assert_eq!(dead["death_reason"], "killed by a user");
    common::until(&c.head, "the actor is dead in the view", |v| {
        v.actor(&id).is_some_and(|a| a.state == ActorState::Dead && a.endpoint.is_none())
    })
    .await;

    // Waiting for what will not come ends with 408; unknown actors are 404.
    let (status, _) = c.admin(Method::GET, "/api/v1/actors/actor-999/endpoint", None).await;
    assert_eq!(status, 404);
    let (status, body) = c.admin(Method::GET, &format!("{path}?timeout_s=-1"), None).await;
    assert_eq!((status, body["field"].as_str()), (400, Some("timeout_s")), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_waits_for_many_tasks_with_one_call() {
    let c = cluster().await;
    let submit = |command: &str, args: Value| json!({"command": command, "args": args, "resources": {"CPU": 1}});
    let (_, quick) = c.admin(Method::POST, "/api/v1/tasks", Some(submit("true", json!([])))).await;
    let (_, slow) =
        c.admin(Method::POST, "/api/v1/tasks", Some(submit("sleep", json!(["600"])))).await;
    assert_eq!(quick["work_key"].as_str().map(str::len), Some(64), "{quick}");
    let quick = quick["task_id"].as_str().unwrap().to_string();
    let slow = slow["task_id"].as_str().unwrap().to_string();

    let wait = |ids: Vec<&str>, timeout: f64| json!({"task_ids": ids, "timeout_s": timeout});
    let (status, answer) =
        c.admin(Method::POST, "/api/v1/tasks:wait", Some(wait(vec![&quick, &slow], 30.0))).await;
    assert_eq!(status, 200, "{answer}");
    let ended: Vec<&str> = answer["ended"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(ended, vec![quick.as_str()], "{answer}");
    assert_eq!(answer["ended"][0]["state"], "FINISHED");
    assert!(answer["ended"][0].get("work_key").is_none());

    // Nothing ended among these: empty after the timeout. Unknown IDs answer at once.
    let (status, answer) =
        c.admin(Method::POST, "/api/v1/tasks:wait", Some(wait(vec![&slow], 0.2))).await;
    assert_eq!((status, answer), (200, json!({"ended": [], "unknown": []})));
    let (_, answer) = c
        .admin(Method::POST, "/api/v1/tasks:wait", Some(wait(vec![&slow, "task-999"], 30.0)))
        .await;
    assert_eq!(answer, json!({"ended": [], "unknown": ["task-999"]}));

    // Bad input names the field.
    for (body, field) in [
        (wait(vec![], 1.0), "task_ids"),
        (wait(vec![&slow], -1.0), "timeout_s"),
        (wait(vec![&slow], 601.0), "timeout_s"),
        (json!({"task_ids": [slow.clone()], "extra": 1}), ""),
    ] {
        let (status, answer) =
            c.admin(Method::POST, "/api/v1/tasks:wait", Some(body.clone())).await;
        assert_eq!(status, 400, "{body}: {answer}");
        if !field.is_empty() {
            assert_eq!(answer["field"], field, "{body}: {answer}");
        }
    }
    let many: Vec<String> = (0..10_001).map(|i| format!("task-{i}")).collect();
    let (status, answer) =
        c.admin(Method::POST, "/api/v1/tasks:wait", Some(json!({"task_ids": many}))).await;
    assert_eq!((status, answer["field"].as_str()), (400, Some("task_ids")), "{answer}");
    let (_, _) = c.admin(Method::POST, &format!("/api/v1/tasks/{slow}/cancel"), None).await;
}
