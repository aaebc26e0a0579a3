//! Berth's head: the control plane.
//!
//! One task (the owner, `owner.rs`) holds the cluster state, the scheduler and the pending
//! queue, and applies commands in the order they arrive. REST handlers (`http.rs`) and the
//! agent protocol (`agents.rs`) send it commands (`command.rs`, the protocol both sides share;
//! the owner imports no edge) through a [`HeadHandle`] and read the published [`View`]. No lock is held across a decision. A committer, on a thread of its own
//! (`berth-commit`), makes each cycle's changes durable (one store commit per cycle, cycles
//! that queued up merged) before anything is acknowledged.
//!
//! [`start`] runs a head on a tokio runtime: it takes the store's lease, reloads the state,
//! and serves REST, `/metrics`, the dashboard and the agent protocol (gRPC) on one port;
//! [`RunningHead::shutdown`] stops it gracefully. [`run`] does both around a listener and a
//! shutdown future the caller gives (embedding, tests).

#![warn(missing_docs)]

mod agents;
mod autoscaler;
pub mod changes;
mod clock;
mod command;
pub mod config;
mod connections;
mod dashboard;
pub mod error;
mod failpoint;
pub mod handle;
mod http;
mod ids;
pub mod keyring;
mod logs;
mod measured;
mod metrics;
mod owner;
mod records;
pub mod standby;
pub mod stop;
mod store_health;
pub mod store_mark;
pub mod tls;
pub mod token;
pub mod view;
mod work_keys;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use berth_store::{AnyStore, Lease, Store, StoreError};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use config::HeadConfig;
pub use error::HeadError;
pub use handle::HeadHandle;
pub use stop::{Stop, StopKind};
pub use token::Token;
pub use view::View;

use crate::agents::AgentApi;
use crate::command::Command;
use crate::ids::Sequences;
use crate::metrics::Metrics;
use crate::owner::Owner;

/// How long the head's store lease lasts without renewal by default; renewed every third of
/// it (see [`HeadConfig::lease_ttl`]).
pub const LEASE_TTL: Duration = Duration::from_secs(10);

/// Why a head could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The token files could not be read or created.
    #[error("cannot read or create the tokens in {dir}: {source}")]
    Token {
        /// The data directory.
        dir: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The store failed (open, lease, load, first commit).
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The store is behind what this data directory last saw of it: it lost acknowledged
    /// writes. The head refuses to serve on it (see [`stop::BEHIND_ADVICE`]).
    #[error("{0}; {advice}", advice = stop::BEHIND_ADVICE)]
    StoreBehind(StoreError),
    /// The address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The settings are invalid.
    #[error("{0}")]
    Config(String),
    /// A thread of the head (the store's committer, the agents' connections) could not be
    /// started.
    #[error("cannot start a thread of the head: {0}")]
    Thread(std::io::Error),
}

/// A running head.
pub struct RunningHead {
    /// Where it listens (the real port when the configuration said 0).
    pub address: SocketAddr,
    /// Its base URL: `http://ADDRESS`, or `https://ADDRESS` when it serves TLS.
    pub url: String,
    /// The admin token (the CLI's: `DATA_DIR/token`).
    pub token: Token,
    /// The agent token (machines join with it: `DATA_DIR/agent-token`).
    pub agent_token: Token,
    /// True when the token files were created by this start.
    pub token_created: bool,
    /// A handle for in-process callers.
    pub handle: HeadHandle,
    /// What was reloaded from the store.
    pub restored: String,
    /// Stops the server accepting.
    shutdown: watch::Sender<bool>,
    /// Has the owner apply what is queued in a last cycle, then end.
    stop_owner: watch::Sender<bool>,
    /// Has the lease renewer release the lease and end.
    release: watch::Sender<bool>,
    tasks: Tasks,
    stopped: watch::Receiver<Option<Stop>>,
}

/// The head's tasks, named: shutdown stops them in an order (server, owner, committer, lease).
struct Tasks {
    server: JoinHandle<()>,
    owner: JoinHandle<()>,
    committer: JoinHandle<()>,
    renewer: JoinHandle<()>,
    /// The autoscaler's rounds, when it runs.
    autoscaler: Option<JoinHandle<()>>,
}

/// How long requests in flight get to finish at shutdown before their connections are cut
/// (long streams, such as agents' assignment streams and `logs --follow`, never finish).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

impl std::fmt::Debug for RunningHead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningHead").field("address", &self.address).finish_non_exhaustive()
    }
}

/// Starts a head on `config.bind`: token, store lease, reload, then serving. Returns once it
/// listens; stop it with [`RunningHead::shutdown`].
pub async fn start(config: HeadConfig) -> Result<RunningHead, StartError> {
    let listener =
        listen(config.bind).map_err(|source| StartError::Bind { address: config.bind, source })?;
    start_on(config, listener).await
}

/// Connections the kernel queues for the head before it accepts them. The standard library's
/// (and tokio's) 128 is less than a burst of clients brings: in one run of `berth bench api`
/// (1,000 watchers connecting at once, 1,000 agents registering) the kernel dropped 1,305
/// handshakes (`ListenOverflows` in `/proc/net/netstat`), each connection then waiting for a
/// retransmission a second or more later; none with this backlog.
const LISTEN_BACKLOG: u32 = 4096;

/// Listens on `address` (with `SO_REUSEADDR`, as `TcpListener::bind`) with [`LISTEN_BACKLOG`];
/// the kernel caps it at `net.core.somaxconn`. For [`run`].
pub fn listen(address: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match address {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Runs a head on `listener` until `shutdown` completes, then shuts it down gracefully (see
/// [`RunningHead::shutdown`]). A head whose lease moved to another head, or whose store stayed
/// away for longer than the retry window, steps down and stands by on the same socket (not
/// exit): it serves again once it holds the lease. It returns an error only when it cannot
/// start, or its store is behind what it saw ([`StopKind::StoreBehind`]). `serving` is called
/// each time it serves as the active head. The shape of mini-redis's `server::run`: the
/// caller owns the listener (tests bind port 0) and decides when to stop (Ctrl-C, a test's
/// end).
pub async fn run(
    config: HeadConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
    mut serving: impl FnMut(&RunningHead),
) -> Result<(), RunError> {
    let address = listener.local_addr().unwrap_or(config.bind);
    let bind_error = |source| StartError::Bind { address, source };
    // One descriptor of the socket stays here: each head (after a step-down, the next) serves
    // on a duplicate, and connections that arrive in between wait in the backlog.
    let socket = listener.into_std().map_err(bind_error)?;
    failpoint::configure();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut stepped_down = false;
    let mut backoff = Duration::from_millis(200);
    loop {
        let listener =
            socket.try_clone().and_then(tokio::net::TcpListener::from_std).map_err(bind_error)?;
        let started = tokio::select! {
            started = start_on(config.clone(), listener) => started,
            () = &mut shutdown => return Ok(()),
        };
        let mut head = match started {
            Ok(head) => head,
            // After a step-down the store may still be away: wait for it, as a standby would.
            Err(StartError::Store(err)) if stepped_down && err.is_transient() => {
                tracing::warn!(error = %err, retry_in = ?backoff, "the store does not answer; standing by");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = &mut shutdown => return Ok(()),
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
            Err(err) => return Err(err.into()),
        };
        backoff = Duration::from_millis(200);
        serving(&head);
        let stop = tokio::select! {
            stop = head.stopped() => stop,
            () = &mut shutdown => {
                head.shutdown().await;
                return Ok(());
            }
        };
        head.shutdown().await;
        if !stop.steps_down() {
            tracing::error!(reason = %stop, "the store is behind what this head saw: {}", stop::BEHIND_ADVICE);
            return Err(RunError::Stopped(stop));
        }
        tracing::warn!(reason = %stop, "stepping down: standing by until this head holds the store's lease again");
        stepped_down = true;
    }
}

/// Why [`run`] ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// It could not start.
    #[error("{0}")]
    Start(#[from] StartError),
    /// It stopped by itself and cannot go on: its store is behind what it saw.
    #[error("the head stopped: {0}; {advice}", advice = stop::BEHIND_ADVICE)]
    Stopped(Stop),
}

/// Starts a head serving on `listener`: token, store lease, reload, then serving.
pub async fn start_on(
    config: HeadConfig,
    listener: tokio::net::TcpListener,
) -> Result<RunningHead, StartError> {
    let address = listener
        .local_addr()
        .map_err(|source| StartError::Bind { address: config.bind, source })?;
    config.scheduler.validate().map_err(|e| StartError::Config(e.to_string()))?;
    if config.heartbeat_timeout <= config.heartbeat_interval {
        return Err(StartError::Config(format!(
            "the heartbeat timeout ({:?}) must be longer than the heartbeat interval ({:?})",
            config.heartbeat_timeout, config.heartbeat_interval
        )));
    }
    if !(Duration::from_millis(500)..=Duration::from_secs(3600)).contains(&config.lease_ttl) {
        return Err(StartError::Config(format!(
            "the lease ttl ({:?}) must be between 0.5 s and 1 h",
            config.lease_ttl
        )));
    }
    for name in config.rare_resources.iter().flatten() {
        berth_core::ResourceRegistry::default()
            .intern(name)
            .map_err(|e| StartError::Config(format!("rare-resource isolation: {e}")))?;
    }
    tls::install_crypto_provider();
    // Checked before anything is opened: a bad file is refused with its path and problem.
    let tls = match &config.tls {
        Some(files) => {
            Some(tls::acceptor(files).map_err(|e| StartError::Config(format!("TLS: {e}")))?)
        }
        None => None,
    };
    // The data directory holds the store, the tokens and the log: its owner's alone.
    berth_api::local::private_dir(&config.data_dir).map_err(|source| StartError::Token {
        dir: config.data_dir.display().to_string(),
        source,
    })?;
    let keyring::Loaded { keyring, admin: token, agent: agent_token, created: token_created } =
        keyring::Keyring::load(
            &config.data_dir,
            config.token.as_deref(),
            config.agent_token.as_deref(),
        )
        .map_err(|source| StartError::Token {
            dir: config.data_dir.display().to_string(),
            source,
        })?;
    let store = config.store.open().await?;
    let durability = check_durability(&store, config.store_durability).await?;
    let seen = store_mark::read(&config.data_dir, store.location());
    if config.accept_store_loss {
        tracing::warn!(store = %store.location(), "--accept-store-loss: the store is taken as it is, whatever this data directory saw of it");
    } else {
        store.expect(seen.as_ref().map(|seen| seen.generation.clone()));
    }
    let holder = holder_name(&config.data_dir);
    let connection_settings = connections::Settings {
        max: connections::raise_open_files(config.max_connections),
        header_timeout: config.header_timeout,
        idle_timeout: config.idle_timeout,
        keepalive: config.heartbeat_timeout,
    };
    let (lease, listener) = standby::acquire(
        &store,
        &holder,
        config.lease_ttl,
        listener,
        (tls.clone(), connection_settings),
        &config.data_dir,
    )
    .await
    .map_err(|err| match err {
        StartError::Store(err) if err.is_behind() => StartError::StoreBehind(err),
        other => other,
    })?;
    let snapshot = store.load().await?;
    // The tokens of the heads before this one (a standby taking over knows its agents').
    if let Some(bytes) = snapshot.get(berth_store::Table::Meta, keyring::KEYRING_KEY) {
        match serde_json::from_slice::<keyring::StoredKeyring>(bytes) {
            Ok(stored) => keyring.merge(&stored).map_err(|e| StartError::Config(e.to_string()))?,
            Err(err) => tracing::warn!(error = %err, "the stored token list is unreadable"),
        }
    }
    let (work_keys, new_secret) = work_keys::WorkKeys::load(&snapshot);
    let work_keys = Arc::new(work_keys);

    let metrics = Arc::new(Metrics::new());
    let sequences = Arc::new(Sequences::default());
    let (stopped_tx, stopped_rx) = watch::channel(None::<Stop>);
    let mut owner = Owner::new(config.clone(), metrics.clone(), work_keys.clone());
    owner.stopped = Some(stopped_tx.clone());
    let sessions = owner.nodes.sessions().clone();
    let restored = owner.restore(&snapshot, &sequences);
    // IDs go on after the highest this data directory handed out, even over a store that lost
    // them and was accepted as it is.
    if let Some(seen) = &seen {
        sequences.raise(seen.ids);
    }
    owner.sequences = sequences.clone();
    for skipped in &restored.skipped {
        tracing::warn!(record = %skipped, "not reloaded");
    }
    let summary = format!(
        "{} nodes, {} actors, {} tasks, {} placement groups, {} jobs{}",
        restored.nodes,
        restored.actors,
        restored.tasks,
        restored.groups,
        restored.jobs,
        if restored.skipped.is_empty() {
            String::new()
        } else {
            format!(" ({} records could not be read; see the log)", restored.skipped.len())
        }
    );

    let (commands_tx, commands_rx) = mpsc::channel::<Command>(65_536);
    let (cycles_tx, cycles_rx) = mpsc::channel(4);
    // The restored state is durable and visible before the head serves anyone.
    let (mut first_batch, first_view) = owner.first_cycle();
    if let Some(secret) = new_secret {
        first_batch.append(secret);
    }
    first_batch.put(
        berth_store::Table::Meta,
        keyring::KEYRING_KEY,
        records::encode(&keyring.stored()),
    );
    if !first_batch.is_empty() {
        store.commit(lease.epoch(), first_batch).await.map_err(|err| {
            if err.is_behind() {
                StartError::StoreBehind(err)
            } else {
                StartError::Store(err)
            }
        })?;
    }
    if let Some(generation) = store.generation() {
        store_mark::write(&config.data_dir, store.location(), &generation, sequences.ids());
    }
    let (view_tx, view_rx) = watch::channel(first_view);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);

    let store_health = Arc::new(store_health::StoreHealth::new(durability));
    let handle = HeadHandle {
        commands: commands_tx.clone(),
        view: view_rx,
        sequences,
        work_keys,
        store: store_health.clone(),
        limits: Arc::new(config.limits.clone()),
        measurements: Default::default(),
    };

    let epoch = lease.epoch();
    let stopped = stopped_tx.clone();
    let commit_metrics = metrics.clone();
    let commit_store = store.clone();
    let settings = owner::CommitSettings {
        assignment_window: config.assignment_window,
        retry_window: config.store_retry_window(),
        health: store_health,
    };
    let committer = owner::spawn_committer(move || async move {
        let committed =
            owner::commit_loop(commit_store, epoch, cycles_rx, view_tx, commit_metrics, settings);
        if let Err(stop) = committed.await {
            stopped.send_replace(Some(stop));
        }
    })
    .await
    .map_err(StartError::Thread)?;
    let (stop_owner, owner_stop) = watch::channel(false);
    let owner = tokio::spawn(owner::run(owner, commands_rx, cycles_tx, owner_stop));
    let (release_tx, release_rx) = watch::channel(false);
    let renewer = tokio::spawn(renew(
        store.clone(),
        lease,
        config.lease_ttl,
        stopped_tx.clone(),
        release_rx,
        (config.data_dir.clone(), handle.sequences.clone()),
    ));

    // The agent protocol shares the port: its routes join the REST router (whose fallback
    // answers unknown paths with a JSON 404).
    // The agents' log streams, shared by the agent protocol and the REST API (never the owner).
    let log_streams = Arc::new(logs::LogStreams::default());
    let autoscaler_commands = commands_tx.clone();
    let agents = AgentApi::server(
        commands_tx,
        keyring.clone(),
        log_streams.clone(),
        handle.measurements.clone(),
        sessions,
    );
    let grpc_path = format!(
        "/{}/{{*rest}}",
        <berth_api::agent::agent_service_server::AgentServiceServer<AgentApi> as tonic::server::NamedService>::NAME
    );
    // The last hour, for the dashboard's charts; the sampler reads only the published view.
    let samples = dashboard::samples::Samples::default();
    tokio::spawn(dashboard::samples::run(
        samples.clone(),
        handle.view.clone(),
        shutdown_rx.clone(),
    ));
    let rest =
        http::router_with_logs(handle.clone(), keyring.clone(), metrics.clone(), log_streams)
            .merge(dashboard::router(handle.clone(), keyring, samples));
    let router = rest.route_service(
        &grpc_path,
        tower::ServiceExt::map_request(agents, |req: axum::http::Request<axum::body::Body>| {
            req.map(tonic::body::Body::new)
        }),
    );
    let tls_served = tls.is_some();
    let url = format!("{}://{address}", if tls_served { "https" } else { "http" });
    // The agents' connections on a thread of their own (see `connections`).
    let lane = connections::Lane::start().await.map_err(StartError::Thread)?;
    let server = tokio::spawn(connections::serve(
        listener,
        router,
        tls,
        connection_settings,
        (Some(metrics.clone()), Some(lane)),
        shutdown_rx.clone(),
    ));
    let autoscaler = config.autoscaler.as_ref().map(|a| {
        let join = autoscaler::Join {
            url: url.clone(),
            agent_token: agent_token.as_str().to_string(),
            data_dir: config.data_dir.clone(),
        };
        let provider = autoscaler::provider(&a.settings.provider, &a.program, join);
        tokio::spawn(autoscaler::run(
            autoscaler_commands.clone(),
            provider,
            a.interval,
            shutdown_rx.clone(),
        ))
    });
    drop(autoscaler_commands);
    // Let the CLI on this machine find the head (the scheme tells it to speak TLS).
    let address_text = if tls_served { url.clone() } else { address.to_string() };
    let _ = berth_api::local::write_private(
        &config.data_dir.join(berth_api::local::ADDRESS_FILE),
        address_text.as_bytes(),
    );
    Ok(RunningHead {
        address,
        url,
        token,
        agent_token,
        token_created,
        handle,
        restored: summary,
        shutdown: shutdown_tx,
        stop_owner,
        release: release_tx,
        tasks: Tasks { server, owner, committer, renewer, autoscaler },
        stopped: stopped_rx,
    })
}

/// Keeps the store lease, and the store mark with it; a lease lost to another head, or a store
/// found behind, stops this one (it is fenced anyway).
async fn renew(
    store: AnyStore,
    mut lease: Lease,
    ttl: Duration,
    stopped: watch::Sender<Option<Stop>>,
    mut shutdown: watch::Receiver<bool>,
    (data_dir, sequences): (std::path::PathBuf, Arc<Sequences>),
) {
    let mark = |store: &AnyStore| {
        if let Some(generation) = store.generation() {
            store_mark::write(&data_dir, store.location(), &generation, sequences.ids());
        }
    };
    let mut tick = tokio::time::interval(ttl / 3);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = async { shutdown.wait_for(|s| *s).await.map(|_| ()) } => {
                let _ = store.release_lease(&lease).await;
                mark(&store);
                return;
            }
        }
        match store.renew_lease(&lease, ttl).await {
            Ok(renewed) => {
                lease = renewed;
                mark(&store);
            }
            Err(err) if err.is_fenced() || err.is_behind() => {
                tracing::warn!(error = %err, "the store's lease is no longer this head's");
                stopped.send_replace(Some(Stop::from_store(&err)));
                return;
            }
            Err(err) => tracing::warn!(error = %err, "lease renewal failed; retrying"),
        }
    }
}

/// The lease holder's name: the machine and a digest of the data directory. The same head
/// restarted takes its lease back at once; another (a standby elsewhere, or beside it in
/// tests) waits for it to expire. The directory's path itself stays out of it: a standby
/// shows the name to anyone who asks its `/healthz`.
fn holder_name(data_dir: &std::path::Path) -> String {
    use sha2::Digest;
    let absolute = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let digest = sha2::Sha256::digest(absolute.as_os_str().as_encoded_bytes());
    let short: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("head@{}#{short}", hostname())
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Refuses a store that can lose acknowledged writes unless `durability` is relaxed; what to
/// say of it (the log, `berth status`) when it is.
async fn check_durability(
    store: &AnyStore,
    durability: config::StoreDurability,
) -> Result<Option<String>, StartError> {
    let AnyStore::Redis(redis) = store else { return Ok(None) };
    let problem = match redis.persistence().await {
        Ok(persistence) if persistence.is_durable() => return Ok(None),
        Ok(persistence) => format!(
            "the Redis server runs with {persistence}, so a crash of the server loses \
             acknowledged writes (Berth needs appendonly yes and appendfsync always)"
        ),
        Err(err) => format!(
            "the Redis server's persistence settings cannot be read ({err}); Berth needs \
             appendonly yes and appendfsync always"
        ),
    };
    match durability {
        config::StoreDurability::Strict => Err(StartError::Config(format!(
            "--store {}: {problem}. Set both (in redis.conf, or CONFIG SET appendonly yes and \
             CONFIG SET appendfsync always), or start with --store-durability relaxed to run \
             on it knowing that acknowledged work can be lost",
            store.location()
        ))),
        config::StoreDurability::Relaxed => {
            tracing::warn!(store = %store.location(), "--store-durability relaxed: {problem}");
            Ok(Some(format!("store durability relaxed: {problem}")))
        }
    }
}

impl RunningHead {
    /// Waits until the head stops by itself (its lease lost, its store away for longer than
    /// the retry window, or behind what it saw); returns why.
    pub async fn stopped(&mut self) -> Stop {
        match self.stopped.wait_for(|s| s.is_some()).await {
            Ok(stop) => stop.clone().unwrap_or_else(|| Stop {
                kind: StopKind::StoreUnavailable,
                reason: "the head stopped".into(),
            }),
            Err(_) => Stop { kind: StopKind::StoreUnavailable, reason: "the head stopped".into() },
        }
    }

    /// Stops gracefully: the server stops accepting and requests in flight get up to
    /// [`SHUTDOWN_GRACE`] to send their commands; the owner applies everything queued in a last
    /// cycle and refuses what comes later ("the head is shutting down"); the committer makes
    /// that cycle durable and answers it; then the lease is released (not before: a standby
    /// taking over must not race our last commit), and whatever still runs is ended.
    pub async fn shutdown(self) {
        let RunningHead { shutdown, stop_owner, release, tasks, handle, .. } = self;
        let Tasks { mut server, owner, committer, renewer, autoscaler } = tasks;
        shutdown.send_replace(true);
        // Before the owner stops: its last round's answers, and the local nodes it stops.
        if let Some(autoscaler) = autoscaler {
            let _ = autoscaler.await;
        }
        let drained = tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await.is_ok();
        stop_owner.send_replace(true);
        drop(handle);
        let _ = owner.await;
        let _ = committer.await;
        release.send_replace(true);
        let _ = renewer.await;
        if !drained {
            server.abort();
            let _ = server.await;
        }
    }

    /// Ends every task at once, as a crash would (no lease release, nothing flushed beyond
    /// what was acknowledged). For tests of restarts.
    ///
    /// The committer, on a thread of its own, cannot be cut mid-commit: it finishes the commit
    /// it has (as a crash just after the fsync would) and stops once the owner is gone, and
    /// this waits for it, so the store is free for the next head when this returns.
    pub async fn crash(self) {
        let Tasks { server, owner, committer, renewer, autoscaler } = self.tasks;
        let tasks: Vec<JoinHandle<()>> =
            [server, owner, renewer].into_iter().chain(autoscaler).collect();
        for task in &tasks {
            task.abort();
        }
        for task in tasks {
            let _ = task.await;
        }
        let _ = committer.await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[tokio::test]
    async fn a_burst_of_connections_waits_for_the_head_to_accept_it() {
        let listener = super::listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let address = listener.local_addr().unwrap();
        // Nobody accepts: every connection waits in the kernel's queue. With the standard
        // library's backlog (128), the kernel drops the handshakes beyond it, and those
        // connections wait for retransmissions (1 s, 3 s, 7 s, …) that find the queue full again.
        let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(4096);
        let burst = somaxconn.min(500);
        assert!(burst > 200, "net.core.somaxconn is {somaxconn}: raise it to test the backlog");
        let connects = (0..burst).map(|_| tokio::net::TcpStream::connect(address));
        let all = futures::future::try_join_all(connects);
        let streams = tokio::time::timeout(Duration::from_secs(60), all)
            .await
            .expect("every connection of the burst is queued")
            .unwrap();
        assert_eq!(streams.len(), burst);
        drop(listener);
    }
}
