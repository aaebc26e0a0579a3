//! Test support: a real `redis-server` on a free port, and a real etcd cluster ([`etcd`])
//! (feature `testutil`).
//!
//! Tests of the Redis backend run against the real server, never a mock. `scripts/test`
//! installs it (Debian's `redis-server`); when it is missing, [`RedisServer::start`] fails with
//! a message saying how to install it, so the Redis tests fail rather than skip.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

mod etcd;
pub use etcd::EtcdCluster;

/// How long the server may take to answer PING after it starts.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often readiness is checked while waiting.
const POLL_INTERVAL: Duration = Duration::from_millis(5);
/// How many free ports are tried when another process takes the chosen one first.
pub(crate) const PORT_ATTEMPTS: usize = 5;

/// A `redis-server` child process on 127.0.0.1, with no persistence, in a temporary directory;
/// killed when dropped.
pub struct RedisServer {
    child: Child,
    port: u16,
    /// The arguments beyond port, bind, dir and log, for a restart.
    extra: Vec<String>,
    /// Holds the server's working directory and log until the server is gone.
    dir: TempDir,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("dir", &self.dir.path())
            .finish()
    }
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers PING.
    ///
    /// redis-server cannot listen on port 0, so a free port is found by binding
    /// `127.0.0.1:0` and closing the socket; if another process takes the port in between, the
    /// server fails to start and another port is tried.
    pub fn start() -> io::Result<Self> {
        Self::start_with(&[])
    }

    /// A server with the persistence the head requires: `appendonly yes`, `appendfsync
    /// always` (its append-only file in the server's temporary directory).
    pub fn start_durable() -> io::Result<Self> {
        Self::start_with(&[
            "--appendonly".into(),
            "yes".into(),
            "--appendfsync".into(),
            "always".into(),
        ])
    }

    /// Kills the server with SIGKILL, as a crash would, and starts it again on the same port
    /// with the same settings and directory: without persistence it comes back empty, with
    /// `appendonly` it replays its log. Waits until it answers PING.
    pub fn kill_and_restart(&mut self) -> io::Result<()> {
        self.kill()?;
        self.restart()
    }

    /// Kills the server with SIGKILL and leaves it down (see [`RedisServer::restart`]).
    pub fn kill(&mut self) -> io::Result<()> {
        self.child.kill()?;
        self.child.wait().map(|_| ())
    }

    /// Starts a killed server again on the same port, settings and directory.
    pub fn restart(&mut self) -> io::Result<()> {
        let log = self.dir.path().join("redis.log");
        self.child = spawn(self.port, self.dir.path(), &log, &self.extra)?;
        self.wait_until_ready(&log)
    }

    /// A replica of the server on `port` (`--replicaof 127.0.0.1 PORT`): it copies the
    /// primary's writes asynchronously, as Redis replication does.
    pub fn replica_of(port: u16) -> io::Result<Self> {
        Self::start_with(&["--replicaof".into(), "127.0.0.1".into(), port.to_string()])
    }

    fn start_with(extra: &[String]) -> io::Result<Self> {
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            match Self::start_once(extra) {
                Ok(server) => return Ok(server),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(e),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    fn start_once(extra: &[String]) -> io::Result<Self> {
        let port = free_port()?;
        let dir = tempfile::Builder::new().prefix("berth-redis-").tempdir()?;
        let log = dir.path().join("redis.log");
        let child = spawn(port, dir.path(), &log, extra)?;
        let mut server = RedisServer { child, port, extra: extra.to_vec(), dir };
        server.wait_until_ready(&log)?;
        Ok(server)
    }

    /// Polls until PING answers PONG, the process exits, or [`STARTUP_TIMEOUT`] passes.
    fn wait_until_ready(&mut self, log: &Path) -> io::Result<()> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(io::Error::other(format!(
                    "redis-server on port {} exited ({status}) before answering: {}",
                    self.port,
                    read_log(log)
                )));
            }
            if ping(self.port).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "redis-server on port {} did not answer PING within {STARTUP_TIMEOUT:?}: {}",
                        self.port,
                        read_log(log)
                    ),
                ));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// `redis://127.0.0.1:PORT/0?prefix=PREFIX`, for [`StoreConfig::parse`](crate::StoreConfig::parse).
    pub fn store_url(&self, prefix: &str) -> String {
        format!("{}?prefix={prefix}", self.url())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // Already gone is fine; there is nothing else to do about a failure here.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `redis-server` on `port` with no persistence unless `extra` turns it on.
fn spawn(port: u16, dir: &Path, log: &Path, extra: &[String]) -> io::Result<Child> {
    let spawned = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .args(extra)
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    match spawned {
        Ok(child) => Ok(child),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(io::Error::new(
            io::ErrorKind::NotFound,
            "redis-server is not installed, and the Redis store tests need a real one: \
             install it with `apt-get update && apt-get install -y redis-server` \
             (scripts/test does this), then run the tests again",
        )),
        Err(e) => Err(io::Error::new(e.kind(), format!("cannot start redis-server: {e}"))),
    }
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// Sends PING in the Redis protocol and expects PONG.
fn ping(port: u16) -> io::Result<()> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_millis(200))?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    stream.write_all(b"PING\r\n")?;
    let mut answer = [0; 7];
    stream.read_exact(&mut answer)?;
    if &answer == b"+PONG\r\n" {
        Ok(())
    } else {
        Err(io::Error::other(format!("unexpected answer {:?}", String::from_utf8_lossy(&answer))))
    }
}

/// The last lines of the server's log, for error messages.
pub(crate) fn read_log(log: &Path) -> String {
    match std::fs::read_to_string(log) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(5)..].join(" | ");
            format!("log {}: {tail}", log.display())
        }
        Err(e) => format!("no log at {}: {e}", log.display()),
    }
}
