//! The long-running commands: `berth start --head` (the control plane), `berth start
//! --address` (an agent), `berth up` (a head and local agents in one process: the quick start)
//! and `berth stop`.
//!
//! They run in the foreground until Ctrl-C or SIGTERM (as `ray start --block` does) and write
//! their process ID to `DATA_DIR/berth.pid`, so `berth stop` can end them from another
//! terminal.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use berth_agent::{
    Agent, AgentConfig, ProcessOptions, ProcessRunner, Runner, RunnerKind, SimCluster, SimNode,
    SimOptions,
};
use berth_api::local::{
    default_data_dir, ADDRESS_FILE, AGENT_TOKEN_ENV, AGENT_TOKEN_FILE, DEFAULT_PORT, TOKEN_ENV,
    TOKEN_FILE,
};
use berth_head::{HeadConfig, RunningHead};
use berth_store::StoreConfig;
use clap::Args;

use crate::logging::{self, LogOptions};

/// The file holding the process ID of a foreground `berth start` or `berth up`.
pub const PID_FILE: &str = "berth.pid";

/// Options of `berth start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    /// Start the head (the control plane).
    #[arg(long, conflicts_with = "address")]
    pub head: bool,
    /// Start an agent that joins the head at HOST:PORT (several, comma-separated, for a head
    /// with standbys: the agent moves to the next when it loses the one it had).
    #[arg(long, value_name = "HOST:PORT")]
    pub address: Option<String>,
    #[command(flatten)]
    pub head_options: HeadOptions,
    #[command(flatten)]
    pub tls: TlsOptions,
    #[command(flatten)]
    pub agent: AgentOptions,
    #[command(flatten)]
    pub log: LogOptions,
}

/// Options of the head (`berth start --head`, `berth up`).
#[derive(Debug, Args)]
pub struct HeadOptions {
    /// The port for REST, the dashboard, /metrics and the agent protocol.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// The address to listen on; the default accepts local connections only. Use 0.0.0.0 for
    /// a cluster of several machines (every call still needs the token).
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Where the token, the embedded store and the head's address file live
    /// [default: $BERTH_DATA_DIR, else ~/.berth].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Keep the state in Redis (redis://HOST:PORT[/DB][?prefix=NAME]) or an etcd cluster
    /// (etcd://HOST:PORT,HOST:PORT,…[?prefix=NAME]) instead of DATA_DIR, so a head on another
    /// machine can take over (README § High availability).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// A scheduler profile (YAML, as `berth explain --profile`): scorers, weights, pick.
    #[arg(long, value_name = "FILE")]
    pub scheduler_config: Option<PathBuf>,
    /// Seconds without a heartbeat after which a node is declared dead (its actors restart
    /// elsewhere); after a third of it, the node is SUSPECT (no new work goes there, nothing
    /// is restarted yet).
    #[arg(
        long,
        default_value_t = berth_head::config::DEFAULT_HEARTBEAT_TIMEOUT.as_secs_f64(),
        value_name = "SECONDS"
    )]
    pub heartbeat_timeout: f64,
    /// Seconds a finished object (DEAD actor; FINISHED, FAILED or CANCELLED task; REMOVED
    /// placement group) is kept before the head forgets it.
    #[arg(long, default_value_t = berth_head::config::DEFAULT_KEEP_FINISHED_FOR.as_secs(), value_name = "SECONDS")]
    pub keep_finished_for: u64,
    /// Finished objects kept per kind at most; the oldest-finished are forgotten first.
    #[arg(long, default_value_t = berth_head::config::DEFAULT_KEEP_FINISHED, value_name = "N")]
    pub keep_finished: usize,
    /// Rare-resource isolation: nodes with any of these resources get the taint
    /// `berth.io/rare-NAME=true`, so only work that asks for the resource (or tolerates the
    /// taint) goes there. Kept in the store: a later start without the flag keeps the list;
    /// `--rare-resource-isolation ''` turns it off.
    #[arg(long, value_name = "NAME,...")]
    pub rare_resource_isolation: Option<String>,
    /// Seconds the store's lease lasts without renewal. A second head started on the same
    /// store (Redis, etcd) stands by and takes over within this (and a second) once the active head
    /// dies.
    #[arg(long, default_value_t = berth_head::LEASE_TTL.as_secs_f64(), value_name = "SECONDS")]
    pub lease_ttl: f64,
    /// Run the autoscaler with this file's node types, limits and provider: nodes are launched
    /// for what waits and idle ones removed (README § Autoscaling).
    #[arg(long, visible_alias = "autoscale", value_name = "FILE")]
    pub autoscaler: Option<PathBuf>,
    /// Milliseconds over which a busy head gathers the starts and stops it sends each agent
    /// (one message for many); a quiet head sends at once. 0 sends each start as soon as it
    /// is durable, at more CPU per start under load (README § Measuring speed).
    #[arg(
        long,
        default_value_t = DEFAULT_ASSIGNMENT_WINDOW_MS,
        value_name = "MS",
        // So that a negative number is refused as this flag's value, not as an unknown flag.
        allow_negative_numbers = true
    )]
    pub assignment_window: u64,
    /// What the head demands of its store: `strict` refuses a Redis server that can lose
    /// acknowledged writes (without appendonly yes and appendfsync always); `relaxed` runs on
    /// it, saying so in the log and in `berth status`.
    #[arg(long, value_enum, default_value_t = Durability::Strict, value_name = "MODE")]
    pub store_durability: Durability,
    /// Seconds a failed store commit is retried before the head steps down to standby
    /// (writes are answered 503 meanwhile) [default: the lease ttl].
    #[arg(long, value_name = "SECONDS")]
    pub store_retry: Option<f64>,
    /// Take the store as it is even if it is behind what this data directory last saw of it
    /// (it lost acknowledged writes): work it lost is stopped when its agents report it, and
    /// no ID is handed out twice. Without it such a head refuses to serve, and says why.
    #[arg(long)]
    pub accept_store_loss: bool,
    /// Change one of the most a request may hold, NAME=N (repeat the flag for more): labels
    /// (64 per object), expressions (32 per selector), values (256 per expression),
    /// tolerations (32), fallbacks (16), bundles (1024 per placement group), resources (64),
    /// env (256), args (1024), batch-items (10000), wait-ids (10000). More is refused with
    /// 400 before any work (docs/limits.md).
    #[arg(long = "limit", value_name = "NAME=N")]
    pub limits: Vec<berth_api::limits::LimitSetting>,
    /// The most connections served at once (REST, dashboard and agents together); more are
    /// closed as they arrive, and the head raises its open-file limit to hold them
    #[arg(long, default_value_t = berth_head::config::DEFAULT_MAX_CONNECTIONS, value_name = "N")]
    pub max_connections: usize,
}

/// `--store-durability`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Durability {
    /// Refuse a store that can lose acknowledged writes.
    Strict,
    /// Run on it anyway, warning.
    Relaxed,
}

/// TLS of a head (`berth start --head`): REST, the dashboard and the agent protocol are then
/// served over HTTPS only, on the same port. `berth up` has no TLS: its agents live in the
/// same process and its port listens on loopback.
#[derive(Debug, Args)]
pub struct TlsOptions {
    /// The head's certificate chain (PEM, leaf first); serves TLS with --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key", conflicts_with = "address")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert", conflicts_with = "address")]
    pub tls_key: Option<PathBuf>,
}

/// Options of an agent (`berth start --address`).
#[derive(Debug, Args)]
pub struct AgentOptions {
    /// The node's ID [default: the head gives one].
    #[arg(long, value_name = "ID")]
    pub node_id: Option<String>,
    /// This machine's IP, as other machines reach it.
    #[arg(long, default_value = "127.0.0.1", value_name = "IP")]
    pub node_ip: String,
    /// CPUs to offer [default: this machine's].
    #[arg(long, value_name = "N")]
    pub num_cpus: Option<String>,
    /// GPUs to offer (whole instances) [default: those `nvidia-smi -L` lists, if installed].
    #[arg(long, value_name = "N")]
    pub num_gpus: Option<u32>,
    /// Memory to offer, bytes (suffixes allowed: 16Gi) [default: this machine's].
    #[arg(long, value_name = "BYTES")]
    pub memory: Option<String>,
    /// Other resources as JSON: '{"TPU": 4}'.
    #[arg(long, value_name = "JSON")]
    pub resources: Option<String>,
    /// Labels: k=v,k2=v2.
    #[arg(long, value_name = "K=V,...")]
    pub labels: Option<String>,
    /// A YAML file of labels (--labels wins on conflicts).
    #[arg(long, value_name = "FILE")]
    pub labels_file: Option<PathBuf>,
    /// Static taints: k=v,k2=v2 (`--taints gpu_node=true`).
    #[arg(long, value_name = "K=V,...")]
    pub taints: Option<String>,
    /// The accelerator model, shown as the label berth.io/accelerator-type [default: the first
    /// GPU's model from `nvidia-smi -L`: NVIDIA A100-SXM4-80GB → nvidia-a100].
    #[arg(long, value_name = "TYPE")]
    pub accelerator_type: Option<String>,
    /// Facts behind default labels: market-type, node-group, availability-zone, region,
    /// accelerator-type (k=v,...; --accelerator-type wins).
    #[arg(long, value_name = "K=V,...")]
    pub facts: Option<String>,
    /// The CA certificate (PEM) that signed the head's certificate, for a head serving TLS
    /// (--address https://HOST:PORT): the agent trusts that CA and no other.
    #[arg(long, value_name = "FILE", conflicts_with = "head")]
    pub ca: Option<PathBuf>,
    /// The agent token the head gave [default: $BERTH_AGENT_TOKEN, else DATA_DIR/agent-token].
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Seconds a stopped process (its whole process group) gets between SIGTERM and SIGKILL.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub grace_period: f64,
    /// On exit, stop the processes this agent runs too, instead of leaving them for the next
    /// agent (the autoscaler's local nodes, which no agent will come back for).
    #[arg(long)]
    pub stop_work_on_exit: bool,
}

/// Options of `berth up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// How many local nodes to start (a mix of CPU and GPU nodes, zones and a taint)
    /// [default: 6; none with --autoscale, whose nodes the autoscaler launches].
    #[arg(long)]
    pub nodes: Option<usize>,
    /// Seed of the node mix.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// A YAML file describing the nodes instead of the mix: `nodes: [{node_id, resources,
    /// labels, taints, facts}]`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub head: HeadOptions,
    #[command(flatten)]
    pub log: LogOptions,
}

/// Options of `berth stop`.
#[derive(Debug, Args)]
pub struct StopArgs {
    /// The data directory whose head (or `berth up`) and agents to stop [default:
    /// $BERTH_DATA_DIR, else ~/.berth].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

/// Options of `berth keeper` (started by agents, see [`berth_agent::lease`]).
#[derive(Debug, Args)]
pub struct KeeperArgs {
    /// The agent directory whose processes it guards.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// `berth keeper DIR`: its stdin is a pipe from its agent, its output the directory's
/// `keeper.log`.
pub fn keeper(args: &KeeperArgs) -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(false).init();
    berth_agent::lease::keep(&args.dir, std::io::stdin())
        .with_context(|| format!("cannot keep the node's lease in {}", args.dir.display()))?;
    Ok(())
}

/// The address the agent's processes listen on (`BERTH_NODE_IP`): the node's, unless it is the
/// loopback default while the head is elsewhere (an agent started without `--node-ip` on
/// another machine): then the SDKs use the address that routes to the head, as before.
fn worker_ip(node_ip: &str, head: &str) -> Option<String> {
    let loopback = |host: &str| {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    };
    let first = head.split(',').next().unwrap_or_default().trim();
    let rest = first.split_once("://").map_or(first, |(_, rest)| rest);
    let host = rest.rsplit_once(':').map_or(rest, |(host, _)| host);
    (!loopback(node_ip) || loopback(host)).then(|| node_ip.to_string())
}

/// How this process's agents start their keeper: this executable, `keeper`.
fn keeper_command() -> anyhow::Result<Vec<std::ffi::OsString>> {
    let exe = std::env::current_exe().context("cannot find this executable (for the keeper)")?;
    Ok(vec![exe.into_os_string(), "keeper".into()])
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// `berth start`.
pub fn start(args: &StartArgs) -> anyhow::Result<()> {
    let data_dir = args.head_options.data_dir.clone().unwrap_or_else(default_data_dir);
    match (args.head, &args.address) {
        (true, _) => {
            let _log = logging::init(&args.log, &data_dir)?;
            runtime()?.block_on(run_head(&args.head_options, &args.tls))
        }
        (false, Some(address)) => {
            let _log = logging::init(&args.log, &agent_dir(&data_dir, &args.agent))?;
            runtime()?.block_on(run_agent(address, &args.agent, &args.head_options))
        }
        (false, None) => bail!("say what to start: --head, or --address HOST:PORT for an agent"),
    }
}

/// An agent's own directory: its processes' state and logs, and its log file.
fn agent_dir(data_dir: &Path, options: &AgentOptions) -> PathBuf {
    data_dir.join("agents").join(options.node_id.as_deref().unwrap_or("node"))
}

/// `--assignment-window`'s default: the head's.
pub(crate) const DEFAULT_ASSIGNMENT_WINDOW_MS: u64 =
    berth_head::config::DEFAULT_ASSIGNMENT_WINDOW.as_millis() as u64;

/// The longest `--assignment-window`: a start under load waits up to the window, and windows
/// of 25 and 40 ms measured no better than 10 (docs/bench-api-log.md), so a longer one is far
/// more likely a unit mistake than a wish.
const MAX_ASSIGNMENT_WINDOW_MS: u64 = 1000;

/// `--assignment-window`'s milliseconds as the head's window, checked (`berth start --head`,
/// `berth up`, `berth bench api`).
pub(crate) fn assignment_window(ms: u64) -> anyhow::Result<Duration> {
    if ms > MAX_ASSIGNMENT_WINDOW_MS {
        bail!(
            "--assignment-window: {ms} ms is more than {MAX_ASSIGNMENT_WINDOW_MS} ms (a start would wait that long)"
        );
    }
    Ok(Duration::from_millis(ms))
}

fn head_config(options: &HeadOptions) -> anyhow::Result<HeadConfig> {
    let data_dir = options.data_dir.clone().unwrap_or_else(default_data_dir);
    let mut config = HeadConfig::new(&data_dir);
    config.bind = SocketAddr::new(options.bind, options.port);
    if let Some(url) = &options.store {
        config.store = StoreConfig::parse(url).map_err(|e| anyhow!("--store: {e}"))?;
    }
    if let Some(path) = &options.scheduler_config {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--scheduler-config: cannot read {}", path.display()))?;
        config.scheduler.profile = berth_api::spec::profile::parse_profile(&text)
            .map_err(|e| anyhow!("--scheduler-config {}: {e}", path.display()))?;
    }
    if !(options.heartbeat_timeout.is_finite()
        && (0.1..=3600.0).contains(&options.heartbeat_timeout))
    {
        bail!(
            "--heartbeat-timeout: {} is not between 0.1 and 3600 seconds",
            options.heartbeat_timeout
        );
    }
    config.heartbeat_timeout = Duration::from_secs_f64(options.heartbeat_timeout);
    config.heartbeat_interval = (config.heartbeat_timeout / 5).min(Duration::from_millis(500));
    config.retention = berth_head::config::Retention {
        keep_for: Duration::from_secs(options.keep_finished_for),
        keep_count: options.keep_finished,
    };
    if let Some(list) = &options.rare_resource_isolation {
        config.rare_resources = Some(rare_resources(list)?);
    }
    if !(options.lease_ttl.is_finite() && (0.5..=3600.0).contains(&options.lease_ttl)) {
        bail!("--lease-ttl: {} is not between 0.5 and 3600 seconds", options.lease_ttl);
    }
    config.lease_ttl = Duration::from_secs_f64(options.lease_ttl);
    // A standby takes over within the store lease's ttl and a second; nodes that reach no head
    // for their own lease stop their work meanwhile.
    let node_lease = config
        .heartbeat_timeout
        .saturating_sub(berth_agent::lease::margin(config.heartbeat_timeout));
    let takeover = config.lease_ttl + Duration::from_secs(1);
    if options.store.is_some() && takeover >= node_lease {
        tracing::warn!(
            "--lease-ttl {:?} with --heartbeat-timeout {:?}: a standby's takeover (up to {:?}) \
             outlasts the nodes' leases ({:?}), so a failover stops their work; give a \
             heartbeat timeout of at least {:?}",
            config.lease_ttl,
            config.heartbeat_timeout,
            takeover,
            node_lease,
            (takeover * 5 / 4).max(takeover + Duration::from_secs(2))
        );
    }
    config.assignment_window = assignment_window(options.assignment_window)?;
    config.store_durability = match options.store_durability {
        Durability::Strict => berth_head::config::StoreDurability::Strict,
        Durability::Relaxed => berth_head::config::StoreDurability::Relaxed,
    };
    if let Some(seconds) = options.store_retry {
        if !(seconds.is_finite() && (0.0..=3600.0).contains(&seconds)) {
            bail!("--store-retry: {seconds} is not between 0 and 3600 seconds");
        }
        config.store_retry = Some(Duration::from_secs_f64(seconds));
    }
    config.accept_store_loss = options.accept_store_loss;
    for setting in &options.limits {
        config.limits.set(setting.limit, setting.most);
    }
    if options.max_connections < 16 {
        bail!(
            "--max-connections: {} is below 16 (the CLI, a dashboard and agents each hold some)",
            options.max_connections
        );
    }
    config.max_connections = options.max_connections;
    if let Some(path) = &options.autoscaler {
        let settings = berth_api::spec::node_types::load_autoscaler(path)?;
        let program = std::env::current_exe()
            .context("--autoscaler: cannot find this berth executable for local agents")?;
        config.autoscaler = Some(berth_head::config::AutoscalerConfig {
            settings,
            program,
            interval: berth_head::config::DEFAULT_AUTOSCALER_INTERVAL,
        });
    }
    Ok(config)
}

/// The names of `--rare-resource-isolation`, checked as resource names; empty for `''`.
fn rare_resources(list: &str) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        berth_core::ResourceRegistry::default()
            .intern(name)
            .map_err(|e| anyhow!("--rare-resource-isolation: {e}"))?;
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    Ok(names)
}

async fn boot_head(config: HeadConfig) -> anyhow::Result<RunningHead> {
    let data_dir = config.data_dir.clone();
    let head =
        berth_head::start(config).await.map_err(|e| anyhow!("the head could not start: {e}"))?;
    write_pid(&data_dir)?;
    tracing::info!(address = %head.address, data_dir = %data_dir.display(), restored = %head.restored, "head serving");
    Ok(head)
}

fn print_head(head: &RunningHead, data_dir: &Path) {
    println!("Berth head listening on {}", head.url);
    println!("  REST API: {}/api/v1  (OpenAPI: /api/v1/openapi.json, metrics: /metrics)", head.url);
    println!("  dashboard: {}/  (it asks for the token below)", head.url);
    println!("  reloaded: {}", head.restored);
    println!("  log: {}", data_dir.join(logging::LOG_FILE).display());
    let token_path = data_dir.join(TOKEN_FILE);
    let agent_path = data_dir.join(AGENT_TOKEN_FILE);
    if head.token_created {
        println!(
            "  new tokens were written to {} (admin) and {} (agents), mode 0600",
            token_path.display(),
            agent_path.display()
        );
    }
    // The token itself stays in its file: stdout often ends up in a service's log.
    println!(
        "  admin token: in {} (the CLI on this machine reads it by itself)",
        token_path.display()
    );
    println!(
        "  elsewhere pass it as `Authorization: Bearer <token>` or export {TOKEN_ENV}=<token>;"
    );
    println!("  more tokens (read-only, agents): berth token create");
}

async fn run_head(options: &HeadOptions, tls: &TlsOptions) -> anyhow::Result<()> {
    let mut config = head_config(options)?;
    if let (Some(cert), Some(key)) = (&tls.tls_cert, &tls.tls_key) {
        config.tls = Some(berth_head::tls::TlsFiles { cert: cert.clone(), key: key.clone() });
    }
    let tls_note = config.tls.as_ref().map(|_| " --ca <the CA that signed --tls-cert>");
    let data_dir = config.data_dir.clone();
    let listener = berth_head::listen(config.bind)
        .with_context(|| format!("the head could not start: cannot listen on {}", config.bind))?;
    let mut served = 0u32;
    let serving = |head: &RunningHead| {
        served += 1;
        tracing::info!(address = %head.address, data_dir = %data_dir.display(), restored = %head.restored, "head serving");
        if served > 1 {
            println!("Serving again as the active head (reloaded: {}).", head.restored);
            return;
        }
        if let Err(err) = write_pid(&data_dir) {
            tracing::warn!(error = %err, "cannot write the pid file");
        }
        print_head(head, &data_dir);
        println!(
            "  agents join with: {AGENT_TOKEN_ENV}=<the agent token, in {}> berth start --address {}{}",
            data_dir.join(AGENT_TOKEN_FILE).display(),
            head.url,
            tls_note.unwrap_or(""),
        );
        println!("Press Ctrl-C to stop (or run `berth stop`).");
    };
    let outcome = berth_head::run(config.clone(), listener, shutdown_signal(), serving).await;
    cleanup(&data_dir);
    outcome.map_err(|e| anyhow!("{e}"))
}

fn agent_config(
    address: &str,
    options: &AgentOptions,
    data_dir: &Path,
) -> anyhow::Result<AgentConfig> {
    let token = match &options.token {
        Some(token) => token.clone(),
        None => match std::env::var(AGENT_TOKEN_ENV) {
            Ok(token) if !token.trim().is_empty() => token.trim().to_string(),
            _ => std::fs::read_to_string(data_dir.join(AGENT_TOKEN_FILE))
                .map(|t| t.trim().to_string())
                .map_err(|_| {
                    anyhow!(
                        "no agent token: pass --token, set {AGENT_TOKEN_ENV}, or run on the \
                         head's machine (DATA_DIR/{AGENT_TOKEN_FILE})"
                    )
                })?,
        },
    };
    let mut config = AgentConfig::new(address, token);
    if let Some(path) = &options.ca {
        config.ca = Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("--ca: cannot read {}", path.display()))?,
        );
    }
    config.node_id = options.node_id.clone();
    config.address = options.node_ip.clone();
    // Flags win; what they leave out comes from the machine (nvidia-smi for GPUs).
    let machine = berth_agent::discover::discover();
    let cpus = options.num_cpus.clone().unwrap_or_else(|| machine.cpus.to_string());
    config.resources.insert("CPU".into(), cpus);
    let gpus = options.num_gpus.unwrap_or(machine.gpus.len() as u32);
    if gpus > 0 {
        config.resources.insert("GPU".into(), gpus.to_string());
    }
    let memory = options.memory.clone().or_else(|| machine.memory_bytes.map(|m| m.to_string()));
    if let Some(memory) = memory {
        config.resources.insert("memory".into(), memory);
    }
    if let Some(json) = &options.resources {
        let map: BTreeMap<String, serde_json::Value> = serde_json::from_str(json)
            .map_err(|e| anyhow!("--resources: not a JSON object of amounts: {e}"))?;
        for (name, value) in map {
            let amount = match value {
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::String(s) => s,
                other => bail!("--resources.{name}: {other} is not an amount"),
            };
            config.resources.insert(name, amount);
        }
    }
    config.labels = pairs("--labels", options.labels.as_deref())?;
    config.taints = pairs("--taints", options.taints.as_deref())?;
    if let Some(path) = &options.labels_file {
        config.labels_file = Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("--labels-file: cannot read {}", path.display()))?,
        );
    }
    config.facts = pairs("--facts", options.facts.as_deref())?;
    let given = config.facts.contains_key("accelerator-type");
    let accelerator = options.accelerator_type.clone().or_else(|| {
        // The machine's model only describes the GPUs it has (not an overridden count of 0).
        (gpus > 0 && !given).then(|| machine.accelerator_type()).flatten()
    });
    if let Some(kind) = accelerator {
        config.facts.insert("accelerator-type".into(), kind);
    }
    config.validate().map_err(|e| anyhow!("{e}"))?;
    Ok(config)
}

/// `k=v,k2=v2` as a map (the head checks the syntax of each key and value).
fn pairs(flag: &str, text: Option<&str>) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for item in text.unwrap_or("").split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, v) =
            item.split_once('=').ok_or_else(|| anyhow!("{flag}: {item:?} is not key=value"))?;
        out.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(out)
}

/// `berth start --address`: an agent running its assignments as processes, keeping their
/// logs, working directories and state in `DATA_DIR/agents/<node-id>` (`node` without
/// `--node-id`). Ctrl-C or SIGTERM stop the agent but not its processes: they keep running,
/// recorded in that directory, and the next agent started there within the node's lease adopts
/// them (and announces them to the head, which keeps or stops them); past the lease, the node's
/// keeper stops them (see [`berth_agent::lease`]).
async fn run_agent(
    address: &str,
    options: &AgentOptions,
    head: &HeadOptions,
) -> anyhow::Result<()> {
    let data_dir = head.data_dir.clone().unwrap_or_else(default_data_dir);
    let config = agent_config(address, options, &data_dir)?;
    if !(options.grace_period.is_finite() && (0.0..=3600.0).contains(&options.grace_period)) {
        bail!("--grace-period: {} is not between 0 and 3600 seconds", options.grace_period);
    }
    // The node ID is validated above, so it is a plain file name.
    let work_dir = agent_dir(&data_dir, options);
    let process_options = ProcessOptions {
        grace: Duration::from_secs_f64(options.grace_period),
        node_id: options.node_id.clone(),
        head: Some(config.head.clone()),
        ca_file: options.ca.clone(),
        node_ip: worker_ip(&config.address, &config.head),
        keeper: Some(keeper_command()?),
    };
    let runner = std::sync::Arc::new(
        ProcessRunner::new(work_dir.clone(), process_options).map_err(|e| anyhow!("{e}"))?,
    );
    let adopted = runner.running().len();
    // Its own pid file (the runner's lock makes it the only agent of that directory), so that
    // `berth stop --data-dir` finds it beside the head's.
    write_pid(&work_dir)?;
    let _pid = RemovePid(work_dir.join(PID_FILE));
    let agent = Agent::new(config, runner.clone()).map_err(|e| anyhow!("{e}"))?;
    let handle = agent.spawn();
    let status = tokio::select! {
        s = handle.wait_registered(Duration::from_secs(30)) => s.map_err(|e| anyhow!("{e}"))?,
        () = shutdown_signal() => return Ok(()),
    };
    println!(
        "Berth agent registered with the head at {address} as node {}",
        status.node_id.clone().unwrap_or_default()
    );
    println!("  runs its work as processes; logs in {}", work_dir.join("logs").display());
    println!("  agent log: {}", work_dir.join(logging::LOG_FILE).display());
    if adopted > 0 {
        println!("  adopted {adopted} process(es) the previous agent left running");
    }
    println!("Press Ctrl-C to stop. Its processes keep running for the node's lease with the head");
    println!("(the head's heartbeat timeout less a fifth); an agent started on");
    println!("{} within it adopts them, else the node's keeper stops them.", work_dir.display());
    shutdown_signal().await;
    handle.stop().await.map_err(|e| anyhow!("{e}"))?;
    if options.stop_work_on_exit {
        runner.stop_all().await;
    }
    Ok(())
}

/// `berth up`.
pub fn up(args: &UpArgs) -> anyhow::Result<()> {
    let autoscaled = args.head.autoscaler.is_some();
    let count = args.nodes.unwrap_or(if autoscaled { 0 } else { 6 });
    if count == 0 && args.config.is_none() && !autoscaled {
        bail!("--nodes: give at least 1 (or --autoscale FILE, to let the autoscaler add nodes)");
    }
    let data_dir = args.head.data_dir.clone().unwrap_or_else(default_data_dir);
    let _log = logging::init(&args.log, &data_dir)?;
    runtime()?.block_on(async move {
        let config = head_config(&args.head)?;
        let data_dir = config.data_dir.clone();
        let nodes = match &args.config {
            Some(path) => nodes_file(path)?,
            None => SimNode::mix(count, args.seed),
        };
        let mut head = boot_head(config).await?;
        // The local agents run real processes, each node in DATA_DIR/agents/<node-id>. They
        // live in this process, so stopping `up` stops their processes too (SIGTERM, SIGKILL
        // after 5 s: within the 10 s `berth stop` waits).
        let agents_dir = data_dir.join("agents");
        let options = SimOptions {
            runner: RunnerKind::Process {
                root: agents_dir.clone(),
                grace: Duration::from_secs(5),
                keeper: Some(keeper_command()?),
            },
            ..SimOptions::default()
        };
        let started = SimCluster::start_with(
            &head.address.to_string(),
            head.agent_token.as_str(),
            nodes,
            options,
        )
        .map_err(|e| anyhow!("the local agents could not start: {e}"));
        let sim = match started {
            Ok(sim) => match sim.wait_registered(Duration::from_secs(30)).await {
                Ok(()) => sim,
                Err(err) => {
                    let _ = sim.shutdown().await;
                    head.shutdown().await;
                    cleanup(&data_dir);
                    bail!("the local agents did not register: {err}");
                }
            },
            Err(err) => {
                // The head is up already: stop it, so no stale pid or address file stays.
                head.shutdown().await;
                cleanup(&data_dir);
                return Err(err);
            }
        };
        println!("Berth is up: a head and {} local nodes.", sim.len());
        if let Some(path) = &args.head.autoscaler {
            println!(
                "  autoscaler: node types from {}; watch it with `berth autoscaler status`",
                path.display()
            );
        }
        println!("  work runs as processes; logs in {}/<node>/logs", agents_dir.display());
        print_head(&head, &data_dir);
        println!("Try:");
        println!("  berth status");
        println!("  berth list nodes");
        println!("  berth actor create --command sleep --arg 600 --resources CPU=1");
        match sim.node_ids().next() {
            Some(node) => println!("  berth taint --node-id {node} --append maintenance=true"),
            None => println!("  berth autoscaler status      # the nodes it launches, and why"),
        }
        println!("Press Ctrl-C to stop (or run `berth stop`).");
        let outcome = tokio::select! {
            reason = head.stopped() => Err(anyhow!("the head stopped: {reason}")),
            () = shutdown_signal() => Ok(()),
        };
        let _ = sim.shutdown().await;
        head.shutdown().await;
        cleanup(&data_dir);
        outcome
    })
}

/// The `--config` file of `berth up`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct UpFile {
    nodes: Vec<UpNode>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct UpNode {
    node_id: String,
    #[serde(default)]
    resources: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    taints: BTreeMap<String, String>,
    #[serde(default)]
    facts: BTreeMap<String, String>,
}

fn nodes_file(path: &Path) -> anyhow::Result<Vec<SimNode>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--config: cannot read {}", path.display()))?;
    let file: UpFile =
        serde_saphyr::from_str(&text).map_err(|e| anyhow!("--config {}: {e}", path.display()))?;
    if file.nodes.is_empty() {
        bail!("--config {}: nodes: give at least one node", path.display());
    }
    Ok(file
        .nodes
        .into_iter()
        .map(|n| {
            let mut node = SimNode::new(n.node_id);
            node.resources = n
                .resources
                .into_iter()
                .map(|(k, v)| (k, v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())))
                .collect();
            node.labels = n.labels;
            node.taints = n.taints;
            node.facts = n.facts;
            node
        })
        .collect())
}

/// `berth stop`: SIGTERM to what runs from the data directory: its head or `berth up`
/// (`DATA_DIR/berth.pid`) and its agents (`DATA_DIR/agents/<node>/berth.pid`); waits until each
/// has gone (10 s at most).
pub fn stop(args: &StopArgs) -> anyhow::Result<()> {
    let data_dir = args.data_dir.clone().unwrap_or_else(default_data_dir);
    let mut pid_files = vec![data_dir.join(PID_FILE)];
    if let Ok(agents) = std::fs::read_dir(data_dir.join("agents")) {
        let mut found: Vec<PathBuf> =
            agents.flatten().map(|e| e.path().join(PID_FILE)).filter(|p| p.exists()).collect();
        found.sort();
        pid_files.extend(found);
    }
    let mut signalled = Vec::new();
    for path in &pid_files {
        let Ok(text) = std::fs::read_to_string(path) else { continue };
        let pid: i32 = text
            .trim()
            .parse()
            .map_err(|_| anyhow!("{} does not hold a process ID", path.display()))?;
        let pid = nix::unistd::Pid::from_raw(pid);
        match nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM) {
            Ok(()) => signalled.push((pid, path.clone())),
            Err(nix::errno::Errno::ESRCH) => {
                println!("process {pid} is not running; removing the stale {}", path.display());
                let _ = std::fs::remove_file(path);
                if path.parent() == Some(data_dir.as_path()) {
                    cleanup(&data_dir);
                }
            }
            Err(err) => bail!("cannot signal process {pid} ({}): {err}", path.display()),
        }
    }
    if signalled.is_empty() && !pid_files.iter().any(|p| p.exists()) {
        println!(
            "nothing to stop: no {} (is Berth running with this data directory?)",
            pid_files[0].display()
        );
        return Ok(());
    }
    // Bounded wait for each to go.
    for _ in 0..200 {
        signalled.retain(|(pid, path)| {
            let running = nix::sys::signal::kill(*pid, None).is_ok();
            if !running {
                let what =
                    if path.parent() == Some(data_dir.as_path()) { "Berth" } else { "an agent" };
                println!("stopped {what} (process {pid})");
            }
            running
        });
        if signalled.is_empty() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<String> = signalled.iter().map(|(pid, _)| pid.to_string()).collect();
    bail!(
        "process(es) {} did not stop within 10 s; they may still be shutting down",
        left.join(", ")
    )
}

/// Removes a pid file when dropped (the agent's, at its end).
struct RemovePid(PathBuf);

impl Drop for RemovePid {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn write_pid(data_dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create {}", data_dir.display()))?;
    berth_api::local::write_private(
        &data_dir.join(PID_FILE),
        std::process::id().to_string().as_bytes(),
    )
    .with_context(|| format!("cannot write {}", data_dir.join(PID_FILE).display()))
}

fn cleanup(data_dir: &Path) {
    let _ = std::fs::remove_file(data_dir.join(PID_FILE));
    let _ = std::fs::remove_file(data_dir.join(ADDRESS_FILE));
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn workers_listen_on_the_nodes_address_unless_it_is_a_loopback_default_for_a_remote_head() {
        assert_eq!(super::worker_ip("10.0.0.5", "http://10.0.0.1:8780"), Some("10.0.0.5".into()));
        assert_eq!(
            super::worker_ip("127.0.0.1", "http://127.0.0.1:8780"),
            Some("127.0.0.1".into())
        );
        assert_eq!(super::worker_ip("127.0.0.1", "localhost:8780"), Some("127.0.0.1".into()));
        assert_eq!(super::worker_ip("127.0.0.1", "https://10.0.0.1:8780,10.0.0.2:8780"), None);
        assert_eq!(super::worker_ip("::1", "[::1]:8780"), Some("::1".into()));
    }
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        head: HeadOptions,
    }

    fn config(args: &[&str]) -> anyhow::Result<HeadConfig> {
        let flags = Flags::try_parse_from(std::iter::once("berth").chain(args.iter().copied()))?;
        head_config(&flags.head)
    }

    #[test]
    fn the_assignment_window_defaults_to_the_heads_and_is_bounded() {
        let dir = ["--data-dir", "/nonexistent/berth-test"];
        let default = config(&dir).unwrap();
        assert_eq!(default.assignment_window, berth_head::config::DEFAULT_ASSIGNMENT_WINDOW);
        let off = config(&[&dir[..], &["--assignment-window", "0"]].concat()).unwrap();
        assert_eq!(off.assignment_window, Duration::ZERO);
        let longest = config(&[&dir[..], &["--assignment-window", "1000"]].concat()).unwrap();
        assert_eq!(longest.assignment_window, Duration::from_secs(1));
        let err = config(&[&dir[..], &["--assignment-window", "1001"]].concat()).unwrap_err();
        assert!(
            err.to_string().contains("--assignment-window: 1001 ms is more than 1000"),
            "{err}"
        );
        let err = config(&[&dir[..], &["--assignment-window", "-1"]].concat()).unwrap_err();
        assert!(err.to_string().contains("--assignment-window"), "{err}");
    }
}
