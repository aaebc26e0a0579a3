//! The protocol side of the node daemon: register, heartbeat, follow assignments, report.
//!
//! One agent is one loop of *sessions*. A session starts with `Register` (announcing what the
//! runner has running, and stopping what the head says to stop) and then runs four parts
//! concurrently:
//!
//! - the `Heartbeat` stream, one message every interval the head asked for, on the agents'
//!   lane (see `lane`);
//! - the `Assignments` stream, each `Start`/`Stop` queued for the runner (see `orders`);
//! - the reporter, which turns the runner's [`Events`] into batches on the `Reports` stream,
//!   in order (`ReportStatus` calls against a head without that stream);
//! - the `Logs` stream, which serves the head's log requests (`berth logs`) from the files the
//!   runner names ([`Runner::log_file`]; see `logs`). It is optional: its failures are retried
//!   after the backoff without ending the session (a head without it answers UNIMPLEMENTED,
//!   and the agent then runs without serving logs), except an old session or a refused token.
//!
//! **Liveness waits on nothing the agent does.** The runner may block for seconds (a start
//! waits for a fork server or a slow spawn; its lock is held meanwhile), and the runtime that
//! runs the agent may be starved (`berth up` shares it with the head and hundreds of process
//! watchers). So the runner is only ever called from a blocking thread: starts and stops in
//! order by the `orders` applier, measurements by the heartbeat loop without waiting for
//! them. And the heartbeats, with the connection's I/O, run on the `lane`, a runtime on a
//! thread of its own: a node stays alive to the head however long its starts take.
//!
//! The session ends when any other part fails or a stream ends: the head restarted, declared the node
//! dead (`FAILED_PRECONDITION` on an old session), or cannot be reached. The agent then waits
//! [`AgentConfig::reconnect_backoff`] and registers again under the node ID the head gave,
//! forever, until shut down. Only a refused token (`UNAUTHENTICATED`, `PERMISSION_DENIED`) or a
//! refused registration (`INVALID_ARGUMENT` on `Register`: the node's description is wrong)
//! end the agent with an error, since retrying cannot fix either.
//!
//! Reports are never lost to a reconnection: a report is removed from the queue only once the
//! head answered it, so one interrupted mid-call is sent again under the new session (the
//! head's attempt numbers make a repeat harmless). A report the head rejects as malformed
//! (`INVALID_ARGUMENT`, `NOT_FOUND`) is dropped with a warning rather than retried forever.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use berth_api::agent::agent_service_client::AgentServiceClient;
use berth_api::agent::{
    assignment, Assignment, AssignmentsRequest, StatusReplies, StatusReport, StatusReports, Stop,
};
use thiserror::Error;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Status};
use tracing::{debug, info, warn};

use crate::config::{AgentConfig, ConfigError};
use crate::runner::{Events, Runner, WorkEvent};

mod lane;
pub mod logs;
mod orders;

use orders::{Order, Orders};

/// The request metadata naming the node of a `Logs` stream (see `proto/agent.proto`).
pub const LOG_NODE_METADATA: &str = "berth-node-id";
/// The request metadata naming the session of a `Logs` stream (decimal).
pub const LOG_SESSION_METADATA: &str = "berth-session";
/// Log chunks queued for the head at most, all requests together.
const LOG_QUEUE: usize = 32;

/// The longest wait for a unary call (`Register`, `ReportStatus`) or for a stream to open.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Status reports sent in one call at most (the head takes up to 4096).
const MAX_BATCH: usize = 1024;
/// The longest wait for a TCP connection to the head.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The head's heartbeat timeout until a head says otherwise (its default).
pub(crate) const DEFAULT_HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// The HTTP/2 keepalive for a head whose heartbeat timeout is `head_timeout`: a ping after the
/// head was silent for that long, and the connection given up if the ping is not answered
/// within a third of it more (1 to 5 s). So a vanished head (a partition, a dead machine) is
/// noticed even when no call fails, but never before the head itself would call this node
/// dead: a head too busy to answer pings for a while (a saturated machine) keeps its agents'
/// connections. The silence it takes (at most the timeout and 5 s) stays within the grace a
/// head that took over gives its agents to register again (the timeout and 10 s: the head's
/// `RESTORE_GRACE`).
fn keepalive(head_timeout: Duration) -> (Duration, Duration) {
    let interval = head_timeout.max(Duration::from_secs(1));
    (interval, (head_timeout / 3).clamp(Duration::from_secs(1), Duration::from_secs(5)))
}
/// The heartbeat interval used when the head's reply says 0.
const FALLBACK_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);

/// Why an agent stopped with an error. Everything else (an unreachable head, a lost session) is
/// retried, not returned.
#[derive(Debug, Error)]
pub enum AgentError {
    /// The configuration is invalid.
    #[error("invalid agent configuration: {0}")]
    Config(#[from] ConfigError),
    /// The head answered `UNAUTHENTICATED` or `PERMISSION_DENIED`.
    #[error(
        "the head at {head} refused the token ({call}: {message}); give the agent the head's \
         agent token (DATA_DIR/agent-token)"
    )]
    Unauthenticated {
        /// The head's address.
        head: String,
        /// The call that was refused.
        call: &'static str,
        /// The head's message.
        message: String,
    },
    /// The CA given for TLS cannot be used.
    #[error("cannot set up TLS to the head: {0}")]
    Tls(String),
    /// The head answered `INVALID_ARGUMENT` to `Register`: it will not accept this node as
    /// described (a bad label file, a node ID in use, ...).
    #[error("the head at {head} refused to register this node: {message}")]
    RegistrationRefused {
        /// The head's address.
        head: String,
        /// The head's message.
        message: String,
    },
}

/// What an agent is doing, published through a `watch` channel ([`Agent::status`],
/// [`AgentHandle::subscribe`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentStatus {
    /// The node ID the head gave, once registered; kept across re-registrations.
    pub node_id: Option<String>,
    /// The current session; `None` while connecting or re-registering.
    pub session: Option<u64>,
    /// How many times the agent registered successfully.
    pub registrations: u64,
    /// Why the last session ended or the last registration failed, or the fatal error.
    pub last_error: Option<String>,
    /// The agent has stopped (shut down, killed, or a fatal error).
    pub stopped: bool,
}

impl AgentStatus {
    /// True while the agent holds a session.
    pub fn is_registered(&self) -> bool {
        self.session.is_some()
    }
}

/// A bounded wait on an agent's status did not succeed.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum WaitError {
    /// The condition did not hold within the timeout.
    #[error("the agent did not reach the awaited state within {timeout:?} (last: {last:?})")]
    Timeout {
        /// The timeout.
        timeout: Duration,
        /// The status when the wait gave up.
        last: AgentStatus,
    },
    /// The agent stopped first.
    #[error("the agent stopped: {}", .0.last_error.as_deref().unwrap_or("shut down"))]
    Stopped(AgentStatus),
}

/// Adds `authorization: Bearer <token>` to every call.
#[derive(Clone, Debug)]
struct Auth(MetadataValue<Ascii>);

impl Interceptor for Auth {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        request.metadata_mut().insert("authorization", self.0.clone());
        Ok(request)
    }
}

type Client = AgentServiceClient<InterceptedService<Channel, Auth>>;

/// How a session ended.
#[derive(Debug)]
enum Ended {
    /// Register again after the backoff.
    Lost(String),
    /// Stop the agent.
    Fatal(AgentError),
}

/// What to do with a failed call.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// The session is gone or the head unreachable: register again.
    Reconnect,
    /// The token was refused: stop.
    Refused,
    /// The head will never accept this message: drop it (reports) or stop (registration).
    Rejected,
}

fn verdict(code: Code) -> Verdict {
    match code {
        Code::Unauthenticated | Code::PermissionDenied => Verdict::Refused,
        Code::InvalidArgument | Code::NotFound => Verdict::Rejected,
        _ => Verdict::Reconnect,
    }
}

fn describe(call: &str, status: &Status) -> String {
    if status.message().is_empty() {
        format!("{call} failed with {:?}", status.code())
    } else {
        format!("{call} failed with {:?}: {}", status.code(), status.message())
    }
}

/// One agent: a configuration, a runner, and the status it publishes.
pub struct Agent {
    config: AgentConfig,
    /// The head addresses, tried in turn: the next after each lost session.
    urls: Vec<String>,
    /// Which of `urls` the next session uses.
    current: std::sync::atomic::AtomicUsize,
    auth: MetadataValue<Ascii>,
    runner: Arc<dyn Runner>,
    status: Arc<watch::Sender<AgentStatus>>,
    /// What of the agent runs apart from its task.
    helpers: Helpers,
    /// The heartbeat timeout the head last said (ms): what the keepalive is sized for.
    head_timeout_ms: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("config", &self.config)
            .field("status", &*self.status.borrow())
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// An agent for `config` (validated here) executing assignments with `runner`.
    pub fn new(config: AgentConfig, runner: Arc<dyn Runner>) -> Result<Agent, AgentError> {
        config.validate()?;
        let urls = config.head_urls()?;
        let auth = config.authorization()?;
        let (status, _) = watch::channel(AgentStatus::default());
        Ok(Agent {
            config,
            urls,
            current: 0.into(),
            auth,
            runner,
            status: Arc::new(status),
            helpers: Helpers::default(),
            head_timeout_ms: (DEFAULT_HEAD_TIMEOUT.as_millis() as u64).into(),
        })
    }

    /// Validates `config` and runs an agent until `shutdown` turns true (or its sender is
    /// dropped): `Ok(())` then, an error only for a fatal refusal (see [`AgentError`]).
    pub async fn run(
        config: AgentConfig,
        runner: Arc<dyn Runner>,
        shutdown: watch::Receiver<bool>,
    ) -> Result<(), AgentError> {
        Agent::new(config, runner)?.run_until(shutdown).await
    }

    /// The agent's status, updated as it registers and loses sessions.
    pub fn status(&self) -> watch::Receiver<AgentStatus> {
        self.status.subscribe()
    }

    /// Runs until `shutdown` turns true or its sender is dropped. Work the runner holds is
    /// left as it is: what to do with it on shutdown is the caller's decision.
    pub async fn run_until(self, mut shutdown: watch::Receiver<bool>) -> Result<(), AgentError> {
        // One sink for the agent's whole life: reports outlive sessions.
        let (events, events_rx) = Events::channel();
        self.runner.attach(events.clone());
        let (orders, mut applier) =
            orders::channel(self.runner.clone(), events, self.helpers.clone());
        let result = tokio::select! {
            result = self.sessions(&mut shutdown, &orders, events_rx) => result,
            never = applier.run() => match never {},
        };
        // The orders not applied yet are dropped; the one in hand, a measurement and the
        // heartbeats' task end first: then the runner is the caller's alone.
        drop(applier);
        self.helpers.none_left().await;
        self.status.send_modify(|s| {
            s.session = None;
            s.stopped = true;
            if let Err(e) = &result {
                s.last_error = Some(e.to_string());
            }
        });
        match &result {
            Ok(()) => info!(node_id = ?self.status.borrow().node_id, "agent shut down"),
            Err(e) => warn!(node_id = ?self.status.borrow().node_id, "agent stopped: {e}"),
        }
        result
    }

    /// Runs the agent as a task on the current tokio runtime (panics outside one).
    pub fn spawn(self) -> AgentHandle {
        let (shutdown, shutdown_rx) = watch::channel(false);
        let status = self.status.clone();
        let helpers = self.helpers.clone();
        let task = tokio::spawn(self.run_until(shutdown_rx));
        AgentHandle { status, helpers, shutdown, task }
    }

    async fn sessions(
        &self,
        shutdown: &mut watch::Receiver<bool>,
        orders: &Orders,
        mut events_rx: mpsc::UnboundedReceiver<WorkEvent>,
    ) -> Result<(), AgentError> {
        let mut pending = VecDeque::new();
        let mut node_id = self.config.node_id.clone().unwrap_or_default();
        let mut failures = 0u32;
        loop {
            let ended = tokio::select! {
                biased;
                () = shutdown_requested(shutdown) => return Ok(()),
                ended = self.session(&mut node_id, orders, &mut events_rx, &mut pending) => ended,
            };
            // What the head sent and the runner has not done yet: the head sends what still
            // holds again to the next session.
            orders.discard();
            let reason = match ended {
                Ended::Fatal(e) => return Err(e),
                Ended::Lost(reason) => reason,
            };
            // Warn once per outage; the retries of a long outage go to debug.
            if self.status.borrow().session.is_some() {
                failures = 0;
            }
            failures += 1;
            let backoff = self.config.reconnect_backoff;
            if failures == 1 {
                warn!(node_id, %reason, ?backoff, "lost the head; registering again");
            } else {
                debug!(node_id, %reason, failures, ?backoff, "still no session; registering again");
            }
            self.status.send_modify(|s| {
                s.session = None;
                s.last_error = Some(reason);
            });
            // With standby heads, the next address may be the active one now.
            if self.urls.len() > 1 {
                self.current.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            tokio::select! {
                biased;
                () = shutdown_requested(shutdown) => return Ok(()),
                () = tokio::time::sleep(backoff) => {}
            }
        }
    }

    /// The head address this session uses.
    fn url(&self) -> &str {
        let i = self.current.load(std::sync::atomic::Ordering::Relaxed);
        &self.urls[i % self.urls.len()]
    }

    fn client(&self) -> Result<Client, Ended> {
        let url = self.url().to_string();
        let mut endpoint = Endpoint::from_shared(url.clone())
            .map_err(|e| Ended::Lost(format!("cannot use the head address {url}: {e}")))?;
        if let Some(ca) = &self.config.ca {
            // Only this CA: the head's certificate must chain to it.
            let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| Ended::Fatal(AgentError::Tls(e.to_string())))?;
        }
        let head_timeout = self.head_timeout_ms.load(std::sync::atomic::Ordering::Relaxed);
        let (interval, timeout) = keepalive(Duration::from_millis(head_timeout));
        let endpoint = endpoint
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(interval)
            .keep_alive_timeout(timeout)
            .keep_alive_while_idle(true)
            // The connection's I/O runs on the lane, with the heartbeats.
            .executor(lane::Executor);
        // A fresh lazy channel per session: nothing of a broken connection is reused, and a
        // head that is down fails the first call (retried after the backoff).
        Ok(AgentServiceClient::with_interceptor(endpoint.connect_lazy(), Auth(self.auth.clone())))
    }

    /// What a failed call means for the session.
    fn failed(&self, call: &'static str, status: Status) -> Ended {
        match verdict(status.code()) {
            Verdict::Refused => Ended::Fatal(AgentError::Unauthenticated {
                head: self.url().to_string(),
                call,
                message: status.message().to_string(),
            }),
            Verdict::Rejected if call == "Register" => {
                Ended::Fatal(AgentError::RegistrationRefused {
                    head: self.url().to_string(),
                    message: status.message().to_string(),
                })
            }
            _ => Ended::Lost(describe(call, &status)),
        }
    }

    /// One session: register, then heartbeats, assignments and reports until one of them ends.
    async fn session(
        &self,
        node_id: &mut String,
        orders: &Orders,
        events_rx: &mut mpsc::UnboundedReceiver<WorkEvent>,
        pending: &mut VecDeque<WorkEvent>,
    ) -> Ended {
        let mut client = match self.client() {
            Ok(client) => client,
            Err(ended) => return ended,
        };
        // After every order of the last session is applied or dropped: nothing being started
        // is missed.
        let running = orders.running().await;
        let request = self.config.register_request(node_id, running);
        // The head hears the node no earlier than this: its lease runs from here.
        let sent_ms = crate::lease::clock_ms();
        let reply = match tokio::time::timeout(CALL_TIMEOUT, client.register(request)).await {
            Ok(Ok(reply)) => reply.into_inner(),
            Ok(Err(status)) => return self.failed("Register", status),
            Err(_) => return Ended::Lost(format!("Register timed out after {CALL_TIMEOUT:?}")),
        };
        if reply.node_id.is_empty() {
            return Ended::Lost("the head's registration reply has no node ID".into());
        }
        if !node_id.is_empty() && *node_id != reply.node_id {
            warn!(asked = %node_id, given = %reply.node_id, "the head gave another node ID");
        }
        node_id.clone_from(&reply.node_id);
        let interval = match reply.heartbeat_interval_ms {
            0 => {
                warn!("the head asked for heartbeats every 0 ms; sending one per second");
                FALLBACK_HEARTBEAT_INTERVAL
            }
            ms => Duration::from_millis(u64::from(ms)),
        };
        // The session's streams go on a connection whose keepalive fits the head's timeout
        // (the registration used the last one known).
        let said = u64::from(reply.heartbeat_timeout_ms);
        let known = self.head_timeout_ms.load(std::sync::atomic::Ordering::Relaxed);
        if said != 0 && said != known {
            self.head_timeout_ms.store(said, std::sync::atomic::Ordering::Relaxed);
            client = match self.client() {
                Ok(client) => client,
                Err(ended) => return ended,
            };
        }
        let timeout =
            Duration::from_millis(self.head_timeout_ms.load(std::sync::atomic::Ordering::Relaxed));
        // Before any assignment of the session: nothing starts under a lease run out.
        self.runner.renew_lease(sent_ms, timeout);
        orders.send(Order::Registered(node_id.clone()));
        let session = Session { node_id: node_id.clone(), session: reply.session };
        info!(node_id = %session.node_id, session = session.session, ?interval, "registered");
        self.status.send_modify(|s| {
            s.node_id = Some(session.node_id.clone());
            s.session = Some(session.session);
            s.registrations += 1;
            s.last_error = None;
        });
        if !reply.stop.is_empty() {
            orders.send(Order::StopWork {
                work_ids: reply.stop,
                reason: "the head no longer places this work on this node".into(),
            });
        }
        let heartbeats = lane::OnLane::spawn(lane::heartbeats(
            client.clone(),
            session.clone(),
            interval,
            timeout,
            self.helpers.enlist(&self.runner),
        ));
        tokio::select! {
            ended = heartbeats => match ended {
                Ok(ended) => self.ended("Heartbeat", ended),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => Ended::Lost(format!("the heartbeats ended: {e}")),
            },
            ended = self.assignments(client.clone(), &session, orders) => ended,
            ended = self.logs(client.clone(), &session) => ended,
            ended = self.reports(client, &session, orders, events_rx, pending) => ended,
        }
    }

    /// Keeps the session's `Logs` stream open and serves it. Ends the session only for an old
    /// session or a refused token; anything else is retried after the backoff, and a head
    /// that does not serve logs leaves this part idle for the session.
    async fn logs(&self, mut client: Client, session: &Session) -> Ended {
        let metadata = (
            MetadataValue::<Ascii>::try_from(session.node_id.as_str()),
            MetadataValue::<Ascii>::try_from(session.session.to_string()),
        );
        let (Ok(node), Ok(number)) = metadata else {
            warn!(node_id = %session.node_id, "the node ID cannot travel as metadata: logs are not served");
            return std::future::pending().await;
        };
        loop {
            let (tx, rx) = mpsc::channel(LOG_QUEUE);
            let mut request = tonic::Request::new(ReceiverStream::new(rx));
            request.metadata_mut().insert(LOG_NODE_METADATA, node.clone());
            request.metadata_mut().insert(LOG_SESSION_METADATA, number.clone());
            let reason = match tokio::time::timeout(CALL_TIMEOUT, client.logs(request)).await {
                Ok(Ok(response)) => {
                    debug!(node_id = %session.node_id, "log stream open");
                    match logs::serve(self.runner.clone(), response.into_inner(), tx).await {
                        Ok(()) => "the head ended the log stream".to_string(),
                        Err(status) => describe("Logs", &status),
                    }
                }
                Ok(Err(status)) => match status.code() {
                    Code::Unimplemented => {
                        warn!("the head does not serve logs (an older head?): `berth logs` cannot read this node");
                        return std::future::pending().await;
                    }
                    Code::FailedPrecondition => return self.failed("Logs", status),
                    _ if verdict(status.code()) == Verdict::Refused => {
                        return self.failed("Logs", status)
                    }
                    _ => describe("Logs", &status),
                },
                Err(_) => "opening the log stream timed out".to_string(),
            };
            debug!(node_id = %session.node_id, %reason, "log stream lost; opening it again");
            tokio::time::sleep(self.config.reconnect_backoff).await;
        }
    }

    async fn assignments(&self, mut client: Client, session: &Session, orders: &Orders) -> Ended {
        let request =
            AssignmentsRequest { node_id: session.node_id.clone(), session: session.session };
        let mut stream = match tokio::time::timeout(CALL_TIMEOUT, client.assignments(request)).await
        {
            Ok(Ok(response)) => response.into_inner(),
            Ok(Err(status)) => return self.failed("Assignments", status),
            Err(_) => return Ended::Lost("opening the assignments stream timed out".into()),
        };
        loop {
            match stream.message().await {
                Ok(Some(assignment)) => queue(assignment, orders),
                Ok(None) => return Ended::Lost("the head ended the assignments stream".into()),
                Err(status) => return self.failed("Assignments", status),
            }
        }
    }

    async fn reports(
        &self,
        mut client: Client,
        session: &Session,
        orders: &Orders,
        events_rx: &mut mpsc::UnboundedReceiver<WorkEvent>,
        pending: &mut VecDeque<WorkEvent>,
    ) -> Ended {
        let mut channel = ReportChannel::Unopened;
        loop {
            if pending.is_empty() {
                match events_rx.recv().await {
                    Some(event) => pending.push_back(event),
                    // The agent holds a sender for its whole life.
                    None => std::future::pending().await,
                }
            }
            while let Ok(event) = events_rx.try_recv() {
                pending.push_back(event);
            }
            if pending.is_empty() {
                continue;
            }
            // Everything that happened since the last batch, in one.
            let batch = pending.len().min(MAX_BATCH);
            let reports = pending
                .iter()
                .take(batch)
                .map(|event| StatusReport {
                    node_id: session.node_id.clone(),
                    session: session.session,
                    work_id: event.work_id.clone(),
                    attempt: event.attempt,
                    status: Some(event.status.to_proto()),
                })
                .collect();
            let reports = StatusReports { reports };
            if let ReportChannel::Unopened = channel {
                channel = match ReportStream::open(&mut client).await {
                    Ok(Some(stream)) => ReportChannel::Stream(Box::new(stream)),
                    Ok(None) => {
                        info!("the head has no Reports stream (an older head?): reporting by ReportStatus calls");
                        ReportChannel::Calls
                    }
                    Err(ended) => return self.ended("Reports", ended),
                };
            }
            let call =
                if let ReportChannel::Stream(_) = channel { "Reports" } else { "ReportStatus" };
            let answer = match &mut channel {
                ReportChannel::Stream(stream) => stream.send(reports).await,
                _ => {
                    match tokio::time::timeout(CALL_TIMEOUT, client.report_status(reports)).await {
                        Ok(Ok(reply)) => Ok(reply.into_inner()),
                        Ok(Err(status)) => Err(CallEnded::Failed(status)),
                        Err(_) => Err(CallEnded::Lost(format!(
                            "ReportStatus timed out after {CALL_TIMEOUT:?}"
                        ))),
                    }
                }
            };
            match answer {
                Ok(reply) => {
                    let replies = reply.replies;
                    for i in 0..batch {
                        let event = pending.pop_front().expect("the batch came from the queue");
                        debug!(work_id = %event.work_id, attempt = event.attempt, status = ?event.status, "reported");
                        // A missing reply counts as current: never stop work on a doubt.
                        if replies.get(i).is_some_and(|r| !r.current) {
                            // Stopped if it still runs once the orders before are applied.
                            orders.send(Order::StopIfRunning(Stop {
                                work_id: event.work_id,
                                attempt: event.attempt,
                                reason: "the head replaced this attempt".into(),
                            }));
                        }
                    }
                }
                Err(CallEnded::Failed(status)) if verdict(status.code()) == Verdict::Rejected => {
                    for _ in 0..batch {
                        let event = pending.pop_front().expect("the batch came from the queue");
                        warn!(work_id = %event.work_id, attempt = event.attempt, status = ?event.status,
                            "the head rejected a report; dropped: {}", describe(call, &status));
                    }
                    // The error ended the stream (not the session): the next batch opens another.
                    if let ReportChannel::Stream(_) = channel {
                        channel = ReportChannel::Unopened;
                    }
                }
                Err(ended) => return self.ended(call, ended),
            }
        }
    }

    fn ended(&self, call: &'static str, ended: CallEnded) -> Ended {
        match ended {
            CallEnded::Failed(status) => self.failed(call, status),
            CallEnded::Lost(reason) => Ended::Lost(reason),
        }
    }
}

/// Queues what `assignment` asks of the runner.
fn queue(assignment: Assignment, orders: &Orders) {
    match assignment.kind {
        Some(assignment::Kind::Start(start)) if !start.work_id.is_empty() => {
            orders.send(Order::Start(Box::new(start)));
        }
        Some(assignment::Kind::Stop(stop)) if !stop.work_id.is_empty() => {
            orders.send(Order::Stop(stop));
        }
        Some(_) => warn!("ignored an assignment without a work ID"),
        None => warn!("ignored an empty assignment"),
    }
}

/// Counts what of an agent runs apart from its task and holds the runner: a batch of orders
/// on a blocking thread, the heartbeats on the lane, a measurement. An agent that stops or is
/// killed waits until none is left, so that its runner is its owner's alone again (the next
/// agent on a process runner's directory can take its lock).
#[derive(Clone, Debug, Default)]
struct Helpers(Arc<watch::Sender<usize>>);

impl Helpers {
    /// A helper holding `runner` (enlisted before it is spawned, so a wait never sees a gap).
    fn enlist(&self, runner: &Arc<dyn Runner>) -> Helper {
        self.0.send_modify(|n| *n += 1);
        Helper { runner: Some(runner.clone()), count: self.0.clone() }
    }

    async fn none_left(&self) {
        // `self` holds the sender: the wait ends only when the count does.
        let _ = self.0.subscribe().wait_for(|n| *n == 0).await;
    }
}

/// One of [`Helpers`]: the runner, counted until this lets go of it.
struct Helper {
    runner: Option<Arc<dyn Runner>>,
    count: Arc<watch::Sender<usize>>,
}

impl Helper {
    fn runner(&self) -> &dyn Runner {
        self.runner.as_deref().expect("held until dropped")
    }

    /// Another helper of the same agent.
    fn another(&self) -> Helper {
        self.count.send_modify(|n| *n += 1);
        Helper { runner: self.runner.clone(), count: self.count.clone() }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        // The runner first: once the count is 0 the agent holds none of it.
        self.runner = None;
        self.count.send_modify(|n| *n -= 1);
    }
}

/// The identity of one registration.
#[derive(Clone, Debug)]
struct Session {
    node_id: String,
    session: u64,
}

/// How a session's reports travel.
enum ReportChannel {
    /// The `Reports` stream is opened with the next batch.
    Unopened,
    /// On the session's `Reports` stream (boxed: its receiving half is large).
    Stream(Box<ReportStream>),
    /// By `ReportStatus` calls: the head answered UNIMPLEMENTED to `Reports` (an older head).
    Calls,
}

/// How a call or a stream's exchange ended without an answer.
enum CallEnded {
    /// The head answered with an error.
    Failed(Status),
    /// No answer: timed out, or the stream ended.
    Lost(String),
}

/// A session's open `Reports` stream: batches go up it one at a time, each answered by one
/// message down it.
struct ReportStream {
    up: mpsc::Sender<StatusReports>,
    down: tonic::Streaming<StatusReplies>,
}

impl ReportStream {
    /// Opens the stream; `Ok(None)` when the head does not have it (UNIMPLEMENTED).
    async fn open(client: &mut Client) -> Result<Option<ReportStream>, CallEnded> {
        // One batch in flight at a time: the reporter waits for each answer.
        let (up, rx) = mpsc::channel(1);
        match tokio::time::timeout(CALL_TIMEOUT, client.reports(ReceiverStream::new(rx))).await {
            Ok(Ok(response)) => Ok(Some(ReportStream { up, down: response.into_inner() })),
            Ok(Err(status)) if status.code() == Code::Unimplemented => Ok(None),
            Ok(Err(status)) => Err(CallEnded::Failed(status)),
            Err(_) => Err(CallEnded::Lost("opening the Reports stream timed out".into())),
        }
    }

    /// Sends one batch and waits for its answer.
    async fn send(&mut self, reports: StatusReports) -> Result<StatusReplies, CallEnded> {
        let exchange = async {
            if self.up.send(reports).await.is_err() {
                return Err(CallEnded::Lost("the Reports stream closed".into()));
            }
            match self.down.message().await {
                Ok(Some(replies)) => Ok(replies),
                Ok(None) => Err(CallEnded::Lost("the head ended the Reports stream".into())),
                Err(status) => Err(CallEnded::Failed(status)),
            }
        };
        match tokio::time::timeout(CALL_TIMEOUT, exchange).await {
            Ok(answer) => answer,
            Err(_) => {
                Err(CallEnded::Lost(format!("a Reports answer timed out after {CALL_TIMEOUT:?}")))
            }
        }
    }
}

/// Completes when `shutdown` is true or its sender is gone.
async fn shutdown_requested(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|&stop| stop).await;
}

/// A running agent task ([`Agent::spawn`]). Dropping the handle shuts the agent down.
#[derive(Debug)]
pub struct AgentHandle {
    status: Arc<watch::Sender<AgentStatus>>,
    helpers: Helpers,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<Result<(), AgentError>>,
}

impl AgentHandle {
    /// The agent's status now.
    pub fn status(&self) -> AgentStatus {
        self.status.borrow().clone()
    }

    /// A receiver of the agent's status.
    pub fn subscribe(&self) -> watch::Receiver<AgentStatus> {
        self.status.subscribe()
    }

    /// Waits at most `timeout` for `condition` to hold on the agent's status; fails early if
    /// the agent stops first.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut condition: impl FnMut(&AgentStatus) -> bool,
    ) -> Result<AgentStatus, WaitError> {
        let mut rx = self.status.subscribe();
        let waited =
            tokio::time::timeout(timeout, rx.wait_for(|s| condition(s) || s.stopped)).await;
        let status = match waited {
            Ok(Ok(status)) => status.clone(),
            // The sender lives in `self`; neither happens but the timeout.
            _ => return Err(WaitError::Timeout { timeout, last: self.status() }),
        };
        if condition(&status) {
            Ok(status)
        } else {
            Err(WaitError::Stopped(status))
        }
    }

    /// Waits at most `timeout` for the agent to hold a session.
    pub async fn wait_registered(&self, timeout: Duration) -> Result<AgentStatus, WaitError> {
        self.wait_for(timeout, AgentStatus::is_registered).await
    }

    /// True once the agent's task has ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Asks the agent to shut down without waiting (see [`AgentHandle::stop`]).
    pub fn request_stop(&self) {
        let _ = self.shutdown.send(true);
    }

    /// Asks the agent to shut down and waits for it: its result. Once it returns, nothing of
    /// the agent calls the runner any more.
    pub async fn stop(self) -> Result<(), AgentError> {
        self.request_stop();
        match self.task.await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Ok(()),
        }
    }

    /// Ends the agent abruptly, as if its machine died: its streams drop mid-flight and no
    /// more heartbeats are sent. Waits until the task is gone and nothing of the agent calls
    /// the runner any more (the order in hand is done; the ones queued after it are dropped).
    pub async fn kill(self) {
        self.task.abort();
        if let Err(e) = self.task.await {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        self.helpers.none_left().await;
        self.status.send_modify(|s| {
            s.session = None;
            s.stopped = true;
            s.last_error = Some("killed".into());
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::AckRunner;

    #[test]
    fn verdicts() {
        assert_eq!(verdict(Code::Unauthenticated), Verdict::Refused);
        assert_eq!(verdict(Code::PermissionDenied), Verdict::Refused);
        assert_eq!(verdict(Code::InvalidArgument), Verdict::Rejected);
        assert_eq!(verdict(Code::NotFound), Verdict::Rejected);
        for code in [
            Code::FailedPrecondition,
            Code::Unavailable,
            Code::Unknown,
            Code::Internal,
            Code::Cancelled,
            Code::DeadlineExceeded,
            Code::ResourceExhausted,
        ] {
            assert_eq!(verdict(code), Verdict::Reconnect, "{code:?}");
        }
    }

    fn agent() -> Agent {
        Agent::new(AgentConfig::new("127.0.0.1:1", "t"), Arc::new(AckRunner::new())).unwrap()
    }

    #[test]
    fn the_keepalive_never_gives_up_before_the_heads_timeout_nor_long_after() {
        let s = Duration::from_secs;
        assert_eq!(keepalive(DEFAULT_HEAD_TIMEOUT), (s(30), s(5)));
        assert_eq!(keepalive(s(6)), (s(6), s(2)));
        assert_eq!(keepalive(s(1)), (s(1), s(1)));
        for ms in [100, 1_000, 5_000, 30_000, 120_000] {
            let timeout = Duration::from_millis(ms);
            let (interval, wait) = keepalive(timeout);
            assert!(interval + wait >= timeout, "{ms} ms");
            // Within the grace a head that took over gives (the timeout and 10 s).
            assert!(interval + wait <= timeout.max(s(1)) + s(10), "{ms} ms");
        }
    }

    #[tokio::test]
    async fn failures_map_to_fatal_errors_or_reconnection() {
        let agent = agent();
        let refused = agent.failed("Heartbeat", Status::unauthenticated("bad token"));
        let Ended::Fatal(e) = refused else { panic!("{refused:?}") };
        let text = e.to_string();
        assert!(text.contains("refused the token") && text.contains("bad token"), "{text}");
        assert!(text.contains("127.0.0.1:1") && text.contains("Heartbeat"), "{text}");

        let Ended::Fatal(e) = agent.failed("Register", Status::invalid_argument("labels_file: x"))
        else {
            panic!()
        };
        assert!(e.to_string().contains("refused to register this node: labels_file: x"), "{e}");

        let lost = agent.failed("Heartbeat", Status::failed_precondition("old session"));
        let Ended::Lost(reason) = lost else { panic!("{lost:?}") };
        assert_eq!(reason, "Heartbeat failed with FailedPrecondition: old session");
        let Ended::Lost(reason) = agent.failed("Assignments", Status::invalid_argument("x")) else {
            panic!()
        };
        assert!(reason.contains("InvalidArgument"));
    }

    #[test]
    fn invalid_configs_are_refused_before_running() {
        let err =
            Agent::new(AgentConfig::new("nowhere", "t"), Arc::new(AckRunner::new())).unwrap_err();
        assert!(matches!(err, AgentError::Config(ref c) if c.field == "head"), "{err}");
        assert!(err.to_string().starts_with("invalid agent configuration: head: "), "{err}");
    }

    #[tokio::test]
    async fn an_unreachable_head_is_retried_until_shutdown() {
        // Port 1 on loopback refuses connections: the agent keeps trying and never fails.
        let mut config = AgentConfig::new("127.0.0.1:1", "t");
        config.reconnect_backoff = Duration::from_millis(5);
        let handle = Agent::new(config, Arc::new(AckRunner::new())).unwrap().spawn();
        let status =
            handle.wait_for(Duration::from_secs(10), |s| s.last_error.is_some()).await.unwrap();
        assert!(!status.is_registered() && !status.stopped);
        handle.stop().await.unwrap();
    }

    #[tokio::test]
    async fn dropping_the_shutdown_sender_stops_the_agent() {
        let (tx, rx) = watch::channel(false);
        drop(tx);
        let result = tokio::time::timeout(
            Duration::from_secs(10),
            Agent::run(AgentConfig::new("127.0.0.1:1", "t"), Arc::new(AckRunner::new()), rx),
        )
        .await
        .expect("the agent stops");
        result.unwrap();
    }
}
