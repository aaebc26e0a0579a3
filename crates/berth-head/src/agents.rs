//! The agent protocol's server side (`proto/agent.proto`): a thin layer that checks the token
//! and the session, and turns each call into an [`AgentCommand`] for the owner task.
//!
//! Heartbeats are the exception: they never reach the owner (one message per node every
//! interval would compete with decisions, and a busy owner would hold up the beats that keep
//! its nodes alive). Each live session has a [`Liveness`] cell, which the owner publishes in
//! the shared [`Sessions`] when the session begins; the heartbeat stream finds it there and
//! writes the time into it (an atomic store), and the owner's periodic tick reads it.
//!
//! Measurements riding on heartbeats (what the machine and its work use) go the same way:
//! into the shared [`Measurements`], never through the owner.
//!
//! Log streams (`Logs`) reach the owner once, when they open, to check the session (the same
//! lookup a heartbeat stream makes); from then on they belong to the [`LogStreams`] registry
//! and their bytes never pass through the owner.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use berth_api::agent::agent_service_server::{AgentService, AgentServiceServer};
use berth_api::agent::{
    Assignment, AssignmentsRequest, HeartbeatReply, HeartbeatRequest, LogChunk, LogRequest,
    RegisterReply, RegisterRequest, StatusReplies, StatusReports,
};
use futures::Stream;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, warn};

use crate::clock::{monotonic_ms, now_ms};
use crate::command::{AgentCommand, Command, Liveness, Sessions};
use crate::keyring::Keyring;
use crate::logs::LogStreams;
use crate::measured::Measurements;
use berth_api::rest::Role;

/// The request metadata naming the node of a `Logs` stream.
pub(crate) const LOG_NODE_METADATA: &str = "berth-node-id";
/// The request metadata naming the session of a `Logs` stream (decimal).
pub(crate) const LOG_SESSION_METADATA: &str = "berth-session";

/// The gRPC service.
#[derive(Clone)]
pub(crate) struct AgentApi {
    commands: mpsc::Sender<Command>,
    logs: Arc<LogStreams>,
    /// Where heartbeats leave their measurements.
    measurements: Arc<Measurements>,
    /// Where heartbeat streams find their session's liveness cell.
    sessions: Arc<Sessions>,
}

impl AgentApi {
    /// The service, wrapped in the token check; log streams register in `logs`, heartbeats
    /// leave their measurements in `measurements`.
    pub(crate) fn server(
        commands: mpsc::Sender<Command>,
        keyring: Keyring,
        logs: Arc<LogStreams>,
        measurements: Arc<Measurements>,
        sessions: Arc<Sessions>,
    ) -> tonic::service::interceptor::InterceptedService<
        AgentServiceServer<AgentApi>,
        impl tonic::service::Interceptor + Clone,
    > {
        let check = move |request: Request<()>| -> Result<Request<()>, Status> {
            let header = request.metadata().get("authorization").and_then(|v| v.to_str().ok());
            match keyring.check(header) {
                Ok(Role::Agent) => Ok(request),
                // A user token must not let its holder pose as a machine and receive others'
                // work.
                Ok(_) => Err(Status::permission_denied(
                    "a user token cannot act as an agent: join with the agent token (the \
                     head's DATA_DIR/agent-token)",
                )),
                Err(_) => Err(Status::unauthenticated(
                    "missing, wrong or revoked agent token: send `authorization: Bearer \
                     <token>` with the head's DATA_DIR/agent-token",
                )),
            }
        };
        let api = AgentApi { commands, logs, measurements, sessions };
        AgentServiceServer::with_interceptor(api, check)
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, Status>>) -> AgentCommand,
    ) -> Result<T, Status> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Agent(make(reply)))
            .await
            .map_err(|_| Status::unavailable("the head is shutting down"))?;
        answer.await.map_err(|_| Status::unavailable("the head stopped"))?
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl AgentService for AgentApi {
    async fn register(
        &self,
        request: Request<RegisterRequest>,
    ) -> Result<Response<RegisterReply>, Status> {
        let request = Box::new(request.into_inner());
        self.ask(|reply| AgentCommand::Register { request, reply }).await.map(Response::new)
    }

    type HeartbeatStream = BoxStream<HeartbeatReply>;

    async fn heartbeat(
        &self,
        request: Request<Streaming<HeartbeatRequest>>,
    ) -> Result<Response<Self::HeartbeatStream>, Status> {
        let mut inbound = request.into_inner();
        let api = self.clone();
        let (tx, rx) = mpsc::channel::<Result<HeartbeatReply, Status>>(4);
        tokio::spawn(async move {
            let mut cell: Option<Arc<Liveness>> = None;
            // The node and session whose measurements this stream keeps, and whether a bad
            // one was already reported (once per stream: a broken agent repeats itself).
            let mut measuring: Option<(String, u64)> = None;
            let mut warned = false;
            while let Some(message) = inbound.next().await {
                let Ok(mut beat) = message else { break };
                let live = match &cell {
                    Some(live) if live.session == beat.session => live.clone(),
                    _ => match api.sessions.find(&beat.node_id, beat.session) {
                        Some(live) => {
                            cell = Some(live.clone());
                            live
                        }
                        None => {
                            let status = Status::failed_precondition(format!(
                                "no live session {} for node {}: register again",
                                beat.session, beat.node_id
                            ));
                            let _ = tx.send(Err(status)).await;
                            break;
                        }
                    },
                };
                if live.ended.load(Ordering::Acquire) {
                    let _ = tx
                        .send(Err(Status::failed_precondition(
                            "session ended (the head declared the node dead or it registered \
                             again): register again",
                        )))
                        .await;
                    break;
                }
                live.last_seen_ms.store(monotonic_ms(), Ordering::Release);
                let now = now_ms();
                if let Some(measured) = beat.measured.take() {
                    let node_id = std::mem::take(&mut beat.node_id);
                    match api.measurements.record(&node_id, live.session, now, measured) {
                        Ok(()) => {}
                        Err(why) if !warned => {
                            warned = true;
                            warn!(node_id, "dropped a measurement from the agent: {why}");
                        }
                        Err(why) => debug!(node_id, "dropped a measurement from the agent: {why}"),
                    }
                    if measuring.as_ref().is_none_or(|(_, s)| *s != live.session) {
                        if let Some((old, session)) = measuring.take() {
                            api.measurements.forget(&old, session);
                        }
                        measuring = Some((node_id, live.session));
                    }
                }
                let reply =
                    HeartbeatReply { head_time_ms: now, agent_clock_ms: beat.agent_clock_ms };
                if tx.send(Ok(reply)).await.is_err() {
                    break;
                }
            }
            // The agent is gone or will register again: its measurement is no longer news.
            if let Some((node_id, session)) = measuring {
                api.measurements.forget(&node_id, session);
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    type AssignmentsStream = BoxStream<Assignment>;

    async fn assignments(
        &self,
        request: Request<AssignmentsRequest>,
    ) -> Result<Response<Self::AssignmentsStream>, Status> {
        let AssignmentsRequest { node_id, session } = request.into_inner();
        let rx =
            self.ask(|reply| AgentCommand::OpenAssignments { node_id, session, reply }).await?;
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }

    async fn report_status(
        &self,
        request: Request<StatusReports>,
    ) -> Result<Response<StatusReplies>, Status> {
        let reports = request.into_inner();
        check_batch(&reports)?;
        self.ask(|reply| AgentCommand::Report { reports, reply }).await.map(Response::new)
    }

    type ReportsStream = BoxStream<StatusReplies>;

    async fn reports(
        &self,
        request: Request<Streaming<StatusReports>>,
    ) -> Result<Response<Self::ReportsStream>, Status> {
        let mut inbound = request.into_inner();
        let api = self.clone();
        // One answer in flight: the agent waits for it before it sends the next batch.
        let (tx, rx) = mpsc::channel::<Result<StatusReplies, Status>>(1);
        tokio::spawn(async move {
            while let Some(message) = inbound.next().await {
                let Ok(reports) = message else { break };
                let answer = match check_batch(&reports) {
                    Ok(()) => api.ask(|reply| AgentCommand::Report { reports, reply }).await,
                    Err(status) => Err(status),
                };
                // An error ends the stream, as it ends a call.
                let failed = answer.is_err();
                if tx.send(answer).await.is_err() || failed {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    type LogsStream = BoxStream<LogRequest>;

    async fn logs(
        &self,
        request: Request<Streaming<LogChunk>>,
    ) -> Result<Response<Self::LogsStream>, Status> {
        let (node_id, session) = log_session(request.metadata())?;
        let name = node_id.clone();
        let liveness =
            self.ask(|reply| AgentCommand::Heartbeat { node_id: name, session, reply }).await?;
        let rx = self.logs.attach(node_id, session, liveness, request.into_inner())?;
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }
}

/// The node and session a `Logs` call names in its metadata.
fn log_session(metadata: &tonic::metadata::MetadataMap) -> Result<(String, u64), Status> {
    let text = |key: &str| {
        metadata.get(key).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty())
    };
    let node_id = text(LOG_NODE_METADATA).ok_or_else(|| {
        Status::invalid_argument(format!(
            "{LOG_NODE_METADATA}: missing; a Logs call names its node and session in metadata"
        ))
    })?;
    let session = text(LOG_SESSION_METADATA)
        .ok_or_else(|| {
            Status::invalid_argument(format!(
                "{LOG_SESSION_METADATA}: missing; a Logs call names its node and session in \
                 metadata"
            ))
        })?
        .parse::<u64>()
        .map_err(|_| {
            Status::invalid_argument(format!("{LOG_SESSION_METADATA}: not a session number"))
        })?;
    Ok((node_id.to_string(), session))
}

/// Most status reports in one call or stream message.
pub(crate) const MAX_REPORTS: usize = 4096;

/// Refuses a batch of more than [`MAX_REPORTS`] reports.
fn check_batch(reports: &StatusReports) -> Result<(), Status> {
    if reports.reports.len() > MAX_REPORTS {
        return Err(Status::invalid_argument(format!(
            "reports: {} reports in one message; send at most {MAX_REPORTS}",
            reports.reports.len()
        )));
    }
    Ok(())
}
