//! The node's lease and its keeper (`berth_agent::lease`), with real processes: a runner
//! whose lease runs out starts nothing, and a keeper kills what the directory records once the
//! lease ran out (with a line in the work's log), leaves it alone while the lease holds, ends
//! when its agent is gone and nothing is left, and steps aside for a newer agent's keeper.
//! Every wait is bounded and on observable state (`/proc`, a report, a return), never a sleep.

#![cfg(target_os = "linux")]

mod runner_dir;

use std::ffi::OsString;
use std::io::Read;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use berth_agent::lease::{self, clock_ms, Kept, LeaseFile};
use berth_agent::{Events, ProcessOptions, ProcessRunner, Runner, WorkEvent, WorkStatus};
use berth_api::agent::{Start, WorkKind};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use runner_dir::RunnerDir;
use tokio::sync::mpsc::UnboundedReceiver;

const WAIT: Duration = Duration::from_secs(10);

/// A runner with a keeper that does nothing but hold its pipe (`sh -c 'cat >/dev/null'`): the
/// tests run the keeper's loop themselves, with [`lease::keep`].
fn runner(dir: &Path) -> ProcessRunner {
    let keeper: Vec<OsString> =
        ["sh", "-c", "cat >/dev/null", "keeper"].iter().map(OsString::from).collect();
    let options = ProcessOptions { keeper: Some(keeper), ..ProcessOptions::default() };
    ProcessRunner::new(dir.to_path_buf(), options).unwrap()
}

fn sleeper(work_id: &str) -> Start {
    Start {
        work_id: work_id.into(),
        attempt: 1,
        kind: WorkKind::Actor as i32,
        command: "sleep".into(),
        args: vec!["600".into()],
        ..Start::default()
    }
}

async fn next(rx: &mut UnboundedReceiver<WorkEvent>) -> WorkStatus {
    match tokio::time::timeout(WAIT, rx.recv()).await {
        Ok(Some(event)) => event.status,
        other => panic!("no report within {WAIT:?}: {other:?}"),
    }
}

fn alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    state.is_some_and(|s| !matches!(s, 'Z' | 'X' | 'x'))
}

/// Runs [`lease::keep`] on a thread with a pipe for its agent: the pipe's writing end (drop it
/// to tell the keeper its agent is gone) and what `keep` returned.
fn keeper(dir: &Path) -> (std::io::PipeWriter, mpsc::Receiver<std::io::Result<Kept>>) {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    let (tx, rx) = mpsc::channel();
    let dir = dir.to_path_buf();
    let lock = dir.join(lease::KEEPER_LOCK);
    std::thread::spawn(move || {
        let reader: Box<dyn Read + Send> = Box::new(reader);
        let _ = tx.send(lease::keep(&dir, reader));
    });
    // Keeping once it holds the keepers' lock (it read whose lease it keeps before).
    let waited = Instant::now();
    loop {
        let file = std::fs::File::open(&lock).ok();
        let held = file.is_some_and(|f| {
            matches!(Flock::lock(f, FlockArg::LockExclusiveNonblock), Err((_, Errno::EWOULDBLOCK)))
        });
        if held {
            break;
        }
        assert!(waited.elapsed() < WAIT, "the keeper never took its lock");
        std::thread::yield_now();
    }
    (writer, rx)
}

/// A keeper kills the recorded processes once the lease ran out, and not before; it notes why
/// in the work's stderr log; with its agent gone and nothing left, it ends.
#[tokio::test]
async fn the_keeper_kills_the_work_when_the_lease_runs_out_and_not_before() {
    let dir = RunnerDir::new();
    let runner = runner(dir.path());
    // A lease of 2 s from now (a 2.5 s timeout, less its 500 ms margin).
    runner.renew_lease(clock_ms(), Duration::from_millis(2_500));
    let (events, mut rx) = Events::channel();
    runner.start(sleeper("actor-1"), events);
    let WorkStatus::Started { pid } = next(&mut rx).await else { panic!("not started") };

    let granted = lease::read(dir.path()).expect("the runner wrote its lease");
    let (pipe, kept) = keeper(dir.path());
    let waited = Instant::now();
    while alive(pid) {
        assert!(waited.elapsed() < WAIT, "the keeper never killed {pid}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let now = clock_ms();
    assert!(
        now >= granted.expires_ms,
        "killed {} ms before the lease ran out",
        granted.expires_ms - now
    );
    assert_eq!(next(&mut rx).await, WorkStatus::Exited { code: None, signal: Some(9) });
    let log = std::fs::read_to_string(dir.path().join("logs/actor-1.err")).unwrap();
    assert!(log.contains("actor-1 attempt 1 killed at "), "{log}");
    assert!(log.contains("declares the node dead after 2500 ms"), "{log}");

    drop(runner);
    drop(pipe);
    let kept = kept.recv_timeout(WAIT).expect("the keeper ends");
    assert_eq!(kept.unwrap(), Kept::NothingLeft);
}

/// A runner whose lease ran out starts nothing, and says why; renewed, it starts again.
#[tokio::test]
async fn a_runner_whose_lease_ran_out_starts_nothing() {
    let dir = RunnerDir::new();
    let runner = runner(dir.path());
    runner.renew_lease(clock_ms().saturating_sub(60_000), Duration::from_secs(30));
    let (events, mut rx) = Events::channel();
    runner.start(sleeper("actor-1"), events.clone());
    match next(&mut rx).await {
        WorkStatus::FailedToStart { error } => {
            assert!(error.contains("this node's lease with the head ran out"), "{error}")
        }
        other => panic!("started with its lease run out: {other:?}"),
    }
    runner.renew_lease(clock_ms(), Duration::from_secs(30));
    runner.start(sleeper("actor-2"), events);
    assert!(matches!(next(&mut rx).await, WorkStatus::Started { .. }));
}

/// A new agent on the directory (a runner after the old one was dropped) keeps the old lease
/// for the processes it adopts; the old keeper, its agent gone and a newer one holding the
/// lease, steps aside, and the processes live on.
#[tokio::test]
async fn a_keeper_steps_aside_for_a_newer_agent() {
    let dir = RunnerDir::new();
    let old = runner(dir.path());
    old.renew_lease(clock_ms(), Duration::from_secs(60));
    let (events, mut rx) = Events::channel();
    old.start(sleeper("actor-1"), events);
    let WorkStatus::Started { pid } = next(&mut rx).await else { panic!("not started") };
    let (pipe, kept) = keeper(dir.path());
    let before = lease::read(dir.path()).unwrap();

    drop(old);
    drop(pipe);
    let new = runner(dir.path());
    assert_eq!(new.running().len(), 1, "the new runner adopts the process");
    let after = lease::read(dir.path()).unwrap();
    assert_ne!(after.agent, before.agent, "the new agent holds the lease");
    assert_eq!(after.expires_ms, before.expires_ms, "under the lease the process had");
    let kept = kept.recv_timeout(WAIT).expect("the old keeper ends");
    assert_eq!(kept.unwrap(), Kept::Replaced);
    assert!(alive(pid), "the adopted process runs on");
}

/// The lease file a runner opens keeps a previous agent's lease, and a renewal replaces it
/// with what the head's answer proves, shorter or longer.
#[test]
fn a_renewal_runs_from_the_beat_the_head_answered() {
    let dir = RunnerDir::new();
    let first = LeaseFile::open(dir.path(), Duration::from_secs(30)).unwrap();
    let start = first.current();
    assert!(start.expires_ms >= start.acked_ms + 28_000);
    first.renew(start.acked_ms + 100, Duration::from_secs(5));
    let renewed = lease::read(dir.path()).unwrap();
    assert_eq!(
        (renewed.acked_ms, renewed.expires_ms, renewed.timeout_ms),
        (start.acked_ms + 100, start.acked_ms + 100 + 4_000, 5_000)
    );
    let second = LeaseFile::open(dir.path(), Duration::from_secs(30)).unwrap();
    assert_eq!(second.current().expires_ms, renewed.expires_ms);
    assert_ne!(second.current().agent, renewed.agent);
}
