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
    /// Silence after which a node is declared dead.
    pub heartbeat_timeout: Duration,
    /// Seed of the head's RNG (ties among equal nodes, RANDOM).
    pub seed: u64,
    /// A token to use instead of the token file (tests); `None` reads or creates the file.
    pub token: Option<String>,
}

/// Default heartbeat period.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(500);
/// Default silence before a node is dead (Ray's default is 30 s; ours is shorter because a
/// heartbeat here is a few bytes on a stream, not a polled RPC).
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);

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
        }
    }
}
