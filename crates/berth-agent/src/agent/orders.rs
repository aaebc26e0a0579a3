//! What the head asks of the runner, applied in order on a blocking thread, off the session.
//!
//! Starting an attempt may take seconds: a fork server has 5 s to answer, and spawning a
//! process on a saturated machine is slow. Applied where the session runs, a start would hold
//! up everything else there, and a burst of them would silence the agent for as long; applied
//! on a runtime worker, it would hold up that worker's other tasks. So the session's parts only
//! queue [`Order`]s, and the [`Applier`] hands them to the runner, a batch at a time, on a
//! blocking thread, while the session goes on.
//!
//! - **In order.** One queue per agent, first in first out: a stop comes after the start of
//!   the same attempt, and the runner reports in the order it applies.
//! - **A lost session's orders are dropped** ([`Orders::discard`]), as the assignments a broken
//!   stream never delivered would be: the head sends every placed attempt not yet started again
//!   on the next session's stream, and its answer to the registration stops what it no longer
//!   places here. So an agent that lost its session registers again after the order in hand,
//!   never after a backlog of starts.
//! - **A registration announces what runs once every earlier order is applied**
//!   ([`Orders::running`]), so it never misses an attempt being started.
//! - **Shutdown**: the order in hand completes (no process is left half started) and the rest
//!   are dropped; the agent waits for it (it is one of its [`Helpers`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use berth_api::agent::{RunningWork, Start, Stop};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::{debug, info};

use super::Helpers;
use crate::runner::{Events, Runner};

/// One thing for the runner to do.
#[derive(Debug)]
pub(super) enum Order {
    /// Start an attempt (boxed: a `Start` is large).
    Start(Box<Start>),
    /// Stop an attempt.
    Stop(Stop),
    /// Stop the attempt if it still runs (the head says it is stale).
    StopIfRunning(Stop),
    /// Stop whatever attempt of these works runs (the head's answer to a registration).
    StopWork {
        /// The works.
        work_ids: Vec<String>,
        /// Why, for the runner's log.
        reason: String,
    },
    /// The head gave this node ID (before any order of the session).
    Registered(String),
    /// Answer with the attempts running, once every earlier order is applied.
    Running(oneshot::Sender<Vec<RunningWork>>),
}

impl Order {
    /// True for orders that act on work (dropped when their session is gone).
    fn acts(&self) -> bool {
        !matches!(self, Order::Registered(_) | Order::Running(_))
    }
}

/// Where the session's parts queue orders. Cheap to clone.
#[derive(Clone, Debug)]
pub(super) struct Orders {
    tx: mpsc::UnboundedSender<(u64, Order)>,
    /// Bumped by [`Orders::discard`]: an order queued under an older value is dropped.
    epoch: Arc<AtomicU64>,
}

impl Orders {
    /// Queues `order`.
    pub(super) fn send(&self, order: Order) {
        // The applier lives as long as the agent's run: nobody sends after it is gone.
        let _ = self.tx.send((self.epoch.load(Ordering::Acquire), order));
    }

    /// Drops the orders queued so far that act on work and are not applied yet (the one in
    /// hand completes).
    pub(super) fn discard(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// The attempts running once every order queued before is applied (or dropped).
    pub(super) async fn running(&self) -> Vec<RunningWork> {
        let (tx, rx) = oneshot::channel();
        self.send(Order::Running(tx));
        // Always answered while the agent runs (`Running` is never dropped).
        rx.await.unwrap_or_default()
    }
}

/// Applies the queued orders; see the [module documentation](self).
pub(super) struct Applier {
    rx: mpsc::UnboundedReceiver<(u64, Order)>,
    runner: Arc<dyn Runner>,
    events: Events,
    epoch: Arc<AtomicU64>,
    helpers: Helpers,
    /// The batch being applied.
    job: Option<JoinHandle<()>>,
}

/// An order queue and its applier, reporting through `events`; each batch it applies is one of
/// `helpers`.
pub(super) fn channel(
    runner: Arc<dyn Runner>,
    events: Events,
    helpers: Helpers,
) -> (Orders, Applier) {
    let (tx, rx) = mpsc::unbounded_channel();
    let epoch = Arc::new(AtomicU64::new(0));
    let orders = Orders { tx, epoch: epoch.clone() };
    (orders, Applier { rx, runner, events, epoch, helpers, job: None })
}

impl Applier {
    /// Applies orders as they come, forever. Cancel-safe: a batch in hand when this is
    /// dropped goes on (a helper of the agent's until it is done).
    pub(super) async fn run(&mut self) -> std::convert::Infallible {
        loop {
            if let Some(job) = &mut self.job {
                let result = job.await;
                self.job = None;
                if let Err(e) = result {
                    if e.is_panic() {
                        std::panic::resume_unwind(e.into_panic());
                    }
                }
            }
            let Some(first) = self.rx.recv().await else {
                // `self` holds no sender, but every `Orders` may be gone.
                return std::future::pending().await;
            };
            let mut batch = vec![first];
            while let Ok(order) = self.rx.try_recv() {
                batch.push(order);
            }
            let helper = self.helpers.enlist(&self.runner);
            let events = self.events.clone();
            let epoch = self.epoch.clone();
            self.job = Some(tokio::task::spawn_blocking(move || {
                let mut dropped = 0;
                for (queued_at, order) in batch {
                    if order.acts() && queued_at != epoch.load(Ordering::Acquire) {
                        dropped += 1;
                        continue;
                    }
                    apply(helper.runner(), order, &events);
                }
                if dropped > 0 {
                    debug!(dropped, "dropped the orders of an ended session");
                }
            }));
        }
    }
}

impl Drop for Applier {
    fn drop(&mut self) {
        // An aborted agent (a killed machine) applies nothing more than the order in hand.
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }
}

fn apply(runner: &dyn Runner, order: Order, events: &Events) {
    match order {
        Order::Start(start) => {
            debug!(work_id = %start.work_id, attempt = start.attempt, "start");
            runner.start(*start, events.clone());
        }
        Order::Stop(stop) => {
            debug!(work_id = %stop.work_id, attempt = stop.attempt, reason = %stop.reason, "stop");
            runner.stop(stop, events.clone());
        }
        Order::StopIfRunning(stop) => {
            let running = runner.running();
            if running.iter().any(|w| w.work_id == stop.work_id && w.attempt == stop.attempt) {
                info!(work_id = %stop.work_id, attempt = stop.attempt, "the head says this attempt is stale; stopping it");
                runner.stop(stop, events.clone());
            }
        }
        Order::StopWork { work_ids, reason } => {
            for work in runner.running() {
                if work_ids.contains(&work.work_id) {
                    info!(work_id = %work.work_id, attempt = work.attempt, "stopping work the head no longer places here");
                    let stop = Stop {
                        work_id: work.work_id,
                        attempt: work.attempt,
                        reason: reason.clone(),
                    };
                    runner.stop(stop, events.clone());
                }
            }
        }
        Order::Registered(node_id) => runner.registered(&node_id),
        Order::Running(reply) => {
            let _ = reply.send(runner.running());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::{AckRunner, WorkEvent, WorkStatus};
    use berth_api::agent::WorkKind;

    fn start(work_id: &str, attempt: u32) -> Order {
        Order::Start(Box::new(Start {
            work_id: work_id.into(),
            attempt,
            kind: WorkKind::Actor as i32,
            ..Start::default()
        }))
    }

    fn stop(work_id: &str, attempt: u32) -> Stop {
        Stop { work_id: work_id.into(), attempt, reason: "test".into() }
    }

    fn drain(rx: &mut mpsc::UnboundedReceiver<WorkEvent>) -> Vec<(String, u32, WorkStatus)> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|e| (e.work_id, e.attempt, e.status))
            .collect()
    }

    const STARTED: WorkStatus = WorkStatus::Started { pid: 0 };
    const STOPPED: WorkStatus = WorkStatus::Exited { code: None, signal: Some(15) };

    #[tokio::test]
    async fn orders_are_applied_in_order_and_a_discarded_sessions_are_dropped() {
        let runner = Arc::new(AckRunner::new());
        let (events, mut rx) = Events::channel();
        let helpers = Helpers::default();
        let (orders, mut applier) = channel(runner, events, helpers.clone());
        let run = async {
            orders.send(start("a", 1));
            orders.send(Order::Stop(stop("a", 1)));
            orders.send(start("b", 1));
            orders.send(Order::StopIfRunning(stop("b", 2)));
            let running = orders.running().await;
            assert_eq!(running, vec![RunningWork { work_id: "b".into(), attempt: 1 }]);
            // Queued, then their session ends before they are applied: dropped. The
            // registration's question after them is still answered.
            orders.send(start("c", 1));
            orders.send(Order::StopWork { work_ids: vec!["b".into()], reason: "x".into() });
            orders.discard();
            let running = orders.running().await;
            assert_eq!(running, vec![RunningWork { work_id: "b".into(), attempt: 1 }]);
            orders.send(Order::StopIfRunning(stop("b", 1)));
            orders.running().await
        };
        let running = tokio::select! {
            running = run => running,
            never = applier.run() => match never {},
        };
        assert!(running.is_empty());
        drop(applier);
        helpers.none_left().await;
        assert_eq!(
            drain(&mut rx),
            vec![
                ("a".into(), 1, STARTED),
                ("a".into(), 1, STOPPED),
                ("b".into(), 1, STARTED),
                ("b".into(), 1, STOPPED),
            ]
        );
    }
}
