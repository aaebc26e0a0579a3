//! A real etcd cluster of N members on free ports, for tests (Debian's `etcd-server`).

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::{read_log, PORT_ATTEMPTS};

/// How long the cluster may take to elect a leader and answer.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// What etcd logs when its port was taken.
const PORT_TAKEN: &str = "address already in use";

/// One member: its process (`None` once killed), ports and data.
struct Member {
    name: String,
    child: Option<Child>,
    client: u16,
    peer: u16,
}

/// An etcd cluster of its own: members on 127.0.0.1 with free ports, in a temporary
/// directory, killed when dropped. Started with the transaction limits Berth's commits need
/// (`--max-txn-ops 100000`, `--max-request-bytes 64 MiB`) and fast elections.
pub struct EtcdCluster {
    members: Vec<Member>,
    dir: TempDir,
    /// Another address the members also serve clients on (a test's veth end).
    also: Option<String>,
}

impl fmt::Debug for EtcdCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdCluster").field("endpoints", &self.endpoints()).finish()
    }
}

impl EtcdCluster {
    /// Starts `n` members and waits until every one answers `/health` with a leader.
    pub fn start(n: usize) -> io::Result<EtcdCluster> {
        EtcdCluster::start_also_on(n, None)
    }

    /// As [`EtcdCluster::start`], the members serving clients on `also` (an IP address of
    /// this machine) too, on the same ports.
    pub fn start_also_on(n: usize, also: Option<&str>) -> io::Result<EtcdCluster> {
        // Ports are found free, then bound by etcd a moment later: another process of the
        // test run may take one in between. Such a start is tried again on other ports.
        let mut tries = 0;
        loop {
            tries += 1;
            match EtcdCluster::try_start(n, also) {
                Err(e) if tries < PORT_ATTEMPTS && e.to_string().contains(PORT_TAKEN) => continue,
                started => return started,
            }
        }
    }

    fn try_start(n: usize, also: Option<&str>) -> io::Result<EtcdCluster> {
        let dir = tempfile::Builder::new().prefix("berth-etcd-").tempdir()?;
        // Every port held open until all are chosen: one at a time, the kernel may hand the same
        // free port out twice (etcd then refuses an initial cluster with a duplicate URL).
        let held = (0..2 * n)
            .map(|_| std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
            .collect::<io::Result<Vec<_>>>()?;
        let ports = held
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect::<io::Result<Vec<u16>>>()?;
        drop(held);
        let mut members = Vec::new();
        for i in 0..n {
            members.push(Member {
                name: format!("m{i}"),
                child: None,
                client: ports[2 * i],
                peer: ports[2 * i + 1],
            });
        }
        let initial: Vec<String> =
            members.iter().map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer)).collect();
        let mut cluster = EtcdCluster { members, dir, also: also.map(str::to_string) };
        for i in 0..n {
            cluster.spawn(i, &initial.join(","))?;
        }
        cluster.wait_healthy()?;
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize, initial: &str) -> io::Result<()> {
        let member = &self.members[i];
        let data = self.dir.path().join(&member.name);
        let log = std::fs::File::create(self.dir.path().join(format!("{}.log", member.name)))?;
        let mut client = format!("http://127.0.0.1:{}", member.client);
        if let Some(also) = &self.also {
            client.push_str(&format!(",http://{also}:{}", member.client));
        }
        let peer = format!("http://127.0.0.1:{}", member.peer);
        let spawned = Command::new("etcd")
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", initial, "--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "berth-test"])
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(["--max-txn-ops", "100000", "--max-request-bytes", "67108864"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "etcd is not installed, and the etcd store tests need a real cluster: \
                     install it with `apt-get update && apt-get install -y etcd-server` \
                     (scripts/test does this), then run the tests again",
                ))
            }
            Err(e) => return Err(io::Error::new(e.kind(), format!("cannot start etcd: {e}"))),
        };
        self.members[i].child = Some(child);
        Ok(())
    }

    fn wait_healthy(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let mut all = true;
            for member in &mut self.members {
                let Some(child) = member.child.as_mut() else { continue };
                if let Some(status) = child.try_wait()? {
                    // The directory goes with the cluster: the log's end is in the error.
                    let log = self.dir.path().join(format!("{}.log", member.name));
                    return Err(io::Error::other(format!(
                        "etcd member {} exited ({status}): {}",
                        member.name,
                        read_log(&log)
                    )));
                }
                all &= healthy(member.client);
            }
            if all {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the etcd cluster was not healthy within {STARTUP_TIMEOUT:?}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `HOST:PORT,…` of the members' client ports.
    pub fn endpoints(&self) -> String {
        self.endpoints_on("127.0.0.1")
    }

    /// `HOST:PORT,…` of the members' client ports on address `host`.
    pub fn endpoints_on(&self, host: &str) -> String {
        let hosts: Vec<String> =
            self.members.iter().map(|m| format!("{host}:{}", m.client)).collect();
        hosts.join(",")
    }

    /// `etcd://HOST:PORT,…?prefix=PREFIX`, for [`StoreConfig::parse`](crate::StoreConfig::parse).
    pub fn store_url(&self, prefix: &str) -> String {
        format!("etcd://{}?prefix={prefix}", self.endpoints())
    }

    /// The index of the member that leads now, as the members report it.
    pub fn leader(&self) -> Option<usize> {
        let status: Vec<Option<(String, String)>> =
            self.members.iter().map(|m| m.child.as_ref().and(status(m.client))).collect();
        let leader = status.iter().flatten().map(|(_, leader)| leader.clone()).next()?;
        status.iter().position(|s| s.as_ref().is_some_and(|(me, _)| *me == leader))
    }

    /// Starts killed member `i` again on its ports and data (etcd takes its existing data
    /// over the initial-cluster flags), and waits until every running member is healthy.
    pub fn restart(&mut self, i: usize) -> io::Result<()> {
        if self.members[i].child.is_some() {
            return Ok(());
        }
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect();
        self.spawn(i, &initial.join(","))?;
        self.wait_healthy()
    }

    /// Kills member `i` (SIGKILL), as a machine lost.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// The member's own ID and its leader's, from `POST /v3/maintenance/status`.
fn status(port: u16) -> Option<(String, String)> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    let request = "POST /v3/maintenance/status HTTP/1.0\r\nHost: etcd\r\nContent-Type: \
                   application/json\r\nContent-Length: 2\r\n\r\n{}";
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let body = answer.split_once("\r\n\r\n")?.1;
    let json: serde_json::Value = serde_json::from_str(body).ok()?;
    let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
    Some((text(&json["header"]["member_id"])?, text(&json["leader"])?))
}

/// `GET /health` answers `"health":"true"`.
fn healthy(port: u16) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    if stream.write_all(b"GET /health HTTP/1.0\r\nHost: etcd\r\n\r\n").is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.contains("\"health\":\"true\"")
}
