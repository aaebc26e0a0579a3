//! The HTTP mapping alone: a [`HeadHandle`] over a hand-made [`View`] and, where a command
//! goes to the owner, a stand-in owner that answers as told. The real owner is tested end to
//! end elsewhere.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::Router;
use berth_api::rest::{
    Actor, ActorCreate, ActorState, Bundle, DryRun, Group, GroupCreate, GroupState, Job, JobCreate,
    JobState, Node, NodeState, Task, TaskState,
};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tower::ServiceExt;

use super::router;
use crate::command::Command;
use crate::error::HeadError;
use crate::handle::HeadHandle;
use crate::ids::Sequences;
use crate::metrics::Metrics;

use crate::view::View;

const TOKEN: &str = "test-token-0123456789";

fn node(id: &str, address: &str, state: NodeState, labels: &[(&str, &str)]) -> Node {
    Node {
        node_id: id.into(),
        address: address.into(),
        state,
        labels: Arc::new(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
        taints: vec![],
        resources: Default::default(),
        actors: 0,
        tasks: 0,
        registered_at_ms: 1,
        dead_reason: None,
        history: Vec::new(),
        measured: None,
    }
}

fn actor(seq: u64, state: ActorState, node: Option<&str>, labels: &[(&str, &str)]) -> Actor {
    Actor {
        endpoint: None,
        work_key: None,
        actor_id: format!("actor-{seq}").into(),
        name: None,
        namespace: "default".into(),
        state,
        node_id: node.map(Arc::from),
        instances: BTreeMap::new(),
        restarts: 0,
        death_reason: None,
        diagnosis: None,
        history: Default::default(),
        created_at_ms: 1,
        spec: Arc::new(ActorCreate {
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            command: "sleep".into(),
            placement: berth_api::spec::PlacementSpec::from_json(json!({"resources": {"CPU": 1}}))
                .unwrap(),
            ..Default::default()
        }),
    }
}

fn task(seq: u64) -> Task {
    Task {
        work_key: None,
        task_id: format!("task-{seq}").into(),
        name: None,
        namespace: "default".into(),
        state: TaskState::Running,
        node_id: Some("node-1".into()),
        instances: BTreeMap::new(),
        attempts: 1,
        exit_code: None,
        failure: None,
        diagnosis: None,
        history: Default::default(),
        created_at_ms: 1,
        spec: Default::default(),
    }
}

fn group(seq: u64, state: GroupState) -> Group {
    Group {
        idempotency_key: None,
        group_id: format!("pg-{seq}"),
        name: None,
        namespace: "default".into(),
        strategy: "PACK".into(),
        state,
        alternative: None,
        bundles: vec![Bundle { index: 0, resources: BTreeMap::new(), node_id: None }],
        diagnosis: None,
        history: Default::default(),
        created_at_ms: 1,
        spec: GroupCreate::default(),
    }
}

fn job(seq: u64, state: JobState) -> Job {
    Job {
        job_id: format!("job-{seq}"),
        state,
        lease_ms: 30_000,
        ended_at_ms: None,
        end_reason: None,
        history: Default::default(),
        created_at_ms: 1,
        spec: JobCreate::default(),
    }
}

fn sample_view() -> View {
    let mut view = View::default();
    for n in [
        node("node-1", "10.0.0.1", NodeState::Alive, &[("zone", "a")]),
        node("node-2", "10.0.0.2", NodeState::Dead, &[("zone", "b")]),
    ] {
        view.nodes.insert(n.node_id.clone(), Arc::new(n));
    }
    view.actors.insert(1, Arc::new(actor(1, ActorState::Alive, Some("node-1"), &[("app", "web")])));
    view.actors.insert(2, Arc::new(actor(2, ActorState::Pending, None, &[("app", "db")])));
    view.tasks.insert(1, Arc::new(task(1)));
    view.groups.insert(1, Arc::new(group(1, GroupState::Pending)));
    view.jobs.insert(1, Arc::new(job(1, JobState::Running)));
    view
}

struct Harness {
    router: Router,
    commands: mpsc::Receiver<Command>,
    view: watch::Sender<Arc<View>>,
    metrics: Arc<Metrics>,
    measurements: Arc<crate::measured::Measurements>,
}

fn harness() -> Harness {
    let (commands_tx, commands) = mpsc::channel(16);
    let (view, view_rx) = watch::channel(Arc::new(sample_view()));
    let handle = HeadHandle {
        commands: commands_tx,
        view: view_rx,
        sequences: Arc::new(Sequences::default()),
        work_keys: Arc::new(crate::work_keys::WorkKeys::with_secret(&[7; 32])),
        store: Arc::default(),
        limits: Arc::default(),
        measurements: Arc::default(),
    };
    let measurements = handle.measurements.clone();
    let metrics = Arc::new(Metrics::new());
    let router =
        router(handle, crate::keyring::Keyring::in_memory(TOKEN, "agent-secret"), metrics.clone());
    Harness { router, commands, view, metrics, measurements }
}

/// A stand-in owner: answers every command with `answer` (the kind of object asked for is
/// given so a success can be built).
fn owner(
    mut commands: mpsc::Receiver<Command>,
    fail: Option<HeadError>,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let mut seen = 0;
        while let Some(command) = commands.recv().await {
            seen += 1;
            let err = fail.clone();
            match command {
                Command::CreateActor { seq, reply, .. } => {
                    let _ = reply.send(match err {
                        Some(e) => Err(e),
                        None => Ok(actor(seq, ActorState::Pending, None, &[])),
                    });
                }
                Command::SubmitTask { seq, reply, .. } => {
                    let _ = reply.send(err.map_or_else(|| Ok(task(seq)), Err));
                }
                Command::SubmitTasks { items, reply } => {
                    let answers = items.iter().map(|i| Ok(task(i.seq))).collect();
                    let _ = reply.send(err.map_or_else(|| Ok(answers), Err));
                }
                Command::CreateActors { items, reply } => {
                    let answers = items
                        .iter()
                        .map(|i| Ok(actor(i.seq, ActorState::Pending, None, &[])))
                        .collect();
                    let _ = reply.send(err.map_or_else(|| Ok(answers), Err));
                }
                Command::CreateGroup { seq, reply, .. } => {
                    let _ =
                        reply.send(err.map_or_else(|| Ok(group(seq, GroupState::Created)), Err));
                }
                Command::KillActor { reply, .. } => {
                    let _ = reply
                        .send(err.map_or_else(|| Ok(actor(1, ActorState::Dead, None, &[])), Err));
                }
                Command::CancelTask { reply, .. } => {
                    let _ = reply.send(err.map_or_else(|| Ok(task(1)), Err));
                }
                Command::TasksDelivered { ids, reply } => {
                    let _ = reply.send(err.map_or_else(|| Ok(ids), Err));
                }
                Command::RemoveGroup { reply, .. } => {
                    let _ = reply.send(err.map_or_else(|| Ok(group(1, GroupState::Removed)), Err));
                }
                Command::DrainNode { reply, .. }
                | Command::UndrainNode { reply, .. }
                | Command::Taints { reply, .. }
                | Command::Labels { reply, .. }
                | Command::Resources { reply, .. } => {
                    let _ = reply.send(err.map_or_else(
                        || Ok(node("node-1", "10.0.0.1", NodeState::Draining, &[])),
                        Err,
                    ));
                }
                Command::DryRun { reply, .. } => {
                    let _ = reply.send(err.map_or_else(
                        || {
                            Ok(DryRun {
                                outcome: "placed".into(),
                                node_id: Some("node-1".into()),
                                bundle_nodes: vec![],
                                instances: BTreeMap::new(),
                                diagnosis: None,
                            })
                        },
                        Err,
                    ));
                }
                Command::CreateJob { seq, reply, .. } => {
                    let _ = reply.send(err.map_or_else(|| Ok(job(seq, JobState::Running)), Err));
                }
                Command::RenewJob { reply, .. } => {
                    let _ = reply.send(err.map_or_else(|| Ok(job(1, JobState::Running)), Err));
                }
                Command::EndJob { reply, .. } => {
                    let _ = reply.send(err.map_or_else(|| Ok(job(1, JobState::Finished)), Err));
                }
                Command::AutoscalePlan { reply, .. } => {
                    let _ = reply.send(err.map_or_else(|| Ok(Default::default()), Err));
                }
                Command::StoreKeyring { reply, .. } => {
                    let _ = reply.send(err.map_or_else(|| Ok(()), Err));
                }
                // Agent messages and ticks are not the REST API's.
                #[allow(unreachable_patterns)]
                _ => {}
            }
        }
        seen
    })
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// Asserts an `ApiError` with this status, `error` word and `field`; returns the body.
    fn error(&self, status: u16, error: &str, field: Option<&str>) -> Value {
        let body = self.json();
        assert_eq!(self.status.as_u16(), status, "{body}");
        assert_eq!(body["error"], error, "{body}");
        assert_eq!(body["field"].as_str(), field, "{body}");
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
        assert_eq!(
            self.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()),
            Some("application/json"),
        );
        body
    }
}

async fn send(
    router: &Router,
    method: Method,
    uri: &str,
    token: Option<&str>,
    body: Option<Vec<u8>>,
) -> Answer {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let body = match body {
        Some(bytes) => {
            request = request.header(header::CONTENT_TYPE, "application/json");
            Body::from(bytes)
        }
        None => Body::empty(),
    };
    let response = router.clone().oneshot(request.body(body).unwrap()).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap().to_vec();
    Answer { status, headers, body }
}

async fn get(router: &Router, uri: &str) -> Answer {
    send(router, Method::GET, uri, Some(TOKEN), None).await
}

async fn with_body(router: &Router, method: Method, uri: &str, body: &str) -> Answer {
    send(router, method, uri, Some(TOKEN), Some(body.as_bytes().to_vec())).await
}

/// Every route, with a body each would accept: (method, concrete URI, OpenAPI template, body).
fn routes() -> Vec<(Method, &'static str, &'static str, Option<&'static str>)> {
    let actor = r#"{"command": "sleep", "resources": {"CPU": 1}}"#;
    let group = r#"{"bundles": [{"CPU": 1}]}"#;
    let batch = r#"{"items": [{"command": "sleep", "resources": {"CPU": 1}}]}"#;
    vec![
        (Method::GET, "/metrics", "/metrics", None),
        (Method::GET, "/api/v1/openapi.json", "/api/v1/openapi.json", None),
        (Method::GET, "/api/v1/cluster/status", "/api/v1/cluster/status", None),
        (Method::GET, "/api/v1/nodes", "/api/v1/nodes", None),
        (Method::GET, "/api/v1/nodes/node-1", "/api/v1/nodes/{node}", None),
        (Method::POST, "/api/v1/nodes/node-1/drain", "/api/v1/nodes/{node}/drain", None),
        (Method::POST, "/api/v1/nodes/node-1/undrain", "/api/v1/nodes/{node}/undrain", None),
        (
            Method::POST,
            "/api/v1/nodes/node-1/taints",
            "/api/v1/nodes/{node}/taints",
            Some(r#"{"gpu_node": "true"}"#),
        ),
        (
            Method::DELETE,
            "/api/v1/nodes/node-1/taints",
            "/api/v1/nodes/{node}/taints",
            Some(r#"{"gpu_node": "true"}"#),
        ),
        (
            Method::POST,
            "/api/v1/nodes/node-1/labels",
            "/api/v1/nodes/{node}/labels",
            Some(r#"{"zone": "a"}"#),
        ),
        (
            Method::DELETE,
            "/api/v1/nodes/node-1/labels",
            "/api/v1/nodes/{node}/labels",
            Some(r#"["zone"]"#),
        ),
        (
            Method::PUT,
            "/api/v1/nodes/node-1/resources",
            "/api/v1/nodes/{node}/resources",
            Some(r#"{"GPU": "2"}"#),
        ),
        (Method::POST, "/api/v1/actors", "/api/v1/actors", Some(actor)),
        (Method::GET, "/api/v1/actors", "/api/v1/actors", None),
        (Method::GET, "/api/v1/actors/actor-1", "/api/v1/actors/{id}", None),
        (Method::DELETE, "/api/v1/actors/actor-1", "/api/v1/actors/{id}", None),
        (
            Method::GET,
            "/api/v1/actors/actor-1/endpoint?timeout_s=0",
            "/api/v1/actors/{id}/endpoint",
            None,
        ),
        (Method::POST, "/api/v1/tasks", "/api/v1/tasks", Some(actor)),
        (Method::POST, "/api/v1/tasks:batch", "/api/v1/tasks:batch", Some(batch)),
        (Method::POST, "/api/v1/actors:batch", "/api/v1/actors:batch", Some(batch)),
        (Method::GET, "/api/v1/tasks", "/api/v1/tasks", None),
        (Method::GET, "/api/v1/tasks/task-1", "/api/v1/tasks/{id}", None),
        (Method::POST, "/api/v1/tasks/task-1/cancel", "/api/v1/tasks/{id}/cancel", None),
        (
            Method::POST,
            "/api/v1/tasks:wait",
            "/api/v1/tasks:wait",
            Some(r#"{"task_ids": ["task-1"], "timeout_s": 0}"#),
        ),
        (
            Method::POST,
            "/api/v1/tasks:delivered",
            "/api/v1/tasks:delivered",
            Some(r#"{"task_ids": ["task-1"]}"#),
        ),
        (Method::POST, "/api/v1/placement_groups", "/api/v1/placement_groups", Some(group)),
        (Method::GET, "/api/v1/placement_groups", "/api/v1/placement_groups", None),
        (Method::GET, "/api/v1/placement_groups/pg-1", "/api/v1/placement_groups/{id}", None),
        (Method::DELETE, "/api/v1/placement_groups/pg-1", "/api/v1/placement_groups/{id}", None),
        (
            Method::GET,
            "/api/v1/placement_groups/pg-1/wait?timeout_s=0",
            "/api/v1/placement_groups/{id}/wait",
            None,
        ),
        (Method::POST, "/api/v1/jobs", "/api/v1/jobs", Some(r#"{"name": "driver.py"}"#)),
        (Method::GET, "/api/v1/jobs", "/api/v1/jobs", None),
        (Method::GET, "/api/v1/jobs/job-1", "/api/v1/jobs/{id}", None),
        (Method::POST, "/api/v1/jobs/job-1/renew", "/api/v1/jobs/{id}/renew", None),
        (Method::POST, "/api/v1/jobs/job-1/finish", "/api/v1/jobs/{id}/finish", None),
        (
            Method::POST,
            "/api/v1/jobs/job-1/stop",
            "/api/v1/jobs/{id}/stop",
            Some(r#"{"reason": "done"}"#),
        ),
        (Method::GET, "/api/v1/explain/actor-1", "/api/v1/explain/{id}", None),
        (Method::POST, "/api/v1/explain", "/api/v1/explain", Some(r#"{"resources": {"CPU": 1}}"#)),
        (Method::GET, "/api/v1/logs/actor-1", "/api/v1/logs/{id}", None),
        (Method::GET, "/api/v1/autoscaler", "/api/v1/autoscaler", None),
        (
            Method::POST,
            "/api/v1/autoscaler/plan",
            "/api/v1/autoscaler/plan",
            Some("node_types: {cpu: {resources: {CPU: 4}}}"),
        ),
        (Method::GET, "/api/v1/tokens", "/api/v1/tokens", None),
        (Method::POST, "/api/v1/tokens", "/api/v1/tokens", Some(r#"{"role": "read"}"#)),
        (Method::DELETE, "/api/v1/tokens/tok-none", "/api/v1/tokens/{id}", None),
    ]
}

#[tokio::test]
async fn http_healthz_needs_no_token() {
    let h = harness();
    let answer = send(&h.router, Method::GET, "/healthz", None, None).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json(), json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")}));
}

#[tokio::test]
async fn http_every_other_route_needs_the_token() {
    let mut h = harness();
    for (method, uri, _, body) in routes() {
        let body = body.map(|b| b.as_bytes().to_vec());
        for token in [None, Some("wrong"), Some(""), Some(&TOKEN[1..])] {
            let answer = send(&h.router, method.clone(), uri, token, body.clone()).await;
            let json = answer.error(401, "unauthorized", None);
            assert!(json["message"].as_str().unwrap().contains("Authorization: Bearer"), "{json}");
            assert!(answer.headers.contains_key(header::WWW_AUTHENTICATE));
        }
        // Another scheme with the right token is refused too.
        let request = Request::builder()
            .method(method.clone())
            .uri(uri)
            .header(header::AUTHORIZATION, format!("Basic {TOKEN}"))
            .body(Body::empty())
            .unwrap();
        let response = h.router.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{method} {uri}");
    }
    // Nothing reached the owner.
    assert!(h.commands.try_recv().is_err());
}

#[tokio::test]
async fn http_every_route_answers_with_the_token() {
    let h = harness();
    let owner = owner(h.commands, None);
    for (method, uri, _, body) in routes() {
        let body = body.map(|b| b.as_bytes().to_vec());
        let answer = send(&h.router, method.clone(), uri, Some(TOKEN), body).await;
        // The waits time out (the group is PENDING, no actor process listens); no agent has a
        // log stream here (409); everything else succeeds.
        let expected: &[u16] = if uri.contains("/wait") || uri.contains("/endpoint") {
            &[408]
        } else if uri.contains("/logs/") {
            &[409]
        } else if uri.contains("/tokens/") {
            &[404] // no such token: the route answers, the token is not there
        } else {
            &[200, 201]
        };
        assert!(
            expected.contains(&answer.status.as_u16()),
            "{method} {uri}: {} {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        );
    }
    drop(h.router);
    drop(h.view);
    // 23 commands: drain, undrain, 2 taints, 2 labels, resources, create actor, kill, submit, 2
    // batches, cancel, delivered, create group, remove, create job, renew, finish, stop, dry
    // run, autoscaler plan, and the token list written after the create (the revoke of an
    // unknown token fails before it).
    assert_eq!(owner.await.unwrap(), 23);
}

#[tokio::test]
async fn http_openapi_lists_every_route_and_the_token_scheme() {
    let h = harness();
    let answer = get(&h.router, "/api/v1/openapi.json").await;
    assert_eq!(answer.status, StatusCode::OK);
    let doc = answer.json();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    let mut templates: Vec<(&str, String)> =
        routes().iter().map(|(m, _, t, _)| (*t, m.as_str().to_ascii_lowercase())).collect();
    templates.push(("/healthz", "get".into()));
    // Authorised by the actor's work key (a bearer secret too), not by a token.
    templates.push(("/api/v1/actors/{id}/endpoint", "put".into()));
    // A stream that does not end: tested on a real head (tests/watch.rs).
    templates.push(("/api/v1/watch", "get".into()));
    for (template, method) in &templates {
        let op = &paths[*template][method.as_str()];
        assert!(op.is_object(), "{method} {template} missing from {}", paths.keys().len());
        if *template == "/healthz" {
            assert!(op.get("security").is_none());
        } else {
            assert_eq!(op["security"], json!([{"token": []}]), "{method} {template}");
            assert!(op["responses"]["401"].is_object(), "{method} {template}");
        }
    }
    let operations: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
    assert_eq!(operations, templates.len());
    assert_eq!(doc["components"]["securitySchemes"]["token"]["scheme"], "bearer");
    for schema in ["ApiError", "Actor", "ActorCreate", "Node", "Group", "TaintsBody", "Health"] {
        assert!(doc["components"]["schemas"][schema].is_object(), "schema {schema}");
    }
    // Every reference resolves (a missing one breaks clients generated from the document).
    fn refs<'a>(value: &'a serde_json::Value, out: &mut Vec<&'a str>) {
        match value {
            serde_json::Value::Object(map) => {
                if let Some(target) = map.get("$ref").and_then(|r| r.as_str()) {
                    out.push(target);
                }
                map.values().for_each(|v| refs(v, out));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let mut targets = Vec::new();
    refs(&doc, &mut targets);
    for target in targets {
        let name = target.strip_prefix("#/components/schemas/").expect("a schema reference");
        assert!(doc["components"]["schemas"][name].is_object(), "{target} does not resolve");
    }
    let counts = &doc["components"]["schemas"]["ClusterStatus"]["properties"]["actors"];
    assert_eq!(counts["additionalProperties"]["type"], "integer", "{counts}");
    // Query parameters are documented as such.
    let params = paths["/api/v1/nodes"]["get"]["parameters"].as_array().unwrap();
    assert!(params.iter().any(|p| p["name"] == "limit" && p["in"] == "query"), "{params:?}");
    let params =
        paths["/api/v1/placement_groups/{id}/wait"]["get"]["parameters"].as_array().unwrap();
    assert!(params.iter().any(|p| p["name"] == "timeout_s" && p["in"] == "query"));
    assert!(params.iter().any(|p| p["name"] == "id" && p["in"] == "path"));
}

#[tokio::test]
async fn http_get_known_and_unknown_ids() {
    let h = harness();
    let r = &h.router;
    assert_eq!(get(r, "/api/v1/nodes/node-1").await.json()["node_id"], "node-1");
    // By address.
    assert_eq!(get(r, "/api/v1/nodes/10.0.0.2").await.json()["node_id"], "node-2");
    assert_eq!(get(r, "/api/v1/actors/actor-1").await.json()["actor_id"], "actor-1");
    assert_eq!(get(r, "/api/v1/tasks/task-1").await.json()["task_id"], "task-1");
    assert_eq!(get(r, "/api/v1/placement_groups/pg-1").await.json()["group_id"], "pg-1");
    let explained = get(r, "/api/v1/explain/actor-1").await.json();
    assert_eq!(explained["summary"], "actor-1 is ALIVE on node-1");
    for uri in [
        "/api/v1/nodes/node-9",
        "/api/v1/actors/actor-9",
        "/api/v1/actors/task-1",
        "/api/v1/actors/actor-01",
        "/api/v1/actors/%FF%FE",
        "/api/v1/tasks/task-9",
        "/api/v1/placement_groups/pg-9",
        "/api/v1/placement_groups/pg-9/wait",
        "/api/v1/explain/actor-9",
        "/api/v1/explain/nonsense",
        "/api/v1/nodes/%00",
    ] {
        let answer = get(r, uri).await;
        if answer.status == StatusCode::BAD_REQUEST {
            // Undecodable path segments are a 400 naming the path parameter.
            answer.error(400, "invalid", Some("id"));
        } else {
            answer.error(404, "not_found", None);
        }
    }
    let body = get(r, "/api/v1/actors/actor-9").await.json();
    assert_eq!(body["message"], "actor actor-9 not found");
}

#[tokio::test]
async fn http_list_filters_and_bad_queries() {
    let h = harness();
    let r = &h.router;
    let count = |v: Value| (v["items"].as_array().unwrap().len(), v["total"].as_u64().unwrap());
    assert_eq!(count(get(r, "/api/v1/nodes").await.json()), (2, 2));
    assert_eq!(count(get(r, "/api/v1/nodes?state=alive").await.json()), (1, 1));
    assert_eq!(count(get(r, "/api/v1/nodes?label=zone%3Db").await.json()), (1, 1));
    assert_eq!(count(get(r, "/api/v1/actors?label=app=web").await.json()), (1, 1));
    assert_eq!(count(get(r, "/api/v1/actors?limit=1").await.json()), (1, 2));
    assert_eq!(count(get(r, "/api/v1/actors?node=node-1&unknown=1").await.json()), (1, 1));
    assert_eq!(count(get(r, "/api/v1/tasks?state=RUNNING").await.json()), (1, 1));
    assert_eq!(count(get(r, "/api/v1/placement_groups?state=pending").await.json()), (1, 1));
    // Pages: newest first, then the rest through the cursor; a name search.
    let first = get(r, "/api/v1/actors?sort=-created_at_ms&limit=1").await.json();
    assert_eq!(count(first.clone()), (1, 2));
    let cursor = first["next_cursor"].as_str().expect("a next page").to_string();
    let second =
        get(r, &format!("/api/v1/actors?sort=-created_at_ms&limit=1&cursor={cursor}")).await.json();
    assert_eq!(count(second.clone()), (1, 2));
    assert!(second.get("next_cursor").is_none(), "the last page: {second}");
    assert_ne!(first["items"][0]["actor_id"], second["items"][0]["actor_id"]);
    assert_eq!(count(get(r, "/api/v1/nodes?sort=-node_id&name=NODE-2").await.json()), (1, 1));
    for (uri, field) in [
        ("/api/v1/actors?sort=colour", "sort"),
        ("/api/v1/tasks?sort=-restarts", "sort"),
        ("/api/v1/actors?cursor=nothex", "cursor"),
        ("/api/v1/actors?sort=name&cursor=7b7d", "cursor"),
        ("/api/v1/nodes?state=SLEEPY", "state"),
        ("/api/v1/actors?state=RUNNING", "state"),
        ("/api/v1/tasks?state=", "state"),
        ("/api/v1/actors?limit=0", "limit"),
        ("/api/v1/actors?limit=-1", "limit"),
        ("/api/v1/actors?limit=abc", "limit"),
        ("/api/v1/actors?limit=", "limit"),
        ("/api/v1/actors?limit=99999999999999999999999", "limit"),
        ("/api/v1/nodes?limit=100001", "limit"),
        ("/api/v1/actors?label=novalue", "label"),
        ("/api/v1/placement_groups?state=x", "state"),
        ("/api/v1/actors?limit=1&limit=2", "limit"),
        ("/api/v1/placement_groups/pg-1/wait?timeout_s=-1", "timeout_s"),
        ("/api/v1/placement_groups/pg-1/wait?timeout_s=NaN", "timeout_s"),
        ("/api/v1/placement_groups/pg-1/wait?timeout_s=inf", "timeout_s"),
        ("/api/v1/placement_groups/pg-1/wait?timeout_s=601", "timeout_s"),
        ("/api/v1/placement_groups/pg-1/wait?timeout_s=soon", "timeout_s"),
    ] {
        get(r, uri).await.error(400, "invalid", Some(field));
    }
}

#[tokio::test]
async fn http_wait_answers_when_the_group_is_created() {
    let h = harness();
    let router = h.router.clone();
    let waiter = tokio::spawn(async move {
        get(&router, "/api/v1/placement_groups/pg-1/wait?timeout_s=30").await
    });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let mut view = sample_view();
    view.groups.insert(1, Arc::new(group(1, GroupState::Created)));
    h.view.send(Arc::new(view)).unwrap();
    let answer = waiter.await.unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json()["state"], "CREATED");
    // Still pending after the timeout: 408.
    let mut view = sample_view();
    view.groups.insert(1, Arc::new(group(1, GroupState::Pending)));
    h.view.send(Arc::new(view)).unwrap();
    get(&h.router, "/api/v1/placement_groups/pg-1/wait?timeout_s=0.01")
        .await
        .error(408, "timeout", None);
}

#[tokio::test]
async fn http_malformed_bodies_name_the_field() {
    let h = harness();
    let r = &h.router;
    let cases: &[(Method, &str, &str, Option<&str>)] = &[
        (Method::POST, "/api/v1/actors", r#"{"command": 5, "resources": {}}"#, Some("command")),
        (Method::POST, "/api/v1/actors", r#"{"command": "x"}"#, Some("resources")),
        (
            Method::POST,
            "/api/v1/actors",
            r#"{"command": "x", "resources": {}, "colour": 1}"#,
            Some("colour"),
        ),
        (
            Method::POST,
            "/api/v1/actors",
            r#"{"command": "x", "resources": {}, "labels": {"a": 1}}"#,
            Some("labels.a"),
        ),
        (
            Method::POST,
            "/api/v1/actors",
            r#"{"command": "x", "resources": {}, "args": ["a", 2]}"#,
            Some("args[1]"),
        ),
        (
            Method::POST,
            "/api/v1/actors",
            r#"{"command": "x", "resources": {}, "max_restarts": 1.5}"#,
            Some("max_restarts"),
        ),
        (
            Method::POST,
            "/api/v1/actors",
            r#"{"command": "x", "resources": {}, "max_restarts": -2}"#,
            Some("max_restarts"),
        ),
        (
            Method::POST,
            "/api/v1/actors",
            r#"{"command": "x", "resources": {}, "labels": {"app": "a", "app": "b"}}"#,
            Some("labels.app"),
        ),
        (
            Method::POST,
            "/api/v1/actors",
            r#"{"command": "x", "resources": {"CPU": 1, "CPU": 2}}"#,
            Some("resources.CPU"),
        ),
        (
            Method::POST,
            "/api/v1/actors:batch",
            r#"{"items": [{"command": "x", "resources": {}, "env": {"A": "1", "A": "2"}}]}"#,
            Some("items.0.env.A"),
        ),
        (Method::POST, "/api/v1/nodes/node-1/taints", r#"{"k": "a", "k": "b"}"#, Some("k")),
        (Method::POST, "/api/v1/actors", r#"{"command": "", "resources": {}}"#, Some("command")),
        (Method::POST, "/api/v1/actors", r#"{"command": "#, Some("command")),
        (Method::POST, "/api/v1/actors", r#"{"command": "x", "resources": {}} trailing"#, None),
        (Method::POST, "/api/v1/actors", "[]", None),
        (Method::POST, "/api/v1/actors", "null", None),
        (Method::POST, "/api/v1/actors", "", None),
        (Method::POST, "/api/v1/actors", "\u{feff}{}", None),
        (
            Method::POST,
            "/api/v1/tasks",
            r#"{"command": "x", "resources": {}, "max_retries": -1}"#,
            Some("max_retries"),
        ),
        (
            Method::POST,
            "/api/v1/tasks",
            r#"{"command": "x", "resources": {}, "priority": 1}"#,
            Some("priority"),
        ),
        (Method::POST, "/api/v1/placement_groups", r#"{"strategy": "PACK"}"#, Some("bundles")),
        (Method::POST, "/api/v1/placement_groups", r#"{"bundles": [], "id": "pg-7"}"#, Some("id")),
        (Method::POST, "/api/v1/nodes/node-1/taints", r#"{"gpu_node": 5}"#, Some("gpu_node")),
        (Method::POST, "/api/v1/nodes/node-1/taints", r#"["gpu_node"]"#, None),
        (Method::POST, "/api/v1/nodes/node-1/taints", "{}", None),
        (Method::DELETE, "/api/v1/nodes/node-1/taints", "", None),
        (Method::POST, "/api/v1/explain", "[1, 2]", None),
        (Method::POST, "/api/v1/explain", "{", None),
        (Method::POST, "/api/v1/explain", "", None),
    ];
    for (method, uri, body, field) in cases {
        let answer = with_body(r, method.clone(), uri, body).await;
        answer.error(400, "invalid", *field);
    }
    // The content type is not checked: a JSON body without one (or with another) is parsed.
    for content_type in [None, Some("text/plain"), Some("application/x-www-form-urlencoded")] {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri("/api/v1/actors")
            .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"));
        if let Some(ct) = content_type {
            request = request.header(header::CONTENT_TYPE, ct);
        }
        let body = Body::from(r#"{"command": 5, "resources": {}}"#);
        let response = h.router.clone().oneshot(request.body(body).unwrap()).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        let json: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(json["field"], "command");
    }
}

#[tokio::test]
async fn http_bodies_over_one_mib_are_413_json() {
    let h = harness();
    let mut big = br#"{"command": "x", "resources": {}, "args": [""#.to_vec();
    big.resize(big.len() + (1 << 20), b'a');
    big.extend_from_slice(br#""]}"#);
    for (method, uri) in [
        (Method::POST, "/api/v1/actors"),
        (Method::POST, "/api/v1/tasks"),
        (Method::POST, "/api/v1/placement_groups"),
        (Method::POST, "/api/v1/explain"),
        (Method::POST, "/api/v1/nodes/node-1/taints"),
        (Method::DELETE, "/api/v1/nodes/node-1/taints"),
    ] {
        let answer = send(&h.router, method, uri, Some(TOKEN), Some(big.clone())).await;
        let body = answer.error(413, "invalid", None);
        assert!(body["message"].as_str().unwrap().contains("1 MiB"));
    }
    // Without a Content-Length (streamed), the limit holds too.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = vec![Ok(big.clone())];
    let request = Request::builder()
        .method(Method::POST)
        .uri("/api/v1/actors")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(Body::from_stream(futures::stream::iter(chunks)))
        .unwrap();
    let response = h.router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn http_unknown_routes_404_and_wrong_methods_405() {
    let h = harness();
    let r = &h.router;
    for token in [Some(TOKEN), None] {
        for uri in
            ["/", "/api/v1", "/api/v1/nodes/node-1/extra", "/api/v2/nodes", "/api/v1/actors/"]
        {
            let answer = send(r, Method::GET, uri, token, None).await;
            answer.error(404, "not_found", None);
        }
    }
    for (method, uri) in [
        (Method::PUT, "/api/v1/actors"),
        (Method::DELETE, "/api/v1/tasks/task-1"),
        (Method::GET, "/api/v1/nodes/node-1/drain"),
        (Method::PATCH, "/api/v1/placement_groups/pg-1"),
        (Method::POST, "/healthz"),
        (Method::GET, "/api/v1/explain"),
    ] {
        let answer = send(r, method.clone(), uri, Some(TOKEN), None).await;
        answer.error(405, "invalid", None);
        assert!(answer.headers.contains_key(header::ALLOW), "{method} {uri}");
    }
    // gRPC requests to an unknown service get gRPC's UNIMPLEMENTED, not JSON.
    let request = Request::builder()
        .method(Method::POST)
        .uri("/berth.Unknown/Call")
        .header(header::CONTENT_TYPE, "application/grpc")
        .body(Body::empty())
        .unwrap();
    let response = h.router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.headers()["grpc-status"], "12");
}

#[tokio::test]
async fn http_head_errors_map_to_statuses() {
    for (error, status, word) in [
        (HeadError::NotFound { what: "actor", id: "actor-5".into() }, 404, "not_found"),
        (HeadError::Conflict("name web is in use".into()), 409, "conflict"),
        (HeadError::Unavailable("store failed".into()), 503, "unavailable"),
        (HeadError::invalid("resources.GPU", "unknown resource"), 400, "invalid"),
        (HeadError::Timeout("slow".into()), 408, "timeout"),
    ] {
        let h = harness();
        let _owner = owner(h.commands, Some(error.clone()));
        for (method, uri, _, body) in routes() {
            let answer =
                send(&h.router, method.clone(), uri, Some(TOKEN), body.map(|b| b.into())).await;
            // Tokens are not the owner's: its errors do not reach them.
            let changes = !matches!(method, Method::GET) && !uri.contains("/tokens");
            // Waits read the view; the owner's errors do not reach them.
            if changes && !uri.ends_with("/wait") && !uri.ends_with(":wait") {
                let field = matches!(error, HeadError::Invalid { .. }).then_some("resources.GPU");
                let json = answer.error(status, word, field);
                assert_eq!(json["message"], error.body().message, "{method} {uri}");
            }
        }
    }
    // The owner gone: 503, never a hang or a 500.
    let h = harness();
    drop(h.commands);
    let answer = with_body(&h.router, Method::POST, "/api/v1/tasks/task-1/cancel", "").await;
    answer.error(503, "unavailable", None);
}

#[tokio::test]
async fn http_creates_answer_201_with_a_location() {
    let h = harness();
    let _owner = owner(h.commands, None);
    let r = &h.router;
    let answer = with_body(
        r,
        Method::POST,
        "/api/v1/actors",
        r#"{"command": "sleep", "resources": {"CPU": 1}}"#,
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED);
    assert_eq!(answer.headers[header::LOCATION], "/api/v1/actors/actor-1");
    assert_eq!(answer.json()["actor_id"], "actor-1");
    let answer =
        with_body(r, Method::POST, "/api/v1/tasks", r#"{"command": "true", "resources": {}}"#)
            .await;
    assert_eq!(answer.status, StatusCode::CREATED);
    assert_eq!(answer.headers[header::LOCATION], "/api/v1/tasks/task-1");
    let answer =
        with_body(r, Method::POST, "/api/v1/placement_groups", r#"{"bundles": [{"GPU": 1}]}"#)
            .await;
    assert_eq!(answer.status, StatusCode::CREATED);
    assert_eq!(answer.headers[header::LOCATION], "/api/v1/placement_groups/pg-1");
}

#[tokio::test]
async fn http_metrics_record_requests_by_route_template() {
    let h = harness();
    get(&h.router, "/api/v1/actors/actor-1").await;
    get(&h.router, "/api/v1/actors/actor-9").await;
    send(&h.router, Method::GET, "/api/v1/nodes", None, None).await;
    get(&h.router, "/no/such/route").await;
    let answer = get(&h.router, "/metrics").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.headers[header::CONTENT_TYPE], crate::metrics::CONTENT_TYPE);
    let text = String::from_utf8(answer.body).unwrap();
    for needle in [
        r#"berth_http_requests_total{method="GET",route="/api/v1/actors/{id}",status="2xx"} 1"#,
        r#"berth_http_requests_total{method="GET",route="/api/v1/actors/{id}",status="4xx"} 1"#,
        r#"berth_http_requests_total{method="GET",route="/api/v1/nodes",status="4xx"} 1"#,
        r#"berth_http_requests_total{method="GET",route="unmatched",status="4xx"} 1"#,
        "# EOF",
    ] {
        assert!(text.contains(needle), "missing {needle}\n{text}");
    }
    assert!(!text.contains("actor-9"));
    assert!(h.metrics.render().contains(r#"route="/metrics""#));
}

#[tokio::test]
async fn http_measured_usage_is_in_nodes_and_metrics_for_live_nodes_only() {
    let h = harness();
    let measured = |work_id: &str| berth_api::agent::Measured {
        cpu_millicores: Some(1500),
        cpus: 4,
        memory_used_bytes: 1 << 30,
        memory_total_bytes: 4 << 30,
        gpus: vec![berth_api::agent::GpuMeasured {
            index: 0,
            memory_used_bytes: 3 << 30,
            memory_total_bytes: 16 << 30,
            utilization_percent: Some(45),
        }],
        work: vec![berth_api::agent::WorkMeasured {
            work_id: work_id.into(),
            attempt: 1,
            cpu_millicores: Some(990),
            memory_bytes: 10 << 20,
            processes: 2,
        }],
    };
    // node-1 is alive, node-2 dead (its stream may linger: never shown).
    h.measurements.record("node-1", 1, 1000, measured("actor-1")).unwrap();
    h.measurements.record("node-2", 1, 1000, measured("task-1")).unwrap();
    let one: serde_json::Value =
        serde_json::from_slice(&get(&h.router, "/api/v1/nodes/node-1").await.body).unwrap();
    assert_eq!(one["measured"]["cpu_millicores"], 1500);
    assert_eq!(one["measured"]["memory_total_bytes"], 4u64 << 30);
    assert_eq!(one["measured"]["work"][0]["work_id"], "actor-1");
    assert_eq!(one["measured"]["work"][0]["cpu_millicores"], 990);
    assert_eq!(one["measured"]["gpus"][0]["utilization_percent"], 45);
    assert_eq!(one["measured"]["gpus"][0]["memory_used_bytes"], 3u64 << 30);
    let dead: serde_json::Value =
        serde_json::from_slice(&get(&h.router, "/api/v1/nodes/node-2").await.body).unwrap();
    assert!(dead.get("measured").is_none(), "{dead}");
    let list: serde_json::Value =
        serde_json::from_slice(&get(&h.router, "/api/v1/nodes").await.body).unwrap();
    assert_eq!(list["items"][0]["measured"]["cpus"], 4);
    // Lists leave the attempts out.
    assert!(list["items"][0]["measured"].get("work").is_none(), "{list}");
    assert!(list["items"][1].get("measured").is_none(), "{list}");
    let text = String::from_utf8(get(&h.router, "/metrics").await.body).unwrap();
    for needle in [
        r#"berth_node_cpu_used_cores{node="node-1"} 1.5"#,
        r#"berth_node_cpus{node="node-1"} 4"#,
        r#"berth_node_memory_used_bytes{node="node-1"} 1073741824"#,
        r#"berth_node_memory_total_bytes{node="node-1"} 4294967296"#,
        r#"berth_node_gpu_memory_used_bytes{node="node-1",gpu="0"} 3221225472"#,
        r#"berth_node_gpu_memory_total_bytes{node="node-1",gpu="0"} 17179869184"#,
        r#"berth_node_gpu_utilization_percent{node="node-1",gpu="0"} 45"#,
    ] {
        assert!(text.contains(needle), "missing {needle}\n{text}");
    }
    assert!(!text.contains(r#"node="node-2""#), "{text}");
    assert!(!text.contains("actor-1"), "no per-work series: {text}");
    // A node whose measurement is gone leaves no series behind.
    h.measurements.forget("node-1", 1);
    let text = String::from_utf8(get(&h.router, "/metrics").await.body).unwrap();
    assert!(!text.contains(r#"node="node-1""#), "{text}");
}

#[tokio::test]
async fn http_odd_input_never_panics_or_5xx() {
    let h = harness();
    let _owner = owner(h.commands, None);
    let uris = [
        "/api/v1/actors?limit=%FF%FE",
        "/api/v1/actors?%%%&&&==",
        "/api/v1/actors?state=%00",
        "/api/v1/nodes/%2F%2F..%2F",
        "/api/v1/explain/%E2%82%AC",
        "/api/v1/placement_groups/pg-1/wait?timeout_s=1e400",
        "/api/v1/placement_groups/pg-1/wait?timeout_s=-0",
        "/api/v1/placement_groups/pg-99999999999999999999999/wait?timeout_s=0",
        "/api/v1/tasks?limit=18446744073709551616",
        "//api//v1//nodes",
    ];
    for uri in uris {
        let answer = get(&h.router, uri).await;
        assert!(answer.status.as_u16() < 500, "{uri}: {}", answer.status);
        answer.json();
    }
    let bodies = [
        "\u{0}",
        "{\"command\": \"\\ud800\", \"resources\": {}}",
        "{\"command\": \"x\", \"resources\": {\"CPU\": 1e999}}",
        "{\"command\": \"x\", \"resources\": {\"CPU\": -1}}",
        "{\"command\": \"x\", \"resources\": \"lots\"}",
        "{\"command\": \"x\", \"resources\": {}, \"env\": {\"A=B\": \"c\"}}",
        "{\"command\": \"x\", \"resources\": {}, \"scheduling_strategy\": [[[[[[[[[[]]]]]]]]]]}",
    ];
    for body in bodies {
        for uri in
            ["/api/v1/actors", "/api/v1/tasks", "/api/v1/placement_groups", "/api/v1/explain"]
        {
            let answer = with_body(&h.router, Method::POST, uri, body).await;
            assert!(answer.status.as_u16() < 500, "{uri} {body}: {}", answer.status);
            answer.json();
        }
    }
    let mut deep = "[".repeat(10_000);
    deep.push_str(&"]".repeat(10_000));
    let answer = with_body(&h.router, Method::POST, "/api/v1/explain", &deep).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.json()["message"].as_str().unwrap().contains("recursion limit"));
}

#[tokio::test]
async fn http_merges_with_grpc_routes_once_their_fallback_is_reset() {
    let h = harness();
    // tonic's `Routes` carry a fallback of their own; axum refuses to merge two fallbacks.
    let grpc = tonic::service::Routes::default().prepare().into_axum_router();
    let merged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        h.router.clone().merge(grpc.clone())
    }));
    assert!(merged.is_err(), "axum now merges two fallbacks; simplify the wiring note");
    let router = h.router.clone().merge(grpc.reset_fallback());
    get(&router, "/api/v1/nope").await.error(404, "not_found", None);
    assert_eq!(get(&router, "/api/v1/actors/actor-1").await.status, StatusCode::OK);
}

/// A work credential (`work:<id>:<key>`) reaches the actors, tasks, groups and job of its own
/// job and nothing else; what it creates is its process's own, in its job.
#[tokio::test]
async fn a_work_credential_reaches_the_work_of_its_own_job_only() {
    let mut h = harness();
    let mut view = sample_view();
    let of_job = |spec: &mut berth_api::rest::Ownership, job: &str| spec.job_id = Some(job.into());
    for (seq, job) in [(1, "job-1"), (2, "job-2")] {
        let mut actor = (*view.actors[&seq]).clone();
        let mut spec = (*actor.spec).clone();
        of_job(&mut spec.ownership, job);
        actor.spec = Arc::new(spec);
        view.actors.insert(seq, Arc::new(actor));
    }
    let mut task = (*view.tasks[&1]).clone();
    let mut spec = (*task.spec).clone();
    of_job(&mut spec.ownership, "job-1");
    task.spec = Arc::new(spec);
    view.tasks.insert(1, Arc::new(task));
    h.view.send_replace(Arc::new(view));
    let keys = crate::work_keys::WorkKeys::with_secret(&[7; 32]);
    let mine = format!("work:actor-1:{}", keys.key("actor-1"));
    let mine = Some(mine.as_str());

    for ok in ["/api/v1/actors/actor-1", "/api/v1/tasks/task-1", "/api/v1/jobs/job-1"] {
        let answer = send(&h.router, Method::GET, ok, mine, None).await;
        assert_eq!(answer.status, StatusCode::OK, "{ok}: {}", answer.json());
    }
    let other = send(&h.router, Method::GET, "/api/v1/actors/actor-2", mine, None).await;
    let body = other.error(403, "forbidden", None);
    assert!(body["message"].as_str().unwrap().contains("actor-2 is of job-2"), "{body}");
    send(&h.router, Method::GET, "/api/v1/jobs/job-2", mine, None).await.error(
        403,
        "forbidden",
        None,
    );
    send(&h.router, Method::DELETE, "/api/v1/actors/actor-2", mine, None).await.error(
        403,
        "forbidden",
        None,
    );
    for (method, path) in [
        (Method::GET, "/api/v1/nodes"),
        (Method::POST, "/api/v1/nodes/node-1/drain"),
        (Method::GET, "/api/v1/tokens"),
        (Method::POST, "/api/v1/jobs"),
        (Method::GET, "/api/v1/cluster/status"),
    ] {
        send(&h.router, method, path, mine, None).await.error(403, "forbidden", None);
    }
    // A work the head no longer holds reaches nothing, not even work of no job.
    let gone = format!("work:actor-9:{}", keys.key("actor-9"));
    let body = send(&h.router, Method::GET, "/api/v1/tasks/task-1", Some(&gone), None).await.error(
        403,
        "forbidden",
        None,
    );
    assert!(body["message"].as_str().unwrap().contains("no longer known"), "{body}");
    // Only a task's owner says its result arrived.
    let delivered = json!({"task_ids": ["task-1"]}).to_string().into();
    let body = send(&h.router, Method::POST, "/api/v1/tasks:delivered", mine, Some(delivered))
        .await
        .error(403, "forbidden", None);
    assert!(body["message"].as_str().unwrap().contains("not owned by actor-1"), "{body}");
    let forged = format!("work:actor-1:{}", keys.key("actor-2"));
    send(&h.router, Method::GET, "/api/v1/actors/actor-1", Some(&forged), None).await.error(
        401,
        "unauthorized",
        None,
    );

    // Lists: its job's only, whatever it asks for.
    let list = send(&h.router, Method::GET, "/api/v1/actors", mine, None).await.json();
    let ids: Vec<&str> =
        list["items"].as_array().unwrap().iter().map(|a| a["actor_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["actor-1"], "{list}");
    send(&h.router, Method::GET, "/api/v1/actors?job=job-2", mine, None).await.error(
        403,
        "forbidden",
        None,
    );

    // A creation is its process's own; another owner or job is refused before the owner sees it.
    let body = json!({"command": "sleep", "resources": {"CPU": 1}});
    let create =
        send(&h.router, Method::POST, "/api/v1/actors", mine, Some(body.to_string().into()));
    let stand_in = async {
        match h.commands.recv().await {
            Some(Command::CreateActor { seq, body, reply }) => {
                let _ = reply.send(Ok(actor(seq, ActorState::Pending, None, &[])));
                body.ownership.owner_id.map(|o| o.to_string())
            }
            other => panic!("expected CreateActor, got {other:?}"),
        }
    };
    let (answer, owner) = tokio::join!(create, stand_in);
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.json());
    assert_eq!(owner.as_deref(), Some("actor-1"));
    for (field, value) in [("owner_id", "actor-2"), ("job_id", "job-2")] {
        let mut body = json!({"command": "sleep", "resources": {"CPU": 1}});
        body[field] = json!(value);
        let answer =
            send(&h.router, Method::POST, "/api/v1/actors", mine, Some(body.to_string().into()))
                .await;
        let error = answer.error(403, "forbidden", None);
        assert!(error["message"].as_str().unwrap().starts_with(field), "{error}");
    }
}
