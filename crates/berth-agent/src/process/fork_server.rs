//! Fork servers: warm copies of commands that say they speak the fork-server protocol
//! (`Start.fork_server`), from which the runner forks attempts instead of starting the program
//! anew. A Python worker spends ~50 ms of CPU starting an interpreter and importing its
//! libraries before it does anything; a fork of a warm one costs about a millisecond, and the
//! attempt is still a process of its own: its own PID and process group (so stops, logs,
//! exit codes, retries and re-adoption by a later agent work exactly as for a spawned one).
//!
//! A server is started, without delaying anyone, on the first attempt of its [`Key`] (that
//! attempt is spawned as usual) and is used once it has said it is ready. It is the command
//! with its arguments and environment, less the variables that differ per attempt (`BERTH_*`
//! and `CUDA_VISIBLE_DEVICES`), plus `BERTH_FORK_SERVER=1`; it talks over its stdin and stdout
//! in JSON lines (see `docs/worker-protocol.md`, § Fork servers):
//!
//! ```text
//! server → agent  {"type":"ready"}
//! agent → server  {"type":"fork","request":7,"env":{…},"cwd":"…","stdout":"…","stderr":"…"}
//! server → agent  {"type":"forked","request":7,"pid":4242}   or {"type":"failed","request":7,"error":"…"}
//! server → agent  {"type":"exited","pid":4242,"code":0}     or {"type":"exited","pid":4242,"signal":9}
//! server → agent  {"type":"done","pid":4242,"code":0}       the attempt ended, the process lives on
//! agent → server  {"type":"release","pid":4242}             it may run another attempt
//! ```
//!
//! The child sets its own process group, opens its log files for appending, changes to its
//! working directory and replaces its environment with `env` (the whole environment a spawned
//! attempt would get). The server reports each child's exit status, which only it, the parent,
//! can read. A server ends when its stdin closes (the agent dropped it or died); its children
//! keep running, and their watchers fall back to polling `/proc` as for adopted processes.
//!
//! A child may be *reused*: when its attempt ended well and left nothing behind in it, the
//! server says `done` instead of waiting for an exit, and hands the same process the next
//! attempt of its key once the agent has released it. The release is what makes this safe:
//! until the watcher of the ended attempt has forgotten it (so no stop of that attempt can
//! signal the process any more), the server never gives the process another attempt.
//!
//! Anything unexpected (a server that never says ready, a fork that takes longer than
//! [`FORK_TIMEOUT`], a malformed line) costs the server, never the attempt: the runner spawns
//! the attempt the usual way. A command that exits before saying ready is not tried again
//! while its entry is kept.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use berth_api::agent::Start;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use super::state::Stat;

/// The directory under the runner's directory holding the servers' stderr.
pub const FORK_SERVER_DIR: &str = "fork-servers";
/// How many servers an agent keeps; the least recently used one is ended beyond that.
const MAX_SERVERS: usize = 8;
/// How long a fork may take before the server is given up (and the attempt spawned).
const FORK_TIMEOUT: Duration = Duration::from_secs(5);
/// Set in a server's environment: the command should serve forks.
const SERVER_VAR: &str = "BERTH_FORK_SERVER";

/// How a forked attempt ended, as its parent (the server) saw it: exit code or signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitStatus {
    /// The exit code, when it exited.
    pub code: Option<i32>,
    /// The signal, when one ended it.
    pub signal: Option<i32>,
    /// The attempt ended but its process lives on, to be reused once [`Release`]d.
    pub lives_on: bool,
}

/// Lets the server reuse a forked process whose attempt has ended (`ExitStatus::lives_on`).
/// Sent only once nothing can signal the process for that attempt any more; never sent, the
/// process is simply not reused (the server ends it when idle or when it ends).
#[derive(Debug)]
pub struct Release {
    /// Weak: a server dropped by the runner must end, whoever still holds a release.
    stdin: std::sync::Weak<Mutex<ChildStdin>>,
    pid: u32,
}

impl Release {
    /// Tells the server the process may run another attempt.
    pub fn send(self) {
        let Some(stdin) = self.stdin.upgrade() else { return };
        let mut line = serde_json::to_vec(&Order::Release { pid: self.pid }).unwrap_or_default();
        line.push(b'\n');
        let mut stdin = stdin.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // A server that cannot be written to has ended: its children end when idle.
        let _ = stdin.write_all(&line).and_then(|()| stdin.flush());
    }
}

/// What a server is started for: attempts with the same command, arguments and environment
/// (less what differs per attempt) share it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
}

impl Key {
    /// The key of `start`'s command.
    pub fn of(start: &Start) -> Key {
        let env = start
            .env
            .iter()
            .filter(|(name, _)| !per_attempt(name))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        Key { command: start.command.clone(), args: start.args.clone(), env }
    }
}

/// Variables that differ from attempt to attempt: set in the child, never in the server.
fn per_attempt(name: &str) -> bool {
    name.starts_with("BERTH_") || name == "CUDA_VISIBLE_DEVICES"
}

/// One attempt to fork.
#[derive(Debug)]
pub struct ForkRequest {
    /// The attempt's whole environment.
    pub env: BTreeMap<String, String>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// The files its stdout and stderr append to.
    pub stdout: PathBuf,
    /// See `stdout`.
    pub stderr: PathBuf,
}

/// What became of a request to fork.
#[derive(Debug)]
pub enum Outcome {
    /// The attempt runs as `pid`; its exit status arrives on `exit` (which closes without one
    /// if the server died first).
    Forked {
        /// The child's PID (and process group).
        pid: u32,
        /// Its exit status, from the server.
        exit: oneshot::Receiver<ExitStatus>,
        /// For when the status says the process lives on.
        release: Release,
    },
    /// No server can fork it now: spawn it. `why` is set when a server failed.
    Spawn {
        /// What went wrong with the server, if anything did.
        why: Option<String>,
    },
}

/// The servers of one runner.
#[derive(Debug)]
pub struct ForkServers {
    dir: PathBuf,
    /// The environment every server starts from (the agent's, plus `BERTH_ADDRESS` and such).
    base_env: Vec<(OsString, OsString)>,
    /// Least recently used first.
    servers: Vec<Server>,
    next_request: u64,
}

impl ForkServers {
    /// Servers keeping their stderr under `dir`, started with the agent's environment plus
    /// `extra_env`.
    pub fn new(dir: PathBuf, extra_env: Vec<(OsString, OsString)>) -> ForkServers {
        let mut base_env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        base_env.extend(extra_env);
        base_env.retain(|(name, _)| !per_attempt(&name.to_string_lossy()));
        ForkServers { dir, base_env, servers: Vec::new(), next_request: 0 }
    }

    /// Forks `request` from the server of `key`, starting that server if there is none.
    pub fn fork(&mut self, key: &Key, request: ForkRequest) -> Outcome {
        let Some(index) = self.servers.iter().position(|s| &s.key == key) else {
            self.start(key.clone());
            return Outcome::Spawn { why: None };
        };
        let server = self.servers.remove(index);
        let link = server.link.lock();
        let (ready, closed) = (link.ready, link.closed);
        drop(link);
        if closed && ready {
            // It served, then died: a new one for the next attempts.
            info!(pid = server.pid, command = %key.command, "a fork server ended; starting another");
            self.start(key.clone());
            return Outcome::Spawn { why: None };
        }
        if !ready {
            // Starting, or a command that does not serve forks (kept so it is not retried).
            self.servers.push(server);
            return Outcome::Spawn { why: None };
        }
        self.next_request += 1;
        match server.fork(self.next_request, request) {
            Ok((pid, exit)) => {
                let release = Release { stdin: Arc::downgrade(&server.stdin), pid };
                self.servers.push(server);
                Outcome::Forked { pid, exit, release }
            }
            Err(why) => {
                warn!(pid = server.pid, command = %key.command, "fork server given up: {why}");
                server.kill();
                Outcome::Spawn { why: Some(why) }
            }
        }
    }

    fn start(&mut self, key: Key) {
        if self.servers.len() >= MAX_SERVERS {
            // Dropping its stdin ends it.
            let old = self.servers.remove(0);
            debug!(pid = old.pid, "ending the least recently used fork server");
        }
        match Server::start(&self.dir, &self.base_env, key.clone()) {
            Ok(server) => {
                info!(pid = server.pid, command = %key.command, "fork server starting");
                self.servers.push(server);
            }
            Err(e) => warn!(command = %key.command, "cannot start a fork server: {e}"),
        }
    }
}

/// One server process.
#[derive(Debug)]
struct Server {
    key: Key,
    pid: u32,
    /// Requests go here; dropping it ends the server (releases hold it weakly).
    stdin: Arc<Mutex<ChildStdin>>,
    link: Arc<Link>,
}

/// The answer to a fork: the child's PID and where its exit status will arrive, or why not.
type Reply = Result<(u32, oneshot::Receiver<ExitStatus>), String>;

/// What the server's reader thread shares with the runner.
#[derive(Debug, Default)]
struct Link(Mutex<LinkState>);

#[derive(Debug, Default)]
struct LinkState {
    ready: bool,
    closed: bool,
    /// Forks asked for, by request number.
    waiting: HashMap<u64, SyncSender<Reply>>,
    /// Children running, by PID.
    children: HashMap<u32, oneshot::Sender<ExitStatus>>,
}

impl Link {
    fn lock(&self) -> MutexGuard<'_, LinkState> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A line from a server.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum Message {
    Ready,
    Forked { request: u64, pid: u32 },
    Failed { request: u64, error: String },
    Exited { pid: u32, code: Option<i32>, signal: Option<i32> },
    Done { pid: u32, code: i32 },
}

/// A line to a server.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Order<'a> {
    Fork {
        request: u64,
        env: &'a BTreeMap<String, String>,
        cwd: &'a std::path::Path,
        stdout: &'a std::path::Path,
        stderr: &'a std::path::Path,
    },
    Release {
        pid: u32,
    },
}

impl Server {
    fn start(
        dir: &std::path::Path,
        base_env: &[(OsString, OsString)],
        key: Key,
    ) -> io::Result<Server> {
        std::fs::create_dir_all(dir)?;
        let err_path = dir.join(format!("{}.err", std::process::id()));
        let stderr = berth_api::local::open_private(&err_path, true)?;
        let mut child = Command::new(&key.command)
            .args(&key.args)
            .env_clear()
            .envs(base_env.iter().map(|(n, v)| (n, v)))
            .envs(&key.env)
            .env(SERVER_VAR, "1")
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            // Ctrl-C in the agent's terminal is not for it.
            .process_group(0)
            .spawn()?;
        let pid = child.id();
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            let _ = child.kill();
            return Err(io::Error::other("no pipes to the fork server"));
        };
        let link = Arc::new(Link::default());
        let reader_link = link.clone();
        std::thread::Builder::new().name(format!("fork-server-{pid}")).spawn(move || {
            read(BufReader::new(stdout), &reader_link, pid);
            // Reap it: it is this thread's child.
            let _ = child.wait();
        })?;
        Ok(Server { key, pid, stdin: Arc::new(Mutex::new(stdin)), link })
    }

    fn fork(&self, request: u64, fork: ForkRequest) -> Reply {
        let (tx, rx) = sync_channel(1);
        self.link.lock().waiting.insert(request, tx);
        let order = Order::Fork {
            request,
            env: &fork.env,
            cwd: &fork.cwd,
            stdout: &fork.stdout,
            stderr: &fork.stderr,
        };
        let mut line = serde_json::to_vec(&order).map_err(|e| e.to_string())?;
        line.push(b'\n');
        let mut stdin = self.stdin.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Err(e) = stdin.write_all(&line).and_then(|()| stdin.flush()) {
            self.link.lock().waiting.remove(&request);
            return Err(format!("cannot write to it: {e}"));
        }
        drop(stdin);
        wait_reply(&rx, request, &self.link)
    }

    fn kill(self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

fn wait_reply(rx: &Receiver<Reply>, request: u64, link: &Link) -> Reply {
    match rx.recv_timeout(FORK_TIMEOUT) {
        Ok(reply) => reply,
        Err(e) => {
            link.lock().waiting.remove(&request);
            Err(match e {
                std::sync::mpsc::RecvTimeoutError::Timeout => {
                    format!("no answer to a fork within {FORK_TIMEOUT:?}")
                }
                std::sync::mpsc::RecvTimeoutError::Disconnected => "it ended".to_string(),
            })
        }
    }
}

/// The reader thread: hands replies to the forks waiting for them and exit statuses to the
/// watchers, until the server's stdout closes.
fn read(stdout: BufReader<ChildStdout>, link: &Link, pid: u32) {
    for line in stdout.lines() {
        let line = match line {
            Ok(line) => line,
            Err(e) => {
                warn!(pid, "cannot read from the fork server: {e}");
                break;
            }
        };
        let message = match serde_json::from_str::<Message>(&line) {
            Ok(message) => message,
            Err(e) => {
                warn!(pid, "the fork server said something unexpected ({e}): {line:.200}");
                break;
            }
        };
        let mut state = link.lock();
        match message {
            Message::Ready => state.ready = true,
            Message::Forked { request, pid: child } if !is_child_of(child, pid) => {
                // The runner signals the group it is told of: never one that is not the
                // server's own child (pid 0 would be the agent's own group).
                warn!(pid, child, "the fork server named a process that is not its child");
                if let Some(waiting) = state.waiting.remove(&request) {
                    let _ = waiting.send(Err(format!("it named process {child}, not its child")));
                }
                break;
            }
            Message::Forked { request, pid: child } => {
                // Registered before anyone learns the PID: its exit cannot come first, the
                // server reports it on a later line.
                let (tx, rx) = oneshot::channel();
                state.children.insert(child, tx);
                if let Some(waiting) = state.waiting.remove(&request) {
                    if waiting.send(Ok((child, rx))).is_err() {
                        // Nobody waits any more (timed out): the attempt was spawned instead.
                        super::signal_group(child as i32, nix::sys::signal::Signal::SIGKILL);
                    }
                }
            }
            Message::Failed { request, error } => {
                if let Some(waiting) = state.waiting.remove(&request) {
                    let _ = waiting.send(Err(format!("the fork failed: {error}")));
                }
            }
            Message::Exited { pid: child, code, signal } => {
                if let Some(watcher) = state.children.remove(&child) {
                    let _ = watcher.send(ExitStatus { code, signal, lives_on: false });
                }
            }
            Message::Done { pid: child, code } => {
                if let Some(watcher) = state.children.remove(&child) {
                    let _ =
                        watcher.send(ExitStatus { code: Some(code), signal: None, lives_on: true });
                }
            }
        }
    }
    let mut state = link.lock();
    state.closed = true;
    // Waiting forks fail; watchers of running children fall back to polling.
    state.waiting.clear();
    state.children.clear();
}

/// True when `child` can be the server `server`'s child: a real PID whose parent is the
/// server, or one already gone from `/proc` (it ended and was reaped before this line was
/// read; its exit follows).
fn is_child_of(child: u32, server: u32) -> bool {
    child > 1
        && i32::try_from(child).is_ok()
        && named_child(super::state::stat(child), || super::state::stat(child), server)
}

/// The rule of [`is_child_of`] on what `/proc` said (`first`) and says when asked `again`.
/// A read that races the server reaping its child shows parent 0 (the kernel has already
/// unhashed the process, in any state letter); the process is gone once that is done, so a
/// second read finds nothing. A process that still shows parent 0 then (PID 1 of a
/// namespace, or one whose parent is outside it) is not the server's.
fn named_child(first: Option<Stat>, again: impl FnOnce() -> Option<Stat>, server: u32) -> bool {
    match first {
        None => true,
        Some(stat) if stat.ppid == server as i32 => true,
        Some(stat) if stat.ppid == 0 => again().is_none(),
        Some(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_ignore_what_differs_per_attempt() {
        let mut a = Start {
            command: "python3".into(),
            args: vec!["-m".into(), "w".into()],
            ..Start::default()
        };
        a.env.insert("PYTHONPATH".into(), "/x".into());
        a.env.insert("BERTH_CALL".into(), "1".into());
        a.env.insert("CUDA_VISIBLE_DEVICES".into(), "0".into());
        let mut b = a.clone();
        b.env.insert("BERTH_CALL".into(), "2".into());
        b.env.insert("CUDA_VISIBLE_DEVICES".into(), "1".into());
        assert_eq!(Key::of(&a), Key::of(&b));
        b.env.insert("PYTHONPATH".into(), "/y".into());
        assert_ne!(Key::of(&a), Key::of(&b));
    }

    #[test]
    fn only_the_servers_own_children_are_accepted() {
        let me = std::process::id();
        let parent = std::os::unix::process::parent_id();
        assert!(is_child_of(me, parent));
        assert!(!is_child_of(me, me), "a live process with another parent");
        assert!(!is_child_of(0, parent), "0 names the caller's own group");
        assert!(!is_child_of(1, 0));
        assert!(!is_child_of(u32::MAX, parent), "not a PID");
    }

    #[test]
    fn a_child_read_while_its_server_reaps_it_is_accepted_once_it_is_gone() {
        let stat = |state, ppid| Some(Stat { state, ppid, pgrp: 9, start_time: 1 });
        let unasked = || -> Option<Stat> { panic!("read once is enough") };
        assert!(named_child(None, unasked, 7), "reaped before the read");
        assert!(named_child(stat('R', 7), unasked, 7));
        assert!(named_child(stat('Z', 7), unasked, 7), "a zombie is still its child");
        assert!(!named_child(stat('S', 8), unasked, 7), "another's child");
        // Mid-reap reads show parent 0 in any state letter; the process is gone right after.
        for state in ['R', 'Z', 'X'] {
            assert!(named_child(stat(state, 0), || None, 7), "{state}");
        }
        assert!(!named_child(stat('S', 0), || stat('S', 0), 7), "parent outside the namespace");
    }

    #[test]
    fn messages_parse_and_unknown_ones_do_not() {
        let m: Message = serde_json::from_str(r#"{"type":"exited","pid":5,"signal":9}"#).unwrap();
        assert!(matches!(m, Message::Exited { pid: 5, code: None, signal: Some(9) }));
        let m: Message = serde_json::from_str(r#"{"type":"done","pid":5,"code":0}"#).unwrap();
        assert!(matches!(m, Message::Done { pid: 5, code: 0 }));
        let order = serde_json::to_string(&Order::Release { pid: 5 }).unwrap();
        assert_eq!(order, r#"{"type":"release","pid":5}"#);
        assert!(serde_json::from_str::<Message>(r#"{"type":"forked","request":1}"#).is_err());
        assert!(serde_json::from_str::<Message>(r#"{"type":"reboot"}"#).is_err());
    }
}
