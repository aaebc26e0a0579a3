//! What executes assignments: the [`Runner`] trait, the [`Events`] sink a runner reports
//! through, and [`AckRunner`], a runner without processes.
//!
//! The agent calls the runner from blocking threads, never from its protocol loops: a start
//! may take as long as it needs (a spawn, a fork server's answer) without delaying a heartbeat.
//! Everything that happens later is reported through [`Events`], which the agent turns into
//! `ReportStatus` calls in the order they were sent.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use berth_api::agent::{self, status_report, LogStream, RunningWork, Start, Stop, WorkKind};
use tokio::sync::mpsc;

/// The signal number reported when work is stopped (SIGTERM).
pub const STOP_SIGNAL: i32 = 15;

/// What happened to one attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkStatus {
    /// The attempt is running (`pid` 0 when there is no process).
    Started {
        /// The process ID.
        pid: u32,
    },
    /// The attempt ended.
    Exited {
        /// The exit code; `None` when a signal ended it.
        code: Option<i32>,
        /// The signal that ended it, if any.
        signal: Option<i32>,
    },
    /// The attempt could not be started.
    FailedToStart {
        /// Why, for the user.
        error: String,
    },
}

impl WorkStatus {
    /// The protocol form.
    pub fn to_proto(&self) -> status_report::Status {
        match self {
            WorkStatus::Started { pid } => {
                status_report::Status::Started(agent::Started { pid: *pid })
            }
            WorkStatus::Exited { code, signal } => {
                status_report::Status::Exited(agent::Exited { code: *code, signal: *signal })
            }
            WorkStatus::FailedToStart { error } => {
                status_report::Status::FailedToStart(agent::FailedToStart { error: error.clone() })
            }
        }
    }
}

/// One report from a runner: what happened to attempt `attempt` of `work_id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkEvent {
    /// The work (actor or task) ID.
    pub work_id: String,
    /// The attempt number the head gave in `Start`.
    pub attempt: u32,
    /// What happened.
    pub status: WorkStatus,
}

/// The sink a runner reports through. Cloneable and cheap; reports are delivered in the order
/// they were sent, including across a re-registration (a report that could not be delivered is
/// sent again under the new session).
#[derive(Clone, Debug)]
pub struct Events {
    tx: mpsc::UnboundedSender<WorkEvent>,
}

impl Events {
    /// A sink and the receiving end: the agent makes one per run; runner tests make their own.
    pub fn channel() -> (Events, mpsc::UnboundedReceiver<WorkEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Events { tx }, rx)
    }

    /// Reports `status` for attempt `attempt` of `work_id`. False when nobody receives reports
    /// any more (the agent stopped).
    pub fn report(&self, work_id: impl Into<String>, attempt: u32, status: WorkStatus) -> bool {
        self.tx.send(WorkEvent { work_id: work_id.into(), attempt, status }).is_ok()
    }

    /// Reports that the attempt is running as process `pid` (0 without a process).
    pub fn started(&self, work_id: impl Into<String>, attempt: u32, pid: u32) -> bool {
        self.report(work_id, attempt, WorkStatus::Started { pid })
    }

    /// Reports that the attempt ended with exit code `code` or by signal `signal`.
    pub fn exited(
        &self,
        work_id: impl Into<String>,
        attempt: u32,
        code: Option<i32>,
        signal: Option<i32>,
    ) -> bool {
        self.report(work_id, attempt, WorkStatus::Exited { code, signal })
    }

    /// Reports that the attempt could not be started, and why.
    pub fn failed_to_start(
        &self,
        work_id: impl Into<String>,
        attempt: u32,
        error: impl Into<String>,
    ) -> bool {
        self.report(work_id, attempt, WorkStatus::FailedToStart { error: error.into() })
    }
}

/// What executes the head's assignments on this machine.
///
/// Contract (the agent relies on it, and so does the head):
/// - `start` reports `Started` or `FailedToStart` for the attempt, later `Exited` when it ends.
///   A `start` of an attempt that is already running must not start it twice: report `Started`
///   again (the head resends unacknowledged starts when a stream is reopened). A `start` of a
///   newer attempt of running work replaces the older attempt.
/// - `stop` ends the named attempt and reports `Exited`; a stop of an attempt that is not
///   running (already exited, or replaced) is ignored.
/// - `running` lists the attempts running now; the agent sends it with every registration.
/// - `attach` hands over the agent's report sink once, before the first registration, for
///   reports no `start` or `stop` carries (work adopted from an earlier agent that exits, or
///   died while no agent ran); `registered` tells the node ID the head gave, at every
///   registration, before any assignment of that session. Both default to doing nothing.
///
/// `start`, `stop`, `running` and `registered` are called one at a time, in the order of the
/// head's messages, from a blocking thread: they may block (a start waiting for a fork server),
/// which holds up the next of them but no heartbeat. `measure` is called from another blocking
/// thread, concurrently with them. `attach` and `log_file` are called from the agent's
/// protocol loops and must return quickly.
pub trait Runner: Send + Sync + 'static {
    /// Starts an attempt.
    fn start(&self, start: Start, events: Events);
    /// Stops an attempt.
    fn stop(&self, stop: Stop, events: Events);
    /// The attempts running now.
    fn running(&self) -> Vec<RunningWork>;
    /// The agent's report sink, given once when the agent starts running.
    fn attach(&self, events: Events) {
        let _ = events;
    }
    /// The node ID the head gave this node, after each successful registration.
    fn registered(&self, node_id: &str) {
        let _ = node_id;
    }
    /// The head heard this node no earlier than `sent_ms` (the node's clock,
    /// [`crate::lease::clock_ms`]) and declares it dead after `timeout` of silence: the node's
    /// lease runs on (see [`crate::lease`]). Called at every registration, before any
    /// assignment of that session, and for every heartbeat the head answered, from the
    /// agents' lane: it must not wait on anything but the lease file's lock (which the keeper
    /// holds for milliseconds, while it kills a node's work whose lease ran out).
    /// Runners without processes to stop ignore it (the default).
    fn renew_lease(&self, sent_ms: u64, timeout: Duration) {
        let _ = (sent_ms, timeout);
    }
    /// The file holding `stream` (stdout or stderr) of `work_id`, all its attempts, for
    /// `berth logs`; `None` when this runner keeps no logs (the agent then answers "this node
    /// keeps no logs"). The agent checks `work_id` with [`invalid_work_id`] first; the file
    /// need not exist yet.
    fn log_file(&self, work_id: &str, stream: LogStream) -> Option<PathBuf> {
        let _ = (work_id, stream);
        None
    }
    /// True when [`Runner::measure`] measures anything; false (the default) spares the agent
    /// a trip to a blocking thread per heartbeat (simulated nodes, thousands to a process).
    fn measures(&self) -> bool {
        false
    }
    /// What the machine and the attempts running now use (see [`crate::measure`]), for the
    /// heartbeats; `None` when this runner does not measure. It may take milliseconds (it
    /// reads `/proc`) or longer (a lock a start holds, in a runner that takes it): the agent calls it on a blocking thread,
    /// at most once per heartbeat, and sends each heartbeat without waiting for it.
    fn measure(&self) -> Option<agent::Measured> {
        None
    }
}

/// Why `work_id` cannot name a file, or `None` when it can: 1 to 200 letters, digits, `-`, `_`
/// and `.`, not starting with `.` (the head's IDs are `actor-<n>` and `task-<n>`). Every work
/// ID that becomes part of a path (a log, a working directory) passes this check first, so
/// none can reach outside the runner's directory.
pub fn invalid_work_id(work_id: &str) -> Option<String> {
    let valid = !work_id.is_empty()
        && work_id.len() <= 200
        && !work_id.starts_with('.')
        && work_id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    (!valid).then(|| {
        format!(
            "work ID {work_id:?} cannot name a file: use 1 to 200 letters, digits, '-', '_' and \
             '.', not starting with '.'"
        )
    })
}

#[derive(Clone, Copy, Debug)]
struct Held {
    attempt: u32,
}

/// A runner without processes, for simulated nodes and tests: it acknowledges every start
/// (`Started` with pid 0) and remembers the work. Tasks then exit at once with a configurable
/// code (0 by default), unless [`AckRunner::hold_tasks`] keeps them running until stopped;
/// actors run until stopped. A stop reports `Exited` by signal 15 and forgets the work.
/// A start with a work kind other than actor or task fails to start.
#[derive(Debug, Default)]
pub struct AckRunner {
    work: Mutex<BTreeMap<String, Held>>,
    task_exit_code: i32,
    hold_tasks: bool,
    starts: AtomicU64,
}

impl AckRunner {
    /// A runner whose tasks exit with code 0 at once.
    pub fn new() -> AckRunner {
        AckRunner::default()
    }

    /// Tasks exit with `code`.
    pub fn task_exit_code(mut self, code: i32) -> AckRunner {
        self.task_exit_code = code;
        self
    }

    /// When `hold` is true, tasks keep running until stopped, like actors.
    pub fn hold_tasks(mut self, hold: bool) -> AckRunner {
        self.hold_tasks = hold;
        self
    }

    /// Records `work_id`'s attempt `attempt` as running without reporting anything: work that
    /// survived an agent restart, which the agent will announce when it registers.
    pub fn adopt(&self, work_id: impl Into<String>, attempt: u32) {
        self.lock().insert(work_id.into(), Held { attempt });
    }

    /// Forgets all work without reporting anything (the machine rebooted).
    pub fn forget_all(&self) {
        self.lock().clear();
    }

    /// True when some attempt of `work_id` is running.
    pub fn is_running(&self, work_id: &str) -> bool {
        self.lock().contains_key(work_id)
    }

    /// The number of attempts started (acknowledged with `Started`) so far, repeats included.
    pub fn starts(&self) -> u64 {
        self.starts.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Held>> {
        // A panic while holding the lock cannot leave the map half-updated: every update is
        // one insert or remove.
        self.work.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Runner for AckRunner {
    fn start(&self, start: Start, events: Events) {
        let Start { work_id, attempt, kind, .. } = start;
        let kind = match WorkKind::try_from(kind) {
            Ok(kind @ (WorkKind::Actor | WorkKind::Task)) => kind,
            _ => {
                events.failed_to_start(
                    work_id,
                    attempt,
                    format!("work kind {kind} is neither an actor (1) nor a task (2)"),
                );
                return;
            }
        };
        // Reports are sent under the lock so that a concurrent stop cannot report `Exited`
        // before this start's `Started`.
        let mut work = self.lock();
        if let Some(held) = work.get(&work_id).copied() {
            if held.attempt == attempt {
                events.started(work_id, attempt, 0);
                self.starts.fetch_add(1, Ordering::Relaxed);
                return;
            }
            tracing::debug!(%work_id, old = held.attempt, new = attempt, "a newer attempt replaces a running one");
            events.exited(work_id.clone(), held.attempt, None, Some(STOP_SIGNAL));
            work.remove(&work_id);
        }
        events.started(work_id.clone(), attempt, 0);
        self.starts.fetch_add(1, Ordering::Relaxed);
        if kind == WorkKind::Task && !self.hold_tasks {
            events.exited(work_id, attempt, Some(self.task_exit_code), None);
        } else {
            work.insert(work_id, Held { attempt });
        }
    }

    fn stop(&self, stop: Stop, events: Events) {
        let mut work = self.lock();
        match work.get(&stop.work_id) {
            Some(held) if held.attempt == stop.attempt => {
                work.remove(&stop.work_id);
                events.exited(stop.work_id, stop.attempt, None, Some(STOP_SIGNAL));
            }
            held => tracing::debug!(
                work_id = %stop.work_id,
                attempt = stop.attempt,
                running = ?held.map(|h| h.attempt),
                "stop of an attempt that is not running: ignored"
            ),
        }
    }

    fn running(&self) -> Vec<RunningWork> {
        self.lock()
            .iter()
            .map(|(work_id, held)| RunningWork { work_id: work_id.clone(), attempt: held.attempt })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(id: &str, attempt: u32, kind: WorkKind) -> Start {
        Start { work_id: id.into(), attempt, kind: kind as i32, ..Start::default() }
    }

    fn stop(id: &str, attempt: u32) -> Stop {
        Stop { work_id: id.into(), attempt, reason: "test".into() }
    }

    fn drain(rx: &mut mpsc::UnboundedReceiver<WorkEvent>) -> Vec<(String, u32, WorkStatus)> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|e| (e.work_id, e.attempt, e.status))
            .collect()
    }

    fn exited(code: Option<i32>, signal: Option<i32>) -> WorkStatus {
        WorkStatus::Exited { code, signal }
    }

    const STARTED: WorkStatus = WorkStatus::Started { pid: 0 };

    #[test]
    fn tasks_exit_at_once_with_the_configured_code() {
        let (events, mut rx) = Events::channel();
        let runner = AckRunner::new().task_exit_code(7);
        runner.start(start("t", 1, WorkKind::Task), events);
        assert_eq!(
            drain(&mut rx),
            vec![("t".into(), 1, STARTED), ("t".into(), 1, exited(Some(7), None))]
        );
        assert!(runner.running().is_empty());
        assert_eq!(runner.starts(), 1);
    }

    #[test]
    fn actors_and_held_tasks_run_until_stopped() {
        let (events, mut rx) = Events::channel();
        let runner = AckRunner::new().hold_tasks(true);
        runner.start(start("a", 1, WorkKind::Actor), events.clone());
        runner.start(start("t", 3, WorkKind::Task), events.clone());
        assert_eq!(drain(&mut rx), vec![("a".into(), 1, STARTED), ("t".into(), 3, STARTED)]);
        assert_eq!(
            runner.running(),
            vec![
                RunningWork { work_id: "a".into(), attempt: 1 },
                RunningWork { work_id: "t".into(), attempt: 3 }
            ]
        );
        runner.stop(stop("t", 3), events.clone());
        assert_eq!(drain(&mut rx), vec![("t".into(), 3, exited(None, Some(15)))]);
        assert!(runner.is_running("a") && !runner.is_running("t"));
    }

    #[test]
    fn stops_of_other_attempts_are_ignored() {
        let (events, mut rx) = Events::channel();
        let runner = AckRunner::new();
        runner.start(start("a", 2, WorkKind::Actor), events.clone());
        drain(&mut rx);
        runner.stop(stop("a", 1), events.clone());
        runner.stop(stop("nothing", 1), events.clone());
        assert!(drain(&mut rx).is_empty());
        assert!(runner.is_running("a"));
    }

    #[test]
    fn a_repeated_start_is_acknowledged_again_and_a_newer_attempt_replaces() {
        let (events, mut rx) = Events::channel();
        let runner = AckRunner::new();
        runner.start(start("a", 1, WorkKind::Actor), events.clone());
        runner.start(start("a", 1, WorkKind::Actor), events.clone());
        runner.start(start("a", 2, WorkKind::Actor), events.clone());
        assert_eq!(
            drain(&mut rx),
            vec![
                ("a".into(), 1, STARTED),
                ("a".into(), 1, STARTED),
                ("a".into(), 1, exited(None, Some(15))),
                ("a".into(), 2, STARTED),
            ]
        );
        assert_eq!(runner.running(), vec![RunningWork { work_id: "a".into(), attempt: 2 }]);
    }

    #[test]
    fn an_unknown_kind_fails_to_start() {
        let (events, mut rx) = Events::channel();
        let runner = AckRunner::new();
        runner.start(start("x", 1, WorkKind::Unspecified), events.clone());
        let mut odd = start("y", 1, WorkKind::Actor);
        odd.kind = 42;
        runner.start(odd, events);
        let got = drain(&mut rx);
        assert_eq!(got.len(), 2);
        for (_, _, status) in got {
            assert!(
                matches!(status, WorkStatus::FailedToStart { ref error } if error.contains("neither an actor"))
            );
        }
        assert!(runner.running().is_empty());
    }

    #[test]
    fn adopted_work_is_listed_and_stoppable() {
        let (events, mut rx) = Events::channel();
        let runner = AckRunner::new();
        runner.adopt("old", 4);
        assert_eq!(runner.running(), vec![RunningWork { work_id: "old".into(), attempt: 4 }]);
        assert!(drain(&mut rx).is_empty());
        runner.stop(stop("old", 4), events);
        assert_eq!(drain(&mut rx), vec![("old".into(), 4, exited(None, Some(15)))]);
        runner.adopt("x", 1);
        runner.forget_all();
        assert!(runner.running().is_empty());
    }

    #[test]
    fn reports_to_a_closed_sink_say_so() {
        let (events, rx) = Events::channel();
        assert!(events.started("a", 1, 0));
        drop(rx);
        assert!(!events.started("a", 1, 0));
    }

    #[test]
    fn statuses_map_to_the_protocol() {
        assert_eq!(
            WorkStatus::Exited { code: Some(3), signal: None }.to_proto(),
            status_report::Status::Exited(agent::Exited { code: Some(3), signal: None })
        );
        assert_eq!(
            WorkStatus::Started { pid: 9 }.to_proto(),
            status_report::Status::Started(agent::Started { pid: 9 })
        );
        assert_eq!(
            WorkStatus::FailedToStart { error: "e".into() }.to_proto(),
            status_report::Status::FailedToStart(agent::FailedToStart { error: "e".into() })
        );
    }
}
