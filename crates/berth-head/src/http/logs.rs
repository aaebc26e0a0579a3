//! `/api/v1/logs/{id}`: an actor's or task's output, streamed from its node's agent.
//!
//! The head keeps no logs: the agent of the node where the work runs (or ran last) reads them
//! from its files and sends them up its log stream (`crate::logs`). The answer is `text/plain`
//! and streamed; errors found before the first byte (no such work, never placed, node dead or
//! unreachable, a node that keeps no logs) are `ApiError`s, and a failure after the first byte
//! (the node's stream lost mid-answer) aborts the answer, so a client never takes a cut log for
//! a whole one.
//!
//! With `follow=true` the answer stays open and carries what is appended, until the client goes
//! away (its request is then cancelled at the agent) or the work ends for good (an actor DEAD, a
//! task FINISHED, FAILED or CANCELLED) or moves to another node: the rest of the log is then
//! read to its end and the answer ends.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use berth_api::agent::LogStream as WireStream;
use berth_api::rest::{ActorState, ApiError, Event, LogStream, LogsQuery, NodeState, TaskState};
use tokio::sync::watch;

use super::extract::{Failure, PathId, Query};
use super::Api;
use crate::error::HeadError;
use crate::logs::{LogReader, LogStreams, OpenError, MAX_REQUESTS_PER_NODE};
use crate::view::View;
use berth_api::ObjectKind;

/// How long the agent has to answer a request at all (its first answer comes at once).
pub(crate) const FIRST_ANSWER: Duration = Duration::from_secs(10);

/// The output of an actor or task: every attempt's, each after a header line.
///
/// `stream`: `out` (default) or `err`. `follow=true` keeps the answer open and sends what is
/// written later, until the client goes away or the work ends for good. `offset`: the first
/// byte to send (default 0).
#[utoipa::path(
    get, path = "/api/v1/logs/{id}", tag = "logs", operation_id = "get_logs",
    params(
        ("id" = String, Path, description = "The actor's or task's ID (`actor-17`, `task-3`)"),
        LogsQuery,
    ),
    responses(
        (status = 200, description = "The log from `offset` on, streamed (every attempt's output, \
            each after a `=== berth: …` header line); with follow=true the answer stays open",
            content_type = "text/plain", body = String),
        (status = 400, description = "A bad query parameter (`field` names it), or a placement \
            group's ID", body = ApiError),
        (status = 404, description = "No such actor or task", body = ApiError),
        (status = 409, description = "The work was never placed, or its node is dead, \
            unreachable or keeps no logs", body = ApiError),
    )
)]
pub(crate) async fn logs(
    State(api): State<Api>,
    PathId(id): PathId,
    Query(query): Query<LogsQuery>,
) -> Result<Response, Failure> {
    let view = api.handle.view();
    let work = locate(&view, &id)?;
    let node_id = work.node_id.clone().ok_or_else(|| {
        HeadError::Conflict(format!(
            "{id} was never placed on a node (it is {}): it has no output yet",
            work.state
        ))
    })?;
    match view.nodes.get(&*node_id) {
        Some(node) if node.state == NodeState::Dead => {
            let why = node.dead_reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
            return Err(HeadError::Conflict(format!(
                "{id} ran on node {node_id}, which is DEAD{why}: its logs stay on that machine \
                 until its agent connects again"
            ))
            .into());
        }
        Some(_) => {}
        None => {
            return Err(HeadError::Conflict(format!(
                "{id} ran on node {node_id}, which the head no longer knows"
            ))
            .into())
        }
    }
    let stream = query.stream.unwrap_or_default();
    let wire = match stream {
        LogStream::Out => WireStream::Out,
        LogStream::Err => WireStream::Err,
    };
    let offset = query.offset.unwrap_or(0);
    // Following work that ended for good would wait forever: read it to its end instead.
    let follow = query.follow.unwrap_or(false) && !work.over(&view, &id, &node_id);
    let mut reader = open(&api.logs, &node_id, &id, wire, offset, follow)?;
    let first = match tokio::time::timeout(FIRST_ANSWER, reader.next()).await {
        Err(_) => {
            return Err(HeadError::Conflict(format!(
                "the agent of node {node_id} did not answer within {} s: it is unreachable \
                 (or overloaded)",
                FIRST_ANSWER.as_secs()
            ))
            .into())
        }
        Ok(None) => return Err(lost_before_answer(&node_id).into()),
        Ok(Some(chunk)) if !chunk.error.is_empty() => {
            return Err(HeadError::Conflict(format!(
                "node {node_id} cannot send the logs of {id}: {}",
                chunk.error
            ))
            .into())
        }
        Ok(Some(chunk)) => chunk,
    };
    let state = Streaming {
        logs: api.logs.clone(),
        id,
        stream: wire,
        position: offset,
        pending: Some(first.data),
        finished: first.eof,
        follow: follow.then(|| api.handle.subscribe()),
        reader,
    };
    let body = Body::from_stream(futures::stream::unfold(state, Streaming::step));
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if let Ok(value) = HeaderValue::from_str(&node_id) {
        headers.insert("berth-node-id", value);
    }
    Ok(response)
}

/// Where a work's output is, as the published view says.
struct Work {
    kind: ObjectKind,
    /// Its node now, else the last node it was placed on.
    node_id: Option<Arc<str>>,
    /// Its state, for messages.
    state: String,
}

impl Work {
    /// True when following `id` on `node_id` can bring nothing more: it ended for good, or
    /// it now runs on another node.
    fn over(&self, view: &View, id: &str, node_id: &str) -> bool {
        let (ended, now_on) = match self.kind {
            ObjectKind::Actor => match view.actor(id) {
                Some(a) => (a.state == ActorState::Dead, a.node_id.clone()),
                None => (true, None),
            },
            _ => match view.task(id) {
                Some(t) => (
                    matches!(
                        t.state,
                        TaskState::Finished | TaskState::Failed | TaskState::Cancelled
                    ),
                    t.node_id.clone(),
                ),
                None => (true, None),
            },
        };
        ended || now_on.is_some_and(|n| *n != *node_id)
    }
}

/// The actor or task `id` and where its output is.
fn locate(view: &View, id: &str) -> Result<Work, HeadError> {
    let not_found = || HeadError::NotFound { what: "actor or task", id: id.to_string() };
    match ObjectKind::parse(id) {
        Some((ObjectKind::Actor, _)) => {
            let a = view.actor(id).ok_or_else(not_found)?;
            Ok(Work {
                kind: ObjectKind::Actor,
                node_id: a.node_id.clone().or_else(|| last_node(&a.history)),
                state: word(&a.state),
            })
        }
        Some((ObjectKind::Task, _)) => {
            let t = view.task(id).ok_or_else(not_found)?;
            Ok(Work {
                kind: ObjectKind::Task,
                node_id: t.node_id.clone().or_else(|| last_node(&t.history)),
                state: word(&t.state),
            })
        }
        Some((kind @ (ObjectKind::Group | ObjectKind::Job), _)) => Err(HeadError::invalid(
            "id",
            format!("{id} is a {}: only actors and tasks have logs", kind.noun()),
        )),
        None => Err(not_found()),
    }
}

/// The last node a history names (a restarting actor or a retrying task has none now).
fn last_node(history: &[Event]) -> Option<Arc<str>> {
    history.iter().rev().find_map(|e| e.node_id.clone())
}

/// A state as the API spells it (`ALIVE`).
fn word<T: serde::Serialize>(state: &T) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn open(
    logs: &LogStreams,
    node_id: &str,
    id: &str,
    stream: WireStream,
    offset: u64,
    follow: bool,
) -> Result<LogReader, HeadError> {
    logs.open(node_id, id, stream, offset, follow).map_err(|err| match err {
        OpenError::NoStream => HeadError::Conflict(format!(
            "the agent of node {node_id} (where {id} runs or ran) has no log stream open to the \
             head: it is unreachable or reconnecting (or too old to serve logs); try again"
        )),
        OpenError::Busy => HeadError::Conflict(format!(
            "node {node_id} serves {MAX_REQUESTS_PER_NODE} log readers already; try again later"
        )),
    })
}

fn lost_before_answer(node_id: &str) -> HeadError {
    HeadError::Conflict(format!(
        "the log stream of node {node_id} was lost before its agent answered: it is unreachable \
         or reconnecting; try again"
    ))
}

/// An answer being streamed.
struct Streaming {
    logs: Arc<LogStreams>,
    id: String,
    stream: WireStream,
    /// The offset of the next byte to send.
    position: u64,
    /// Bytes received and not yet sent.
    pending: Option<Vec<u8>>,
    /// The request ended: nothing follows `pending`.
    finished: bool,
    /// While following: the view, to notice the work ending or moving.
    follow: Option<watch::Receiver<Arc<View>>>,
    reader: LogReader,
}

/// What woke a following answer.
enum Woke {
    Chunk(Option<berth_api::agent::LogChunk>),
    View(bool),
}

impl Streaming {
    /// The next piece of the body. An error aborts the answer (the client sees it cut).
    async fn step(mut self) -> Option<(Result<Bytes, io::Error>, Streaming)> {
        loop {
            if let Some(data) = self.pending.take().filter(|d| !d.is_empty()) {
                self.position += data.len() as u64;
                return Some((Ok(Bytes::from(data)), self));
            }
            if self.finished {
                return None;
            }
            let woke = match &mut self.follow {
                None => Woke::Chunk(self.reader.next().await),
                Some(view) => tokio::select! {
                    chunk = self.reader.next() => Woke::Chunk(chunk),
                    changed = view.changed() => Woke::View(changed.is_ok()),
                },
            };
            match woke {
                Woke::Chunk(None) => {
                    let message = format!(
                        "the log stream of node {} was lost in the middle of the answer",
                        self.reader.node_id()
                    );
                    return self.fail(message);
                }
                Woke::Chunk(Some(chunk)) if !chunk.error.is_empty() => {
                    let message = format!("node {}: {}", self.reader.node_id(), chunk.error);
                    return self.fail(message);
                }
                Woke::Chunk(Some(chunk)) => {
                    self.finished = chunk.eof;
                    self.pending = Some(chunk.data);
                }
                // The head is shutting down.
                Woke::View(false) => return None,
                Woke::View(true) => {
                    let over = {
                        let view = self.follow.as_mut().expect("following").borrow_and_update();
                        let node_id = self.reader.node_id();
                        let kind = if self.id.starts_with(ObjectKind::Actor.prefix()) {
                            ObjectKind::Actor
                        } else {
                            ObjectKind::Task
                        };
                        Work { kind, node_id: None, state: String::new() }
                            .over(&view, &self.id, node_id)
                    };
                    if over {
                        // Read what is left to the end, then finish (the chunks the follow
                        // request had in flight are dropped with it, and read again).
                        self.follow = None;
                        let node_id = self.reader.node_id().to_string();
                        match self.logs.open(&node_id, &self.id, self.stream, self.position, false)
                        {
                            Ok(reader) => self.reader = reader,
                            Err(_) => return self.fail(lost_before_answer(&node_id).to_string()),
                        }
                    }
                }
            }
        }
    }

    fn fail(mut self, message: String) -> Option<(Result<Bytes, io::Error>, Streaming)> {
        tracing::debug!(id = %self.id, "log answer cut: {message}");
        self.finished = true;
        self.pending = None;
        Some((Err(io::Error::other(message)), self))
    }
}

#[cfg(test)]
mod tests {
    //! The streaming answer against a real server and a stand-in agent stream: a client that
    //! goes away cancels its request at the agent, a followed answer ends with its work, and a
    //! stream lost mid-answer cuts the answer.

    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, AtomicU64};

    use berth_api::agent::{LogChunk, LogRequest};
    use berth_api::rest::{Actor, ActorCreate, Node};
    use tokio::sync::mpsc;
    use tonic::Status;

    use super::*;
    use crate::command::Liveness;
    use crate::handle::HeadHandle;
    use crate::ids::Sequences;
    use crate::metrics::Metrics;

    const TOKEN: &str = "test-token-0123456789";
    const WAIT: Duration = Duration::from_secs(20);

    struct Setup {
        base: String,
        http: reqwest::Client,
        logs: Arc<LogStreams>,
        view: watch::Sender<Arc<View>>,
        to_agent: mpsc::UnboundedReceiver<Result<LogRequest, Status>>,
        from_agent: Option<mpsc::UnboundedSender<Result<LogChunk, Status>>>,
    }

    fn actor(state: ActorState) -> Actor {
        Actor {
            endpoint: None,
            work_key: None,
            actor_id: "actor-1".into(),
            name: None,
            namespace: "default".into(),
            state,
            node_id: Some("n1".into()),
            instances: BTreeMap::new(),
            restarts: 0,
            death_reason: None,
            diagnosis: None,
            history: Default::default(),
            created_at_ms: 1,
            spec: Arc::new(ActorCreate { command: "x".into(), ..ActorCreate::default() }),
        }
    }

    fn view(state: ActorState) -> Arc<View> {
        let mut view = View::default();
        let node = Node {
            node_id: "n1".into(),
            address: "10.0.0.1".into(),
            state: NodeState::Alive,
            labels: Default::default(),
            taints: vec![],
            resources: Default::default(),
            actors: 1,
            tasks: 0,
            registered_at_ms: 1,
            dead_reason: None,
            history: Vec::new(),
            measured: None,
        };
        view.nodes.insert("n1".into(), Arc::new(node));
        view.actors.insert(1, Arc::new(actor(state)));
        Arc::new(view)
    }

    async fn setup() -> Setup {
        let logs = Arc::new(LogStreams::default());
        let (from_agent, inbound) = mpsc::unbounded_channel();
        let liveness = Arc::new(Liveness {
            session: 1,
            last_seen_ms: AtomicU64::new(0),
            ended: AtomicBool::new(false),
        });
        let inbound = tokio_stream::wrappers::UnboundedReceiverStream::new(inbound);
        let to_agent = logs.attach("n1".into(), 1, liveness, inbound).unwrap();
        let (commands, _) = mpsc::channel(1);
        let (view_tx, view_rx) = watch::channel(view(ActorState::Alive));
        let handle = HeadHandle {
            commands,
            view: view_rx,
            sequences: Arc::new(Sequences::default()),
            work_keys: Arc::new(crate::work_keys::WorkKeys::with_secret(&[7; 32])),
            store: Arc::default(),
            limits: Arc::default(),
            measurements: Default::default(),
        };
        let router = super::super::router_with_logs(
            handle,
            crate::keyring::Keyring::in_memory(TOKEN, "agent-secret"),
            Arc::new(Metrics::new()),
            logs.clone(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        crate::tls::install_crypto_provider();
        Setup {
            base,
            http: reqwest::Client::new(),
            logs,
            view: view_tx,
            to_agent,
            from_agent: Some(from_agent),
        }
    }

    impl Setup {
        /// `GET /api/v1/logs/actor-1?query`, sent when awaited (borrowing nothing of `self`,
        /// so the stand-in agent can answer meanwhile).
        fn get(&self, query: &str) -> impl std::future::Future<Output = reqwest::Response> {
            let sent = self
                .http
                .get(format!("{}/api/v1/logs/actor-1?{query}", self.base))
                .bearer_auth(TOKEN)
                .send();
            async move { sent.await.unwrap() }
        }

        /// The next request the agent receives (acknowledgements skipped).
        async fn request(&mut self) -> LogRequest {
            loop {
                let next = tokio::time::timeout(WAIT, self.to_agent.recv())
                    .await
                    .expect("a request in time")
                    .expect("the stream is open")
                    .expect("not an error");
                if next.credit == 0 {
                    return next;
                }
            }
        }

        fn answer(&self, request_id: u64, data: &[u8], eof: bool) {
            let chunk = LogChunk { request_id, data: data.to_vec(), eof, error: String::new() };
            self.from_agent.as_ref().unwrap().send(Ok(chunk)).unwrap();
        }
    }

    async fn chunk(response: &mut reqwest::Response) -> Option<Vec<u8>> {
        tokio::time::timeout(WAIT, response.chunk())
            .await
            .expect("a chunk in time")
            .expect("the answer is whole")
            .map(|c| c.to_vec())
    }

    #[tokio::test]
    async fn a_client_that_goes_away_cancels_its_request() {
        let mut s = setup().await;
        let answer = s.get("follow=true&stream=err");
        let (mut response, asked) = tokio::join!(answer, async {
            let asked = s.request().await;
            s.answer(asked.request_id, b"first\n", false);
            asked
        });
        assert!(asked.follow && asked.stream == WireStream::Err as i32 && asked.offset == 0);
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(chunk(&mut response).await.unwrap(), b"first\n");
        s.answer(asked.request_id, b"second\n", false);
        assert_eq!(chunk(&mut response).await.unwrap(), b"second\n");
        assert_eq!(s.logs.open_requests("n1"), 1);
        drop(response);
        let cancel = s.request().await;
        assert_eq!((cancel.request_id, cancel.cancel), (asked.request_id, true));
        assert_eq!(s.logs.open_requests("n1"), 0);
    }

    #[tokio::test]
    async fn a_followed_answer_reads_the_rest_and_ends_when_its_work_ends() {
        let mut s = setup().await;
        let answer = s.get("follow=true&offset=10");
        let (mut response, asked) = tokio::join!(answer, async {
            let asked = s.request().await;
            s.answer(asked.request_id, b"abc", false);
            asked
        });
        assert_eq!(asked.offset, 10);
        assert_eq!(chunk(&mut response).await.unwrap(), b"abc");
        s.view.send_replace(view(ActorState::Dead));
        // The rest is asked for where the answer stands, without follow; the follow is
        // cancelled.
        let rest = s.request().await;
        assert_eq!((rest.offset, rest.follow, rest.cancel), (13, false, false));
        assert_eq!(
            s.request().await,
            LogRequest { request_id: asked.request_id, cancel: true, ..LogRequest::default() }
        );
        s.answer(rest.request_id, b"def", true);
        assert_eq!(chunk(&mut response).await.unwrap(), b"def");
        assert_eq!(chunk(&mut response).await, None);
    }

    #[tokio::test]
    async fn an_agent_error_is_a_conflict_and_a_lost_stream_cuts_the_answer() {
        let mut s = setup().await;
        let answer = s.get("");
        let (response, _) = tokio::join!(answer, async {
            let asked = s.request().await;
            let error = LogChunk {
                request_id: asked.request_id,
                error: "disk gone".into(),
                ..LogChunk::default()
            };
            s.from_agent.as_ref().unwrap().send(Ok(error)).unwrap();
        });
        assert_eq!(response.status(), StatusCode::CONFLICT);
        let body: ApiError = response.json().await.unwrap();
        assert_eq!(body.message, "node n1 cannot send the logs of actor-1: disk gone");

        let answer = s.get("");
        let (mut response, _) = tokio::join!(answer, async {
            let asked = s.request().await;
            s.answer(asked.request_id, b"partial", false);
        });
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(chunk(&mut response).await.unwrap(), b"partial");
        // The agent's stream goes away mid-answer: the answer is cut, not ended.
        drop(s.from_agent.take());
        let cut = tokio::time::timeout(WAIT, response.chunk()).await.expect("in time");
        assert!(cut.is_err(), "{cut:?}");
        // The cut came from the registry forgetting the stream (it forgets, then ends the
        // stream's requests): a new request finds no stream, and says so.
        let response = s.get("").await;
        assert_eq!(response.status(), StatusCode::CONFLICT);
        let body: ApiError = response.json().await.unwrap();
        assert!(body.message.contains("has no log stream open"), "{}", body.message);
    }
}
