//! The process runner with real processes, driven through the `Runner` trait and an
//! `Events::channel()`: environment and logs, failures to start, exit codes and signals,
//! stops of whole process groups, SIGKILL after the grace period, replacement of attempts, and
//! re-adoption by a new runner on the same directory. Every wait is bounded and on observable
//! state (a report, `/proc`), never a sleep.

#![cfg(target_os = "linux")]

mod runner_dir;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use berth_agent::process::STATE_FILE;
use berth_agent::{
    Events, ProcessError, ProcessOptions, ProcessRunner, Runner, WorkEvent, WorkStatus,
};
use berth_api::agent::{InstanceIds, RunningWork, Start, Stop, WorkKind};
use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use runner_dir::RunnerDir;
use tokio::sync::mpsc::UnboundedReceiver;

/// Generous: a bound on waiting, never a synchronisation sleep.
const WAIT: Duration = Duration::from_secs(10);
const NODE: &str = "node-a";

fn runner(dir: &Path, grace: Duration) -> ProcessRunner {
    let options = ProcessOptions { grace, node_id: Some(NODE.into()), ..ProcessOptions::default() };
    ProcessRunner::new(dir.to_path_buf(), options).unwrap()
}

fn start(work_id: &str, attempt: u32, kind: WorkKind, command: &str, args: &[&str]) -> Start {
    Start {
        work_id: work_id.into(),
        attempt,
        kind: kind as i32,
        command: command.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
        namespace: "ns".into(),
        ..Start::default()
    }
}

fn sh(work_id: &str, attempt: u32, kind: WorkKind, script: &str) -> Start {
    start(work_id, attempt, kind, "sh", &["-c", script])
}

fn stop(work_id: &str, attempt: u32) -> Stop {
    Stop { work_id: work_id.into(), attempt, reason: "test".into() }
}

fn exited(code: Option<i32>, signal: Option<i32>) -> WorkStatus {
    WorkStatus::Exited { code, signal }
}

/// The next report, waiting at most [`WAIT`].
async fn next(rx: &mut UnboundedReceiver<WorkEvent>) -> WorkEvent {
    match tokio::time::timeout(WAIT, rx.recv()).await {
        Ok(Some(event)) => event,
        Ok(None) => panic!("the report channel closed"),
        Err(_) => panic!("no report within {WAIT:?}"),
    }
}

/// The next report, which must be about attempt `attempt` of `work_id`: its status.
async fn next_of(rx: &mut UnboundedReceiver<WorkEvent>, work_id: &str, attempt: u32) -> WorkStatus {
    let event = next(rx).await;
    assert_eq!((event.work_id.as_str(), event.attempt), (work_id, attempt), "{event:?}");
    event.status
}

/// Expects `Started` for the attempt: its PID.
async fn started(rx: &mut UnboundedReceiver<WorkEvent>, work_id: &str, attempt: u32) -> u32 {
    match next_of(rx, work_id, attempt).await {
        WorkStatus::Started { pid } if pid > 0 => pid,
        other => panic!("expected Started for {work_id}/{attempt}, got {other:?}"),
    }
}

/// Polls `check` until it holds, for at most [`WAIT`].
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "not within {WAIT:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// (pid, command name) of the processes of group `pgid` that are not zombies.
fn group_members(pgid: u32) -> Vec<(u32, String)> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        if fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string() {
            members.push((pid, stat[open + 1..close].to_string()));
        }
    }
    members
}

fn sleeps_in(pgid: u32) -> usize {
    group_members(pgid).iter().filter(|(_, name)| name == "sleep").count()
}

/// Waits until no process of group `pgid` exists any more, zombies included (`killpg(0)`
/// answers ESRCH once every member is reaped).
async fn group_gone(pgid: u32) {
    eventually(&format!("process group {pgid} is gone"), || {
        killpg(Pid::from_raw(pgid as i32), None) == Err(Errno::ESRCH)
    })
    .await;
}

fn log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test]
async fn a_task_sees_its_environment_and_gpus_and_logs_its_output() {
    let dir = RunnerDir::new();
    let runner = runner(dir.path(), Duration::from_secs(10));
    let (events, mut rx) = Events::channel();

    let mut task = sh("task-1", 1, WorkKind::Task, "env; echo cwd=$(pwd); echo to-stderr >&2");
    task.instances.insert("GPU".into(), InstanceIds { ids: vec![1, 3] });
    task.resources.insert("GPU".into(), "2".into());
    task.resources.insert("CPU".into(), "0.5".into());
    task.env.insert("FOO".into(), "bar".into());
    // Berth's variables win over the request's.
    task.env.insert("BERTH_NODE_ID".into(), "spoofed".into());
    runner.start(task, events.clone());
    started(&mut rx, "task-1", 1).await;
    assert_eq!(next_of(&mut rx, "task-1", 1).await, exited(Some(0), None));
    assert!(runner.running().is_empty());

    let (out, err) = runner.log_paths("task-1");
    assert_eq!(out, dir.path().join("logs/task-1.out"));
    let text = log(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("=== berth: task-1 attempt 1 starting at "), "{text}");
    let cwd = dir.path().join("work/task-1-1").canonicalize().unwrap();
    for line in [
        "CUDA_VISIBLE_DEVICES=1,3".to_string(),
        "BERTH_TASK_ID=task-1".into(),
        format!("BERTH_NODE_ID={NODE}"),
        "BERTH_NAMESPACE=ns".into(),
        "BERTH_ATTEMPT=1".into(),
        r#"BERTH_RESOURCES={"CPU":"0.5","GPU":"2"}"#.into(),
        r#"BERTH_INSTANCES={"GPU":[1,3]}"#.into(),
        "FOO=bar".into(),
        format!("cwd={}", cwd.display()),
    ] {
        assert!(lines.contains(&line.as_str()), "{line:?} in:\n{text}");
    }
    assert!(!text.contains("BERTH_ACTOR_ID="), "{text}");
    let err_text = log(&err);
    assert!(err_text.contains("to-stderr"), "{err_text}");
    assert!(err_text.contains("=== berth: task-1 attempt 1 exited with code 0"), "{err_text}");

    // A second attempt appends to the same logs, after its own header; no GPU: empty.
    runner.start(sh("task-1", 2, WorkKind::Task, "env"), events.clone());
    started(&mut rx, "task-1", 2).await;
    assert_eq!(next_of(&mut rx, "task-1", 2).await, exited(Some(0), None));
    let text = log(&out);
    let second = text.split("=== berth: task-1 attempt 2 starting at ").nth(1).expect("a header");
    assert!(second.lines().any(|l| l == "CUDA_VISIBLE_DEVICES="), "{text}");
    assert!(second.lines().any(|l| l == "BERTH_ATTEMPT=2"), "{text}");
    assert!(text.contains("CUDA_VISIBLE_DEVICES=1,3"), "the first attempt's output stays");

    // Two actors sharing one GPU (0.5 each) both see that instance.
    for actor in ["actor-a", "actor-b"] {
        let mut start = sh(actor, 1, WorkKind::Actor, "echo gpu=$CUDA_VISIBLE_DEVICES; env");
        start.instances.insert("GPU".into(), InstanceIds { ids: vec![2] });
        start.resources.insert("GPU".into(), "0.5".into());
        runner.start(start, events.clone());
        started(&mut rx, actor, 1).await;
        assert_eq!(next_of(&mut rx, actor, 1).await, exited(Some(0), None));
        let text = log(&runner.log_paths(actor).0);
        assert!(text.lines().any(|l| l == "gpu=2"), "{text}");
        assert!(text.lines().any(|l| l == format!("BERTH_ACTOR_ID={actor}")), "{text}");
        assert!(!text.contains("BERTH_TASK_ID="), "{text}");
    }
}

#[tokio::test]
async fn a_command_that_cannot_start_fails_to_start_with_the_os_reason() {
    let dir = RunnerDir::new();
    let runner = runner(dir.path(), Duration::from_secs(10));
    let (events, mut rx) = Events::channel();

    runner.start(start("t", 1, WorkKind::Task, "/no/such/command", &[]), events.clone());
    match next_of(&mut rx, "t", 1).await {
        WorkStatus::FailedToStart { error } => {
            assert!(error.contains("No such file or directory"), "{error}");
            assert!(error.contains("/no/such/command"), "{error}");
        }
        other => panic!("expected FailedToStart, got {other:?}"),
    }

    // Not executable.
    let script = dir.path().join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    runner.start(start("u", 1, WorkKind::Task, script.to_str().unwrap(), &[]), events.clone());
    match next_of(&mut rx, "u", 1).await {
        WorkStatus::FailedToStart { error } => {
            assert!(error.contains("Permission denied"), "{error}")
        }
        other => panic!("expected FailedToStart, got {other:?}"),
    }

    // Requests that cannot be run at all.
    let mut odd = sh("v", 1, WorkKind::Task, "true");
    odd.kind = 42;
    runner.start(odd, events.clone());
    runner.start(start("w", 1, WorkKind::Actor, "", &[]), events.clone());
    runner.start(sh("../escape", 1, WorkKind::Task, "true"), events.clone());
    for (work_id, words) in
        [("v", "neither an actor"), ("w", "command is empty"), ("../escape", "cannot name a file")]
    {
        match next_of(&mut rx, work_id, 1).await {
            WorkStatus::FailedToStart { error } => assert!(error.contains(words), "{error}"),
            other => panic!("expected FailedToStart, got {other:?}"),
        }
    }
    assert!(runner.running().is_empty());
    // No Started, nothing else: a work that exits at once is the marker.
    runner.start(sh("marker", 1, WorkKind::Task, "true"), events.clone());
    started(&mut rx, "marker", 1).await;
    assert!(!dir.path().join("escape.out").exists(), "nothing written outside logs/");
    assert_eq!(log(&runner.log_paths("t").1).lines().count(), 2, "a header and the failure");
}

#[tokio::test]
async fn exit_codes_and_signals_are_reported() {
    let dir = RunnerDir::new();
    let runner = runner(dir.path(), Duration::from_secs(10));
    let (events, mut rx) = Events::channel();

    runner.start(sh("three", 1, WorkKind::Task, "exit 3"), events.clone());
    started(&mut rx, "three", 1).await;
    assert_eq!(next_of(&mut rx, "three", 1).await, exited(Some(3), None));

    runner.start(sh("killed", 1, WorkKind::Actor, "kill -9 $$"), events.clone());
    started(&mut rx, "killed", 1).await;
    assert_eq!(next_of(&mut rx, "killed", 1).await, exited(None, Some(9)));
    assert!(log(&runner.log_paths("killed").1).contains("killed attempt 1 ended by signal 9"));
}

#[tokio::test]
async fn a_stop_ends_the_whole_process_group() {
    let dir = RunnerDir::new();
    let runner = runner(dir.path(), Duration::from_secs(10));
    let (events, mut rx) = Events::channel();

    runner.start(sh("a", 1, WorkKind::Actor, "sleep 1000 & sleep 1000"), events.clone());
    let pid = started(&mut rx, "a", 1).await;
    assert_eq!(runner.running(), vec![RunningWork { work_id: "a".into(), attempt: 1 }]);
    // Both sleeps run (the background one is a child of the command, in its group).
    eventually("two sleeps in the group", || sleeps_in(pid) == 2).await;

    // A stop of another attempt, or of unknown work, is ignored.
    runner.stop(stop("a", 7), events.clone());
    runner.stop(stop("nothing", 1), events.clone());
    runner.stop(stop("a", 1), events.clone());
    assert!(runner.running().is_empty(), "a stopping attempt is not listed as running");
    assert_eq!(next_of(&mut rx, "a", 1).await, exited(None, Some(15)));
    // Reported once the group is empty: no live process of it remains.
    assert_eq!(group_members(pid), vec![]);
    group_gone(pid).await;
    assert!(rx.try_recv().is_err(), "nothing else was reported");
}

#[tokio::test]
async fn a_process_ignoring_sigterm_is_killed_after_the_grace_period() {
    let dir = RunnerDir::new();
    let runner = runner(dir.path(), Duration::from_millis(200));
    let (events, mut rx) = Events::channel();

    runner.start(sh("stubborn", 1, WorkKind::Actor, "trap '' TERM; sleep 1000"), events.clone());
    let pid = started(&mut rx, "stubborn", 1).await;
    // The trap is set once the sleep runs.
    eventually("the sleep runs", || sleeps_in(pid) == 1).await;
    let asked = Instant::now();
    runner.stop(stop("stubborn", 1), events.clone());
    assert_eq!(next_of(&mut rx, "stubborn", 1).await, exited(None, Some(9)));
    assert!(asked.elapsed() >= Duration::from_millis(200), "SIGKILL only after the grace period");
    group_gone(pid).await;
}

#[tokio::test]
async fn what_a_command_leaves_behind_in_its_group_is_stopped_when_it_exits() {
    let dir = RunnerDir::new();
    let runner = runner(dir.path(), Duration::from_secs(10));
    let (events, mut rx) = Events::channel();

    runner.start(sh("t", 1, WorkKind::Task, "sleep 1000 & echo $! > bg.pid"), events.clone());
    let pid = started(&mut rx, "t", 1).await;
    assert_eq!(next_of(&mut rx, "t", 1).await, exited(Some(0), None));
    group_gone(pid).await;
}

#[tokio::test]
async fn repeated_starts_are_acknowledged_and_newer_attempts_replace_older_ones() {
    let dir = RunnerDir::new();
    let runner = runner(dir.path(), Duration::from_secs(10));
    let (events, mut rx) = Events::channel();

    runner.start(start("a", 1, WorkKind::Actor, "sleep", &["1000"]), events.clone());
    let first = started(&mut rx, "a", 1).await;
    // The head resends a start it has no acknowledgement for: Started again, same process.
    runner.start(start("a", 1, WorkKind::Actor, "sleep", &["1000"]), events.clone());
    assert_eq!(started(&mut rx, "a", 1).await, first);

    // A newer attempt: the older one is stopped first, then the newer one starts.
    runner.start(start("a", 2, WorkKind::Actor, "sleep", &["1000"]), events.clone());
    assert_eq!(next_of(&mut rx, "a", 1).await, exited(None, Some(15)));
    let second = started(&mut rx, "a", 2).await;
    assert_ne!(first, second);
    assert_eq!(runner.running(), vec![RunningWork { work_id: "a".into(), attempt: 2 }]);
    group_gone(first).await;

    // An older attempt is stale: ignored.
    runner.start(start("a", 1, WorkKind::Actor, "sleep", &["1000"]), events.clone());
    runner.stop(stop("a", 2), events.clone());
    assert_eq!(next_of(&mut rx, "a", 2).await, exited(None, Some(15)));
    assert!(runner.running().is_empty());
    let text = log(&runner.log_paths("a").0);
    assert_eq!(text.matches("=== berth: a attempt").count(), 2, "{text}");
    assert!(dir.path().join("work/a-1").is_dir() && dir.path().join("work/a-2").is_dir());
}

#[tokio::test]
async fn stop_all_ends_everything() {
    let dir = RunnerDir::new();
    let runner = runner(dir.path(), Duration::from_secs(10));
    let (events, mut rx) = Events::channel();
    let mut pids = Vec::new();
    for actor in ["x", "y"] {
        runner.start(start(actor, 1, WorkKind::Actor, "sleep", &["1000"]), events.clone());
        pids.push(started(&mut rx, actor, 1).await);
    }
    tokio::time::timeout(WAIT, runner.stop_all()).await.expect("stop_all returns");
    assert!(runner.running().is_empty());
    let mut exits: Vec<WorkEvent> = vec![next(&mut rx).await, next(&mut rx).await];
    exits.sort_by(|a, b| a.work_id.cmp(&b.work_id));
    for (event, actor) in exits.iter().zip(["x", "y"]) {
        assert_eq!((event.work_id.as_str(), &event.status), (actor, &exited(None, Some(15))));
    }
    for pid in pids {
        group_gone(pid).await;
    }
}

/// The processes the runner records (state file and journal), as (work_id, attempt, pid).
fn recorded(dir: &Path) -> Vec<(String, u64, u64)> {
    berth_agent::process::recorded(dir)
        .into_iter()
        .map(|p| (p.work_id, u64::from(p.attempt), u64::from(p.pid)))
        .collect()
}

#[tokio::test]
async fn a_new_runner_adopts_the_processes_of_the_previous_one() {
    let dir = RunnerDir::new();
    let a = runner(dir.path(), Duration::from_secs(10));
    let (events, mut rx) = Events::channel();
    a.start(start("actor-x", 2, WorkKind::Actor, "sleep", &["1000"]), events.clone());
    let pid = started(&mut rx, "actor-x", 2).await;
    assert_eq!(recorded(dir.path()), vec![("actor-x".to_string(), 2, u64::from(pid))]);

    // One runner per directory.
    let err = ProcessRunner::new(dir.path().to_path_buf(), ProcessOptions::default()).unwrap_err();
    assert!(matches!(err, ProcessError::InUse { .. }), "{err}");
    assert!(err.to_string().contains("in use by another agent"), "{err}");

    // The runner goes (the agent exits): the process keeps running.
    drop(a);
    assert_eq!(sleeps_in(pid), 1, "the process outlives its runner");

    let b = runner(dir.path(), Duration::from_secs(10));
    assert_eq!(b.running(), vec![RunningWork { work_id: "actor-x".into(), attempt: 2 }]);
    let (events, mut rx) = Events::channel();
    b.attach(events.clone());
    // A repeated start of the adopted attempt is acknowledged with its PID.
    b.start(start("actor-x", 2, WorkKind::Actor, "sleep", &["1000"]), events.clone());
    assert_eq!(started(&mut rx, "actor-x", 2).await, pid);

    b.stop(stop("actor-x", 2), events.clone());
    assert_eq!(next_of(&mut rx, "actor-x", 2).await, exited(None, Some(15)));
    assert!(b.running().is_empty());
    assert_eq!(recorded(dir.path()), vec![]);
    group_gone(pid).await;
}

#[tokio::test]
async fn an_adopted_process_that_exits_is_reported() {
    let dir = RunnerDir::new();
    let a = runner(dir.path(), Duration::from_secs(10));
    let (events, mut rx) = Events::channel();
    a.start(start("t", 1, WorkKind::Task, "sleep", &["1000"]), events.clone());
    let pid = started(&mut rx, "t", 1).await;
    drop(a);

    let b = runner(dir.path(), Duration::from_secs(10));
    let (events, mut rx) = Events::channel();
    b.attach(events);
    assert_eq!(b.running(), vec![RunningWork { work_id: "t".into(), attempt: 1 }]);
    // It ends on its own (not through the runner): seen by polling, status unknown.
    killpg(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
    assert_eq!(next_of(&mut rx, "t", 1).await, exited(None, None));
    assert!(b.running().is_empty());
    assert_eq!(recorded(dir.path()), vec![]);
}

#[tokio::test]
async fn a_process_that_died_while_no_runner_existed_is_reported_exited() {
    let dir = RunnerDir::new();
    let a = runner(dir.path(), Duration::from_secs(10));
    let (events, mut rx) = Events::channel();
    a.start(start("gone", 3, WorkKind::Actor, "sleep", &["1000"]), events.clone());
    let pid = started(&mut rx, "gone", 3).await;
    drop(a);
    killpg(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
    eventually("the process died", || sleeps_in(pid) == 0).await;

    let b = runner(dir.path(), Duration::from_secs(10));
    assert!(b.running().is_empty());
    assert_eq!(recorded(dir.path()), vec![]);
    let (events, mut rx) = Events::channel();
    b.attach(events);
    assert_eq!(next_of(&mut rx, "gone", 3).await, exited(None, None));
    let err = log(&b.log_paths("gone").1);
    assert!(err.contains("gone attempt 3 ended while no agent watched it"), "{err}");
}

#[tokio::test]
async fn a_recorded_pid_now_used_by_another_process_is_not_adopted() {
    let dir = RunnerDir::new();
    // This test's own PID, recorded with another start time: PID reuse.
    let me = std::process::id();
    let state = serde_json::json!({
        "version": 1,
        "processes": [
            {"work_id": "reused", "attempt": 1, "kind": "actor", "pid": me, "pgid": me, "start_time": 1},
            {"work_id": "vanished", "attempt": 4, "kind": "task", "pid": 999_999_999u32, "pgid": 999_999_999, "start_time": 5},
        ],
    });
    std::fs::write(dir.path().join(STATE_FILE), state.to_string()).unwrap();
    let b = runner(dir.path(), Duration::from_secs(10));
    assert!(b.running().is_empty());
    let (events, mut rx) = Events::channel();
    b.attach(events);
    let mut got: BTreeMap<String, (u32, WorkStatus)> = BTreeMap::new();
    for _ in 0..2 {
        let event = next(&mut rx).await;
        got.insert(event.work_id, (event.attempt, event.status));
    }
    assert_eq!(got["reused"], (1, exited(None, None)));
    assert_eq!(got["vanished"], (4, exited(None, None)));
    assert_eq!(recorded(dir.path()), vec![]);
}

#[tokio::test]
async fn the_runner_needs_a_usable_directory() {
    let dir = RunnerDir::new();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let err = ProcessRunner::new(file.join("sub"), ProcessOptions::default()).unwrap_err();
    assert!(matches!(err, ProcessError::Directory { .. }), "{err}");
    assert!(err.to_string().contains("cannot use the agent directory"), "{err}");
}

// ---- Fork servers ------------------------------------------------------------------------

/// A command speaking the fork-server protocol: the SDK's own server (`python/berth/
/// _fork_server.py`, standard library only) with a `run` that reports who it is and then
/// sleeps (`BERTH_TEST_SLEEP`), offers its process for reuse (`BERTH_TEST_REUSE`, after
/// leaving a thread running with `BERTH_TEST_THREAD`) or exits with `$BERTH_TEST_CODE`.
/// Without `BERTH_FORK_SERVER` it runs the same `run` once, as a spawned attempt.
fn fork_server_task(work_id: &str, attempt: u32) -> Start {
    let sdk = concat!(env!("CARGO_MANIFEST_DIR"), "/../../python/berth");
    let script = format!(
        r#"
import os, sys, time
sys.path.insert(0, {sdk:?})
def run():
    print("ppid", os.getppid(), "cwd", os.getcwd(), flush=True)
    print("FOO=" + os.environ.get("FOO", ""), "BERTH_TASK_ID=" + os.environ.get("BERTH_TASK_ID", ""))
    print("to-stderr", file=sys.stderr)
    if os.environ.get("BERTH_TEST_SLEEP"):
        time.sleep(1000)
    if os.environ.get("BERTH_TEST_THREAD"):
        import threading
        threading.Thread(target=time.sleep, args=(1000,), daemon=True).start()
    if os.environ.get("BERTH_TEST_REUSE"):
        return True
    sys.exit(int(os.environ.get("BERTH_TEST_CODE", "0")))
if os.environ.get("BERTH_FORK_SERVER") == "1":
    import _fork_server
    _fork_server.serve(run)
else:
    run()
"#
    );
    let mut start = start(work_id, attempt, WorkKind::Task, "python3", &["-c", &script]);
    start.fork_server = true;
    start.env.insert("FOO".into(), "bar".into());
    start
}

/// The parent PID an attempt printed. Exactly one process runs an attempt: a fork given up
/// whose child ran all the same would print twice here.
fn parent_of(runner: &ProcessRunner, work_id: &str) -> u32 {
    let text = log(&runner.log_paths(work_id).0);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("ppid ")).collect();
    assert_eq!(lines.len(), 1, "one process ran {work_id}:\n{text}");
    lines[0].split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Runs attempts `prefix-0`, `prefix-1`… of `fork_server_task` (exit 0) until one is forked (its parent is not this
/// process, the runner's); returns its work ID and the server's PID. The first is always
/// spawned: it starts the server, which is used once it says it is ready.
async fn until_forked(
    prefix: &str,
    runner: &ProcessRunner,
    events: &Events,
    rx: &mut UnboundedReceiver<WorkEvent>,
) -> (String, u32) {
    let deadline = Instant::now() + WAIT;
    let mut i = 0;
    loop {
        let work_id = format!("{prefix}-{i}");
        runner.start(fork_server_task(&work_id, 1), events.clone());
        started(rx, &work_id, 1).await;
        assert_eq!(next_of(rx, &work_id, 1).await, exited(Some(0), None));
        let parent = parent_of(runner, &work_id);
        if parent != std::process::id() {
            return (work_id, parent);
        }
        assert!(Instant::now() < deadline, "never forked within {WAIT:?}");
        // A bounded poll on observable state: the server says ready within ~100 ms.
        tokio::time::sleep(Duration::from_millis(20)).await;
        i += 1;
    }
}

#[tokio::test]
async fn attempts_are_forked_from_a_warm_server_with_their_own_environment_logs_and_exit_code() {
    let dir = RunnerDir::new();
    let runner = runner(dir.path(), Duration::from_secs(10));
    let (events, mut rx) = Events::channel();
    assert_eq!(parent_of_first(&runner, &events, &mut rx).await, std::process::id());
    let (_, server) = until_forked("warm", &runner, &events, &mut rx).await;

    let mut task = fork_server_task("task-f", 4);
    task.env.insert("BERTH_TEST_CODE".into(), "3".into());
    runner.start(task, events.clone());
    let pid = started(&mut rx, "task-f", 4).await;
    assert_eq!(next_of(&mut rx, "task-f", 4).await, exited(Some(3), None));
    assert_ne!(pid, server);
    assert_eq!(parent_of(&runner, "task-f"), server, "forked by the same server");
    let (out, err) = runner.log_paths("task-f");
    let text = log(&out);
    assert!(text.starts_with("=== berth: task-f attempt 4 starting at "), "{text}");
    let cwd = dir.path().join("work/task-f-4").canonicalize().unwrap();
    assert!(text.contains(&format!("cwd {}", cwd.display())), "{text}");
    assert!(text.contains("FOO=bar BERTH_TASK_ID=task-f"), "{text}");
    let err_text = log(&err);
    assert!(err_text.contains("to-stderr"), "{err_text}");
    assert!(err_text.contains("=== berth: task-f attempt 4 exited with code 3"), "{err_text}");
    assert!(runner.running().is_empty());

    // Dropping the runner ends its servers (their stdin closes).
    drop(runner);
    eventually("the fork server ends with its runner", || {
        nix::sys::signal::kill(Pid::from_raw(server as i32), None) == Err(Errno::ESRCH)
    })
    .await;
}

/// Runs the first attempt: spawned, so its parent is this process.
async fn parent_of_first(
    runner: &ProcessRunner,
    events: &Events,
    rx: &mut UnboundedReceiver<WorkEvent>,
) -> u32 {
    runner.start(fork_server_task("first", 1), events.clone());
    started(rx, "first", 1).await;
    assert_eq!(next_of(rx, "first", 1).await, exited(Some(0), None));
    parent_of(runner, "first")
}

#[tokio::test]
async fn a_forked_attempt_is_stopped_with_its_group_and_is_watched_after_its_server_dies() {
    let dir = RunnerDir::new();
    let runner = runner(dir.path(), Duration::from_secs(10));
    let (events, mut rx) = Events::channel();
    let (_, server) = until_forked("warm", &runner, &events, &mut rx).await;

    // A stop: SIGTERM to its group, reported by the server as the signal.
    let mut sleeper = fork_server_task("task-s", 1);
    sleeper.env.insert("BERTH_TEST_SLEEP".into(), "1".into());
    runner.start(sleeper.clone(), events.clone());
    let pid = started(&mut rx, "task-s", 1).await;
    assert_eq!(runner.running(), vec![RunningWork { work_id: "task-s".into(), attempt: 1 }]);
    assert_eq!(recorded(dir.path()), vec![("task-s".to_string(), 1, u64::from(pid))]);
    runner.stop(stop("task-s", 1), events.clone());
    assert_eq!(next_of(&mut rx, "task-s", 1).await, exited(None, Some(15)));
    group_gone(pid).await;

    // Its server dies while it runs: the runner watches it through /proc from then on, and
    // the next attempt starts a new server (spawned meanwhile).
    sleeper.work_id = "task-t".into();
    runner.start(sleeper, events.clone());
    let pid = started(&mut rx, "task-t", 1).await;
    eventually("the attempt has printed", || {
        std::fs::read_to_string(runner.log_paths("task-t").0)
            .is_ok_and(|t| t.lines().any(|l| l.starts_with("ppid ")))
    })
    .await;
    assert_eq!(parent_of(&runner, "task-t"), server);
    nix::sys::signal::kill(Pid::from_raw(server as i32), Signal::SIGKILL).unwrap();
    eventually("the server is gone", || {
        nix::sys::signal::kill(Pid::from_raw(server as i32), None) == Err(Errno::ESRCH)
    })
    .await;
    assert_eq!(runner.running(), vec![RunningWork { work_id: "task-t".into(), attempt: 1 }]);
    killpg(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
    assert_eq!(
        next_of(&mut rx, "task-t", 1).await,
        exited(None, None),
        "status unknown without the server"
    );
    let (_, new_server) = until_forked("rewarm", &runner, &events, &mut rx).await;
    assert_ne!(new_server, server);
}

/// `fork_server_task` that offers its process for reuse, with `extra` in its environment.
fn reusing(work_id: &str, extra: &[(&str, &str)]) -> Start {
    let mut task = fork_server_task(work_id, 1);
    task.env.insert("BERTH_TEST_REUSE".into(), "1".into());
    task.env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    task
}

/// Runs `task` to its exit with code 0; returns its PID.
async fn run_to_end(
    runner: &ProcessRunner,
    events: &Events,
    rx: &mut UnboundedReceiver<WorkEvent>,
    task: Start,
) -> u32 {
    let work_id = task.work_id.clone();
    runner.start(task, events.clone());
    let pid = started(rx, &work_id, 1).await;
    assert_eq!(next_of(rx, &work_id, 1).await, exited(Some(0), None));
    pid
}

#[tokio::test]
async fn a_process_whose_attempt_ended_cleanly_is_reused_as_a_new_attempt() {
    let dir = RunnerDir::new();
    let runner = runner(dir.path(), Duration::from_secs(10));
    let (events, mut rx) = Events::channel();
    let (_, server) = until_forked("warm", &runner, &events, &mut rx).await;

    // The attempt ends (code 0) while its process lives on, idle in the server...
    let first = run_to_end(&runner, &events, &mut rx, reusing("task-r1", &[])).await;
    assert_eq!(parent_of(&runner, "task-r1"), server);
    assert!(runner.running().is_empty());
    assert!(recorded(dir.path()).is_empty(), "an ended attempt is not recorded");
    assert_eq!(nix::sys::signal::kill(Pid::from_raw(first as i32), None), Ok(()));
    // ...and runs the next attempt as the attempt it is: its own logs, directory, environment.
    let second = run_to_end(&runner, &events, &mut rx, reusing("task-r2", &[])).await;
    assert_eq!(second, first, "the idle process was reused");
    let text = log(&runner.log_paths("task-r2").0);
    let cwd = dir.path().join("work/task-r2-1").canonicalize().unwrap();
    assert!(text.contains(&format!("cwd {}", cwd.display())), "{text}");
    assert!(text.contains("FOO=bar BERTH_TASK_ID=task-r2"), "{text}");
    let earlier = log(&runner.log_paths("task-r1").0);
    assert!(
        !earlier.contains("task-r2"),
        "nothing of the next attempt in the last one's log: {earlier}"
    );
    assert!(log(&runner.log_paths("task-r2").1)
        .contains("=== berth: task-r2 attempt 1 exited with code 0"));

    // A stop of an attempt in a reused process ends the process, as any stop does.
    let mut sleeper = reusing("task-r3", &[("BERTH_TEST_SLEEP", "1")]);
    sleeper.attempt = 1;
    runner.start(sleeper, events.clone());
    assert_eq!(started(&mut rx, "task-r3", 1).await, first);
    eventually("the attempt has printed", || {
        std::fs::read_to_string(runner.log_paths("task-r3").0)
            .is_ok_and(|t| t.lines().any(|l| l.starts_with("ppid ")))
    })
    .await;
    runner.stop(stop("task-r3", 1), events.clone());
    assert_eq!(next_of(&mut rx, "task-r3", 1).await, exited(None, Some(15)));
    group_gone(first).await;

    // Not reused: a process that left a thread running, or ran a GPU attempt.
    let threaded = reusing("task-r4", &[("BERTH_TEST_THREAD", "1")]);
    let pid = run_to_end(&runner, &events, &mut rx, threaded).await;
    group_gone(pid).await;
    let mut gpu = reusing("task-r5", &[]);
    gpu.instances.insert("GPU".into(), InstanceIds { ids: vec![0] });
    let pid = run_to_end(&runner, &events, &mut rx, gpu).await;
    group_gone(pid).await;
    assert_eq!(parent_of(&runner, "task-r5"), server);
}

#[tokio::test]
async fn a_command_that_does_not_serve_forks_is_spawned_every_time() {
    let dir = RunnerDir::new();
    let runner = runner(dir.path(), Duration::from_secs(10));
    let (events, mut rx) = Events::channel();
    for i in 0..4 {
        let work_id = format!("plain-{i}");
        let mut task = sh(&work_id, 1, WorkKind::Task, "echo hello; exit 2");
        task.fork_server = true;
        runner.start(task, events.clone());
        started(&mut rx, &work_id, 1).await;
        assert_eq!(next_of(&mut rx, &work_id, 1).await, exited(Some(2), None));
        assert!(log(&runner.log_paths(&work_id).0).contains("hello"));
    }
}
