//! The head's side of the agents' log streams (`rpc Logs` in `proto/agent.proto`), for
//! `GET /api/v1/logs/{id}` and `berth logs`.
//!
//! Agents connect out to the head, never the other way, so each agent opens one `Logs` stream
//! per session and the head sends its requests down it. [`LogStreams`] is the registry of those
//! streams, one per node (the newest session's: a newer stream replaces an older one, whose
//! readers then see it lost), and the router of their answers: every request has its own
//! `request_id` and its own channel to the [`LogReader`] that asked. Dropping a reader before
//! its request ended (the HTTP client went away) sends the agent a cancel.
//!
//! Log bytes never go through the owner task or the store: the owner is asked once per stream,
//! when it opens, whether the session is current (the same question a heartbeat stream asks),
//! and the session's [`Liveness`] tells later whether it has ended (node dead, registered
//! again), without asking again.
//!
//! Flow control: an agent may have at most [`LOG_WINDOW`] chunks of a request unacknowledged;
//! the reader acknowledges each chunk it takes (`credit: 1`). So a slow reader holds at most the
//! window in the head's memory and never stalls the other requests of its node's stream, and a
//! chunk beyond the window (an agent breaking the protocol) fails that request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use berth_api::agent::{LogChunk, LogRequest, LogStream};
use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tonic::Status;

use crate::command::Liveness;

/// Chunks of one request an agent may send before the head acknowledges them.
pub(crate) const LOG_WINDOW: u32 = 16;
/// The most bytes of one chunk.
pub(crate) const MAX_CHUNK: usize = 64 * 1024;
/// The most requests open at once on one node's stream.
pub(crate) const MAX_REQUESTS_PER_NODE: usize = 256;

/// What went to the agent: a request, an acknowledgement, a cancel, or the stream's end.
pub(crate) type ToAgent = mpsc::UnboundedSender<Result<LogRequest, Status>>;

/// Why a request could not be sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum OpenError {
    /// The node's agent has no log stream open (not connected, or its session ended).
    NoStream,
    /// Too many requests are open on the node's stream.
    Busy,
}

/// The live log streams, by node.
#[derive(Debug, Default)]
pub(crate) struct LogStreams {
    nodes: Mutex<HashMap<String, Arc<NodeLogs>>>,
    next_request: AtomicU64,
}

/// One agent's log stream.
#[derive(Debug)]
struct NodeLogs {
    node_id: String,
    session: u64,
    liveness: Arc<Liveness>,
    to_agent: ToAgent,
    requests: Mutex<HashMap<u64, OpenRequest>>,
}

/// A request waiting for chunks.
#[derive(Debug)]
struct OpenRequest {
    answers: mpsc::UnboundedSender<LogChunk>,
    /// Chunks delivered and not yet taken by the reader.
    unacked: Arc<AtomicU32>,
}

impl NodeLogs {
    fn requests(&self) -> MutexGuard<'_, HashMap<u64, OpenRequest>> {
        // Every update is one insert or remove: a panic cannot leave the map half-changed.
        self.requests.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn is_live(&self) -> bool {
        !self.liveness.ended.load(Ordering::Acquire) && !self.to_agent.is_closed()
    }

    /// Routes one chunk from the agent to the reader waiting for it.
    fn deliver(&self, chunk: LogChunk) {
        let mut requests = self.requests();
        let id = chunk.request_id;
        let Some(waiting) = requests.get(&id) else {
            // Cancelled (or never asked): dropped.
            return;
        };
        let counted = chunk.error.is_empty();
        let breach = if chunk.data.len() > MAX_CHUNK {
            Some(format!("a chunk of {} bytes (at most {MAX_CHUNK})", chunk.data.len()))
        } else if counted && waiting.unacked.fetch_add(1, Ordering::AcqRel) >= LOG_WINDOW {
            Some(format!("more than {LOG_WINDOW} unacknowledged chunks"))
        } else {
            None
        };
        if let Some(breach) = breach {
            let waiting = requests.remove(&id).expect("looked up above");
            tracing::warn!(node_id = %self.node_id, request_id = id, "the agent sent {breach}");
            let _ = waiting.answers.send(LogChunk {
                request_id: id,
                error: format!(
                    "the agent of node {} broke the log protocol: {breach}",
                    self.node_id
                ),
                ..LogChunk::default()
            });
            let _ = self.to_agent.send(Ok(cancel(id)));
            return;
        }
        let last = chunk.eof || !chunk.error.is_empty();
        if waiting.answers.send(chunk).is_err() || last {
            requests.remove(&id);
        }
    }

    /// Ends every request (their readers see the stream lost) and the stream to the agent.
    fn close(&self, why: &str) {
        self.requests().clear();
        let _ = self.to_agent.send(Err(Status::failed_precondition(why.to_string())));
    }
}

fn cancel(request_id: u64) -> LogRequest {
    LogRequest { request_id, cancel: true, ..LogRequest::default() }
}

impl LogStreams {
    fn nodes(&self) -> MutexGuard<'_, HashMap<String, Arc<NodeLogs>>> {
        self.nodes.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes over the log stream the agent of `node_id` opened in session `session` (checked
    /// current by the caller; `liveness` is that session's cell): answers from `inbound` are
    /// routed from now on, and the returned receiver is what goes to the agent. Replaces the
    /// node's older stream; refuses a stream of a session older than the one registered.
    pub(crate) fn attach<S>(
        self: &Arc<Self>,
        node_id: String,
        session: u64,
        liveness: Arc<Liveness>,
        inbound: S,
    ) -> Result<mpsc::UnboundedReceiver<Result<LogRequest, Status>>, Status>
    where
        S: Stream<Item = Result<LogChunk, Status>> + Send + Unpin + 'static,
    {
        let (to_agent, rx) = mpsc::unbounded_channel();
        let node = Arc::new(NodeLogs {
            node_id: node_id.clone(),
            session,
            liveness,
            to_agent,
            requests: Mutex::new(HashMap::new()),
        });
        {
            let mut nodes = self.nodes();
            if let Some(old) = nodes.get(&node_id) {
                if old.session > session {
                    return Err(Status::failed_precondition(format!(
                        "session {session} of node {node_id} is not current; register again"
                    )));
                }
            }
            if let Some(old) = nodes.insert(node_id.clone(), node.clone()) {
                old.close("a newer log stream of this node replaced this one");
            }
        }
        tracing::debug!(%node_id, session, "log stream open");
        let streams = self.clone();
        tokio::spawn(async move {
            let mut inbound = inbound;
            while let Some(message) = inbound.next().await {
                match message {
                    Ok(chunk) => node.deliver(chunk),
                    Err(status) => {
                        tracing::debug!(node_id = %node.node_id, "log stream failed: {status}");
                        break;
                    }
                }
            }
            streams.detach(&node);
        });
        Ok(rx)
    }

    /// Forgets `node`'s stream (it ended) unless a newer one replaced it already.
    fn detach(&self, node: &Arc<NodeLogs>) {
        let mut nodes = self.nodes();
        if nodes.get(&node.node_id).is_some_and(|current| Arc::ptr_eq(current, node)) {
            nodes.remove(&node.node_id);
        }
        drop(nodes);
        node.close("the log stream ended");
        tracing::debug!(node_id = %node.node_id, session = node.session, "log stream closed");
    }

    /// True when the agent of `node_id` has a log stream open in a current session.
    #[cfg(test)]
    pub(crate) fn is_connected(&self, node_id: &str) -> bool {
        self.nodes().get(node_id).is_some_and(|node| node.is_live())
    }

    /// Requests open on `node_id`'s stream (for tests: cancellation reached the registry).
    #[cfg(test)]
    pub(crate) fn open_requests(&self, node_id: &str) -> usize {
        self.nodes().get(node_id).map_or(0, |node| node.requests().len())
    }

    /// Asks the agent of `node_id` for `stream` of `work_id` from byte `offset` (and, with
    /// `follow`, for what is appended later). The answers come through the reader.
    pub(crate) fn open(
        &self,
        node_id: &str,
        work_id: &str,
        stream: LogStream,
        offset: u64,
        follow: bool,
    ) -> Result<LogReader, OpenError> {
        let node = self.nodes().get(node_id).cloned().ok_or(OpenError::NoStream)?;
        if !node.is_live() {
            return Err(OpenError::NoStream);
        }
        let request_id = self.next_request.fetch_add(1, Ordering::Relaxed) + 1;
        let (answers, rx) = mpsc::unbounded_channel();
        let unacked = Arc::new(AtomicU32::new(0));
        {
            let mut requests = node.requests();
            if requests.len() >= MAX_REQUESTS_PER_NODE {
                return Err(OpenError::Busy);
            }
            requests.insert(request_id, OpenRequest { answers, unacked: unacked.clone() });
        }
        let request = LogRequest {
            request_id,
            work_id: work_id.to_string(),
            stream: stream as i32,
            offset,
            follow,
            cancel: false,
            credit: 0,
        };
        if node.to_agent.send(Ok(request)).is_err() {
            node.requests().remove(&request_id);
            return Err(OpenError::NoStream);
        }
        Ok(LogReader { node, request_id, rx, unacked, done: false })
    }
}

/// The answers to one request, in order. Dropped before the request ended, it cancels it.
#[derive(Debug)]
pub(crate) struct LogReader {
    node: Arc<NodeLogs>,
    request_id: u64,
    rx: mpsc::UnboundedReceiver<LogChunk>,
    unacked: Arc<AtomicU32>,
    done: bool,
}

impl LogReader {
    /// The next chunk; `None` when the node's stream was lost (or replaced) before the request
    /// ended. A chunk with `eof` or an `error` is the request's last.
    pub(crate) async fn next(&mut self) -> Option<LogChunk> {
        if self.done {
            return None;
        }
        let Some(chunk) = self.rx.recv().await else {
            self.done = true;
            return None;
        };
        let last = chunk.eof || !chunk.error.is_empty();
        if chunk.error.is_empty() {
            self.unacked.fetch_sub(1, Ordering::AcqRel);
            if !last {
                let credit =
                    LogRequest { request_id: self.request_id, credit: 1, ..LogRequest::default() };
                let _ = self.node.to_agent.send(Ok(credit));
            }
        }
        self.done = last;
        Some(chunk)
    }

    /// The node whose agent answers.
    pub(crate) fn node_id(&self) -> &str {
        &self.node.node_id
    }
}

impl Drop for LogReader {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // The request may have ended meanwhile: a cancel of an ended request is ignored.
        if self.node.requests().remove(&self.request_id).is_some() {
            let _ = self.node.to_agent.send(Ok(cancel(self.request_id)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    fn liveness(session: u64) -> Arc<Liveness> {
        Arc::new(Liveness {
            session,
            last_seen_ms: AtomicU64::new(0),
            ended: AtomicBool::new(false),
        })
    }

    type Agent = (
        mpsc::UnboundedSender<Result<LogChunk, Status>>,
        mpsc::UnboundedReceiver<Result<LogRequest, Status>>,
    );

    fn attach(streams: &Arc<LogStreams>, node: &str, session: u64) -> (Agent, Arc<Liveness>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let live = liveness(session);
        let inbound = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
        let to_agent = streams.attach(node.into(), session, live.clone(), inbound).unwrap();
        ((tx, to_agent), live)
    }

    async fn request(agent: &mut Agent) -> LogRequest {
        tokio::time::timeout(Duration::from_secs(10), agent.1.recv())
            .await
            .expect("a request within 10 s")
            .expect("the stream is open")
            .expect("not an error")
    }

    fn data(request_id: u64, bytes: &[u8]) -> Result<LogChunk, Status> {
        Ok(LogChunk { request_id, data: bytes.to_vec(), ..LogChunk::default() })
    }

    #[tokio::test]
    async fn answers_are_routed_acknowledged_and_ended() {
        let streams = Arc::new(LogStreams::default());
        assert_eq!(
            streams.open("n1", "actor-1", LogStream::Out, 0, false).unwrap_err(),
            OpenError::NoStream
        );
        let (mut agent, _) = attach(&streams, "n1", 1);
        assert!(streams.is_connected("n1"));
        let mut reader = streams.open("n1", "actor-1", LogStream::Err, 7, false).unwrap();
        assert_eq!(reader.node_id(), "n1");
        let asked = request(&mut agent).await;
        assert_eq!(
            (asked.work_id.as_str(), asked.stream, asked.offset, asked.follow, asked.cancel),
            ("actor-1", LogStream::Err as i32, 7, false, false)
        );
        let id = asked.request_id;
        agent.0.send(data(id, b"hello")).unwrap();
        agent
            .0
            .send(Ok(LogChunk {
                request_id: id + 1000,
                data: b"x".to_vec(),
                ..LogChunk::default()
            }))
            .unwrap();
        agent
            .0
            .send(Ok(LogChunk {
                request_id: id,
                data: b"!".to_vec(),
                eof: true,
                ..LogChunk::default()
            }))
            .unwrap();
        assert_eq!(reader.next().await.unwrap().data, b"hello");
        // The first chunk is acknowledged; the last is not (nothing follows it).
        assert_eq!(
            request(&mut agent).await,
            LogRequest { request_id: id, credit: 1, ..LogRequest::default() }
        );
        let last = reader.next().await.unwrap();
        assert!(last.eof && last.data == b"!");
        assert!(reader.next().await.is_none());
        assert_eq!(streams.open_requests("n1"), 0);
        drop(reader);
        // Nothing more went to the agent: no cancel for an ended request.
        assert!(agent.1.try_recv().is_err());
    }

    #[tokio::test]
    async fn a_dropped_reader_cancels_its_request() {
        let streams = Arc::new(LogStreams::default());
        let (mut agent, _) = attach(&streams, "n1", 1);
        let reader = streams.open("n1", "actor-1", LogStream::Out, 0, true).unwrap();
        let id = request(&mut agent).await.request_id;
        assert_eq!(streams.open_requests("n1"), 1);
        drop(reader);
        assert_eq!(request(&mut agent).await, cancel(id));
        assert_eq!(streams.open_requests("n1"), 0);
        // Late chunks of the cancelled request are dropped.
        agent.0.send(data(id, b"late")).unwrap();
    }

    #[tokio::test]
    async fn a_lost_or_replaced_stream_ends_its_readers() {
        let streams = Arc::new(LogStreams::default());
        let (mut old, _) = attach(&streams, "n1", 1);
        let mut reader = streams.open("n1", "actor-1", LogStream::Out, 0, true).unwrap();
        request(&mut old).await;
        // A newer session's stream replaces it: the old stream is ended, its readers see None.
        let (mut new, live) = attach(&streams, "n1", 2);
        assert!(reader.next().await.is_none());
        let ended = tokio::time::timeout(Duration::from_secs(10), old.1.recv()).await.unwrap();
        assert!(
            matches!(ended, Some(Err(ref s)) if s.code() == tonic::Code::FailedPrecondition),
            "{ended:?}"
        );
        // An older session cannot take the node back.
        let (_tx, rx) = mpsc::unbounded_channel::<Result<LogChunk, Status>>();
        let stale = streams.attach(
            "n1".into(),
            1,
            liveness(1),
            tokio_stream::wrappers::UnboundedReceiverStream::new(rx),
        );
        assert_eq!(stale.unwrap_err().code(), tonic::Code::FailedPrecondition);
        // The session ends (node dead): no stream for new requests.
        let mut reader = streams.open("n1", "task-1", LogStream::Out, 0, false).unwrap();
        request(&mut new).await;
        live.ended.store(true, Ordering::Release);
        assert!(!streams.is_connected("n1"));
        assert_eq!(
            streams.open("n1", "task-1", LogStream::Out, 0, false).unwrap_err(),
            OpenError::NoStream
        );
        // The agent's side closes: the registry forgets the node, readers see the loss.
        drop(new.0);
        assert!(tokio::time::timeout(Duration::from_secs(10), reader.next())
            .await
            .unwrap()
            .is_none());
        tokio::time::timeout(Duration::from_secs(10), async {
            while streams.nodes().contains_key("n1") {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the node's stream is forgotten");
    }

    #[tokio::test]
    async fn an_agent_beyond_its_window_fails_the_request() {
        let streams = Arc::new(LogStreams::default());
        let (mut agent, _) = attach(&streams, "n1", 1);
        let mut reader = streams.open("n1", "actor-1", LogStream::Out, 0, true).unwrap();
        let id = request(&mut agent).await.request_id;
        for _ in 0..=LOG_WINDOW {
            agent.0.send(data(id, b"x")).unwrap();
        }
        for _ in 0..LOG_WINDOW {
            assert_eq!(reader.next().await.unwrap().data, b"x");
        }
        let failed = reader.next().await.unwrap();
        assert!(failed.error.contains("more than 16 unacknowledged chunks"), "{failed:?}");
        assert!(reader.next().await.is_none());
        // Too big a chunk fails a request too.
        let mut reader = streams.open("n1", "actor-1", LogStream::Out, 0, false).unwrap();
        let mut id = 0;
        while id == 0 {
            let r = request(&mut agent).await;
            if !r.cancel && r.credit == 0 {
                id = r.request_id;
            }
        }
        agent.0.send(data(id, &vec![0; MAX_CHUNK + 1])).unwrap();
        assert!(reader.next().await.unwrap().error.contains("a chunk of 65537 bytes"));
    }

    #[tokio::test]
    async fn requests_per_node_are_bounded() {
        let streams = Arc::new(LogStreams::default());
        let (_agent, _) = attach(&streams, "n1", 1);
        let readers: Vec<LogReader> = (0..MAX_REQUESTS_PER_NODE)
            .map(|_| streams.open("n1", "actor-1", LogStream::Out, 0, true).unwrap())
            .collect();
        assert_eq!(
            streams.open("n1", "actor-1", LogStream::Out, 0, true).unwrap_err(),
            OpenError::Busy
        );
        drop(readers);
        assert!(streams.open("n1", "actor-1", LogStream::Out, 0, true).is_ok());
    }
}
