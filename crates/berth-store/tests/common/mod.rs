//! What the integration tests share: one harness per backend, so every test of the suite runs
//! the same code against redb and against a real Redis server.

#![allow(dead_code)] // Each test binary uses a different part of this module.

use std::future::Future;
use std::path::PathBuf;

use berth_store::testutil::{EtcdCluster, RedisServer};
use berth_store::{Batch, EtcdStore, RedbStore, RedisStore, Snapshot, Store, StoreConfig, Table};

/// A backend under test: opens stores on the same underlying data as often as asked, so a
/// test can drop a store and open it again (redb: the same file; Redis: a new connection to
/// the same server and prefix).
pub trait Harness: Send + Sync + 'static {
    /// The store type.
    type Store: Store + Clone + 'static;

    /// A fresh, empty backend.
    fn new() -> Self;

    /// Opens a store on the backend's data.
    fn open(&self) -> impl Future<Output = Self::Store> + Send;

    /// The `--store` value for the same data.
    fn config(&self) -> StoreConfig;
}

/// redb in a temporary data directory.
pub struct RedbHarness {
    dir: tempfile::TempDir,
}

impl RedbHarness {
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }
}

impl Harness for RedbHarness {
    type Store = RedbStore;

    fn new() -> Self {
        RedbHarness { dir: tempfile::tempdir().expect("temporary directory") }
    }

    async fn open(&self) -> RedbStore {
        RedbStore::open(self.data_dir()).await.unwrap_or_else(|e| panic!("{e}"))
    }

    fn config(&self) -> StoreConfig {
        StoreConfig::redb(self.data_dir())
    }
}

/// A real redis-server of its own, on a free port, and a prefix on it.
pub struct RedisHarness {
    pub server: RedisServer,
    pub prefix: String,
}

impl Harness for RedisHarness {
    type Store = RedisStore;

    fn new() -> Self {
        let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
        RedisHarness { server, prefix: "test".to_owned() }
    }

    async fn open(&self) -> RedisStore {
        RedisStore::connect(&self.server.url(), &self.prefix)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn config(&self) -> StoreConfig {
        StoreConfig::parse(&self.server.store_url(&self.prefix)).expect("valid URL")
    }
}

/// A real etcd cluster of its own (one member: the contract is the same, and it starts fast;
/// the cluster tests use three), and a prefix on it.
pub struct EtcdHarness {
    pub cluster: EtcdCluster,
    pub prefix: String,
}

impl Harness for EtcdHarness {
    type Store = EtcdStore;

    fn new() -> Self {
        let cluster = EtcdCluster::start(1).unwrap_or_else(|e| panic!("{e}"));
        EtcdHarness { cluster, prefix: "test".to_owned() }
    }

    async fn open(&self) -> EtcdStore {
        let StoreConfig::Etcd { endpoints, prefix } = self.config() else { unreachable!() };
        EtcdStore::connect(&endpoints, &prefix).await.unwrap_or_else(|e| panic!("{e}"))
    }

    fn config(&self) -> StoreConfig {
        StoreConfig::parse(&self.cluster.store_url(&self.prefix)).expect("valid URL")
    }
}

/// A batch of one put in `Nodes`.
pub fn put(key: &str, value: &[u8]) -> Batch {
    let mut batch = Batch::new();
    batch.put(Table::Nodes, key, value.to_vec());
    batch
}

/// The snapshot's entries as `(table, key, value)`, table by table, keys sorted.
pub fn entries(snapshot: &Snapshot) -> Vec<(Table, String, Vec<u8>)> {
    snapshot.iter().map(|(table, key, value)| (table, key.to_owned(), value.to_vec())).collect()
}
