//! `berth bench failover --store URL`: how long a standby head takes over from an active head
//! killed with SIGKILL, with many actors in the store.
//!
//! Two heads run as processes of this binary (`berth start --head`, each with its own data
//! directory, both on `--store`); simulated agents in this process know both addresses. The
//! active head's client creates `--actors` actors (batches of 1,000) and waits until they are
//! ALIVE. Each round then kills the active head and measures, from the kill:
//!
//! - **serving**: the standby's `/healthz` says `ok`;
//! - **agents**: every node registered again with the new head (its `registered_at_ms` is
//!   after the kill);
//! - **first creation**: a client that sends one creation after another to both addresses gets
//!   its first 201.
//!
//! The killed head is started again (it stands by) for the next round, so rounds alternate.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context};
use berth_agent::{SimCluster, SimNode, SimOptions};
use berth_api::local::AGENT_TOKEN_FILE;
use berth_client::{Endpoint, Environment, Overrides};
use serde::Serialize;

/// How long any one wait may take before the bench gives up.
const PATIENCE: Duration = Duration::from_secs(120);
/// How often the waits look.
const POLL: Duration = Duration::from_millis(10);

/// What `berth bench failover` measures with.
#[derive(Clone, Debug)]
pub struct FailoverBench {
    /// The store both heads share (`redis://…`, `etcd://…`).
    pub store: String,
    /// Actors in the store during the takeovers.
    pub actors: usize,
    /// Simulated nodes.
    pub nodes: usize,
    /// Takeovers measured.
    pub rounds: usize,
    /// The heads' `--lease-ttl`, seconds.
    pub lease_ttl: f64,
}

/// One takeover's figures, seconds from the kill.
#[derive(Clone, Debug, Serialize)]
pub struct Round {
    /// The round, from 1.
    pub round: usize,
    /// Until the standby served.
    pub serving_s: f64,
    /// Until every node had registered again.
    pub agents_s: f64,
    /// Until the first creation was acknowledged.
    pub first_creation_s: f64,
}

/// A head process.
struct Head {
    child: Child,
    port: u16,
    dir: PathBuf,
    log: PathBuf,
}

impl Head {
    fn start(
        exe: &Path,
        settings: &FailoverBench,
        dir: PathBuf,
        port: u16,
    ) -> anyhow::Result<Head> {
        let log = dir.with_extension("log");
        let file = std::fs::File::create(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let child = Command::new(exe)
            .args(["start", "--head", "--port", &port.to_string(), "--store", &settings.store])
            .args(["--lease-ttl", &settings.lease_ttl.to_string(), "--heartbeat-timeout", "30"])
            .arg("--data-dir")
            .arg(&dir)
            .env_remove("BERTH_TOKEN")
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("cannot start a head ({})", exe.display()))?;
        Ok(Head { child, port, dir, log })
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The end of its log, for errors.
    fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    }
}

impl Drop for Head {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port that was free a moment ago (a head's port must be known before it binds it: the
/// agents and the client are given both heads' addresses).
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Runs the bench; `progress` is told each step.
pub fn run(settings: &FailoverBench, progress: &mut dyn FnMut(&str)) -> anyhow::Result<Vec<Round>> {
    if settings.actors == 0 || settings.nodes == 0 || settings.rounds == 0 {
        bail!("--actors, --nodes and --runs must each be at least 1");
    }
    let exe = std::env::current_exe().context("cannot find this program to start the heads")?;
    let root = tempfile::Builder::new().prefix("berth-bench-failover-").tempdir()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let http = berth_client::async_http_builder().timeout(Duration::from_secs(30)).build()?;
        // One after the other: the first takes the lease, the second stands by.
        let first = Head::start(&exe, settings, root.path().join("a"), free_port()?)?;
        wait_health(&http, &first, "ok").await?;
        let second = Head::start(&exe, settings, root.path().join("b"), free_port()?)?;
        wait_health(&http, &second, "standby").await?;
        let mut heads = [first, second];
        let mut active = 0;
        let both = format!("{},{}", heads[0].address(), heads[1].address());
        // The heads' token as the CLI finds it, from the first head's data directory (the
        // environment left out, as it is for the heads).
        let given = Overrides {
            address: Some(both.clone()),
            data_dir: Some(heads[0].dir.clone()),
            ca: None,
        };
        let endpoint = Endpoint::resolve(&given, &Environment::default())?;
        let token = endpoint.token.context("the first head wrote no token file")?.secret;
        let agent_token = std::fs::read_to_string(heads[0].dir.join(AGENT_TOKEN_FILE))?;
        let nodes: Vec<SimNode> = (0..settings.nodes)
            .map(|i| {
                let mut node = SimNode::new(format!("node-{i:04}"));
                node.resources = [("CPU".to_string(), "1000".to_string())].into();
                node
            })
            .collect();
        progress(&format!("{} simulated nodes join both heads", nodes.len()));
        let agents =
            SimCluster::start_with(&both, agent_token.trim(), nodes, SimOptions::default())
                .map_err(|e| anyhow!("the simulated agents could not start: {e}"))?;
        agents.wait_registered(PATIENCE).await.map_err(|e| anyhow!("{e}"))?;
        progress(&format!("{} actors created and ALIVE", settings.actors));
        create(&http, &heads[0].address(), &token, settings.actors).await?;
        wait_alive(&http, &heads[0].address(), &token, settings.actors).await?;

        let mut rounds = Vec::new();
        for round in 1..=settings.rounds {
            let standby = 1 - active;
            progress(&format!("round {round}: the active head killed (SIGKILL)"));
            let killed_ms = unix_ms();
            let started = Instant::now();
            heads[active].kill();
            let prober = {
                let (http, token) = (http.clone(), token.clone());
                let addresses = endpoint.addresses.clone();
                tokio::spawn(
                    async move { first_creation(&http, &addresses, &token, started).await },
                )
            };
            wait_health(&http, &heads[standby], "ok").await?;
            let serving_s = started.elapsed().as_secs_f64();
            wait_reregistered(&http, &heads[standby].address(), &token, settings.nodes, killed_ms)
                .await?;
            let agents_s = started.elapsed().as_secs_f64();
            let first_creation_s = prober.await??;
            rounds.push(Round { round, serving_s, agents_s, first_creation_s });
            // The killed head comes back as the standby of the next round.
            let (dir, port) = (heads[active].dir.clone(), heads[active].port);
            heads[active] = Head::start(&exe, settings, dir, port)?;
            wait_health(&http, &heads[active], "standby").await?;
            active = standby;
        }
        let _ = agents.shutdown().await;
        Ok(rounds)
    })
}

/// Waits until `head`'s `/healthz` says `status`.
async fn wait_health(http: &reqwest::Client, head: &Head, status: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + PATIENCE;
    let url = format!("http://{}/healthz", head.address());
    loop {
        if let Ok(answer) = http.get(&url).timeout(Duration::from_secs(1)).send().await {
            if let Ok(body) = answer.json::<serde_json::Value>().await {
                if body["status"] == status {
                    return Ok(());
                }
            }
        }
        if Instant::now() > deadline {
            bail!(
                "the head at {} never said {status:?}; its log ends:\n{}",
                head.address(),
                head.tail()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Creates `n` actors that ask for nothing, in batches of 1,000.
async fn create(
    http: &reqwest::Client,
    address: &str,
    token: &str,
    n: usize,
) -> anyhow::Result<()> {
    let body = serde_json::json!({"command": "sleep", "args": ["600"], "resources": {}});
    let mut left = n;
    while left > 0 {
        let items: Vec<&serde_json::Value> = std::iter::repeat_n(&body, left.min(1000)).collect();
        let answer = http
            .post(format!("http://{address}/api/v1/actors:batch"))
            .bearer_auth(token)
            .json(&serde_json::json!({"items": items}))
            .send()
            .await?;
        if !answer.status().is_success() {
            bail!(
                "creating actors: the head answered {}: {}",
                answer.status(),
                answer.text().await?
            );
        }
        left -= items.len();
    }
    Ok(())
}

/// Waits until `n` actors are ALIVE.
async fn wait_alive(
    http: &reqwest::Client,
    address: &str,
    token: &str,
    n: usize,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let status: serde_json::Value = http
            .get(format!("http://{address}/api/v1/cluster/status"))
            .bearer_auth(token)
            .send()
            .await?
            .json()
            .await?;
        if status["actors"]["ALIVE"].as_u64() == Some(n as u64) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{n} actors never became ALIVE: {}", status["actors"]);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every one of `nodes` nodes registered after `since_ms`.
async fn wait_reregistered(
    http: &reqwest::Client,
    address: &str,
    token: &str,
    nodes: usize,
    since_ms: u64,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let answer = http
            .get(format!("http://{address}/api/v1/nodes"))
            .query(&[("limit", "10000")])
            .bearer_auth(token)
            .send()
            .await;
        if let Ok(answer) = answer {
            if let Ok(list) = answer.json::<serde_json::Value>().await {
                let again = list["items"]
                    .as_array()
                    .map(|items| {
                        items
                            .iter()
                            .filter(|n| n["registered_at_ms"].as_u64() >= Some(since_ms))
                            .count()
                    })
                    .unwrap_or(0);
                if again >= nodes {
                    return Ok(());
                }
            }
        }
        if Instant::now() > deadline {
            bail!("the nodes never all registered with the new head");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Sends one creation after another to each address until one is acknowledged; the seconds
/// from `started`.
async fn first_creation(
    http: &reqwest::Client,
    addresses: &[String],
    token: &str,
    started: Instant,
) -> anyhow::Result<f64> {
    let body = serde_json::json!({"command": "sleep", "args": ["600"], "resources": {}});
    let deadline = started + PATIENCE;
    loop {
        for address in addresses {
            let answer = http
                .post(format!("http://{address}/api/v1/actors"))
                .bearer_auth(token)
                .json(&body)
                .timeout(Duration::from_secs(5))
                .send()
                .await;
            if answer.is_ok_and(|a| a.status().as_u16() == 201) {
                return Ok(started.elapsed().as_secs_f64());
            }
        }
        if Instant::now() > deadline {
            bail!("no creation was acknowledged after the kill");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The median of `values` (not empty).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
