//! The dashboard's pages, rendered over a hand-made [`View`] through the real router (as
//! `http/tests.rs` does for the REST layer); actions go to a stand-in owner that records what
//! it was asked and answers as told.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::Router;
use berth_api::rest::{
    Actor, ActorCreate, ActorState, Bundle, Diagnosis, Event, Group, GroupCreate, GroupState, Job,
    JobCreate, JobState, Node, NodeState, PendingItem, ReasonCount, ResourceTable, ResourceUse,
    StringMap, Taint, Task, TaskState, TaskSubmit,
};
use berth_api::spec::{PlacementGroupSpec, PlacementSpec};
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tower::ServiceExt;

use super::router;
use crate::command::Command;
use crate::error::HeadError;
use crate::handle::HeadHandle;
use crate::ids::Sequences;

use berth_api::ObjectKind;

use crate::view::{PendingRequest, View};

const TOKEN: &str = "dashboard-test-token";
const XSS: &str = "<script>alert(1)</script>";

fn map(pairs: &[(&str, &str)]) -> StringMap {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn usage(total: &str, used: &str) -> ResourceUse {
    let amount = |text: &str| berth_core::Quantity::parse(text).unwrap();
    let (total, used) = (amount(total), amount(used));
    ResourceUse::new(total, total.saturating_sub(used))
}

fn node(id: &str, state: NodeState, labels: &[(&str, &str)], taints: &[(&str, &str)]) -> Node {
    Node {
        node_id: id.into(),
        address: "10.0.0.1".into(),
        state,
        labels: Arc::new(map(labels)),
        taints: taints
            .iter()
            .map(|(k, v)| Taint { key: k.to_string(), value: v.to_string() })
            .collect(),
        resources: ResourceTable::from_iter([
            ("CPU".to_string(), usage("8", "2")),
            ("GPU".to_string(), usage("4", "0")),
            ("memory".to_string(), usage("34359738368", "8589934592")),
        ]),
        actors: 1,
        tasks: 0,
        registered_at_ms: 1,
        dead_reason: None,
        history: Vec::new(),
        measured: None,
    }
}

fn gpu_diagnosis() -> Diagnosis {
    Diagnosis {
        infeasible: true,
        summary: "0/3 nodes can take it now: 2 too little GPU in total, 1 untolerated taint \
                  gpu_node=true"
            .into(),
        hints: Vec::new(),
        reasons: vec![
            ReasonCount {
                code: "insufficient_total:GPU".into(),
                text: "too little GPU in total".into(),
                count: 2,
            },
            ReasonCount {
                code: "untolerated_taint:gpu_node=true".into(),
                text: "untolerated taint gpu_node=true".into(),
                count: 1,
            },
        ],
    }
}

fn actor(seq: u64, state: ActorState, node: Option<&str>, labels: &[(&str, &str)]) -> Actor {
    Actor {
        endpoint: None,
        work_key: None,
        actor_id: format!("actor-{seq}").into(),
        name: Some(format!("web-{seq}").into()),
        namespace: "default".into(),
        state,
        node_id: node.map(Arc::from),
        instances: BTreeMap::new(),
        restarts: 0,
        death_reason: None,
        diagnosis: None,
        history: thin_vec::thin_vec![Event {
            at_ms: 1_700_000_000_000,
            kind: berth_api::rest::EventKind::Created,
            node_id: None,
            message: "".into(),
        }],
        created_at_ms: 1_700_000_000_000,
        spec: Arc::new(ActorCreate {
            labels: map(labels),
            command: "sleep".into(),
            args: Box::new(["600".into()]),
            placement: berth_api::spec::PlacementSpec::from_json(json!({"resources": {"CPU": 1}}))
                .unwrap(),
            ..Default::default()
        }),
    }
}

fn task(seq: u64, state: TaskState) -> Task {
    Task {
        work_key: None,
        task_id: format!("task-{seq}").into(),
        name: None,
        namespace: "batch".into(),
        state,
        node_id: Some("node-1".into()),
        instances: BTreeMap::new(),
        attempts: 1,
        exit_code: None,
        failure: None,
        diagnosis: None,
        history: Default::default(),
        created_at_ms: 1,
        spec: Arc::new(TaskSubmit {
            command: "true".into(),
            placement: berth_api::spec::PlacementSpec::from_json(json!({"resources": {"CPU": 2}}))
                .unwrap(),
            max_retries: 3,
            ..Default::default()
        }),
    }
}

fn group(seq: u64, state: GroupState) -> Group {
    Group {
        idempotency_key: None,
        group_id: format!("pg-{seq}"),
        name: None,
        namespace: "default".into(),
        strategy: "STRICT_SPREAD".into(),
        state,
        alternative: Some(0),
        bundles: vec![Bundle {
            index: 0,
            resources: map(&[("GPU", "1")]),
            node_id: Some("node-1".into()),
        }],
        diagnosis: None,
        history: Default::default(),
        created_at_ms: 1,
        spec: GroupCreate {
            placement: PlacementGroupSpec::from_json(json!({"bundles": [{"GPU": 1}]})).unwrap(),
            ..Default::default()
        },
    }
}

/// Two alive nodes (one with a user taint and one of Berth's), a dead one; an alive actor,
/// a pending infeasible actor that asks for 16 GPUs, a task, a group.
fn sample_view() -> View {
    let mut view = View::default();
    for n in [
        node("node-1", NodeState::Alive, &[("zone", "a"), ("berth.io/node-id", "node-1")], &[]),
        node(
            "node-2",
            NodeState::Alive,
            &[("zone", "b")],
            &[("gpu_node", "true"), ("berth.io/rare-GPU", "true")],
        ),
        node("node-3", NodeState::Dead, &[], &[]),
    ] {
        view.nodes.insert(n.node_id.clone(), Arc::new(n));
    }
    view.actors.insert(1, Arc::new(actor(1, ActorState::Alive, Some("node-1"), &[("app", "web")])));
    let mut pending = actor(2, ActorState::Pending, None, &[("app", "train")]);
    Arc::make_mut(&mut pending.spec).placement = PlacementSpec::from_json(
        json!({"resources": {"GPU": 16}, "tolerations": {"dedicated": "ml"}}),
    )
    .unwrap();
    pending.diagnosis = Some(Box::new(gpu_diagnosis()));
    view.actors.insert(2, Arc::new(pending));
    view.waiting.insert(
        (ObjectKind::Actor, 2),
        Arc::new(PendingRequest {
            item: PendingItem {
                kind: "actor".into(),
                id: "actor-2".into(),
                diagnosis: gpu_diagnosis(),
            },
            shapes: vec![map(&[("GPU", "16")])],
            label_selector: StringMap::new(),
            tolerations: map(&[("dedicated", "ml")]),
        }),
    );
    view.tasks.insert(1, Arc::new(task(1, TaskState::Running)));
    view.groups.insert(1, Arc::new(group(1, GroupState::Created)));
    view.jobs.insert(1, Arc::new(job(1)));
    // actor-1 belongs to job-1, made by its driver.
    Arc::make_mut(&mut Arc::make_mut(view.actors.get_mut(&1).unwrap()).spec).ownership.job_id =
        Some("job-1".into());
    view
}

fn job(seq: u64) -> Job {
    Job {
        job_id: format!("job-{seq}"),
        state: JobState::Running,
        lease_ms: 30_000,
        ended_at_ms: None,
        end_reason: None,
        history: Default::default(),
        created_at_ms: 1_700_000_000_000,
        spec: JobCreate {
            name: Some("train.py".into()),
            metadata: map(&[("sdk", "python"), ("host", "laptop"), ("pid", "4242")]),
            ..Default::default()
        },
    }
}

/// What the stand-in owner was asked: (node, taints, add) for taints; (node, {}, false) for
/// a drain.
type Asked = Arc<std::sync::Mutex<Vec<(String, StringMap, Option<bool>)>>>;

struct Harness {
    router: Router,
    asked: Asked,
    /// A read-only token's secret.
    read: String,
    _view: watch::Sender<Arc<View>>,
    /// What the agents measured, as heartbeats would leave it.
    measurements: Arc<crate::measured::Measurements>,
}

/// The dashboard over `view`, with a stand-in owner that answers taint and drain commands
/// with the node (its taints changed as asked), or with `fail`.
fn harness_with(view: View, fail: Option<HeadError>) -> Harness {
    let (commands_tx, mut commands) = mpsc::channel::<Command>(16);
    let first = super::samples::Sample::of(&view, 1_700_000_000_000);
    let (view_tx, view_rx) = watch::channel(Arc::new(view));
    let handle = HeadHandle {
        commands: commands_tx,
        view: view_rx.clone(),
        sequences: Arc::new(Sequences::default()),
        work_keys: Arc::new(crate::work_keys::WorkKeys::with_secret(&[7; 32])),
        store: Arc::default(),
        limits: Arc::default(),
        measurements: Arc::default(),
    };
    let measurements = handle.measurements.clone();
    let asked: Asked = Arc::default();
    let record = asked.clone();
    tokio::spawn(async move {
        while let Some(command) = commands.recv().await {
            let current = view_rx.borrow().clone();
            let answer = |id: &str| {
                current
                    .node(id)
                    .map(|n| (*n).clone())
                    .ok_or(HeadError::NotFound { what: "node", id: id.to_string() })
            };
            match command {
                Command::Taints { node, taints, add, reply } => {
                    record.lock().unwrap().push((node.clone(), taints.clone(), Some(add)));
                    let result = fail.clone().map_or_else(
                        || {
                            answer(&node).map(|mut n| {
                                for (key, value) in taints {
                                    n.taints.retain(|t| t.key != key);
                                    if add {
                                        n.taints.push(Taint { key, value });
                                    }
                                }
                                n
                            })
                        },
                        Err,
                    );
                    let _ = reply.send(result);
                }
                Command::UndrainNode { node, reply } => {
                    record.lock().unwrap().push((node.clone(), map(&[("undrain", "")]), None));
                    let result = fail.clone().map_or_else(
                        || {
                            answer(&node).map(|mut n| {
                                n.state = NodeState::Alive;
                                n
                            })
                        },
                        Err,
                    );
                    let _ = reply.send(result);
                }
                Command::KillActor { id, reply } => {
                    record.lock().unwrap().push((id.clone(), map(&[("kill", "")]), None));
                    let result = current
                        .actor(&id)
                        .map(|a| {
                            let mut a = (*a).clone();
                            a.state = ActorState::Dead;
                            a.death_reason = Some("killed by a user".into());
                            a
                        })
                        .ok_or(HeadError::NotFound { what: "actor", id });
                    let _ = reply.send(fail.clone().map_or(result, Err));
                }
                Command::CancelTask { id, reply } => {
                    record.lock().unwrap().push((id.clone(), map(&[("cancel", "")]), None));
                    let result = current
                        .task(&id)
                        .map(|t| {
                            let mut t = (*t).clone();
                            t.state = TaskState::Cancelled;
                            t
                        })
                        .ok_or(HeadError::NotFound { what: "task", id });
                    let _ = reply.send(fail.clone().map_or(result, Err));
                }
                Command::EndJob { id, reply, .. } => {
                    record.lock().unwrap().push((id.clone(), map(&[("stop", "")]), None));
                    let result = current
                        .job(&id)
                        .map(|j| {
                            let mut j = (*j).clone();
                            j.state = JobState::Stopped;
                            j.end_reason = Some("stopped from the dashboard".into());
                            j
                        })
                        .ok_or(HeadError::NotFound { what: "job", id });
                    let _ = reply.send(fail.clone().map_or(result, Err));
                }
                Command::RemoveGroup { id, reply } => {
                    record.lock().unwrap().push((id.clone(), map(&[("remove", "")]), None));
                    let result = current
                        .group(&id)
                        .map(|g| {
                            let mut g = (*g).clone();
                            g.state = GroupState::Removed;
                            g
                        })
                        .ok_or(HeadError::NotFound { what: "placement_group", id });
                    let _ = reply.send(fail.clone().map_or(result, Err));
                }
                Command::DrainNode { node, reply } => {
                    record.lock().unwrap().push((node.clone(), StringMap::new(), None));
                    let result = fail.clone().map_or_else(
                        || {
                            answer(&node).map(|mut n| {
                                n.state = NodeState::Draining;
                                n
                            })
                        },
                        Err,
                    );
                    let _ = reply.send(result);
                }
                _ => {}
            }
        }
    });
    let keyring = crate::keyring::Keyring::in_memory(TOKEN, "agent-secret");
    let (_, read) = keyring.create(berth_api::rest::Role::Read, "reader", 1).unwrap();
    let samples = super::samples::Samples::default();
    samples.push(first);
    Harness { router: router(handle, keyring, samples), asked, read, _view: view_tx, measurements }
}

fn harness() -> Harness {
    harness_with(sample_view(), None)
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    text: String,
}

impl Answer {
    fn header(&self, name: header::HeaderName) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    /// Asserts a 200 HTML answer; returns its text.
    fn ok(&self) -> &str {
        assert_eq!(self.status, StatusCode::OK, "{}", self.text);
        assert!(self.header(header::CONTENT_TYPE).starts_with("text/html"));
        &self.text
    }

    /// Asserts an error fragment with this status and field; returns its text.
    fn error(&self, status: u16, field: Option<&str>) -> &str {
        assert_eq!(self.status.as_u16(), status, "{}", self.text);
        assert!(self.header(header::CONTENT_TYPE).starts_with("text/html"));
        assert!(self.text.contains(r#"<div class="error">"#), "{}", self.text);
        assert!(self.text.contains(r#"aria-label="Dismiss this message""#), "{}", self.text);
        if let Some(field) = field {
            assert!(self.text.contains(&format!("<code>{field}</code>")), "{}", self.text);
        }
        &self.text
    }
}

async fn send(
    router: &Router,
    method: Method,
    uri: &str,
    token: Option<&str>,
    form: Option<&str>,
) -> Answer {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let body = match form {
        Some(text) => {
            request = request.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
            Body::from(text.to_string())
        }
        None => Body::empty(),
    };
    let response = router.clone().oneshot(request.body(body).unwrap()).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    Answer { status, headers, text: String::from_utf8(bytes.to_vec()).unwrap() }
}

async fn get(router: &Router, uri: &str) -> Answer {
    send(router, Method::GET, uri, Some(TOKEN), None).await
}

/// The value of `attribute` on the first tag that has `marker` in it.
fn attribute<'a>(html: &'a str, marker: &str, attribute: &str) -> &'a str {
    let at = html.find(marker).unwrap_or_else(|| panic!("no {marker:?} in {html}"));
    let start = html[..at].rfind('<').unwrap();
    let end = at + html[at..].find('>').unwrap();
    let tag = &html[start..end];
    let key = format!(r#"{attribute}=""#);
    let from = tag.find(&key).unwrap_or_else(|| panic!("no {attribute} in {tag}")) + key.len();
    &tag[from..from + tag[from..].find('"').unwrap()]
}

/// Every data route, with the method it takes.
const DATA_ROUTES: &[(&str, &str)] = &[
    ("GET", "/ui/overview"),
    ("GET", "/ui/nodes"),
    ("GET", "/ui/nodes/table"),
    ("POST", "/ui/nodes/node-1/taints"),
    ("DELETE", "/ui/nodes/node-1/taints"),
    ("POST", "/ui/nodes/node-1/drain"),
    ("POST", "/ui/nodes/node-1/undrain"),
    ("GET", "/ui/nodes/node-1"),
    ("POST", "/ui/actors/actor-1/kill"),
    ("POST", "/ui/tasks/task-1/cancel"),
    ("POST", "/ui/groups/pg-1/remove"),
    ("GET", "/ui/actors"),
    ("GET", "/ui/actors/rows"),
    ("GET", "/ui/actors/actor-1"),
    ("GET", "/ui/tasks"),
    ("GET", "/ui/tasks/rows"),
    ("GET", "/ui/tasks/task-1"),
    ("GET", "/ui/groups"),
    ("GET", "/ui/groups/rows"),
    ("GET", "/ui/groups/pg-1"),
    ("GET", "/ui/jobs"),
    ("GET", "/ui/jobs/rows"),
    ("GET", "/ui/jobs/job-1"),
    ("POST", "/ui/jobs/job-1/stop"),
];

// ---------------------------------------------------------------------------------------------
// The shell, assets and the token.

#[tokio::test]
async fn the_shell_is_public_holds_no_data_and_asks_for_the_token() {
    let h = harness();
    let answer = send(&h.router, Method::GET, "/", None, None).await;
    let html = answer.ok();
    assert!(html.contains(r#"<label for="token">Cluster token</label>"#), "{html}");
    assert!(html.contains(r#"<input id="token" name="token" type="password""#));
    assert!(html.contains(r#"<div id="alert" class="alert" role="alert">"#));
    assert!(html.contains(r#"<nav aria-label="Sections">"#));
    assert!(!html.contains("node-1") && !html.contains("actor-1"), "{html}");
    // No inline script or style: the CSP allows none.
    assert!(!html.contains("<script>") && !html.contains("style="), "{html}");
    assert!(html.contains(r#""allowEval":false"#));
    let csp = answer.header(header::CONTENT_SECURITY_POLICY);
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(answer.header(header::X_CONTENT_TYPE_OPTIONS), "nosniff");
}

#[tokio::test]
async fn assets_are_embedded_versioned_and_cached_for_long() {
    let h = harness();
    let shell = send(&h.router, Method::GET, "/", None, None).await;
    let src = attribute(&shell.text, "htmx.min.js", "src").to_string();
    assert!(src.starts_with("/ui/assets/htmx.min.js?v="), "{src}");
    for (file, kind, start) in [
        ("htmx.min.js", "text/javascript", "/*! htmx 2.0.11"),
        ("dashboard.js", "text/javascript", "// Berth dashboard"),
        ("dashboard.css", "text/css", "/* Berth dashboard"),
        ("favicon.svg", "image/svg+xml", "<svg"),
    ] {
        let answer = send(&h.router, Method::GET, &format!("/ui/assets/{file}"), None, None).await;
        assert_eq!(answer.status, StatusCode::OK, "{file}");
        assert!(answer.header(header::CONTENT_TYPE).starts_with(kind), "{file}");
        assert!(answer.header(header::CACHE_CONTROL).contains("immutable"), "{file}");
        assert!(answer.text.starts_with(start), "{file}");
    }
    let missing = send(&h.router, Method::GET, "/ui/assets/nope.js", None, None).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn every_fragment_needs_the_token_and_a_refusal_asks_for_it_again() {
    let h = harness();
    for (method, uri) in DATA_ROUTES {
        let method: Method = method.parse().unwrap();
        for (token, why) in [(None, "no token was sent"), (Some("wrong"), "does not know")] {
            let answer = send(&h.router, method.clone(), uri, token, Some("taint=a%3Db")).await;
            let text = answer.error(401, None);
            assert!(text.contains("Token refused — enter it again"), "{method} {uri}: {text}");
            assert!(text.contains(why), "{method} {uri}: {text}");
            assert_eq!(answer.header(header::WWW_AUTHENTICATE), "Bearer");
            assert!(!text.contains("node-1") || uri.contains("node-1"), "no data leaks: {text}");
        }
    }
    assert!(h.asked.lock().unwrap().is_empty(), "nothing reached the owner");
}

// ---------------------------------------------------------------------------------------------
// Pages.

#[tokio::test]
async fn the_overview_shows_nodes_resources_counts_waiting_and_demand() {
    let h = harness();
    let html = get(&h.router, "/ui/overview").await.ok().to_string();
    assert!(html.contains(r#"hx-trigger="berth:changed""#), "it looks again on changes: {html}");
    assert!(html.contains(r#"<span class="badge ok">2 alive</span>"#), "{html}");
    assert!(html.contains(r#"<span class="badge bad">1 dead</span>"#), "{html}");
    // CPU: 2 + 2 used of 8 + 8 on the alive nodes (the dead one does not count).
    assert!(
        html.contains(r#"<meter min="0" max="100" value="25" aria-label="CPU used: 25%">"#),
        "{html}"
    );
    assert!(html.contains("4 / 16"), "{html}");
    assert!(html.contains("16Gi / 64Gi"), "memory in binary units: {html}");
    assert!(html.contains(r#"<span class="badge ok">1 alive</span>"#), "actors by state: {html}");
    assert!(html.contains(r#"<span class="badge bad">1 infeasible</span>"#), "{html}");
    assert!(html.contains(r##"<a href="#actors/actor-2">actor-2</a>"##), "{html}");
    assert!(html.contains("2 too little GPU in total"), "{html}");
    assert!(html.contains("<td>GPU 16</td>"), "demand by shape: {html}");
    assert!(html.contains("<code>dedicated=ml</code>"), "{html}");
}

#[tokio::test]
async fn the_overview_has_an_autoscaler_card_and_its_decisions_when_one_runs() {
    let html = get(&harness().router, "/ui/overview").await.ok().to_string();
    assert!(!html.contains("Autoscaled nodes"), "no autoscaler, no card: {html}");
    let mut view = sample_view();
    view.autoscaler = Some(Arc::new(berth_api::rest::AutoscalerStatus {
        enabled: true,
        provider: "local".into(),
        node_types: vec![berth_api::rest::NodeTypeStatus {
            name: "gpu".into(),
            resources: [("GPU".to_string(), "2".to_string())].into(),
            taints: [("gpu_node".to_string(), "true".to_string())].into(),
            max_nodes: 2,
            alive: 1,
            launching: 1,
            ..Default::default()
        }],
        decisions: vec![berth_api::rest::AutoscalerDecision {
            at_ms: 0,
            action: "launch".into(),
            node_id: "gpu-1a".into(),
            node_type: "gpu".into(),
            reason: "for actor-<b>7".into(),
        }],
        ..Default::default()
    }));
    let html = get(&harness_with(view, None).router, "/ui/overview").await.ok().to_string();
    assert!(html.contains("<h2>Autoscaled nodes</h2>"), "{html}");
    assert!(html.contains(r#"<span class="badge wait">1 launching</span>"#), "{html}");
    assert!(
        html.contains(
            r#"<th scope="row">gpu</th><td>GPU 2 </td><td><code>gpu_node=true </code></td>"#
        ),
        "{html}"
    );
    assert!(
        html.contains("<td>gpu-1a</td><td>for actor-&#60;b&#62;7</td>")
            || html.contains("for actor-&lt;b&gt;7"),
        "escaped: {html}"
    );
}

#[tokio::test]
async fn the_nodes_table_shows_resources_labels_taints_state_and_controls() {
    let h = harness();
    let page = get(&h.router, "/ui/nodes").await.ok().to_string();
    assert!(page.contains(r#"<div id="nodes-live" class="live" hx-get="/ui/nodes/table""#));
    let html = get(&h.router, "/ui/nodes/table").await.ok().to_string();
    assert!(html.contains(r#"aria-label="GPU used on node-1: 0%""#), "{html}");
    assert!(html.contains("8Gi / 32Gi"), "{html}");
    assert!(html.contains(r#"<li class="chip">zone=a</li>"#), "{html}");
    assert!(!html.contains("berth.io/node-id"), "the ID column says it: {html}");
    // Every control is labelled.
    assert!(html.contains(
        r#"<label for="taint-0" class="sr-only">New taint on node-1, as key=value</label>"#
    ));
    assert!(html.contains(r#"<input id="taint-0" name="taint" type="text""#), "{html}");
    assert!(html.contains(r#"aria-label="Remove taint gpu_node=true from node-2""#), "{html}");
    assert!(html.contains(r#"aria-label="Drain node-1""#), "{html}");
    // Berth's own taint is shown, not removable; a dead node has no drain and no taint form.
    assert!(html.contains("berth.io/rare-GPU=true"), "{html}");
    assert!(!html.contains("Remove taint berth.io/rare-GPU"), "{html}");
    assert!(!html.contains(r#"aria-label="Drain node-3""#), "{html}");
    assert!(!html.contains(r#"id="taint-2""#), "{html}");
    assert!(html.contains(r#"<span class="badge bad">DEAD</span>"#), "{html}");
}

#[tokio::test]
async fn the_taint_forms_post_what_the_head_is_asked() {
    let h = harness();
    let html = get(&h.router, "/ui/nodes/table").await.ok().to_string();
    // Add: the form's action and field, sent as a browser sends a form.
    let action = attribute(&html, r#"<label for="taint-0""#, "hx-post");
    assert_eq!(action, "/ui/nodes/node-1/taints");
    let target = attribute(&html, r#"<label for="taint-0""#, "hx-target");
    assert_eq!(target, "#nodes-live");
    let name = attribute(&html, r#"id="taint-0""#, "name");
    let body = format!("{name}=e2e%3Dtrue");
    let answer = send(&h.router, Method::POST, action, Some(TOKEN), Some(&body)).await;
    let table = answer.ok();
    assert!(table.contains(r#"<div id="flash" class="flash" role="status" hx-swap-oob="true">Taint e2e=true added to node-1.</div>"#), "{table}");
    assert!(table.contains(r#"aria-label="Remove taint e2e=true from node-1""#), "{table}");
    // Remove: the button's form sends the taint back with DELETE.
    let remove = r#"aria-label="Remove taint gpu_node=true from node-2""#;
    let at = html.find(remove).unwrap();
    let form = &html[html[..at].rfind("<form").unwrap()..at];
    let action = attribute(form, "hx-delete", "hx-delete");
    let value = attribute(form, r#"type="hidden""#, "value");
    assert_eq!((action, value), ("/ui/nodes/node-2/taints", "gpu_node=true"));
    let body = format!("taint={}", value.replace('=', "%3D"));
    let answer = send(&h.router, Method::DELETE, action, Some(TOKEN), Some(&body)).await;
    assert!(answer.ok().contains("Taint gpu_node=true removed from node-2"), "{}", answer.text);
    assert!(!answer.text.contains("Remove taint gpu_node=true"), "{}", answer.text);
    // Drain.
    let answer = send(&h.router, Method::POST, "/ui/nodes/node-1/drain", Some(TOKEN), None).await;
    assert!(answer.ok().contains("node-1 is draining"), "{}", answer.text);
    assert_eq!(
        *h.asked.lock().unwrap(),
        vec![
            ("node-1".to_string(), map(&[("e2e", "true")]), Some(true)),
            ("node-2".to_string(), map(&[("gpu_node", "true")]), Some(false)),
            ("node-1".to_string(), StringMap::new(), None),
        ]
    );
}

#[tokio::test]
async fn a_refused_taint_is_an_error_fragment_naming_the_field() {
    let h = harness();
    let post = |body: &'static str| {
        let router = h.router.clone();
        async move {
            send(&router, Method::POST, "/ui/nodes/node-1/taints", Some(TOKEN), Some(body)).await
        }
    };
    post("taint=novalue").await.error(400, Some("taint"));
    post("taint=").await.error(400, Some("taint"));
    post("other=x").await.error(400, Some("taint"));
    // The head's own rule (a label key), checked before the owner is asked.
    let text = post("taint=bad%20key%3Dx").await.error(400, Some("bad key")).to_string();
    assert!(text.contains("Refused"), "{text}");
    assert!(h.asked.lock().unwrap().is_empty());
    // The owner's refusals: an unknown node, Berth's own taint.
    let answer =
        send(&h.router, Method::POST, "/ui/nodes/nope/taints", Some(TOKEN), Some("taint=a%3Db"))
            .await;
    assert!(answer.error(404, None).contains("node nope not found"));
    let h =
        harness_with(sample_view(), Some(HeadError::invalid("berth.io/rare-GPU", "Berth's own")));
    let answer = send(
        &h.router,
        Method::DELETE,
        "/ui/nodes/node-2/taints",
        Some(TOKEN),
        Some("taint=a%3Db"),
    )
    .await;
    answer.error(400, Some("berth.io/rare-GPU"));
    let h = harness_with(sample_view(), Some(HeadError::Conflict("node-3 is dead".into())));
    let answer = send(&h.router, Method::POST, "/ui/nodes/node-3/drain", Some(TOKEN), None).await;
    assert!(answer.error(409, None).contains("node-3 is dead"));
}

#[tokio::test]
async fn user_text_is_escaped_everywhere() {
    let mut view = sample_view();
    let evil = node("n\"/<b>", NodeState::Alive, &[("team", XSS)], &[("k", "v")]);
    view.nodes.insert(evil.node_id.clone(), Arc::new(evil));
    let mut a = actor(3, ActorState::Alive, Some("n\"/<b>"), &[("app", XSS)]);
    a.name = Some(XSS.into());
    Arc::make_mut(&mut a.spec).env = map(&[("X", XSS)]);
    view.actors.insert(3, Arc::new(a));
    let h = harness_with(view, None);
    for uri in ["/ui/nodes", "/ui/actors", "/ui/actors/rows", "/ui/actors/actor-3", "/ui/overview"]
    {
        let html = get(&h.router, uri).await.ok().to_string();
        assert!(!html.contains("<script>"), "{uri}: {html}");
        assert!(!html.contains("<b>"), "{uri}: {html}");
        if uri != "/ui/overview" {
            assert!(html.contains("&#60;script&#62;alert(1)"), "{uri}: {html}");
        }
    }
    // A node ID in a URL is one encoded path segment; in an attribute, escaped.
    let html = get(&h.router, "/ui/nodes/table").await.ok().to_string();
    assert!(html.contains(r#"hx-post="/ui/nodes/n%22%2F%3Cb%3E/taints""#), "{html}");
    let answer = send(
        &h.router,
        Method::POST,
        "/ui/nodes/n%22%2F%3Cb%3E/taints",
        Some(TOKEN),
        Some("taint=a%3Db"),
    )
    .await;
    assert!(answer.ok().contains("added to n&#34;/&#60;b&#62;."), "{}", answer.text);
    // An error message carrying user text is escaped too.
    let answer = send(
        &h.router,
        Method::POST,
        "/ui/nodes/node-1/taints",
        Some(TOKEN),
        Some("taint=%3Cscript%3E"),
    )
    .await;
    assert!(!answer.error(400, Some("taint")).contains("<script>"), "{}", answer.text);
}

#[tokio::test]
async fn lists_filter_by_state_namespace_node_and_label() {
    let h = harness();
    let page = get(&h.router, "/ui/actors?state=ALIVE").await.ok().to_string();
    for label in ["State", "Namespace", "Node", "Label"] {
        let id = format!("f-{}", label.to_lowercase());
        assert!(page.contains(&format!(r#"<label for="{id}">{label}</label>"#)), "{page}");
    }
    assert!(page.contains(r#"<option value="ALIVE" selected>"#), "the filter is kept: {page}");
    assert!(page.contains(r##"<a href="#actors/actor-1">actor-1</a>"##), "{page}");
    assert!(!page.contains("actor-2"), "{page}");
    let rows = |uri: &'static str| {
        let router = h.router.clone();
        async move { get(&router, uri).await }
    };
    // Empty fields (as the form sends them) are no filter.
    let all = rows("/ui/actors/rows?state=&namespace=&node=&label=").await;
    assert!(all.ok().contains("actor-1") && all.text.contains("actor-2"));
    let web = rows("/ui/actors/rows?label=app%3Dweb").await;
    assert!(web.ok().contains("actor-1") && !web.text.contains("actor-2"), "{}", web.text);
    let on_node = rows("/ui/actors/rows?node=node-1").await;
    assert!(on_node.ok().contains("actor-1") && !on_node.text.contains("actor-2"));
    let none = rows("/ui/actors/rows?namespace=other").await;
    assert!(none.ok().contains("No actor matches."), "{}", none.text);
    let pending = rows("/ui/actors/rows?state=pending").await;
    assert!(
        pending.ok().contains(r#"<span class="badge bad">infeasible</span>"#),
        "{}",
        pending.text
    );
    rows("/ui/actors/rows?state=SLEEPING").await.error(400, Some("state"));
    rows("/ui/actors/rows?label=novalue").await.error(400, Some("label"));
    // Tasks and groups: their own columns; no label filter.
    let tasks = get(&h.router, "/ui/tasks").await.ok().to_string();
    assert!(tasks.contains(r##"<a href="#tasks/task-1">task-1</a>"##) && tasks.contains("CPU 2"));
    assert!(!tasks.contains(r#"for="f-label""#), "{tasks}");
    let groups = rows("/ui/groups/rows?state=CREATED").await;
    assert!(groups.ok().contains(r##"<a href="#groups/pg-1">pg-1</a>"##), "{}", groups.text);
    assert!(groups.text.contains("STRICT_SPREAD") && groups.text.contains("GPU 1"));
}

#[tokio::test]
async fn details_show_the_options_the_history_and_why_it_waits() {
    let h = harness();
    let html = get(&h.router, "/ui/actors/actor-2").await.ok().to_string();
    assert!(html.contains(
        r#"hx-get="/ui/actors/actor-2?part=live" hx-trigger="berth:changed" hx-swap="outerHTML""#
    ));
    assert!(html.contains("Actor actor-2"), "{html}");
    assert!(html.contains("<p>0/3 nodes can take it now: 2 too little GPU in total"), "{html}");
    assert!(html.contains("Why no node could ever take it"), "{html}");
    assert!(html.contains("<li><strong>2 nodes</strong>: too little GPU in total"), "{html}");
    assert!(
        html.contains("<li><strong>1 node</strong>: untolerated taint gpu_node=true"),
        "{html}"
    );
    let tolerations =
        "<dt>Tolerations</dt><dd><code>{&#34;dedicated&#34;:&#34;ml&#34;}</code></dd>";
    assert!(html.contains(tolerations), "{html}");
    assert!(html.contains("<dt>Resources</dt><dd><code>GPU 16</code></dd>"), "{html}");
    assert!(html.contains("<dt>Command</dt><dd>sleep 600</dd>"), "{html}");
    assert!(html.contains("2023-11-14 22:13:20Z</td><td>created</td>"), "history: {html}");
    let alive = get(&h.router, "/ui/actors/actor-1").await.ok().to_string();
    assert!(!alive.contains("Why it waits") && alive.contains("actor-1 is ALIVE on node-1"));
    let task = get(&h.router, "/ui/tasks/task-1").await.ok().to_string();
    assert!(task.contains("<dt>Attempts</dt><dd>1 (retries at most 3)</dd>"), "{task}");
    let group = get(&h.router, "/ui/groups/pg-1").await.ok().to_string();
    assert!(group.contains("<td class=\"num\">0</td><td>GPU 1</td><td>node-1</td>"), "{group}");
    assert!(get(&h.router, "/ui/actors/actor-9")
        .await
        .error(404, None)
        .contains("actor actor-9 not found"));
    get(&h.router, "/ui/tasks/actor-1").await.error(404, None);
    get(&h.router, "/ui/groups/nope").await.error(404, None);
}

#[tokio::test]
async fn lists_are_newest_first_sortable_by_their_columns_and_paged() {
    let mut view = sample_view();
    for seq in 10..=14 {
        let mut a = actor(seq, ActorState::Alive, Some("node-1"), &[]);
        a.created_at_ms = 1_700_000_000_000 + seq;
        view.actors.insert(seq, Arc::new(a));
    }
    let h = harness_with(view, None);
    let page = get(&h.router, "/ui/actors?limit=20").await.ok().to_string();
    let first = page.find("actor-14").unwrap();
    assert!(first < page.find("actor-10").unwrap(), "newest first: {page}");
    assert!(page.contains(r#"aria-sort="descending""#), "{page}");
    // The order and page live in the form, not out of band, on the first rendering.
    assert!(
        page.contains(
            r#"<span id="list-state"><input type="hidden" name="sort" value="-created_at_ms">"#
        ),
        "{page}"
    );
    // A click on Name sorts by name, A first.
    assert!(
        page.contains(r#"hx-vals='{"sort": "name", "cursor": "", "page": "1"}'>Name</button>"#),
        "{page}"
    );
    let by_name = get(&h.router, "/ui/actors/rows?sort=name&limit=20").await.ok().to_string();
    assert!(by_name.find("web-1<").unwrap() < by_name.find("web-14").unwrap(), "{by_name}");
    assert!(by_name.contains(r#"<span id="list-state" hx-swap-oob="true">"#), "{by_name}");
    // Pages of 20: the 7 actors fit; a search narrows them.
    assert!(by_name.contains("Rows 1–7 of 7 matching") && !by_name.contains("Next page"));
    let found = get(&h.router, "/ui/actors/rows?name=WEB-1").await.ok().to_string();
    assert!(found.contains("of 6 matching"), "web-1 and web-10 to 14: {found}");
    get(&h.router, "/ui/actors/rows?sort=colour").await.error(400, Some("sort"));
    get(&h.router, "/ui/actors/rows?limit=7").await.error(400, Some("limit"));
    get(&h.router, "/ui/actors/rows?page=0").await.error(400, Some("page"));
    get(&h.router, "/ui/actors/rows?cursor=zz").await.error(400, Some("cursor"));
}

#[tokio::test]
async fn a_page_of_twenty_has_a_next_page_that_continues_where_it_ended() {
    let mut view = View::default();
    for seq in 1..=25 {
        let mut t = task(seq, TaskState::Running);
        t.created_at_ms = seq;
        view.tasks.insert(seq, Arc::new(t));
    }
    let h = harness_with(view, None);
    let first = get(&h.router, "/ui/tasks/rows?limit=20").await.ok().to_string();
    assert!(first.contains("Rows 1–20 of 25 matching"), "{first}");
    let marker = r#"hx-vals='{"cursor": ""#;
    let at = first.find(marker).unwrap() + marker.len();
    let cursor = &first[at..at + first[at..].find('"').unwrap()];
    let second = get(&h.router, &format!("/ui/tasks/rows?limit=20&page=2&cursor={cursor}"))
        .await
        .ok()
        .to_string();
    assert!(second.contains("Rows 21–25 of 25 matching"), "{second}");
    assert!(second.contains(">task-5<") && !second.contains(">task-6<"), "{second}");
    assert!(second.contains("First page"));
}

#[tokio::test]
async fn actions_ask_first_answer_with_the_heads_word_and_are_disabled_for_read_tokens() {
    let h = harness();
    let page = get(&h.router, "/ui/actors/actor-1").await.ok().to_string();
    assert!(page.contains(r#"hx-post="/ui/actors/actor-1/kill""#), "{page}");
    assert!(page.contains(r#"hx-confirm="Kill actor-1?"#), "{page}");
    assert!(!page.contains("disabled"), "{page}");
    let killed = send(&h.router, Method::POST, "/ui/actors/actor-1/kill", Some(TOKEN), None).await;
    let text = killed.ok();
    assert!(text.contains("actor-1 killed: it is DEAD."), "{text}");
    assert!(!text.contains(r#"hx-post="/ui/actors/actor-1/kill""#), "a dead actor has no kill");
    for (uri, word) in
        [("/ui/tasks/task-1/cancel", "cancelled"), ("/ui/groups/pg-1/remove", "removed")]
    {
        let answer = send(&h.router, Method::POST, uri, Some(TOKEN), None).await;
        assert!(answer.ok().contains(word), "{}", answer.text);
    }
    let asked: Vec<String> = h.asked.lock().unwrap().iter().map(|(id, _, _)| id.clone()).collect();
    assert_eq!(asked, ["actor-1", "task-1", "pg-1"]);
    // A read token: the buttons are disabled, and the head refuses the action anyway.
    let read = send(&h.router, Method::GET, "/ui/tasks/task-1", Some(&h.read), None).await;
    assert!(read.ok().contains("disabled title=\"Needs an admin token"), "{}", read.text);
    for uri in [
        "/ui/actors/actor-1/kill",
        "/ui/tasks/task-1/cancel",
        "/ui/groups/pg-1/remove",
        "/ui/nodes/node-1/drain",
        "/ui/nodes/node-1/undrain",
    ] {
        send(&h.router, Method::POST, uri, Some(&h.read), None).await.error(403, None);
    }
    assert_eq!(h.asked.lock().unwrap().len(), 3, "nothing more reached the head");
}

#[tokio::test]
async fn the_nodes_table_is_filtered_sorted_and_paged_and_read_only_for_read_tokens() {
    let mut view = sample_view();
    for i in 10..=34 {
        let mut n = node(&format!("node-{i}"), NodeState::Alive, &[("zone", "c")], &[]);
        n.actors = i;
        view.nodes.insert(n.node_id.clone(), Arc::new(n));
    }
    let h = harness_with(view, None);
    // By ID at first; the order and page in the table, included by every request.
    let page = get(&h.router, "/ui/nodes?limit=20").await.ok().to_string();
    assert!(page.contains(r#"<form id="node-filters""#), "{page}");
    assert!(
        page.contains(
            r#"<span id="node-list-state"><input type="hidden" name="sort" value="node_id">"#
        ),
        "{page}"
    );
    assert!(page.contains("Rows 1–20 of 28 matching"), "{page}");
    assert!(page.find(">node-1<").unwrap() < page.find(">node-10<").unwrap(), "{page}");
    // A click on Actors sorts the most first.
    assert!(
        page.contains(
            r#"hx-vals='{"sort": "-actors", "cursor": "", "page": "1"}'>Actors</button>"#
        ),
        "{page}"
    );
    let busiest = get(&h.router, "/ui/nodes/table?sort=-actors&limit=20").await.ok().to_string();
    assert!(busiest.find(">node-34<").unwrap() < busiest.find(">node-33<").unwrap(), "{busiest}");
    assert!(busiest.contains(r#"aria-sort="descending""#), "{busiest}");
    assert!(
        busiest.contains(
            r#"<span id="node-list-state"><input type="hidden" name="sort" value="-actors">"#
        ),
        "{busiest}"
    );
    assert!(!busiest.contains("hx-swap-oob=\"true\"><input"), "no state out of band: {busiest}");
    // The next page continues where the first ended.
    let marker = r#"hx-vals='{"cursor": ""#;
    let at = busiest.find(marker).unwrap() + marker.len();
    let cursor = &busiest[at..at + busiest[at..].find('"').unwrap()];
    let second =
        get(&h.router, &format!("/ui/nodes/table?sort=-actors&limit=20&page=2&cursor={cursor}"))
            .await
            .ok()
            .to_string();
    assert!(second.contains("Rows 21–28 of 28 matching"), "{second}");
    assert!(second.contains(">node-14<") && !second.contains(">node-15<"), "{second}");
    // Filters: state, label, ID or address.
    let dead = get(&h.router, "/ui/nodes/table?state=DEAD").await.ok().to_string();
    assert!(dead.contains("of 1 matching") && dead.contains(">node-3<"), "{dead}");
    let zone = get(&h.router, "/ui/nodes/table?label=zone%3Da").await.ok().to_string();
    assert!(zone.contains("of 1 matching") && zone.contains(">node-1<"), "{zone}");
    let none = get(&h.router, "/ui/nodes/table?name=nothing-like-it").await.ok().to_string();
    assert!(none.contains("No node matches."), "{none}");
    get(&h.router, "/ui/nodes/table?sort=colour").await.error(400, Some("sort"));
    get(&h.router, "/ui/nodes/table?limit=7").await.error(400, Some("limit"));
    get(&h.router, "/ui/nodes/table?cursor=zz").await.error(400, Some("cursor"));
    // An action answers the page it was taken from (the form's fields travel with it).
    let answer = send(
        &h.router,
        Method::POST,
        "/ui/nodes/node-34/drain",
        Some(TOKEN),
        Some("sort=-actors&limit=20&page=1&cursor="),
    )
    .await;
    let text = answer.ok();
    assert!(text.contains("node-34 is draining"), "{text}");
    assert!(text.find(">node-34<").unwrap() < text.find(">node-33<").unwrap(), "{text}");
    // A read token sees every action disabled, and the head refuses them anyway.
    assert!(!busiest.contains("disabled"), "{busiest}");
    let read = send(&h.router, Method::GET, "/ui/nodes/table", Some(&h.read), None).await;
    let text = read.ok();
    assert!(text.contains("need an admin token"), "{text}");
    for control in [
        r#"aria-label="Drain node-1" disabled title="Needs an admin token"#,
        r#"aria-label="Remove taint gpu_node=true from node-2" disabled title="Needs an admin token"#,
        r#"<button type="submit" disabled title="Needs an admin token: this one may only read">Add taint</button>"#,
    ] {
        assert!(text.contains(control), "missing {control}: {text}");
    }
    let taint = Some("taint=a%3Db");
    send(&h.router, Method::POST, "/ui/nodes/node-1/taints", Some(&h.read), taint)
        .await
        .error(403, None);
    send(&h.router, Method::DELETE, "/ui/nodes/node-2/taints", Some(&h.read), taint)
        .await
        .error(403, None);
}

#[tokio::test]
async fn a_nodes_page_has_its_gpu_map_history_and_undrain() {
    let mut view = sample_view();
    for seq in [5, 6] {
        let mut a = actor(seq, ActorState::Alive, Some("node-1"), &[]);
        Arc::make_mut(&mut a.spec).placement =
            PlacementSpec::from_json(json!({"resources": {"GPU": 0.5}})).unwrap();
        a.instances = BTreeMap::from([("GPU".to_string(), vec![2])]);
        view.actors.insert(seq, Arc::new(a));
    }
    let mut draining = node("node-4", NodeState::Draining, &[], &[]);
    draining.history = vec![berth_api::rest::NodeEvent {
        at_ms: 1_700_000_000_000,
        kind: "draining".into(),
        message: "takes no new work".into(),
    }];
    view.nodes.insert("node-4".into(), Arc::new(draining));
    let h = harness_with(view, None);
    let page = get(&h.router, "/ui/nodes/node-1").await.ok().to_string();
    for holder in ["actor-5", "actor-6"] {
        assert!(
            page.contains(&format!(r#"data-holder="{holder}" data-instance="2" data-share="0.5""#)),
            "{page}"
        );
    }
    assert_eq!(page.matches("<text x=\"0\"").count(), 4, "4 GPU instances: {page}");
    assert!(page.contains(r#"hx-post="/ui/nodes/node-1/drain?from=detail""#));
    let drained = get(&h.router, "/ui/nodes/node-4").await.ok().to_string();
    assert!(drained.contains("takes no new work") && drained.contains(">draining<"), "{drained}");
    let answer =
        send(&h.router, Method::POST, "/ui/nodes/node-4/undrain?from=detail", Some(TOKEN), None)
            .await;
    assert!(answer.ok().contains("node-4 is ALIVE: it takes new work again"), "{}", answer.text);
    let table = get(&h.router, "/ui/nodes/table").await.ok().to_string();
    assert!(table.contains(r#"aria-label="Undrain node-4""#), "{table}");
    assert!(table.contains(r##"<a class="node-id" href="#nodes/node-1">node-1</a>"##), "{table}");
}

#[tokio::test]
async fn measured_use_shows_beside_what_was_reserved_on_node_and_work_pages() {
    let h = harness();
    let unmeasured = get(&h.router, "/ui/nodes/node-1").await.ok().to_string();
    assert!(unmeasured.contains("Not measured"), "{unmeasured}");
    let work = |id: &str, attempt, cpu| berth_api::agent::WorkMeasured {
        work_id: String::from(id),
        attempt,
        cpu_millicores: cpu,
        memory_bytes: 10 << 20,
        processes: 2,
    };
    let measured = berth_api::agent::Measured {
        cpu_millicores: Some(2000),
        cpus: 8,
        memory_used_bytes: 1 << 30,
        memory_total_bytes: 4 << 30,
        gpus: vec![berth_api::agent::GpuMeasured {
            index: 0,
            memory_used_bytes: 3 << 30,
            memory_total_bytes: 16 << 30,
            utilization_percent: Some(45),
        }],
        work: vec![work("actor-1", 1, Some(990)), work("task-1", 1, None)],
    };
    h.measurements.record("node-1", 1, 1_700_000_000_000, measured.clone()).unwrap();
    let page = get(&h.router, "/ui/nodes/node-1").await.ok().to_string();
    assert!(page.contains("2.00 / 8"), "machine CPU: {page}");
    assert!(page.contains("1Gi / 4Gi"), "machine memory: {page}");
    assert!(page.contains("GPU 0 memory (45% busy)") && page.contains("3Gi / 16Gi"), "{page}");
    assert!(page.contains(r#"aria-label="CPU measured in use on node-1: 25%""#), "{page}");
    // Measurements change without the cluster changing: the page also looks every 5 s.
    assert!(page.contains(r#"hx-trigger="berth:changed, every 5s""#), "{page}");
    assert!(page.contains("CPU 0.99 · memory 10Mi · 2 processes (attempt 1)"), "{page}");
    let actor = get(&h.router, "/ui/actors/actor-1").await.ok().to_string();
    assert!(
        actor.contains("CPU 0.99 · memory 10Mi · 2 processes (attempt 1); reserved CPU 1"),
        "{actor}"
    );
    // The task's first measurement: no CPU figure yet.
    let task = get(&h.router, "/ui/tasks/task-1").await.ok().to_string();
    assert!(task.contains("CPU — · memory 10Mi · 2 processes (attempt 1)"), "{task}");
    assert!(actor.contains(r#"hx-trigger="berth:changed, every 5s""#), "{actor}");
    let other = get(&h.router, "/ui/actors/actor-2").await.ok().to_string();
    assert!(other.contains("not measured"), "{other}");
    // A pending actor runs nowhere: nothing to look at again.
    assert!(other.contains(r#"hx-trigger="berth:changed""#), "{other}");
    // A dead node's last measurement is never shown.
    h.measurements.record("node-3", 1, 1_700_000_000_000, measured).unwrap();
    let dead = get(&h.router, "/ui/nodes/node-3").await.ok().to_string();
    assert!(dead.contains("Not measured") && !dead.contains("2.00 / 8"), "{dead}");
}

#[tokio::test]
async fn the_overview_charts_the_last_hour_and_a_group_shows_its_bundles_on_their_nodes() {
    let h = harness();
    let overview = get(&h.router, "/ui/overview").await.ok().to_string();
    assert!(
        overview.contains(r#"aria-label="GPU reserved: 0 of 8 now over the last hour""#),
        "{overview}"
    );
    assert!(overview.contains("Waiting requests: 1 now"), "{overview}");
    let group = get(&h.router, "/ui/groups/pg-1").await.ok().to_string();
    assert!(
        group.contains(r#"class="bundle-map""#) && group.contains("data-bundle=\"0\""),
        "{group}"
    );
    assert!(!group.contains("data-logs"), "a group has no logs");
    let task = get(&h.router, "/ui/tasks/task-1").await.ok().to_string();
    assert!(task.contains(r#"data-logs="task-1""#), "{task}");
    let live = get(&h.router, "/ui/tasks/task-1?part=live").await.ok().to_string();
    assert!(!live.contains("data-logs"), "the live part leaves the logs alone: {live}");
}

#[tokio::test]
async fn jobs_are_listed_link_to_what_they_own_and_stop_for_admins_only() {
    let h = harness();
    let rows = |uri: &'static str| {
        let router = h.router.clone();
        async move { get(&router, uri).await }
    };
    let list = get(&h.router, "/ui/jobs").await.ok().to_string();
    assert!(list.contains(r##"<a href="#jobs/job-1">job-1</a>"##), "{list}");
    assert!(
        list.contains("train.py") && list.contains("laptop") && list.contains("python pid 4242")
    );
    assert!(!list.contains(r#"for="f-job""#), "jobs have no job filter: {list}");
    rows("/ui/jobs/rows?state=LOST").await.ok();
    rows("/ui/jobs/rows?state=ALIVE").await.error(400, Some("state"));
    // The other lists filter by job.
    let actors = get(&h.router, "/ui/actors").await.ok().to_string();
    assert!(actors.contains(r#"for="f-job""#), "{actors}");
    let of_job = rows("/ui/actors/rows?job=job-1").await;
    assert!(of_job.ok().contains("actor-1") && !of_job.text.contains("actor-2"), "{}", of_job.text);
    // A job's page: what it is, links to what it owns (counted), and Stop.
    let page = get(&h.router, "/ui/jobs/job-1").await.ok().to_string();
    assert!(page.contains("Job job-1") && page.contains("job-1 is RUNNING: its driver holds it"));
    assert!(page.contains(r##"<a href="#actors?job=job-1">Its actors (1)</a>"##), "{page}");
    assert!(page.contains(r##"<a href="#tasks?job=job-1">Its tasks (0)</a>"##), "{page}");
    assert!(page.contains("<dt>Lease</dt><dd>30.0 s without a renewal</dd>"), "{page}");
    assert!(page.contains(r#"hx-post="/ui/jobs/job-1/stop""#), "{page}");
    assert!(!page.contains("No logs"), "jobs have no logs: {page}");
    // An actor of the job links to it and says who owns it.
    let actor = get(&h.router, "/ui/actors/actor-1").await.ok().to_string();
    assert!(actor.contains(r##"<a href="#jobs/job-1">Its job, job-1</a>"##), "{actor}");
    assert!(actor.contains("<dt>Owner</dt><dd>the driver of job-1; ends with it</dd>"), "{actor}");
    // Stop: refused for a read token, done for an admin.
    send(&h.router, Method::POST, "/ui/jobs/job-1/stop", Some(&h.read), None)
        .await
        .error(403, None);
    let stopped = send(&h.router, Method::POST, "/ui/jobs/job-1/stop", Some(TOKEN), None).await;
    let text = stopped.ok();
    assert!(text.contains("job-1 stopped: it is STOPPED."), "{text}");
    assert!(!text.contains(r#"hx-post="/ui/jobs/job-1/stop""#), "an ended job has no stop");
    get(&h.router, "/ui/jobs/job-9").await.error(404, None);
}
