//! A small in-test head: enough of `AgentService` to drive the agent through the protocol.
//! Not the real head; it only records what it receives and does what a test tells it to.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_api::agent::agent_service_server::{AgentService, AgentServiceServer};
use berth_api::agent::{
    assignment, Assignment, AssignmentsRequest, HeartbeatReply, HeartbeatRequest, LogChunk,
    LogRequest, RegisterReply, RegisterRequest, Start, StatusReplies, StatusReply, StatusReport,
    StatusReports, Stop, WorkKind,
};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{TcpListenerStream, UnboundedReceiverStream};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

/// Generous: a bound on waiting, never a synchronisation sleep.
pub const WAIT: Duration = Duration::from_secs(20);
pub const TOKEN: &str = "s3cret";
pub const INTERVAL_MS: u32 = 20;

/// One accepted registration.
#[derive(Clone, Debug)]
pub struct Registration {
    pub request: RegisterRequest,
    pub authorization: Option<String>,
    pub node_id: String,
    pub session: u64,
    pub stop: Vec<String>,
}

/// Everything the head received, in order of arrival per kind.
#[derive(Clone, Debug, Default)]
pub struct Log {
    pub registrations: Vec<Registration>,
    /// Registrations answered with an error (injected).
    pub refused_registrations: usize,
    pub heartbeats: HashMap<String, u64>,
    /// Heartbeats that carried a measurement.
    pub measured_heartbeats: HashMap<String, u64>,
    pub last_heartbeat: HashMap<String, HeartbeatRequest>,
    pub heartbeat_streams_ended: Vec<String>,
    pub assignment_streams: Vec<AssignmentsRequest>,
    pub reports: Vec<StatusReport>,
    /// Reports answered FAILED_PRECONDITION.
    pub refused_reports: Vec<StatusReport>,
    /// `ReportStatus` calls answered.
    pub report_calls: usize,
    /// `Reports` streams opened.
    pub report_streams: usize,
}

impl Log {
    pub fn registrations_of(&self, node_id: &str) -> Vec<&Registration> {
        self.registrations.iter().filter(|r| r.node_id == node_id).collect()
    }

    pub fn reports_of(&self, work_id: &str) -> Vec<&StatusReport> {
        self.reports.iter().filter(|r| r.work_id == work_id).collect()
    }
}

#[derive(Default)]
struct NodeEntry {
    session: u64,
    assignments: Option<mpsc::UnboundedSender<Result<Assignment, Status>>>,
}

#[derive(Default)]
struct Inner {
    next_session: u64,
    next_node: u64,
    nodes: HashMap<String, NodeEntry>,
    stale_work: HashSet<String>,
    stop_on_register: HashSet<String>,
    fail_registers: u32,
    expire_on_next_report: bool,
    no_report_stream: bool,
}

struct Shared {
    token: String,
    inner: Mutex<Inner>,
    log: watch::Sender<Log>,
}

impl Shared {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap()
    }

    fn record(&self, f: impl FnOnce(&mut Log)) {
        self.log.send_modify(f);
    }

    fn check_auth(&self, metadata: &MetadataMap) -> Result<(), Status> {
        let expected = format!("Bearer {}", self.token);
        match metadata.get("authorization").and_then(|v| v.to_str().ok()) {
            Some(value) if value == expected => Ok(()),
            _ => Err(Status::unauthenticated("bad or missing token")),
        }
    }

    fn check_session(&self, node_id: &str, session: u64) -> Result<(), Status> {
        match self.inner().nodes.get(node_id) {
            Some(node) if node.session == session => Ok(()),
            _ => Err(Status::failed_precondition(format!(
                "session {session} of {node_id} is not current; register again"
            ))),
        }
    }

    /// Records a batch of reports and answers it, as a call or as a stream message.
    fn answer(&self, reports: Vec<StatusReport>) -> Result<StatusReplies, Status> {
        let Some(first) = reports.first() else {
            return Ok(StatusReplies::default());
        };
        let expire = std::mem::take(&mut self.inner().expire_on_next_report);
        if expire {
            self.expire(&first.node_id);
        }
        if let Err(status) = self.check_session(&first.node_id, first.session) {
            self.record(|l| l.refused_reports.extend(reports));
            return Err(status);
        }
        let mut replies = Vec::new();
        for report in reports {
            let current = !self.inner().stale_work.contains(&report.work_id);
            self.record(|l| l.reports.push(report));
            replies.push(StatusReply { current });
        }
        Ok(StatusReplies { replies })
    }

    /// Gives `node_id` a session its agent does not know and fails its assignments stream.
    fn expire(&self, node_id: &str) {
        let mut inner = self.inner();
        inner.next_session += 1;
        let fresh = inner.next_session;
        let node = inner.nodes.get_mut(node_id).expect("a registered node");
        node.session = fresh;
        if let Some(tx) = node.assignments.take() {
            let _ = tx.send(Err(Status::failed_precondition("the node was declared dead")));
        }
    }
}

#[derive(Clone)]
struct Service(Arc<Shared>);

#[tonic::async_trait]
impl AgentService for Service {
    async fn register(
        &self,
        request: Request<RegisterRequest>,
    ) -> Result<Response<RegisterReply>, Status> {
        self.0.check_auth(request.metadata())?;
        let authorization = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let request = request.into_inner();
        let (node_id, session, stop) = {
            let mut inner = self.0.inner();
            if inner.fail_registers > 0 {
                inner.fail_registers -= 1;
                drop(inner);
                self.0.record(|l| l.refused_registrations += 1);
                return Err(Status::unavailable("the head is starting"));
            }
            let node_id = if request.node_id.is_empty() {
                inner.next_node += 1;
                format!("node-{}", inner.next_node)
            } else {
                request.node_id.clone()
            };
            inner.next_session += 1;
            let session = inner.next_session;
            let entry = inner.nodes.entry(node_id.clone()).or_default();
            entry.session = session;
            // The old assignments stream (if any) belongs to an old session.
            entry.assignments = None;
            let stop: Vec<String> = request
                .running
                .iter()
                .filter(|w| inner.stop_on_register.contains(&w.work_id))
                .map(|w| w.work_id.clone())
                .collect();
            (node_id, session, stop)
        };
        let registration = Registration {
            request,
            authorization,
            node_id: node_id.clone(),
            session,
            stop: stop.clone(),
        };
        self.0.record(|l| l.registrations.push(registration));
        Ok(Response::new(RegisterReply {
            node_id,
            session,
            heartbeat_interval_ms: INTERVAL_MS,
            stop,
            heartbeat_timeout_ms: 0,
        }))
    }

    type HeartbeatStream = UnboundedReceiverStream<Result<HeartbeatReply, Status>>;

    async fn heartbeat(
        &self,
        request: Request<Streaming<HeartbeatRequest>>,
    ) -> Result<Response<Self::HeartbeatStream>, Status> {
        self.0.check_auth(request.metadata())?;
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = self.0.clone();
        tokio::spawn(async move {
            let mut node_id = None;
            while let Ok(Some(beat)) = inbound.message().await {
                node_id = Some(beat.node_id.clone());
                if let Err(status) = shared.check_session(&beat.node_id, beat.session) {
                    let _ = tx.send(Err(status));
                    break;
                }
                shared.record(|l| {
                    *l.heartbeats.entry(beat.node_id.clone()).or_default() += 1;
                    if beat.measured.is_some() {
                        *l.measured_heartbeats.entry(beat.node_id.clone()).or_default() += 1;
                    }
                    l.last_heartbeat.insert(beat.node_id.clone(), beat.clone());
                });
                let reply = HeartbeatReply { head_time_ms: 1, agent_clock_ms: beat.agent_clock_ms };
                if tx.send(Ok(reply)).is_err() {
                    break;
                }
            }
            if let Some(node_id) = node_id {
                shared.record(|l| l.heartbeat_streams_ended.push(node_id));
            }
        });
        Ok(Response::new(UnboundedReceiverStream::new(rx)))
    }

    type AssignmentsStream = UnboundedReceiverStream<Result<Assignment, Status>>;

    async fn assignments(
        &self,
        request: Request<AssignmentsRequest>,
    ) -> Result<Response<Self::AssignmentsStream>, Status> {
        self.0.check_auth(request.metadata())?;
        let request = request.into_inner();
        self.0.check_session(&request.node_id, request.session)?;
        let (tx, rx) = mpsc::unbounded_channel();
        self.0.inner().nodes.get_mut(&request.node_id).expect("checked").assignments = Some(tx);
        self.0.record(|l| l.assignment_streams.push(request));
        Ok(Response::new(UnboundedReceiverStream::new(rx)))
    }

    async fn report_status(
        &self,
        request: Request<StatusReports>,
    ) -> Result<Response<StatusReplies>, Status> {
        self.0.check_auth(request.metadata())?;
        self.0.record(|l| l.report_calls += 1);
        self.0.answer(request.into_inner().reports).map(Response::new)
    }

    type ReportsStream = UnboundedReceiverStream<Result<StatusReplies, Status>>;

    async fn reports(
        &self,
        request: Request<Streaming<StatusReports>>,
    ) -> Result<Response<Self::ReportsStream>, Status> {
        self.0.check_auth(request.metadata())?;
        if self.0.inner().no_report_stream {
            return Err(Status::unimplemented("this head predates the Reports stream"));
        }
        self.0.record(|l| l.report_streams += 1);
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = self.0.clone();
        tokio::spawn(async move {
            while let Ok(Some(message)) = inbound.message().await {
                let answer = shared.answer(message.reports);
                let failed = answer.is_err();
                if tx.send(answer).is_err() || failed {
                    break;
                }
            }
        });
        Ok(Response::new(UnboundedReceiverStream::new(rx)))
    }

    type LogsStream = UnboundedReceiverStream<Result<LogRequest, Status>>;

    /// Not served here (the real head's log streams are tested with it): the agent runs on
    /// without serving logs, as it does against a head that predates them.
    async fn logs(
        &self,
        request: Request<Streaming<LogChunk>>,
    ) -> Result<Response<Self::LogsStream>, Status> {
        self.0.check_auth(request.metadata())?;
        Err(Status::unimplemented("the in-test head serves no logs"))
    }
}

/// The in-test head, serving on 127.0.0.1 on a port the OS chose.
pub struct TestHead {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    log: watch::Receiver<Log>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for TestHead {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl TestHead {
    pub async fn start() -> TestHead {
        TestHead::with_token(TOKEN).await
    }

    pub async fn with_token(token: &str) -> TestHead {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (log_tx, log) = watch::channel(Log::default());
        let shared = Arc::new(Shared {
            token: token.to_string(),
            inner: Mutex::new(Inner::default()),
            log: log_tx,
        });
        let service = AgentServiceServer::new(Service(shared.clone()));
        let server = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
        TestHead { addr, shared, log, server }
    }

    /// `HOST:PORT` of the head.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// What the head has received so far.
    pub fn log(&self) -> Log {
        self.log.borrow().clone()
    }

    /// Waits (at most [`WAIT`]) until `f` finds something in the log, and returns it.
    pub async fn wait<T>(&self, what: &str, mut f: impl FnMut(&Log) -> Option<T>) -> T {
        let mut rx = self.log.clone();
        let mut found = None;
        let waited = tokio::time::timeout(
            WAIT,
            rx.wait_for(|log| {
                found = f(log);
                found.is_some()
            }),
        )
        .await;
        match waited {
            Ok(Ok(_)) => found.expect("found"),
            _ => panic!("timed out after {WAIT:?} waiting for {what}; log: {:#?}", self.log()),
        }
    }

    /// Waits for the `n`-th (1-based) registration of `node_id`.
    pub async fn registration(&self, node_id: &str, n: usize) -> Registration {
        self.wait(&format!("registration {n} of {node_id}"), |log| {
            log.registrations_of(node_id).get(n - 1).map(|r| (*r).clone())
        })
        .await
    }

    /// Waits until the assignments stream of `node_id`'s session `session` is open.
    pub async fn assignments_open(&self, node_id: &str, session: u64) {
        self.wait(&format!("assignments stream of {node_id} session {session}"), |log| {
            log.assignment_streams
                .iter()
                .any(|a| a.node_id == node_id && a.session == session)
                .then_some(())
        })
        .await
    }

    /// Sends an assignment on `node_id`'s open assignments stream.
    pub fn assign(&self, node_id: &str, assignment: Assignment) {
        let inner = self.shared.inner();
        let tx = inner.nodes[node_id].assignments.as_ref().expect("an open assignments stream");
        tx.send(Ok(assignment)).expect("the stream is open");
    }

    /// Ends `node_id`'s assignments stream normally (as a head that shut down would).
    pub fn end_assignments(&self, node_id: &str) {
        self.shared.inner().nodes.get_mut(node_id).unwrap().assignments = None;
    }

    /// Declares `node_id`'s session dead: its calls now fail with FAILED_PRECONDITION.
    pub fn expire(&self, node_id: &str) {
        self.shared.expire(node_id);
    }

    /// Reports for `work_id` are answered `current: false`.
    pub fn mark_stale(&self, work_id: &str) {
        self.shared.inner().stale_work.insert(work_id.into());
    }

    /// Registrations that announce `work_id` running are told to stop it.
    pub fn stop_on_register(&self, work_id: &str) {
        self.shared.inner().stop_on_register.insert(work_id.into());
    }

    /// The next `n` registrations fail with UNAVAILABLE.
    pub fn fail_registers(&self, n: u32) {
        self.shared.inner().fail_registers = n;
    }

    /// The next report expires its node's session first (so it fails FAILED_PRECONDITION).
    /// Answers `Reports` with UNIMPLEMENTED from now on, as a head older than it would.
    pub fn without_report_stream(&self) {
        self.shared.inner().no_report_stream = true;
    }

    pub fn expire_on_next_report(&self) {
        self.shared.inner().expire_on_next_report = true;
    }
}

pub fn start(work_id: &str, attempt: u32, kind: WorkKind) -> Assignment {
    Assignment {
        kind: Some(assignment::Kind::Start(Start {
            work_id: work_id.into(),
            attempt,
            kind: kind as i32,
            command: "sleep".into(),
            args: vec!["1".into()],
            ..Start::default()
        })),
    }
}

pub fn stop(work_id: &str, attempt: u32) -> Assignment {
    Assignment {
        kind: Some(assignment::Kind::Stop(Stop {
            work_id: work_id.into(),
            attempt,
            reason: "test".into(),
        })),
    }
}
