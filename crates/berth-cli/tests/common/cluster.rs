//! Running the `berth` binary as a user does, against real heads and agents: one temporary
//! data directory per test, daemons (`berth up`, `berth start --head`, `berth start --address`)
//! as child processes that are always ended (a guard that sends SIGTERM, then SIGKILL, and
//! reaps), client commands with a bounded run time, and bounded polling instead of sleeps.
//!
//! Every child gets the data directory twice, as `--data-dir` and as `$BERTH_DATA_DIR`, and
//! `$HOME` points into the temporary directory, so nothing ever reads or writes `~/.berth`.
//! `$BERTH_TOKEN` and `$BERTH_ADDRESS` of the environment running the tests are removed.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use tempfile::TempDir;

/// The binary under test.
pub const BERTH: &str = env!("CARGO_BIN_EXE_berth");
/// The longest any single wait lasts: a head coming up, a state change, a command's run.
pub const WAIT: Duration = Duration::from_secs(30);
/// How often a wait looks again.
pub const POLL: Duration = Duration::from_millis(50);
/// How long a daemon gets to end on SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Polls `check` every [`POLL`] until it gives a value, for at most `timeout`; panics with
/// `what` and the last thing `check` reported when it never does.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let start = Instant::now();
    loop {
        match check() {
            Ok(value) => return value,
            Err(last) if start.elapsed() >= timeout => {
                panic!("{what}: not within {timeout:?}; last seen:\n{last}")
            }
            Err(_) => thread::sleep(POLL),
        }
    }
}

/// A port on 127.0.0.1 that nothing listens on for as long as this lives: a socket bound to it
/// and never listening holds it (connections to it are refused), so no other test can take it
/// meanwhile, as one could take a port merely found free.
pub struct ClosedPort {
    /// The port.
    pub port: u16,
    _held: std::os::fd::OwnedFd,
}

/// See [`ClosedPort`].
pub fn closed_port() -> ClosedPort {
    use nix::sys::socket::{
        bind, getsockname, socket, AddressFamily, SockFlag, SockType, SockaddrIn,
    };
    let held = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)
        .expect("a socket");
    bind(std::os::fd::AsRawFd::as_raw_fd(&held), &SockaddrIn::new(127, 0, 0, 1, 0))
        .expect("bound to a free port");
    let bound: SockaddrIn =
        getsockname(std::os::fd::AsRawFd::as_raw_fd(&held)).expect("its address");
    ClosedPort { port: bound.port(), _held: held }
}

/// A port that was free a moment ago, for a daemon to bind (`--port`) when the test needs to
/// know it in advance. Another process may take it in between: the daemon then fails to start
/// and says the address is in use.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let port = listener.local_addr().expect("its address").port();
    drop(listener);
    port
}

/// `GET /healthz` at `address` answers 200 (a plain HTTP/1.0 request, no token needed).
pub fn healthy(address: &str) -> Result<(), String> {
    let addr: SocketAddr = address.parse().map_err(|e| format!("{address:?}: {e}"))?;
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connect {address}: {e}"))?;
    let timeout = Some(Duration::from_secs(5));
    stream.set_read_timeout(timeout).and_then(|()| stream.set_write_timeout(timeout)).ok();
    stream
        .write_all(b"GET /healthz HTTP/1.0\r\nHost: berth\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("send to {address}: {e}"))?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).map_err(|e| format!("read from {address}: {e}"))?;
    let status = answer.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) == Some("200") {
        Ok(())
    } else {
        Err(format!("GET /healthz at {address}: {status:?}"))
    }
}

/// One finished client command.
#[derive(Debug)]
pub struct Run {
    /// The command line, for messages.
    pub line: String,
    /// The exit status; `None` when a signal ended it.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Panics unless it exited 0; returns its stdout.
    pub fn ok(self) -> String {
        assert_eq!(self.code, Some(0), "{self}");
        self.stdout
    }

    /// Panics unless it exited with `code`; returns its stderr.
    pub fn fails(self, code: i32) -> String {
        assert_eq!(self.code, Some(code), "{self}");
        assert!(self.stdout.is_empty(), "nothing on stdout: {self}");
        self.stderr
    }

    /// Its stdout as one JSON value, after checking it exited 0.
    pub fn json(self) -> Value {
        let text = self.ok();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` exited {:?}\n--- stdout\n{}--- stderr\n{}",
            self.line, self.code, self.stdout, self.stderr
        )
    }
}

/// A client command still running; [`Running::finish`] waits for it (bounded).
pub struct Running {
    line: String,
    child: Option<Child>,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> Option<JoinHandle<String>> {
    pipe.map(|mut pipe| {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    })
}

impl Running {
    /// Waits up to `timeout` for it to exit; kills it (and panics) when it does not.
    pub fn finish(mut self, timeout: Duration) -> Run {
        let mut child = self.child.take().expect("not finished yet");
        let start = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if start.elapsed() < timeout => thread::sleep(Duration::from_millis(10)),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("`{}` did not end within {timeout:?}", self.line);
                }
            }
        };
        let text = |handle: Option<JoinHandle<String>>| {
            handle.map(|h| h.join().unwrap_or_default()).unwrap_or_default()
        };
        Run {
            line: std::mem::take(&mut self.line),
            code: status.code(),
            stdout: text(self.stdout.take()),
            stderr: text(self.stderr.take()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A long-running `berth` process (head, agent or `berth up`), its output in a log file. Dropped,
/// it is ended: SIGTERM, up to 10 s to go, then SIGKILL; always reaped. When the test is
/// panicking, its log is printed to help find out why.
pub struct Daemon {
    name: String,
    child: Child,
    log: PathBuf,
    exited: Option<ExitStatus>,
}

impl Daemon {
    /// Its process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it printed so far (stdout and stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its exit status, if it has exited (reaps it).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// Panics (with its log) if it has exited.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.exited() {
            panic!("{} exited ({status}):\n{}", self.name, self.log());
        }
    }

    /// Sends `signal`, unless it has exited already.
    pub fn signal(&mut self, signal: Signal) {
        if self.exited().is_none() {
            let _ = kill(Pid::from_raw(self.pid() as i32), signal);
        }
    }

    /// Waits up to `timeout` for it to exit (reaping it); panics when it does not.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let name = self.name.clone();
        wait_for(&format!("{name} exits"), timeout, || self.exited().ok_or_else(|| self.log()))
    }

    /// SIGKILL, and waits for it to be gone.
    pub fn kill(&mut self) -> ExitStatus {
        self.signal(Signal::SIGKILL);
        self.wait_exit(WAIT)
    }

    /// Ends it as `Drop` does; never panics.
    fn stop(&mut self) {
        if self.exited().is_some() {
            return;
        }
        self.signal(Signal::SIGTERM);
        let start = Instant::now();
        while self.exited().is_none() && start.elapsed() < STOP_GRACE {
            thread::sleep(Duration::from_millis(20));
        }
        if self.exited().is_none() {
            let _ = self.child.kill();
            self.exited = self.child.wait().ok();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
        if thread::panicking() {
            eprintln!(
                "--- log of {} ({})\n{}--- end of {}",
                self.name,
                self.log.display(),
                self.log(),
                self.name
            );
        }
    }
}

/// A test's own Berth installation: a temporary directory holding the data directory (`data/`)
/// and the daemons' logs (`logs/`).
pub struct Cluster {
    root: TempDir,
    data: PathBuf,
    runs: AtomicUsize,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster::new()
    }
}

impl Drop for Cluster {
    /// Agents stopped by a signal leave their processes running, for the next agent to adopt:
    /// a test's cluster kills what its agents' runner directories still record.
    fn drop(&mut self) {
        let agents = self.data.join("agents");
        for entry in std::fs::read_dir(agents).into_iter().flatten().flatten() {
            berth_agent::process::kill_recorded(&entry.path());
        }
    }
}

impl Cluster {
    /// A fresh temporary directory.
    pub fn new() -> Cluster {
        let root = tempfile::Builder::new().prefix("berth-e2e-").tempdir().expect("a temp dir");
        let data = root.path().join("data");
        std::fs::create_dir_all(root.path().join("logs")).expect("the logs directory");
        Cluster { root, data, runs: AtomicUsize::new(0) }
    }

    /// The data directory (`--data-dir`, `$BERTH_DATA_DIR`).
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// A file of the data directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.data.join(name)
    }

    /// `berth ARGS --data-dir DIR`, with this cluster's environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(BERTH);
        command
            .args(args)
            .arg("--data-dir")
            .arg(&self.data)
            .env("BERTH_DATA_DIR", &self.data)
            .env("HOME", self.root.path())
            .env_remove("BERTH_TOKEN")
            .env_remove("BERTH_ADDRESS")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        command
    }

    /// Starts a client command without waiting for it.
    pub fn start(&self, args: &[&str]) -> Running {
        self.start_with(self.command(args), args)
    }

    fn start_with(&self, mut command: Command, args: &[&str]) -> Running {
        let line = format!("berth {}", args.join(" "));
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("`{line}` cannot start: {e}"));
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        Running { line, child: Some(child), stdout, stderr }
    }

    /// Runs a client command to its end (at most [`WAIT`]).
    pub fn run(&self, args: &[&str]) -> Run {
        self.start(args).finish(WAIT)
    }

    /// Runs a client command with extra environment variables.
    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut command = self.command(args);
        command.envs(env.iter().copied());
        self.start_with(command, args).finish(WAIT)
    }

    /// Runs a client command that must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        self.run(args).ok()
    }

    /// Runs a client command with `--output json`; its answer.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["--output", "json"]);
        self.run(&all).json()
    }

    /// Starts a daemon (`up`, `start --head`, `start --address …`); `name` names its log.
    pub fn spawn(&self, name: &str, args: &[&str]) -> Daemon {
        self.spawn_command(name, self.command(args))
    }

    /// Starts `command` (made by [`Cluster::command`], then given more) as a daemon.
    pub fn spawn_command(&self, name: &str, mut command: Command) -> Daemon {
        let n = self.runs.fetch_add(1, Ordering::Relaxed);
        let log = self.root.path().join("logs").join(format!("{n:02}-{name}.log"));
        let file = File::create(&log).expect("a log file");
        let child = command
            .stdout(file.try_clone().expect("the log file, twice"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("`{command:?}` cannot start: {e}"));
        Daemon { name: name.to_string(), child, log, exited: None }
    }

    /// As [`Cluster::spawn`], with the open-file limit (soft and hard) at `files`, as a
    /// machine with that limit would start it.
    pub fn spawn_with_open_files(&self, name: &str, args: &[&str], files: u64) -> Daemon {
        let n = self.runs.fetch_add(1, Ordering::Relaxed);
        let log = self.root.path().join("logs").join(format!("{n:02}-{name}.log"));
        let file = File::create(&log).expect("a log file");
        let berth = self.command(args);
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("ulimit -n {files} && exec \"$0\" \"$@\""))
            .arg(berth.get_program())
            .args(berth.get_args())
            .envs(berth.get_envs().filter_map(|(k, v)| Some((k, v?))))
            .env_remove("BERTH_TOKEN")
            .env_remove("BERTH_ADDRESS")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("the log file, twice"))
            .stderr(file);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("`berth {}` cannot start: {e}", args.join(" ")));
        Daemon { name: name.to_string(), child, log, exited: None }
    }

    /// Waits until `daemon` (a head, or `berth up`) serves: its process ID is in the pid
    /// file, the address it wrote answers `GET /healthz`. Returns the address.
    pub fn wait_head(&self, daemon: &mut Daemon) -> String {
        let pid = daemon.pid().to_string();
        wait_for("the head serves", WAIT, || {
            daemon.assert_running();
            let written = std::fs::read_to_string(self.file("berth.pid")).unwrap_or_default();
            if written.trim() != pid {
                return Err(format!("berth.pid holds {written:?}, not {pid}"));
            }
            let address = std::fs::read_to_string(self.file("head-address"))
                .map_err(|e| format!("no head-address file: {e}"))?;
            let address = address.trim().to_string();
            healthy(&address)?;
            Ok(address)
        })
    }

    /// `berth start --head --port 0 EXTRA…`, once it serves; and its address.
    pub fn head(&self, extra: &[&str]) -> (Daemon, String) {
        let mut args = vec!["start", "--head", "--port", "0"];
        args.extend_from_slice(extra);
        let mut head = self.spawn("head", &args);
        let address = self.wait_head(&mut head);
        (head, address)
    }

    /// The nodes the head lists, as JSON.
    pub fn nodes(&self) -> Vec<Value> {
        let list = self.json(&["list", "nodes"]);
        list["items"].as_array().unwrap_or_else(|| panic!("no items: {list}")).clone()
    }

    /// Waits until node `id` is in `state`; returns the node.
    /// Waits until node `id` has registered again since `before` (what `get node` said then)
    /// and is ALIVE, at most `within`: the node as the head shows it.
    pub fn wait_registered_again(&self, id: &str, before: &Value, within: Duration) -> Value {
        wait_for(&format!("node {id} registers again"), within, || {
            let node = self.json(&["get", "node", id]);
            if node["registered_at_ms"] != before["registered_at_ms"] && node["state"] == "ALIVE" {
                Ok(node)
            } else {
                Err(node.to_string())
            }
        })
    }

    pub fn wait_node(&self, id: &str, state: &str) -> Value {
        wait_for(&format!("node {id} is {state}"), WAIT, || {
            // Until its agent registers, the head does not know it (404).
            let run = self.run(&["get", "node", id, "--output", "json"]);
            if run.code != Some(0) {
                return Err(run.to_string());
            }
            let node = run.json();
            if node["state"] == state {
                Ok(node)
            } else {
                Err(node.to_string())
            }
        })
    }

    /// Waits until `id` (an actor, task or placement group) satisfies `check`; returns it.
    pub fn wait_object(&self, id: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        wait_for(&format!("{id} {what}"), WAIT, || {
            let object = self.json(&["get", id]);
            if check(&object) {
                Ok(object)
            } else {
                Err(serde_json::to_string_pretty(&object).unwrap_or_default())
            }
        })
    }
}

impl Cluster {
    /// `berth actor create --command sleep --arg 600 EXTRA…`; the new actor's ID.
    pub fn sleeper(&self, extra: &[&str]) -> String {
        let mut args = vec!["actor", "create", "--command", "sleep", "--arg", "600"];
        args.extend_from_slice(extra);
        created_id(&self.ok(&args), "actor-")
    }

    /// An agent for node `id` with 4 CPUs and no GPUs joining the heads at `address`
    /// (comma-separated) with `token`.
    pub fn agent_of(&self, address: &str, id: &str, token: &str) -> Daemon {
        let args = [
            "start",
            "--address",
            address,
            "--node-id",
            id,
            "--num-cpus",
            "4",
            "--num-gpus",
            "0",
            "--token",
            token,
        ];
        self.spawn(&format!("agent-{id}"), &args)
    }
}

/// The first word of `berth actor create`'s (or `pg create`'s) answer: the new ID.
pub fn created_id(stdout: &str, prefix: &str) -> String {
    let id = stdout.split_whitespace().next().unwrap_or("");
    assert!(id.starts_with(prefix), "no {prefix}… ID in:\n{stdout}");
    id.to_string()
}
