//! The head's settings.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use berth_core::SchedulerConfig;
use berth_store::StoreConfig;

/// How a head runs. [`HeadConfig::new`] gives the defaults for a data directory.
#[derive(Clone, Debug)]
pub struct HeadConfig {
    /// Where the token (and, with the embedded store, the database) live.
    pub data_dir: PathBuf,
    /// The store: redb in `data_dir` (default) or Redis.
    pub store: StoreConfig,
    /// Where to listen; port 0 picks a free one (tests).
    pub bind: SocketAddr,
    /// The DEFAULT strategy's settings.
    pub scheduler: SchedulerConfig,
    /// How often agents heartbeat.
    pub heartbeat_interval: Duration,
    /// Silence after which a node is declared dead (it is SUSPECT before, from
    /// [`HeadConfig::suspect_after`]).
    pub heartbeat_timeout: Duration,
    /// Seed of the head's RNG (ties among equal nodes, RANDOM).
    pub seed: u64,
    /// An admin token to use instead of `DATA_DIR/token` (tests, embedding); `None` reads or
    /// creates the file. Given, no token file is written.
    pub token: Option<String>,
    /// An agent token to use instead of `DATA_DIR/agent-token`; with `token` given and this
    /// `None`, a random one (see `RunningHead::agent_token`).
    pub agent_token: Option<String>,
    /// How long, and how many, finished objects are kept before they are forgotten.
    pub retention: Retention,
    /// Serve REST, the dashboard and the agent protocol over TLS with these files.
    pub tls: Option<crate::tls::TlsFiles>,
    /// Rare-resource isolation (seed 004): nodes with these resources are tainted
    /// `berth.io/rare-NAME=true`. `None` keeps what the store holds (nothing at first); a list
    /// (empty: none) replaces it and is kept for later restarts.
    pub rare_resources: Option<Vec<String>>,
    /// Run the autoscaler with these settings.
    pub autoscaler: Option<AutoscalerConfig>,
    /// How long the store's lease lasts without renewal (renewed every third of it): a
    /// standby head takes over within this (and a second) after the active head dies.
    pub lease_ttl: Duration,
    /// Under load, the starts and stops of commits are sent to the agents together, at most
    /// once per this window; a quiet head sends each at once (see `owner::outbox`). Zero sends
    /// every one as soon as its commit is durable.
    pub assignment_window: Duration,
    /// How long a failed store commit is retried (with backoff) before the head steps down to
    /// standby; meanwhile writes are answered 503 and reads served from memory. `None`: the
    /// lease's ttl, after which another head may have taken over anyway.
    pub store_retry: Option<Duration>,
    /// What the head demands of its store's durability.
    pub store_durability: StoreDurability,
    /// Take the store as it is at start, even if it is behind what this data directory last
    /// saw of it (it lost acknowledged writes): the operator's decision after a store loss.
    pub accept_store_loss: bool,
    /// The most of each kind of thing one request may hold (labels, bundles, batch items…).
    pub limits: berth_api::limits::Limits,
    /// The most connections served at once (REST, dashboard and agents together); more are
    /// closed as they arrive.
    pub max_connections: usize,
    /// How long a connection may stay with no request in flight before it is closed.
    pub idle_timeout: Duration,
    /// How long an HTTP/1 request's headers may take to arrive.
    pub header_timeout: Duration,
}

/// What the head demands of its store's durability (`--store-durability`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StoreDurability {
    /// Refuse a store that can lose acknowledged writes (a Redis server without `appendonly
    /// yes` and `appendfsync always`).
    #[default]
    Strict,
    /// Run on it anyway, saying so in the log and in `berth status`.
    Relaxed,
}

impl HeadConfig {
    /// The store commit retry window: [`HeadConfig::store_retry`], else the lease's ttl.
    pub fn store_retry_window(&self) -> Duration {
        self.store_retry.unwrap_or(self.lease_ttl)
    }

    /// Silence after which a live node is SUSPECT (takes no new work; nothing of it is
    /// restarted or released): a third of the heartbeat timeout, so that new work stops going
    /// to a silent node well before it is declared dead, but at least two heartbeat intervals
    /// and a second (a late beat or a scheduling hiccup is not news), and at most the timeout
    /// (with a timeout that short, a node goes straight to DEAD).
    pub fn suspect_after(&self) -> Duration {
        (self.heartbeat_timeout / 3)
            .max(self.heartbeat_interval * 2)
            .max(Duration::from_secs(1))
            .min(self.heartbeat_timeout)
    }
}

/// How the head's autoscaler runs.
#[derive(Clone, Debug)]
pub struct AutoscalerConfig {
    /// The node types, limits and provider (the autoscaler file).
    pub settings: berth_api::spec::node_types::AutoscalerSettings,
    /// The `berth` executable the `local` provider starts agents with.
    pub program: PathBuf,
    /// Time between rounds.
    pub interval: Duration,
}

/// Default time between autoscaler rounds.
pub const DEFAULT_AUTOSCALER_INTERVAL: Duration = Duration::from_secs(1);

/// How long finished objects (DEAD actors; FINISHED, FAILED, CANCELLED tasks; REMOVED groups)
/// stay in memory and in the store.
///
/// Without a bound a long-lived head grows with everything it ever ran: every restart reloads
/// it and every status walks it. Kubernetes drops finished pods by TTL and a count threshold;
/// Ray keeps a bounded number of dead actors. Berth does both: an object is dropped once it
/// has been finished for `keep_for`, or earlier when more than `keep_count` finished objects
/// of its kind exist (the oldest-finished first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// How long a finished object is kept after it finished.
    pub keep_for: Duration,
    /// Finished objects kept per kind, at most.
    pub keep_count: usize,
}

/// Default time a finished object is kept.
pub const DEFAULT_KEEP_FINISHED_FOR: Duration = Duration::from_secs(3600);
/// Default number of finished objects kept per kind.
pub const DEFAULT_KEEP_FINISHED: usize = 10_000;

impl Default for Retention {
    fn default() -> Self {
        Retention { keep_for: DEFAULT_KEEP_FINISHED_FOR, keep_count: DEFAULT_KEEP_FINISHED }
    }
}

/// Default [`HeadConfig::assignment_window`]: 10 ms. In `berth bench api`'s single creations
/// the agents' CPU per creation was 14 to 16 µs at 5 ms, 6 to 11 µs at 10 ms and 8 µs at 20 ms,
/// against 16 to 21 µs without a window; at 25 and 40 ms 4 to 7 µs, but creations/s no higher
/// (docs/bench-api-log.md). A start waits at most this long, and only under load.
pub const DEFAULT_ASSIGNMENT_WINDOW: Duration = Duration::from_millis(10);

/// Default heartbeat period.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(500);
/// Default silence before a node is dead: 30 s. Trusted systems wait about this long: Ray's
/// health checks fail a node after 15 to 30 s of missed checks, Kubernetes marks a node
/// not-ready after 40 to 50 s. 5 s, what Berth had, took healthy nodes for dead on a saturated
/// 2-core machine (a burst of Python tasks at load 20), and a false death costs restarts and
/// failed retries, while a slower true death costs only a later restart; 30 s gave no false
/// death in that run. The top of Ray's range, below Kubernetes': nodes are SUSPECT (no new
/// work) after a third of it, so new work stops going to a silent node within 10 s anyway.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(30);

/// The default most connections at once: far above what a cluster's agents, CLIs and
/// dashboards open, and within the open-file limit the head raises itself to at start.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4_096;

/// The default idle timeout: above the 90 s for which HTTP client pools (reqwest, hyper) keep
/// an idle connection, so that a client's pool drops it before the head does.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// The default time an HTTP/1 request's headers may take (a slow-sending client is cut off).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

impl HeadConfig {
    /// Defaults: redb in `data_dir`, 127.0.0.1 on the default port.
    pub fn new(data_dir: impl Into<PathBuf>) -> HeadConfig {
        let data_dir = data_dir.into();
        HeadConfig {
            store: StoreConfig::redb(data_dir.clone()),
            data_dir,
            bind: SocketAddr::from(([127, 0, 0, 1], berth_api::local::DEFAULT_PORT)),
            scheduler: SchedulerConfig::default(),
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            heartbeat_timeout: DEFAULT_HEARTBEAT_TIMEOUT,
            seed: 0,
            token: None,
            agent_token: None,
            retention: Retention::default(),
            tls: None,
            rare_resources: None,
            autoscaler: None,
            lease_ttl: crate::LEASE_TTL,
            assignment_window: DEFAULT_ASSIGNMENT_WINDOW,
            store_retry: None,
            store_durability: StoreDurability::Strict,
            accept_store_loss: false,
            limits: berth_api::limits::Limits::default(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
        }
    }
}
