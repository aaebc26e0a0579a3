//! Group commit: many writers, one transaction per round.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::batch::Batch;
use crate::error::StoreError;
use crate::lease::Epoch;
use crate::store::Store;

/// Limits of a [`BatchWriter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchWriterConfig {
    /// How many writes may wait for a commit before [`BatchWriter::write`] waits for room
    /// (backpressure on the callers instead of unbounded memory).
    pub queue_capacity: usize,
    /// Stop adding writes to a commit once it has this many ops (one write larger than this
    /// still commits, alone), so one commit never grows without bound.
    pub max_ops_per_commit: usize,
}

impl Default for BatchWriterConfig {
    fn default() -> Self {
        BatchWriterConfig { queue_capacity: 4096, max_ops_per_commit: 10_000 }
    }
}

/// Counters of a [`BatchWriter`], for tests, logs and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Commits attempted (successful or not).
    pub commits: u64,
    /// Writes (callers' batches) those commits carried.
    pub writes: u64,
    /// Ops those commits carried.
    pub ops: u64,
}

#[derive(Debug, Default)]
struct Counters {
    commits: AtomicU64,
    writes: AtomicU64,
    ops: AtomicU64,
}

/// One caller's write, waiting for its commit.
struct Pending {
    batch: Batch,
    done: oneshot::Sender<Result<(), StoreError>>,
}

/// Group commit in front of a [`Store`]: callers [`write`](BatchWriter::write) batches
/// concurrently; one task commits everything that has queued up since its last commit in one
/// transaction, then answers every caller in it.
///
/// # Behaviour
///
/// - **No acknowledgement before durability.** `write` returns `Ok` only after the commit that
///   holds its batch has returned `Ok` from the store. If the commit fails, every write in it
///   gets the error, and none of them was applied (the commit is atomic).
/// - **No timers.** Writes that arrive while a commit is in progress wait for the next one, so
///   commits grow with the load (one fsync per round, not per write) and an idle writer commits
///   a lone write at once. A task that owns the whole cycle (the head's state task) can
///   instead build one [`Batch`] per cycle and call [`Store::commit`] itself: the same group
///   commit, without the queue.
/// - **Order.** Writes are committed in the order they were queued; within a commit, batches
///   are applied in that order.
/// - **Backpressure.** At most [`BatchWriterConfig::queue_capacity`] writes wait; further
///   `write` calls wait for room.
/// - **Fencing is final.** Once a commit is refused as fenced, every later write is answered
///   with the same error without touching the store.
/// - **Cancellation.** Dropping a `write` future after it was queued does not withdraw the
///   write; it may still be committed.
///
/// Dropping the writer (or calling [`close`](BatchWriter::close)) lets the task commit what
/// is queued and stop.
pub struct BatchWriter {
    queue: mpsc::Sender<Pending>,
    counters: Arc<Counters>,
    task: JoinHandle<()>,
}

impl BatchWriter {
    /// Starts the commit task on the current tokio runtime; every commit carries `epoch`.
    ///
    /// # Panics
    ///
    /// If called outside a tokio runtime, or with a zero `queue_capacity`.
    pub fn spawn<S: Store + 'static>(store: S, epoch: Epoch, config: BatchWriterConfig) -> Self {
        let (queue, receiver) = mpsc::channel(config.queue_capacity);
        let counters = Arc::new(Counters::default());
        let task = tokio::spawn(run(store, epoch, config, receiver, Arc::clone(&counters)));
        BatchWriter { queue, counters, task }
    }

    /// Queues `batch` and waits until it is durable (or the commit holding it failed). An
    /// invalid batch is refused at once, without failing the other writes of its commit.
    pub async fn write(&self, batch: Batch) -> Result<(), StoreError> {
        batch.validate()?;
        let (done, answer) = oneshot::channel();
        self.queue.send(Pending { batch, done }).await.map_err(|_| StoreError::WriterStopped)?;
        answer.await.unwrap_or(Err(StoreError::WriterStopped))
    }

    /// The counters so far.
    pub fn stats(&self) -> WriterStats {
        WriterStats {
            commits: self.counters.commits.load(Ordering::Relaxed),
            writes: self.counters.writes.load(Ordering::Relaxed),
            ops: self.counters.ops.load(Ordering::Relaxed),
        }
    }

    /// Stops taking writes, waits until every queued write is committed and answered, and
    /// returns the final counters.
    pub async fn close(self) -> WriterStats {
        let BatchWriter { queue, counters, task } = self;
        drop(queue);
        // A panicked task has answered nobody; its callers got WriterStopped already.
        let _ = task.await;
        WriterStats {
            commits: counters.commits.load(Ordering::Relaxed),
            writes: counters.writes.load(Ordering::Relaxed),
            ops: counters.ops.load(Ordering::Relaxed),
        }
    }
}

/// The commit task: take one write (waiting for it), take every other write already queued up
/// to the op limit, commit them together, answer them, repeat until the queue closes.
async fn run<S: Store>(
    store: S,
    epoch: Epoch,
    config: BatchWriterConfig,
    mut receiver: mpsc::Receiver<Pending>,
    counters: Arc<Counters>,
) {
    // Set by the first fenced commit: every later write gets this error.
    let mut fenced: Option<StoreError> = None;
    // A write taken from the queue that did not fit in the previous commit.
    let mut carried: Option<Pending> = None;
    loop {
        let first = match carried.take() {
            Some(pending) => pending,
            None => match receiver.recv().await {
                Some(pending) => pending,
                None => return,
            },
        };
        let (group, ops) =
            take_group(first, &mut receiver, &mut carried, config.max_ops_per_commit);
        if let Some(error) = &fenced {
            for pending in group {
                let _ = pending.done.send(Err(error.clone()));
            }
            continue;
        }

        let mut batch = Batch::new();
        let mut answers = Vec::with_capacity(group.len());
        for pending in group {
            batch.append(pending.batch);
            answers.push(pending.done);
        }
        counters.commits.fetch_add(1, Ordering::Relaxed);
        counters.writes.fetch_add(answers.len() as u64, Ordering::Relaxed);
        counters.ops.fetch_add(ops as u64, Ordering::Relaxed);
        let result = store.commit(epoch, batch).await;
        if let Err(error) = &result {
            if error.is_fenced() {
                fenced = Some(error.clone());
            }
        }
        for answer in answers {
            // A caller that stopped waiting has nothing to be told.
            let _ = answer.send(result.clone());
        }
    }
}

/// `first` and every write already queued behind it, up to `max_ops` ops in all (a write that
/// would go over is put in `carried` for the next round). Returns the group and its op count.
fn take_group(
    first: Pending,
    receiver: &mut mpsc::Receiver<Pending>,
    carried: &mut Option<Pending>,
    max_ops: usize,
) -> (Vec<Pending>, usize) {
    let mut ops = first.batch.len();
    let mut group = vec![first];
    while ops < max_ops {
        let Ok(next) = receiver.try_recv() else { break };
        if ops + next.batch.len() > max_ops {
            *carried = Some(next);
            break;
        }
        ops += next.batch.len();
        group.push(next);
    }
    (group, ops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Table;

    fn pending(ops: usize) -> Pending {
        let mut batch = Batch::new();
        for i in 0..ops {
            batch.put(Table::Tasks, format!("t{i}"), Vec::new());
        }
        Pending { batch, done: oneshot::channel().0 }
    }

    #[test]
    fn take_group_stops_at_the_op_limit_and_carries_the_rest() {
        let (sender, mut receiver) = mpsc::channel(16);
        for ops in [3, 4, 2] {
            assert!(sender.try_send(pending(ops)).is_ok(), "room");
        }
        let mut carried = None;
        let (group, ops) = take_group(pending(2), &mut receiver, &mut carried, 10);
        assert_eq!((group.len(), ops), (3, 9), "2 + 3 + 4 fit in 10");
        let carried = carried.expect("the write of 2 did not fit");
        assert_eq!(carried.batch.len(), 2);

        let mut none = None;
        let (group, ops) = take_group(carried, &mut receiver, &mut none, 10);
        assert_eq!((group.len(), ops, none.is_none()), (1, 2, true), "the queue is empty");
    }

    #[test]
    fn a_write_larger_than_the_limit_commits_alone() {
        let (sender, mut receiver) = mpsc::channel(16);
        assert!(sender.try_send(pending(1)).is_ok(), "room");
        let mut carried = None;
        let (group, ops) = take_group(pending(50), &mut receiver, &mut carried, 10);
        assert_eq!((group.len(), ops), (1, 50));
        assert!(carried.is_none(), "the next write stays queued");
        assert!(receiver.try_recv().is_ok());
    }
}
