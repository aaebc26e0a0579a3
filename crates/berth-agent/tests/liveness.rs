//! Heartbeats wait on nothing the agent does: a start that blocks for seconds (a fork server
//! slow to answer, a spawn on a saturated machine) holding the runner's lock, which its
//! measurements may need too, does not hold up a single heartbeat; and the process runner's
//! measurements do not wait for its starts either. Against the in-test head over real gRPC.
//! No sleeps as synchronisation: every wait is bounded and on observable state.

mod common;
#[cfg(target_os = "linux")]
mod runner_dir;

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use berth_agent::{AckRunner, Agent, AgentConfig, AgentHandle, Events, Runner};
use berth_api::agent::{
    status_report::Status, Exited, Measured, RunningWork, Start, Started, Stop, WorkKind,
};
use common::{start, stop, TestHead, TOKEN, WAIT};
use tokio::sync::watch;

/// How long a start waits at a closed gate at most: longer than any wait of the test, so only
/// a test that already failed (and must not hang) sees it open by itself.
const GATE_BOUND: Duration = Duration::from_secs(40);

fn config(head: &TestHead) -> AgentConfig {
    let mut config = AgentConfig::new(head.address(), TOKEN);
    config.reconnect_backoff = Duration::from_millis(10);
    config
}

/// Waits for the agent's first registration and its assignments stream: its node ID.
async fn ready(head: &TestHead, handle: &AgentHandle) -> String {
    let status = handle.wait_registered(WAIT).await.unwrap();
    let node_id = status.node_id.unwrap();
    head.assignments_open(&node_id, status.session.unwrap()).await;
    node_id
}

fn heartbeats(head: &TestHead, node_id: &str) -> u64 {
    head.log().heartbeats.get(node_id).copied().unwrap_or(0)
}

/// An [`AckRunner`] whose starts wait at a gate the test opens, holding the runner's lock
/// meanwhile, as the process runner holds its own while a fork server answers; its
/// measurements, like the process runner's, take that lock.
struct Gated {
    ack: AckRunner,
    lock: Mutex<()>,
    gate: Mutex<bool>,
    opened: Condvar,
    /// Starts that reached the gate.
    at_gate: watch::Sender<u32>,
    /// Measurements made.
    measured: watch::Sender<u64>,
}

impl Gated {
    fn new() -> Gated {
        Gated {
            ack: AckRunner::new(),
            lock: Mutex::new(()),
            gate: Mutex::new(false),
            opened: Condvar::new(),
            at_gate: watch::channel(0).0,
            measured: watch::channel(0).0,
        }
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn open(&self) {
        *self.gate.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

impl Runner for Gated {
    fn start(&self, start: Start, events: Events) {
        let _held = self.lock();
        self.at_gate.send_modify(|n| *n += 1);
        let gate = self.gate.lock().unwrap();
        let _ = self.opened.wait_timeout_while(gate, GATE_BOUND, |open| !*open).unwrap();
        self.ack.start(start, events);
    }

    fn stop(&self, stop: Stop, events: Events) {
        let _held = self.lock();
        self.ack.stop(stop, events);
    }

    fn running(&self) -> Vec<RunningWork> {
        let _held = self.lock();
        self.ack.running()
    }

    fn measures(&self) -> bool {
        true
    }

    fn measure(&self) -> Option<Measured> {
        let _held = self.lock();
        self.measured.send_modify(|n| *n += 1);
        Some(Measured { cpus: 1, ..Measured::default() })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_coming_while_a_start_blocks_and_orders_keep_their_order() {
    let head = TestHead::start().await;
    let runner = Arc::new(Gated::new());
    let handle = Agent::new(config(&head), runner.clone()).unwrap().spawn();
    let node_id = ready(&head, &handle).await;
    head.wait("a heartbeat with a measurement", |log| {
        log.last_heartbeat.get(&node_id)?.measured.is_some().then_some(())
    })
    .await;

    // A start that blocks, then a stop of it and another start queued behind it.
    head.assign(&node_id, start("slow", 1, WorkKind::Actor));
    head.assign(&node_id, stop("slow", 1));
    head.assign(&node_id, start("next", 1, WorkKind::Actor));
    let mut at_gate = runner.at_gate.subscribe();
    tokio::time::timeout(WAIT, at_gate.wait_for(|n| *n >= 1))
        .await
        .expect("the start reaches the gate")
        .unwrap();

    // Beats every 20 ms: 20 take 0.4 s; the bound is 50 times that. The heartbeats of the
    // agent before this fix stopped for as long as the start blocked.
    let before = heartbeats(&head, &node_id);
    head.wait("20 heartbeats while the start blocks", |log| {
        (log.heartbeats.get(&node_id).copied().unwrap_or(0) >= before + 20).then_some(())
    })
    .await;
    assert!(head.log().reports.is_empty(), "the gate is closed: nothing started yet");
    assert_eq!(*runner.at_gate.borrow(), 1, "the orders behind the start wait for it");

    runner.open();
    let reports = head
        .wait("the three reports", |log| {
            (log.reports.len() >= 3).then(|| {
                log.reports
                    .iter()
                    .map(|r| (r.work_id.clone(), r.status.clone()))
                    .collect::<Vec<_>>()
            })
        })
        .await;
    let started = Some(Status::Started(Started { pid: 0 }));
    let stopped = Some(Status::Exited(Exited { code: None, signal: Some(15) }));
    assert_eq!(
        reports,
        vec![
            ("slow".to_string(), started.clone()),
            ("slow".to_string(), stopped),
            ("next".to_string(), started)
        ]
    );
    // The measurement that waited for the lock is done, and the next ones follow.
    let measured = *runner.measured.borrow();
    let mut measurements = runner.measured.subscribe();
    tokio::time::timeout(WAIT, measurements.wait_for(|n| *n >= measured + 2))
        .await
        .expect("measurements go on once the start is done")
        .unwrap();
    handle.stop().await.unwrap();
}

/// The process runner forks from a fork server that never answers: the start waits the full
/// fork timeout (5 s) for it, holding the runner's lock, then spawns the attempt.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_coming_while_a_fork_server_keeps_a_start_waiting() {
    use berth_agent::{ProcessOptions, ProcessRunner};
    use berth_api::agent::{assignment, Assignment};
    use tokio::time::Instant;

    let dir = runner_dir::RunnerDir::new();
    let runner =
        Arc::new(ProcessRunner::new(dir.path().join("agent"), ProcessOptions::default()).unwrap());
    let head = TestHead::start().await;
    let handle = Agent::new(config(&head), runner.clone()).unwrap().spawn();
    let node_id = ready(&head, &handle).await;

    // As a server (`BERTH_FORK_SERVER=1`): says it is ready, marks the file `$1`, and appends
    // every request to `$2` without ever answering. As an attempt: exits at once.
    let script = r#"[ "$BERTH_FORK_SERVER" = 1 ] || exit 0
printf '{"type":"ready"}\n'
: > "$1"
while read -r line; do printf '%s\n' "$line" >> "$2"; done"#;
    let (ready_file, requests) = (dir.path().join("ready"), dir.path().join("requests"));
    let task = |work_id: &str| Assignment {
        kind: Some(assignment::Kind::Start(Start {
            work_id: work_id.into(),
            attempt: 1,
            kind: WorkKind::Task as i32,
            command: "sh".into(),
            args: vec![
                "-c".into(),
                script.into(),
                "sh".into(),
                ready_file.display().to_string(),
                requests.display().to_string(),
            ],
            fork_server: true,
            ..Start::default()
        })),
    };
    let deadline = Instant::now() + WAIT;
    let poll = || tokio::time::sleep(Duration::from_millis(5));

    // The first start of the command starts its server (and spawns the attempt).
    head.assign(&node_id, task("warm"));
    while !ready_file.exists() {
        assert!(Instant::now() < deadline, "the fork server never got ready");
        poll().await;
    }
    // Until the runner has seen it ready, a start spawns; the first start it sends the
    // server waits for the answer that never comes.
    let started = |work_id: &str| !head.log().reports_of(work_id).is_empty();
    let mut probe = 0;
    let waiting = loop {
        let work_id = format!("probe-{probe}");
        head.assign(&node_id, task(&work_id));
        loop {
            if std::fs::metadata(&requests).is_ok_and(|m| m.len() > 0) {
                break;
            }
            if started(&work_id) {
                break;
            }
            assert!(Instant::now() < deadline, "no start reached the fork server");
            poll().await;
        }
        if !started(&work_id) {
            break work_id;
        }
        probe += 1;
    };

    // Beats every 20 ms, each with the measurement made since the last one: 10 take 0.2 s
    // of the 5 s the start waits.
    let before = head.log().measured_heartbeats.get(&node_id).copied().unwrap_or(0);
    let beats_first = head
        .wait("10 measured heartbeats or the waiting start's report", |log| {
            let beats = log.measured_heartbeats.get(&node_id).copied().unwrap_or(0);
            if beats >= before + 10 {
                Some(true)
            } else {
                (!log.reports_of(&waiting).is_empty()).then_some(false)
            }
        })
        .await;
    assert!(
        beats_first,
        "the heartbeats or their measurements stopped while {waiting} waited for the fork server"
    );
    // The fork server given up, the attempt is spawned after all.
    head.wait("the waiting start's report", |log| {
        (!log.reports_of(&waiting).is_empty()).then_some(())
    })
    .await;
    handle.stop().await.unwrap();
    runner.stop_all().await;
}
