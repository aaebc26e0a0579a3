//! [`ProcessRunner`]: the runner that runs real processes (Unix; re-adoption needs Linux's
//! `/proc`).
//!
//! Each attempt is one command, started with `tokio::process` in **its own process group**, so
//! that a stop reaches everything it started (its children included) and Ctrl-C in the agent's
//! terminal reaches none of it. The runner's directory (`work_dir`) holds:
//!
//! ```text
//! work_dir/
//!   lock                         held (flock) by the runner using the directory
//!   state.json                   the processes running now (for the next agent: re-adoption)
//!   logs/<work_id>.out, .err     stdout and stderr of every attempt, appended, a header each
//!                                (read by `berth logs` through [`Runner::log_file`])
//!   work/<work_id>-<attempt>/    each attempt's working directory
//!   fork-servers/<agent pid>.err stderr of the fork servers
//!   packages/<hash>/             what the SDKs fetch once per node (a runtime_env's working_dir)
//!   lease, keeper.log            the node's lease with the head and its keeper's log (`lease`)
//! ```
//!
//! A start with `fork_server` set may instead be forked from a warm copy of its command (see
//! the `fork_server` module): the attempt is a process of its own all the same, in its own
//! group, with the same logs, environment and reports; only its exit status comes from the
//! server (its parent) rather than from `wait`.
//!
//! The command gets the agent's environment, then the `env` of its `Start`, then Berth's own
//! variables, which win: `BERTH_NODE_ID`, `BERTH_NODE_IP` (the address the node registered
//! with), `BERTH_ACTOR_ID` or `BERTH_TASK_ID`, `BERTH_NAMESPACE`, `BERTH_ATTEMPT`,
//! `BERTH_ADDRESS` and `BERTH_WORK_KEY` (how to reach the head, and the work's credential
//! there), `BERTH_PACKAGES` (`work_dir/packages`, the node's cache of the SDKs' packages),
//! `BERTH_RESOURCES` and `BERTH_INSTANCES` (what was reserved, as JSON:
//! `{"CPU": "1", "GPU": "0.5"}`, `{"GPU": [0]}`), and `CUDA_VISIBLE_DEVICES`, exactly the GPU
//! instance IDs
//! reserved for it, comma-separated (empty without a GPU; a fractional share names the one
//! instance it shares, so two half-GPU actors on one device see the same ID).
//!
//! Lifecycle of an attempt:
//!
//! - **Start**: `Started { pid }`, or `FailedToStart` with the operating system's reason (no
//!   such file, permission denied); a failure is reported, never retried here. A repeated start
//!   of the running attempt reports `Started` again; a start of a newer attempt stops the older
//!   one first (its `Exited` comes before the newer `Started`); an older attempt is ignored.
//! - **Exit**: a watcher task waits for the command and reports `Exited` with its code or
//!   signal. What the command left behind in its group is then stopped as on a stop.
//! - **Stop**: SIGTERM to the group, SIGKILL to the group after the grace period
//!   ([`ProcessOptions::grace`]) if anything of it is left; `Exited` is reported once the
//!   group is empty. A stop of an attempt that is not running is ignored.
//!
//! **Processes outlive the agent.** Nothing is killed when the runner is dropped or the agent
//! exits (no `kill_on_drop`): `state.json` records each process (work, attempt, PID, group and
//! its start time from `/proc/<pid>/stat`, against PID reuse), and the next
//! [`ProcessRunner::new`] on the same directory *adopts* those still running (listed by
//! [`Runner::running`], so the agent announces them when it registers and the head keeps or
//! stops them) and reports those that ended meanwhile as exited with neither code nor signal
//! (through the sink given to [`Runner::attach`]). Adopted processes are not the runner's
//! children, so they are watched by polling `/proc` (every 150 ms), and their exit status is
//! unknown: a stop reports the signal that ended them as far as the runner knows (15, or 9
//! when it had to kill), an exit on their own reports neither code nor signal. To end the
//! processes with the agent, call [`ProcessRunner::stop_all`] first (`berth up` does).
//!
//! Only one runner may use a directory at a time: [`ProcessRunner::new`] takes an exclusive
//! lock on `work_dir/lock` and fails when another runner (agent) holds it.

mod fork_server;
pub(crate) mod logs;
pub(crate) mod state;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use berth_api::agent::{LogStream, RunningWork, Start, Stop, WorkKind};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use thiserror::Error;
use tokio::process::Child;
use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::lease::{self, LeaseFile};
use crate::runner::{Events, Runner, WorkEvent, WorkStatus};

pub use fork_server::FORK_SERVER_DIR;
pub use logs::{LOG_DIR, WORK_DIR};
pub use state::{Entry as RecordedProcess, JOURNAL_FILE, STATE_FILE};

/// The processes the runner directory `dir` records as running (its state file and the
/// journal after it), as a later runner would read them.
pub fn recorded(dir: &Path) -> Vec<RecordedProcess> {
    state::load(dir).0.processes
}

/// Kills, with its whole process group, every process that the state file of the runner
/// directory `dir` records and that is still the process recorded; returns those it killed.
/// Runners never kill on drop (work outlives its agent), so this is how the node's keeper (see
/// [`crate::lease`]), clean-up tools and tests make sure nothing is left behind. The file is
/// left as it is: a later runner finds the processes gone and reports them exited.
pub fn kill_recorded(dir: &Path) -> Vec<RecordedProcess> {
    let (file, _) = state::load(dir);
    file.processes
        .into_iter()
        .filter(|entry| {
            entry.pgid > 1
                && state::is_same_process(entry)
                && killpg(Pid::from_raw(entry.pgid), Signal::SIGKILL).is_ok()
        })
        .collect()
}

/// The directory, in the runner's, where the SDKs keep what they fetch once per node.
pub const PACKAGES_DIR: &str = "packages";

/// The default wait between SIGTERM and SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);
/// The lock file in the runner's directory.
pub const LOCK_FILE: &str = "lock";
/// How often an adopted process (not a child of this runner) is looked at.
const ADOPTED_POLL: Duration = Duration::from_millis(150);
/// How often a stopping process group is looked at.
const GROUP_POLL: Duration = Duration::from_millis(20);
/// How long a group is waited for after SIGKILL before the runner gives up on it.
const AFTER_KILL: Duration = Duration::from_secs(2);

/// How a [`ProcessRunner`] runs its processes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessOptions {
    /// The wait between SIGTERM and SIGKILL when stopping (10 s by default).
    pub grace: Duration,
    /// `BERTH_NODE_ID` until the agent registers ([`Runner::registered`] then gives the ID the
    /// head chose); `None` leaves it empty until then.
    pub node_id: Option<String>,
    /// The head's URL as this agent reaches it (`http://HOST:PORT` or `https://…`), given to
    /// every process as `BERTH_ADDRESS` so the SDKs' workers can reach the head.
    pub head: Option<String>,
    /// The CA file that signed a TLS head's certificate, given as `BERTH_CA`.
    pub ca_file: Option<PathBuf>,
    /// The address the node registered with, given as `BERTH_NODE_IP`: where the SDKs' workers
    /// listen (never on every interface unless told to).
    pub node_ip: Option<String>,
    /// The command that runs the directory's keeper (program, then arguments; the directory
    /// is added last), which kills the processes when the node's lease runs out (see
    /// [`crate::lease`]): `berth keeper` for the agents of the `berth` binary. `None` keeps no
    /// lease: the processes run until stopped, whatever the head decides meanwhile.
    pub keeper: Option<Vec<OsString>>,
}

impl Default for ProcessOptions {
    fn default() -> ProcessOptions {
        ProcessOptions {
            grace: DEFAULT_GRACE,
            node_id: None,
            head: None,
            ca_file: None,
            node_ip: None,
            keeper: None,
        }
    }
}

/// The variables that tell a process how to reach the head; `BERTH_WORK_KEY` (set per
/// process) is its credential there.
fn head_env(options: &ProcessOptions) -> Vec<(&'static str, std::ffi::OsString)> {
    let mut env = Vec::new();
    if let Some(head) = &options.head {
        // Each of a head's addresses (its standbys too) as a URL, in order.
        let urls: Vec<String> = head
            .split(',')
            .map(str::trim)
            .map(|h| if h.contains("://") { h.to_string() } else { format!("http://{h}") })
            .collect();
        env.push(("BERTH_ADDRESS", urls.join(",").into()));
    }
    if let Some(ca) = &options.ca_file {
        // Absolute: each process runs in its own directory, where a path relative to the
        // agent's (`berth start --ca ca.pem`) names nothing.
        let ca = std::path::absolute(ca).unwrap_or_else(|_| ca.clone());
        env.push(("BERTH_CA", ca.into_os_string()));
    }
    if let Some(ip) = &options.node_ip {
        env.push(("BERTH_NODE_IP", ip.into()));
    }
    env
}

/// Why a [`ProcessRunner`] could not be created.
#[derive(Debug, Error)]
pub enum ProcessError {
    /// The directory could not be created or used.
    #[error("cannot use the agent directory {path}: {source}")]
    Directory {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Another runner holds the directory.
    #[error(
        "{path} is in use by another agent; give each agent on this machine its own directory \
         (its own --node-id or --data-dir)"
    )]
    InUse {
        /// The directory.
        path: PathBuf,
    },
    /// Not called on a tokio runtime.
    #[error("the process runner must be created on a tokio runtime")]
    NoRuntime,
    /// The directory's keeper could not be started.
    #[error("cannot start the node's keeper ({}): {source}", shown(command))]
    Keeper {
        /// The command.
        command: Vec<OsString>,
        /// Why.
        #[source]
        source: io::Error,
    },
}

fn shown(command: &[OsString]) -> String {
    command.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
}

/// Actor or task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Actor,
    Task,
}

impl Kind {
    fn from_proto(kind: i32) -> Option<Kind> {
        match WorkKind::try_from(kind) {
            Ok(WorkKind::Actor) => Some(Kind::Actor),
            Ok(WorkKind::Task) => Some(Kind::Task),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Actor => "actor",
            Kind::Task => "task",
        }
    }

    fn parse(name: &str) -> Kind {
        if name == "actor" {
            Kind::Actor
        } else {
            Kind::Task
        }
    }

    /// The variable naming the work, and the other one (removed).
    fn id_vars(self) -> (&'static str, &'static str) {
        match self {
            Kind::Actor => ("BERTH_ACTOR_ID", "BERTH_TASK_ID"),
            Kind::Task => ("BERTH_TASK_ID", "BERTH_ACTOR_ID"),
        }
    }
}

/// One process the runner watches (running or being stopped).
#[derive(Debug)]
struct Proc {
    work_id: String,
    attempt: u32,
    kind: Kind,
    pid: u32,
    pgid: i32,
    start_time: u64,
    /// A stop was requested: no longer listed as running.
    stopping: bool,
    /// Tells the watcher to stop the process.
    stop: watch::Sender<bool>,
    /// Where its exit is reported (the sink of its start, or of its stop); the runner's sink
    /// when `None` (adopted processes).
    events: Option<Events>,
}

impl Proc {
    fn entry(&self) -> state::Entry {
        state::Entry {
            work_id: self.work_id.clone(),
            attempt: self.attempt,
            kind: self.kind.name().into(),
            pid: self.pid,
            pgid: self.pgid,
            start_time: self.start_time,
        }
    }

    fn request_stop(&mut self, events: Option<&Events>) {
        self.stopping = true;
        if let Some(events) = events {
            self.events = Some(events.clone());
        }
        self.stop.send_replace(true);
    }
}

/// How a started attempt is watched.
enum Watched {
    /// A child of this runner.
    Child(Child),
    /// Forked by a fork server, which reports its exit status here.
    Forked(Forked),
}

/// What the runner holds of a forked attempt: where its end is reported, and how to let the
/// server reuse its process after it.
struct Forked {
    exit: oneshot::Receiver<fork_server::ExitStatus>,
    release: fork_server::Release,
}

/// A newer attempt waiting for the older one to end.
#[derive(Debug)]
struct Pending {
    start: Start,
    events: Events,
}

/// What is under way, published for [`ProcessRunner::stop_all`] and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Activity {
    processes: usize,
    pending: usize,
    watchers: usize,
}

impl Activity {
    fn is_idle(&self) -> bool {
        *self == Activity::default()
    }
}

#[derive(Debug, Default)]
struct Inner {
    node_id: String,
    next_id: u64,
    procs: BTreeMap<u64, Proc>,
    pending: BTreeMap<String, Pending>,
    /// The agent's sink, for reports no start or stop carries.
    sink: Option<Events>,
    /// Reports made before there was a sink.
    unreported: Vec<WorkEvent>,
    /// The runner was dropped: watchers leave everything as it is.
    detached: bool,
    /// Where changes to the process list are recorded (`None` until the first full write, or
    /// when the journal cannot be written: then each change rewrites the state file).
    journal: Option<state::Journal>,
}

impl Inner {
    /// The highest attempt of `work_id` known: running, stopping or waiting.
    fn latest_attempt(&self, work_id: &str) -> Option<u32> {
        let live = self.procs.values().filter(|p| p.work_id == work_id).map(|p| p.attempt);
        live.chain(self.pending.get(work_id).map(|p| p.start.attempt)).max()
    }

    fn set_sink(&mut self, events: &Events, replace: bool) {
        if replace || self.sink.is_none() {
            self.sink = Some(events.clone());
        }
        if let Some(sink) = &self.sink {
            for event in self.unreported.drain(..) {
                sink.report(event.work_id, event.attempt, event.status);
            }
        }
    }

    /// Reports `event` through `via`, else the sink, else keeps it for the sink to come.
    fn deliver(&mut self, event: WorkEvent, via: Option<&Events>) {
        match via.or(self.sink.as_ref()) {
            Some(events) => {
                events.report(event.work_id, event.attempt, event.status);
            }
            None => self.unreported.push(event),
        }
    }
}

struct Shared {
    dir: PathBuf,
    grace: Duration,
    /// `BERTH_ADDRESS` and `BERTH_CA` for every process.
    head_env: Vec<(&'static str, std::ffi::OsString)>,
    boot_id: Option<String>,
    runtime: Handle,
    inner: Mutex<Inner>,
    /// Locked after `inner`, never before.
    forks: Mutex<fork_server::ForkServers>,
    /// The node's lease, when a keeper guards the directory.
    lease: Option<LeaseFile>,
    activity: watch::Sender<Activity>,
    detached: watch::Sender<bool>,
    /// The previous look at the machine and the groups, for CPU figures, and the groups it
    /// measured. Never waited for while `inner` is held, nor `inner` while this is: a
    /// measurement reads `/proc` for milliseconds, and only tries `inner`.
    sampler: Mutex<(crate::measure::Sampler, Vec<crate::measure::Group>)>,
}

/// Counts a watcher task while it lives (created before the task is spawned, so that
/// [`ProcessRunner::stop_all`] never sees a gap).
struct WatcherGuard(Arc<Shared>);

impl WatcherGuard {
    fn new(shared: &Arc<Shared>) -> WatcherGuard {
        shared.activity.send_modify(|a| a.watchers += 1);
        WatcherGuard(shared.clone())
    }
}

impl Drop for WatcherGuard {
    fn drop(&mut self) {
        self.0.activity.send_modify(|a| a.watchers -= 1);
    }
}

/// Runs each attempt as a process; see the [module documentation](self).
pub struct ProcessRunner {
    shared: Arc<Shared>,
    // Held for the runner's life; released when it is dropped.
    _lock: Flock<File>,
    // The keeper's stdin: closed when the runner is dropped (or its process ends), which
    // tells the keeper its agent is gone.
    _keeper: Option<std::process::ChildStdin>,
}

impl std::fmt::Debug for ProcessRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessRunner")
            .field("work_dir", &self.shared.dir)
            .field("grace", &self.shared.grace)
            .field("running", &self.running())
            .finish_non_exhaustive()
    }
}

impl ProcessRunner {
    /// A runner keeping its files in `work_dir` (created if needed), adopting the processes
    /// an earlier runner left running there. Must be called on a tokio runtime (its watchers
    /// run there).
    pub fn new(work_dir: PathBuf, options: ProcessOptions) -> Result<ProcessRunner, ProcessError> {
        let runtime = Handle::try_current().map_err(|_| ProcessError::NoRuntime)?;
        let directory = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ProcessError::Directory { path, source }
        };
        // Its owner's alone: the work's logs, state and environment live there.
        for dir in [work_dir.clone(), work_dir.join(LOG_DIR), work_dir.join(WORK_DIR)] {
            berth_api::local::private_dir(&dir).map_err(directory(&dir))?;
        }
        let lock_path = work_dir.join(LOCK_FILE);
        let mut open = std::fs::OpenOptions::new();
        open.create(true).truncate(false).write(true);
        std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
        let file = open.open(&lock_path).map_err(directory(&lock_path))?;
        let lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((_, Errno::EWOULDBLOCK)) => return Err(ProcessError::InUse { path: work_dir }),
            Err((_, errno)) => return Err(directory(&lock_path)(io::Error::from(errno))),
        };
        let (file, problem) = state::load(&work_dir);
        if let Some(problem) = problem {
            warn!("the process list of the previous agent is lost: {problem}");
        }
        let boot_id = state::boot_id();
        let (activity, _) = watch::channel(Activity::default());
        let (detached, _) = watch::channel(false);
        let head_env = head_env(&options);
        let server_env = head_env.iter().map(|(k, v)| (k.into(), v.clone())).collect();
        let forks = fork_server::ForkServers::new(work_dir.join(FORK_SERVER_DIR), server_env);
        let lease = match &options.keeper {
            Some(_) => {
                let path = work_dir.join(lease::LEASE_FILE);
                let first = crate::agent::DEFAULT_HEAD_TIMEOUT;
                Some(LeaseFile::open(&work_dir, first).map_err(directory(&path))?)
            }
            None => None,
        };
        let shared = Arc::new(Shared {
            dir: work_dir,
            grace: options.grace,
            head_env,
            boot_id,
            runtime,
            inner: Mutex::new(Inner {
                node_id: options.node_id.unwrap_or_default(),
                ..Inner::default()
            }),
            forks: Mutex::new(forks),
            lease,
            activity,
            detached,
            sampler: Mutex::new((crate::measure::Sampler::new(), Vec::new())),
        });
        shared.adopt(file);
        let keeper = match &options.keeper {
            Some(command) => match start_keeper(command, &shared.dir) {
                Ok(stdin) => Some(stdin),
                Err(e) => {
                    // The earlier keeper goes on guarding what this runner would have adopted.
                    if let Some(lease) = &shared.lease {
                        if let Some(previous) = lease.previous {
                            lease.give_back(previous);
                        }
                    }
                    return Err(e);
                }
            },
            None => None,
        };
        Ok(ProcessRunner { shared, _lock: lock, _keeper: keeper })
    }

    /// The runner's directory.
    pub fn work_dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The stdout and stderr logs of `work_id` (all its attempts).
    pub fn log_paths(&self, work_id: &str) -> (PathBuf, PathBuf) {
        (logs::out_path(&self.shared.dir, work_id), logs::err_path(&self.shared.dir, work_id))
    }

    /// The working directory of attempt `attempt` of `work_id`.
    pub fn attempt_dir(&self, work_id: &str, attempt: u32) -> PathBuf {
        logs::work_dir(&self.shared.dir, work_id, attempt)
    }

    /// Stops everything: every process (SIGTERM, SIGKILL after the grace period), every
    /// attempt waiting to start, and what exited processes left in their groups; returns once
    /// nothing of it is left. Reports go where they would for a stop.
    pub async fn stop_all(&self) {
        {
            let mut inner = self.shared.lock();
            for proc in inner.procs.values_mut().filter(|p| !p.stopping) {
                proc.request_stop(None);
            }
            let pending = std::mem::take(&mut inner.pending);
            for (work_id, pending) in pending {
                let attempt = pending.start.attempt;
                let exited =
                    WorkStatus::Exited { code: None, signal: Some(Signal::SIGTERM as i32) };
                pending.events.report(work_id, attempt, exited);
            }
            self.shared.publish(&inner);
        }
        let mut activity = self.shared.activity.subscribe();
        let _ = activity.wait_for(Activity::is_idle).await;
    }
}

impl Drop for ProcessRunner {
    fn drop(&mut self) {
        // The processes keep running; a later runner on the directory adopts them.
        self.shared.lock().detached = true;
        self.shared.detached.send_replace(true);
    }
}

impl Runner for ProcessRunner {
    fn start(&self, start: Start, events: Events) {
        self.shared.start(start, events);
    }

    fn stop(&self, stop: Stop, events: Events) {
        self.shared.stop(stop, events);
    }

    fn running(&self) -> Vec<RunningWork> {
        let inner = self.shared.lock();
        let mut running: Vec<RunningWork> = inner
            .procs
            .values()
            .filter(|p| !p.stopping)
            .map(|p| RunningWork { work_id: p.work_id.clone(), attempt: p.attempt })
            .collect();
        running.sort_by(|a, b| (&a.work_id, a.attempt).cmp(&(&b.work_id, b.attempt)));
        running
    }

    fn attach(&self, events: Events) {
        let mut inner = self.shared.lock();
        // A new agent (an agent restarted in-process): everything reports to it from now on.
        for proc in inner.procs.values_mut() {
            proc.events = None;
        }
        for pending in inner.pending.values_mut() {
            pending.events = events.clone();
        }
        inner.set_sink(&events, true);
    }

    fn registered(&self, node_id: &str) {
        node_id.clone_into(&mut self.shared.lock().node_id);
    }

    fn renew_lease(&self, sent_ms: u64, timeout: Duration) {
        if let Some(lease) = &self.shared.lease {
            lease.renew(sent_ms, timeout);
        }
    }

    fn measures(&self) -> bool {
        true
    }

    fn measure(&self) -> Option<berth_api::agent::Measured> {
        let mut sampler = self.shared.sampler.lock().unwrap_or_else(|p| p.into_inner());
        let (sampler, groups) = &mut *sampler;
        // The groups running now; while a start holds the lock (a fork server has seconds to
        // answer), those of the last measurement: a measurement never waits for a start.
        let inner = match self.shared.inner.try_lock() {
            Ok(inner) => Some(inner),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        if let Some(inner) = inner {
            *groups = inner
                .procs
                .values()
                .filter(|p| !p.stopping)
                .map(|p| crate::measure::Group {
                    work_id: p.work_id.clone(),
                    attempt: p.attempt,
                    pgid: p.pgid,
                })
                .collect();
        }
        sampler.sample(groups, std::time::Instant::now())
    }

    fn log_file(&self, work_id: &str, stream: LogStream) -> Option<PathBuf> {
        // Checked again here: a work ID that could leave `logs/` never becomes a path.
        if logs::invalid_work_id(work_id).is_some() {
            return None;
        }
        match stream {
            LogStream::Out => Some(logs::out_path(&self.shared.dir, work_id)),
            LogStream::Err => Some(logs::err_path(&self.shared.dir, work_id)),
            LogStream::Unspecified => None,
        }
    }
}

/// Why `start` cannot be run, for the user.
fn invalid(start: &Start) -> Option<String> {
    if Kind::from_proto(start.kind).is_none() {
        return Some(format!("work kind {} is neither an actor (1) nor a task (2)", start.kind));
    }
    if let Some(why) = logs::invalid_work_id(&start.work_id) {
        return Some(why);
    }
    if start.command.is_empty() {
        return Some("no command to run: the command is empty".into());
    }
    None
}

/// `CUDA_VISIBLE_DEVICES` for `start`: its GPU instance IDs, comma-separated.
fn visible_devices(start: &Start) -> String {
    let ids = start.instances.get("GPU").map(|i| i.ids.as_slice()).unwrap_or_default();
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// Starts the keeper of the runner directory `dir` with `command` (see [`crate::lease`]): in
/// its own process group (a terminal's Ctrl-C does not reach it), its output appended to
/// `dir/keeper.log`, its stdin a pipe from this process; returns the pipe's end.
fn start_keeper(
    command: &[OsString],
    dir: &Path,
) -> Result<std::process::ChildStdin, ProcessError> {
    use std::os::unix::process::CommandExt;
    let log_path = dir.join(lease::KEEPER_LOG);
    let failed = |source: io::Error| ProcessError::Keeper { command: command.to_vec(), source };
    let (program, args) =
        command.split_first().ok_or_else(|| failed(io::Error::other("no program")))?;
    let log = logs::open_append(&log_path)
        .map_err(|e| failed(io::Error::other(format!("{}: {e}", log_path.display()))))?;
    let mut child = std::process::Command::new(program)
        .args(args)
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(log.try_clone().map_err(failed)?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(failed)?;
    let stdin = child.stdin.take().expect("piped");
    // Reaped when it ends (it may outlive this process, then init reaps it). A keeper that
    // ended badly leaves the node unguarded: said loudly.
    let log = log_path.clone();
    let _ = std::thread::Builder::new().name("berth-keeper-wait".into()).spawn(move || match child
        .wait()
    {
        Ok(status) if status.success() => {}
        Ok(status) => warn!(
            %status,
            log = %log.display(),
            "the node's keeper ended badly: this node's work is no longer stopped when its \
             lease with the head runs out (restart the agent)"
        ),
        Err(e) => warn!("cannot wait for the node's keeper: {e}"),
    });
    Ok(stdin)
}

/// Sends `signal` to process group `pgid`; a group that is gone is not an error.
fn signal_group(pgid: i32, signal: Signal) {
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => warn!(pgid, ?signal, "cannot signal the process group: {e}"),
    }
}

/// True while some process of group `pgid` runs (zombies do not count: they are gone, only
/// not yet reaped by their parent).
fn group_alive(pgid: i32) -> bool {
    match killpg(Pid::from_raw(pgid), None) {
        Err(Errno::ESRCH) => false,
        _ => state::group_has_live_member(pgid).unwrap_or(true),
    }
}

/// Completes when `flag` turns true; never when its sender is gone.
async fn raised(flag: &mut watch::Receiver<bool>) {
    if flag.wait_for(|raised| *raised).await.is_err() {
        std::future::pending::<()>().await;
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every update leaves the maps consistent between statements that could panic.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn publish(&self, inner: &Inner) {
        self.activity.send_modify(|a| {
            a.processes = inner.procs.len();
            a.pending = inner.pending.len();
        });
    }

    /// Writes the whole process list and starts a new journal after it; a failure is logged
    /// (the processes still run).
    fn persist_all(&self, inner: &mut Inner) {
        let entries = inner.procs.values().map(Proc::entry).collect();
        match state::Journal::start(&self.dir, self.boot_id.clone(), entries) {
            Ok(journal) => inner.journal = Some(journal),
            Err(e) => {
                inner.journal = None;
                warn!(dir = %self.dir.display(), "cannot record the running processes: {e}");
            }
        }
    }

    /// Records that `entry` started (`started`) or ended.
    fn persist(&self, inner: &mut Inner, entry: &state::Entry, started: bool) {
        let Some(journal) = inner.journal.as_mut() else {
            return self.persist_all(inner);
        };
        let procs = &inner.procs;
        let live = || procs.values().map(Proc::entry).collect();
        let recorded = if started { journal.add(entry, live) } else { journal.remove(entry, live) };
        if let Err(e) = recorded {
            warn!(dir = %self.dir.display(), "cannot journal the running processes: {e}");
            self.persist_all(inner);
        }
    }

    /// Takes over the processes of `file` that still run; reports the others as exited.
    fn adopt(self: &Arc<Self>, file: state::StateFile) {
        let same_boot = match (&file.boot_id, &self.boot_id) {
            (Some(then), Some(now)) => then == now,
            _ => true,
        };
        let mut inner = self.lock();
        for entry in file.processes {
            if same_boot && state::is_same_process(&entry) {
                info!(work_id = %entry.work_id, attempt = entry.attempt, pid = entry.pid, "adopted a process of the previous agent");
                let (stop, stop_rx) = watch::channel(false);
                let id = inner.next_id;
                inner.next_id += 1;
                inner.procs.insert(
                    id,
                    Proc {
                        work_id: entry.work_id.clone(),
                        attempt: entry.attempt,
                        kind: Kind::parse(&entry.kind),
                        pid: entry.pid,
                        pgid: entry.pgid,
                        start_time: entry.start_time,
                        stopping: false,
                        stop,
                        events: None,
                    },
                );
                let guard = WatcherGuard::new(self);
                self.runtime.spawn(watch_other(self.clone(), id, entry, None, stop_rx, guard));
            } else {
                info!(work_id = %entry.work_id, attempt = entry.attempt, pid = entry.pid, "a process of the previous agent ended while no agent watched it");
                logs::note(
                    &logs::err_path(&self.dir, &entry.work_id),
                    &format!(
                        "=== berth: {} attempt {} ended while no agent watched it (exit status \
                         unknown)",
                        entry.work_id, entry.attempt
                    ),
                );
                let status = WorkStatus::Exited { code: None, signal: None };
                inner.deliver(
                    WorkEvent { work_id: entry.work_id, attempt: entry.attempt, status },
                    None,
                );
            }
        }
        self.persist_all(&mut inner);
        self.publish(&inner);
    }

    fn start(self: &Arc<Self>, start: Start, events: Events) {
        let mut inner = self.lock();
        inner.set_sink(&events, false);
        if let Some(error) = invalid(&start) {
            events.failed_to_start(start.work_id, start.attempt, error);
            return;
        }
        let (work_id, attempt) = (start.work_id.clone(), start.attempt);
        match inner.latest_attempt(&work_id) {
            Some(latest) if attempt < latest => {
                debug!(%work_id, attempt, latest, "start of an older attempt: ignored");
                return;
            }
            Some(latest) if attempt == latest => {
                // The same attempt: acknowledged again if it runs; if it is being stopped or
                // waits to start, its report comes in due course.
                let running = inner
                    .procs
                    .values()
                    .find(|p| p.work_id == work_id && p.attempt == attempt && !p.stopping);
                if let Some(proc) = running {
                    events.started(work_id, attempt, proc.pid);
                }
                return;
            }
            _ => {}
        }
        // A newer attempt (or the first): the older ones stop first.
        let mut older = false;
        for proc in inner.procs.values_mut().filter(|p| p.work_id == work_id) {
            if !proc.stopping {
                debug!(%work_id, old = proc.attempt, new = attempt, "a newer attempt replaces a running one");
                proc.request_stop(None);
            }
            older = true;
        }
        if older {
            inner.pending.insert(work_id, Pending { start, events });
            self.publish(&inner);
            return;
        }
        inner.pending.remove(&work_id);
        self.spawn_locked(&mut inner, start, events);
        self.publish(&inner);
    }

    /// Starts `start` now (nothing of its work runs), reporting `Started` or `FailedToStart`.
    fn spawn_locked(self: &Arc<Self>, inner: &mut Inner, start: Start, events: Events) {
        let kind = Kind::from_proto(start.kind).expect("validated before");
        let (work_id, attempt) = (start.work_id.as_str(), start.attempt);
        if let Some(lease) = self.lease.as_ref().map(LeaseFile::current) {
            let now = lease::clock_ms();
            if lease.expired(now) {
                // The head may have declared this node dead: its keeper would kill the attempt.
                let silent = now.saturating_sub(lease.acked_ms);
                let why = format!(
                    "this node's lease with the head ran out (no heartbeat acknowledged for \
                     {silent} ms): it starts nothing until the head hears from it again"
                );
                events.failed_to_start(work_id, attempt, why);
                return;
            }
        }
        let (out_path, err_path) =
            (logs::out_path(&self.dir, work_id), logs::err_path(&self.dir, work_id));
        let cwd = logs::work_dir(&self.dir, work_id, attempt);
        let header = logs::header(work_id, attempt, &start.command, &start.args);
        let prepared = (|| -> io::Result<(File, File)> {
            std::fs::create_dir_all(self.dir.join(LOG_DIR))?;
            std::fs::create_dir_all(&cwd)?;
            let mut out = logs::open_append(&out_path)?;
            let mut err = logs::open_append(&err_path)?;
            writeln!(out, "{header}")?;
            writeln!(err, "{header}")?;
            Ok((out, err))
        })();
        let (out, err) = match prepared {
            Ok(files) => files,
            Err(e) => {
                let error =
                    format!("cannot prepare the attempt's files under {}: {e}", self.dir.display());
                events.failed_to_start(work_id, attempt, error);
                return;
            }
        };
        let env = self.attempt_env(inner, &start, kind);
        // The protocol speaks JSON: an environment that is not UTF-8 is spawned as it is.
        let utf8_env = || -> Option<BTreeMap<String, String>> {
            env.iter()
                .map(|(k, v)| Some((k.to_str()?.to_owned(), v.to_str()?.to_owned())))
                .collect()
        };
        if let Some(fork_env) = start.fork_server.then(utf8_env).flatten() {
            let request = fork_server::ForkRequest {
                env: fork_env,
                cwd: cwd.clone(),
                stdout: out_path.clone(),
                stderr: err_path.clone(),
            };
            let key = fork_server::Key::of(&start);
            let outcome = self.forks.lock().unwrap_or_else(|p| p.into_inner()).fork(&key, request);
            match outcome {
                fork_server::Outcome::Forked { pid, exit, release } => {
                    let watched = Watched::Forked(Forked { exit, release });
                    self.watch_locked(inner, &start, kind, pid, watched, events);
                    return;
                }
                fork_server::Outcome::Spawn { why: Some(why) } => {
                    debug!(%work_id, attempt, "spawned, not forked: {why}");
                }
                fork_server::Outcome::Spawn { why: None } => {}
            }
        }
        let mut command = tokio::process::Command::new(&start.command);
        command
            .args(&start.args)
            .current_dir(&cwd)
            .env_clear()
            .envs(env)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Its own group: stops reach its children, the agent's terminal does not reach it.
            .process_group(0)
            // It outlives the agent (a later agent adopts it).
            .kill_on_drop(false);
        let spawned = {
            let _runtime = self.runtime.enter();
            command.spawn()
        };
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let error = format!("cannot start {:?}: {e}", start.command);
                logs::note(&err_path, &format!("=== berth: {work_id} attempt {attempt}: {error}"));
                events.failed_to_start(work_id, attempt, error);
                return;
            }
        };
        let pid = child.id().unwrap_or(0);
        self.watch_locked(inner, &start, kind, pid, Watched::Child(child), events);
    }

    /// The whole environment of an attempt: the agent's, then the start's `env`, then Berth's
    /// own variables, which win.
    fn attempt_env(
        &self,
        inner: &Inner,
        start: &Start,
        kind: Kind,
    ) -> BTreeMap<OsString, OsString> {
        let (id_var, other_var) = kind.id_vars();
        let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
        env.extend(start.env.iter().map(|(k, v)| (k.into(), v.into())));
        env.remove(OsStr::new(other_var));
        let own = [
            ("BERTH_NODE_ID", inner.node_id.as_str().into()),
            (id_var, start.work_id.as_str().into()),
            ("BERTH_NAMESPACE", start.namespace.as_str().into()),
            ("BERTH_ATTEMPT", start.attempt.to_string().into()),
        ];
        env.extend(
            own.into_iter().chain(self.head_env.iter().cloned()).map(|(k, v)| (k.into(), v)),
        );
        env.insert("BERTH_WORK_KEY".into(), start.work_key.as_str().into());
        env.insert("CUDA_VISIBLE_DEVICES".into(), visible_devices(start).into());
        // What was reserved, for the SDKs' runtime context: {"CPU": "1", "GPU": "0.5"} and
        // {"GPU": [0]}.
        let instances: BTreeMap<&str, &[u32]> =
            start.instances.iter().map(|(k, v)| (k.as_str(), v.ids.as_slice())).collect();
        let resources: BTreeMap<&str, &str> =
            start.resources.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        for (name, value) in [
            ("BERTH_RESOURCES", serde_json::to_string(&resources)),
            ("BERTH_INSTANCES", serde_json::to_string(&instances)),
        ] {
            env.insert(name.into(), value.unwrap_or_default().into());
        }
        // Where the SDKs keep what they fetch once per node (a runtime_env's working_dir).
        env.insert("BERTH_PACKAGES".into(), self.dir.join(PACKAGES_DIR).into());
        env
    }

    /// Records the attempt now running as `pid`, reports `Started` and watches it.
    fn watch_locked(
        self: &Arc<Self>,
        inner: &mut Inner,
        start: &Start,
        kind: Kind,
        pid: u32,
        watched: Watched,
        events: Events,
    ) {
        let (work_id, attempt) = (start.work_id.as_str(), start.attempt);
        let pgid = pid as i32;
        let start_time = state::stat(pid).map(|s| s.start_time).unwrap_or(0);
        let (stop, stop_rx) = watch::channel(false);
        let id = inner.next_id;
        inner.next_id += 1;
        let proc = Proc {
            work_id: work_id.to_string(),
            attempt,
            kind,
            pid,
            pgid,
            start_time,
            stopping: false,
            stop,
            events: Some(events.clone()),
        };
        let entry = proc.entry();
        inner.procs.insert(id, proc);
        self.persist(inner, &entry, true);
        debug!(%work_id, attempt, pid, forked = matches!(watched, Watched::Forked(_)), "started");
        events.started(work_id, attempt, pid);
        let guard = WatcherGuard::new(self);
        match watched {
            Watched::Child(child) => {
                self.runtime.spawn(watch_child(self.clone(), id, child, pgid, stop_rx, guard));
            }
            Watched::Forked(forked) => {
                self.runtime.spawn(watch_other(
                    self.clone(),
                    id,
                    entry,
                    Some(forked),
                    stop_rx,
                    guard,
                ));
            }
        }
    }

    fn stop(&self, stop: Stop, events: Events) {
        let mut inner = self.lock();
        inner.set_sink(&events, false);
        if inner.pending.get(&stop.work_id).is_some_and(|p| p.start.attempt == stop.attempt) {
            // It never started: it ends here.
            inner.pending.remove(&stop.work_id);
            events.exited(stop.work_id, stop.attempt, None, Some(Signal::SIGTERM as i32));
            self.publish(&inner);
            return;
        }
        let running = inner
            .procs
            .values_mut()
            .find(|p| p.work_id == stop.work_id && p.attempt == stop.attempt && !p.stopping);
        match running {
            Some(proc) => {
                debug!(work_id = %stop.work_id, attempt = stop.attempt, pid = proc.pid, reason = %stop.reason, "stopping");
                proc.request_stop(Some(&events));
            }
            None => debug!(
                work_id = %stop.work_id,
                attempt = stop.attempt,
                "stop of an attempt that is not running: ignored"
            ),
        }
    }

    /// Process `id` ended (and, for a stop, its group too), or only its attempt did (`reuse`:
    /// the process lives on in its fork server): forget it, let the server reuse the process,
    /// report the exit, and start the newer attempt of its work if one waits.
    fn finish(
        self: &Arc<Self>,
        id: u64,
        code: Option<i32>,
        signal: Option<i32>,
        reuse: Option<fork_server::Release>,
    ) {
        let mut inner = self.lock();
        if inner.detached {
            return;
        }
        let Some(proc) = inner.procs.remove(&id) else { return };
        self.persist(&mut inner, &proc.entry(), false);
        if let Some(release) = reuse {
            // Forgotten first, so no stop of this attempt can reach the process; released
            // before the exit is reported, so the next attempt may already find it idle.
            release.send();
        }
        let how = match (code, signal) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(signal)) => format!("ended by signal {signal}"),
            (None, None) => "ended (exit status unknown)".to_string(),
        };
        logs::note(
            &logs::err_path(&self.dir, &proc.work_id),
            &format!("=== berth: {} attempt {} {how}", proc.work_id, proc.attempt),
        );
        debug!(work_id = %proc.work_id, attempt = proc.attempt, pid = proc.pid, how, "exited");
        let event = WorkEvent {
            work_id: proc.work_id.clone(),
            attempt: proc.attempt,
            status: WorkStatus::Exited { code, signal },
        };
        inner.deliver(event, proc.events.as_ref());
        if !inner.procs.values().any(|p| p.work_id == proc.work_id) {
            if let Some(next) = inner.pending.remove(&proc.work_id) {
                self.spawn_locked(&mut inner, next.start, next.events);
            }
        }
        self.publish(&inner);
    }
}

/// How a watcher escalates a stop: SIGTERM when asked, SIGKILL once the grace period is over.
struct Escalation {
    pgid: i32,
    grace: Duration,
    termed_at: Option<Instant>,
    killed: bool,
}

impl Escalation {
    fn new(pgid: i32, grace: Duration) -> Escalation {
        Escalation { pgid, grace, termed_at: None, killed: false }
    }

    fn terminate(&mut self) {
        if self.termed_at.is_none() {
            signal_group(self.pgid, Signal::SIGTERM);
            self.termed_at = Some(Instant::now());
        }
    }

    fn kill_at(&self) -> Option<Instant> {
        self.termed_at.filter(|_| !self.killed).map(|at| at + self.grace)
    }

    fn kill(&mut self) {
        signal_group(self.pgid, Signal::SIGKILL);
        self.killed = true;
    }

    /// The signal the runner ended the group with, as far as it knows.
    fn signal(&self) -> Option<i32> {
        match (self.termed_at, self.killed) {
            (_, true) => Some(Signal::SIGKILL as i32),
            (Some(_), false) => Some(Signal::SIGTERM as i32),
            (None, false) => None,
        }
    }

    /// Waits until nothing of the group is left: SIGTERM first if not sent yet, SIGKILL after
    /// the grace period, then at most [`AFTER_KILL`] more. False when the runner was dropped
    /// meanwhile.
    async fn clear(&mut self, detached: &mut watch::Receiver<bool>) -> bool {
        let mut given_up_at = None;
        loop {
            if !group_alive(self.pgid) {
                return true;
            }
            self.terminate();
            let now = Instant::now();
            if self.kill_at().is_some_and(|at| now >= at) {
                self.kill();
                given_up_at = Some(now + AFTER_KILL);
            }
            if given_up_at.is_some_and(|at| now >= at) {
                warn!(
                    pgid = self.pgid,
                    "processes of the group survived SIGKILL; giving up on them"
                );
                return true;
            }
            tokio::select! {
                biased;
                () = raised(detached) => return false,
                () = tokio::time::sleep(GROUP_POLL) => {}
            }
        }
    }
}

/// Watches a child of this runner until it exits (stopping it when asked), then reports.
async fn watch_child(
    shared: Arc<Shared>,
    id: u64,
    mut child: Child,
    pgid: i32,
    mut stop: watch::Receiver<bool>,
    _guard: WatcherGuard,
) {
    let mut detached = shared.detached.subscribe();
    let mut escalation = Escalation::new(pgid, shared.grace);
    let status = loop {
        let kill_at = escalation.kill_at();
        tokio::select! {
            biased;
            () = raised(&mut detached) => return,
            status = child.wait() => break status,
            () = raised(&mut stop), if escalation.termed_at.is_none() => escalation.terminate(),
            () = sleep_until(kill_at), if kill_at.is_some() => escalation.kill(),
        }
    };
    let (code, signal) = match status {
        Ok(status) => (status.code(), status.signal()),
        Err(e) => {
            warn!(pgid, "cannot wait for the process: {e}");
            (None, escalation.signal())
        }
    };
    finish_group(shared, id, escalation, detached, code, signal).await;
}

/// After the leader of a group ended: on a stop, clear the group, then report; otherwise
/// report at once, then clear what the command left behind.
async fn finish_group(
    shared: Arc<Shared>,
    id: u64,
    mut escalation: Escalation,
    mut detached: watch::Receiver<bool>,
    code: Option<i32>,
    signal: Option<i32>,
) {
    if escalation.termed_at.is_some() {
        if escalation.clear(&mut detached).await {
            shared.finish(id, code, signal, None);
        }
    } else {
        shared.finish(id, code, signal, None);
        escalation.clear(&mut detached).await;
    }
}

/// Watches a process that is not this runner's child: forked by a fork server (which reports
/// its exit status) or adopted from an earlier runner (`None`: polled in `/proc`, exit status
/// unknown). A forked one whose server dies is polled from then on.
async fn watch_other(
    shared: Arc<Shared>,
    id: u64,
    entry: state::Entry,
    mut forked: Option<Forked>,
    mut stop: watch::Receiver<bool>,
    _guard: WatcherGuard,
) {
    let mut detached = shared.detached.subscribe();
    let mut escalation = Escalation::new(entry.pgid, shared.grace);
    let mut poll = tokio::time::interval(ADOPTED_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (code, signal) = loop {
        let kill_at = escalation.kill_at();
        tokio::select! {
            biased;
            () = raised(&mut detached) => return,
            status = async { (&mut forked.as_mut().expect("guarded").exit).await }, if forked.is_some() => match status {
                Ok(status) if status.lives_on && escalation.termed_at.is_none() => {
                    // The attempt is over; its process idles in the server, to be reused.
                    let release = forked.map(|f| f.release);
                    shared.finish(id, status.code, None, release);
                    return;
                }
                // Stopped meanwhile: the process is ending by our signal, clear its group.
                Ok(status) => break (status.code, status.signal),
                Err(_) => forked = None,
            },
            () = raised(&mut stop), if escalation.termed_at.is_none() => escalation.terminate(),
            () = sleep_until(kill_at), if kill_at.is_some() => escalation.kill(),
            _ = poll.tick(), if forked.is_none() => {
                if !state::is_same_process(&entry) {
                    break (None, escalation.signal());
                }
            }
        }
    };
    finish_group(shared, id, escalation, detached, code, signal).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_api::agent::InstanceIds;

    #[test]
    fn visible_devices_are_the_gpu_instances() {
        let mut start = Start::default();
        assert_eq!(visible_devices(&start), "");
        start.instances.insert("GPU".into(), InstanceIds { ids: vec![1, 3] });
        start.instances.insert("TPU".into(), InstanceIds { ids: vec![7] });
        assert_eq!(visible_devices(&start), "1,3");
    }

    #[test]
    fn processes_get_the_head_and_an_absolute_ca_path() {
        let options = ProcessOptions {
            head: Some("https://h:1, h2:2".into()),
            ca_file: Some(PathBuf::from("ca.pem")),
            ..ProcessOptions::default()
        };
        let env: BTreeMap<_, _> = head_env(&options).into_iter().collect();
        assert_eq!(env["BERTH_ADDRESS"], "https://h:1,http://h2:2");
        // Processes run in their own directories: the agent's relative path is made absolute.
        assert_eq!(
            PathBuf::from(&env["BERTH_CA"]),
            std::env::current_dir().unwrap().join("ca.pem")
        );
    }

    #[test]
    fn invalid_starts_are_named() {
        let ok = Start {
            work_id: "t".into(),
            kind: WorkKind::Task as i32,
            command: "true".into(),
            ..Start::default()
        };
        assert_eq!(invalid(&ok), None);
        assert!(invalid(&Start { kind: 9, ..ok.clone() }).unwrap().contains("neither an actor"));
        assert!(invalid(&Start { work_id: "../x".into(), ..ok.clone() })
            .unwrap()
            .contains("cannot name a file"));
        assert!(invalid(&Start { command: String::new(), ..ok }).unwrap().contains("empty"));
    }
}
