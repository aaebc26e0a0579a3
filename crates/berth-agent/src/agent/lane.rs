//! The agents' lane: a runtime on a thread of its own (`berth-agent-lane`), shared by every
//! agent of the process, on which each agent's gRPC connection and heartbeats run.
//!
//! A node is alive to the head as long as its heartbeats arrive, so they must not wait on
//! anything the agent does. The runtime that runs the agent may be starved: in `berth up` it
//! also runs the head's REST API and the watchers of hundreds of processes, and its workers
//! block where the process runner does (a spawn on a saturated machine, its lock held while a
//! fork server answers). On the lane only non-blocking work runs: the heartbeat loop
//! ([`heartbeats`]) and the connection's I/O (HTTP/2 framing, keepalive pings, the streams'
//! bodies, through [`Executor`]), so the operating system giving the lane's thread its turn is
//! all a heartbeat needs. Everything else of the session (assignments, reports, logs) stays on
//! the caller's runtime and uses the same connection; the runner's measurements run on the
//! lane's blocking threads and a beat never waits for one.
//!
//! One thread serves all agents of a process, as the head's lane serves all agents'
//! connections: a heartbeat costs microseconds, and simulated clusters run thousands of agents
//! in one process.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use berth_api::agent::{HeartbeatRequest, Measured};
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinHandle};
use tokio_stream::wrappers::ReceiverStream;
use tracing::{debug, warn};

use super::{CallEnded, Client, Helper, Session, CALL_TIMEOUT};

/// The lane's runtime, started on first use; `None` when it could not be (the caller's
/// runtime is used then).
static LANE: OnceLock<Option<Handle>> = OnceLock::new();

fn start() -> Option<Handle> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new().name("berth-agent-lane".into()).spawn(move || {
        match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => {
                let _ = tx.send(Some(runtime.handle().clone()));
                // For the life of the process.
                runtime.block_on(std::future::pending::<()>());
            }
            Err(e) => {
                warn!("cannot start the agents' lane: {e}; heartbeats share the agent's runtime");
                let _ = tx.send(None);
            }
        }
    });
    match spawned {
        Ok(_) => rx.recv().ok().flatten(),
        Err(e) => {
            warn!("cannot start the agents' lane: {e}; heartbeats share the agent's runtime");
            None
        }
    }
}

/// The lane's runtime (the current one if the lane could not start).
fn handle() -> Handle {
    LANE.get_or_init(start).clone().unwrap_or_else(Handle::current)
}

/// Spawns a connection's tasks on the lane (`Endpoint::executor`).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Executor;

impl<F> hyper::rt::Executor<F> for Executor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, future: F) {
        handle().spawn(future);
    }
}

/// A task on the lane, aborted when this is dropped: nothing of a session outlives it.
pub(super) struct OnLane<T>(JoinHandle<T>);

impl<T: Send + 'static> OnLane<T> {
    /// Runs `future` on the lane.
    pub(super) fn spawn(future: impl Future<Output = T> + Send + 'static) -> OnLane<T> {
        OnLane(handle().spawn(future))
    }
}

impl<T> Future for OnLane<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for OnLane<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Beats sent and not answered after which the session is given up (the keepalive would end it
/// too, later).
const UNANSWERED: usize = 256;

/// The session's `Heartbeat` stream: one beat every `interval`, until the stream fails.
/// Runs on the lane; awaits nothing but the network and its ticker. Measures with `helper`'s
/// runner, and renews its lease with every reply (the head's `timeout`).
pub(super) async fn heartbeats(
    mut client: Client,
    session: Session,
    interval: Duration,
    timeout: Duration,
    helper: Helper,
) -> CallEnded {
    let mut measurer = Measurer { helper, slot: Arc::default() };
    let beat = HeartbeatRequest {
        node_id: session.node_id,
        session: session.session,
        usage: Default::default(),
        measured: None,
        agent_clock_ms: 0,
    };
    let (tx, rx) = mpsc::channel(4);
    // The clocks of the beats sent, oldest first: the head answers them in order, so a reply
    // that does not echo its beat's clock (an older head) is the oldest one's.
    let mut sent = std::collections::VecDeque::new();
    // The first beat goes out with the stream, so a head may wait for it before answering.
    let first = measurer.beat(&beat);
    sent.push_back(first.agent_clock_ms);
    let _ = tx.try_send(first);
    let mut inbound =
        match tokio::time::timeout(CALL_TIMEOUT, client.heartbeat(ReceiverStream::new(rx))).await {
            Ok(Ok(response)) => response.into_inner(),
            Ok(Err(status)) => return CallEnded::Failed(status),
            Err(_) => return CallEnded::Lost("opening the heartbeat stream timed out".into()),
        };
    let start = tokio::time::Instant::now() + interval;
    let mut ticker = tokio::time::interval_at(start, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                let next = measurer.beat(&beat);
                let clock = next.agent_clock_ms;
                match tx.try_send(next) {
                    Ok(()) => sent.push_back(clock),
                    // The transport is not taking beats as fast as they come; skipping one is
                    // harmless.
                    Err(mpsc::error::TrySendError::Full(_)) => debug!("heartbeat skipped: stream busy"),
                    Err(mpsc::error::TrySendError::Closed(_)) => {
                        return CallEnded::Lost("the heartbeat stream closed".into())
                    }
                }
                // A head that answers nothing for this long is gone; the stream ends soon.
                if sent.len() > UNANSWERED {
                    return CallEnded::Lost(format!("the head answered none of {UNANSWERED} heartbeats"));
                }
            }
            message = inbound.message() => match message {
                Ok(Some(reply)) => {
                    // The reply's beat: the oldest sent (replies come in order).
                    let oldest = sent.pop_front();
                    let clock = match reply.agent_clock_ms {
                        0 => oldest,
                        echoed => Some(echoed),
                    };
                    if let Some(clock) = clock {
                        measurer.helper.runner().renew_lease(clock, timeout);
                    }
                }
                Ok(None) => return CallEnded::Lost("the head ended the heartbeat stream".into()),
                Err(status) => return CallEnded::Failed(status),
            },
        }
    }
}

/// The runner's measurements for the beats. Each is made on a blocking thread (it reads
/// `/proc`, and a runner may make it wait on a start) and goes with the first beat after it is
/// done; a beat never waits for one, and goes without when none is ready.
struct Measurer {
    helper: Helper,
    slot: Arc<Mutex<Slot>>,
}

#[derive(Debug, Default)]
struct Slot {
    /// A measurement is under way.
    busy: bool,
    /// The last one done, not sent yet.
    ready: Option<Measured>,
}

impl Measurer {
    /// `beat` with the measurement done since the last beat, if any; starts the next one.
    fn beat(&mut self, beat: &HeartbeatRequest) -> HeartbeatRequest {
        let mut beat = beat.clone();
        beat.agent_clock_ms = crate::lease::clock_ms();
        if !self.helper.runner().measures() {
            return beat;
        }
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        beat.measured = slot.ready.take();
        if !slot.busy {
            slot.busy = true;
            let (helper, shared) = (self.helper.another(), self.slot.clone());
            drop(tokio::task::spawn_blocking(move || {
                let measured = helper.runner().measure();
                let mut slot = shared.lock().unwrap_or_else(PoisonError::into_inner);
                slot.ready = measured;
                slot.busy = false;
            }));
        }
        beat
    }
}
