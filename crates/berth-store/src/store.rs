//! The [`Store`] trait every backend implements, and [`AnyStore`], the backend chosen at run
//! time.

use std::future::Future;
use std::time::Duration;

use crate::batch::Batch;
use crate::error::{StoreError, StoreLocation};
use crate::etcd_store::EtcdStore;
use crate::lease::{Epoch, Generation, Lease};
use crate::redb_store::RedbStore;
use crate::redis_store::RedisStore;
use crate::snapshot::Snapshot;

/// The head's durable state: the tables of [`Table`](crate::Table), written in atomic
/// batches, guarded by a lease with fencing epochs.
///
/// # Contract
///
/// - **Durable when it returns.** When [`commit`](Store::commit) returns `Ok`, the whole batch
///   is in the store (for redb, fsynced to disk; for Redis, applied on the server, as durable
///   as the server's persistence settings make it) and every later [`load`](Store::load), by
///   this process or a successor, sees it. Acknowledge nothing to a user before that.
/// - **All or nothing.** A batch is applied in order and whole, or not at all: an invalid op
///   ([`StoreError::InvalidBatch`]) or a stale epoch ([`StoreError::Fenced`]) changes nothing.
/// - **Fencing.** Every commit names the writer's lease epoch; the store refuses it unless that
///   is the current epoch (its number and its random token), checked in the same transaction
///   as the writes. A head must
///   [`acquire_lease`](Store::acquire_lease) *before* it [`load`](Store::load)s, so nothing
///   its predecessor writes after the load can be accepted.
/// - **Leases.** Acquiring succeeds when nobody holds the lease, when it has expired (its ttl
///   passed without renewal), or when the same holder asks again; each success starts a new
///   epoch, which fences every earlier one (including an earlier process with the same
///   holder name). Renewing extends the lease as long as its epoch is still current, even after
///   it expired if nobody took it over. Expiry alone fences nothing: only a new acquisition
///   does.
/// - **A store that lost writes is refused.** Every store has a random ID and counts its
///   commits ([`Generation`]). A store object remembers the furthest it has seen (and what
///   its caller [`expect`](Store::expect)s from an earlier run), and refuses, as
///   [`StoreError::Behind`], any acquisition, renewal or commit on a store that shows another
///   ID or fewer commits: nothing is written to it, and the caller learns that acknowledged
///   writes are gone instead of handing out their IDs again.
/// - Heartbeats and other soft state do not belong here: every commit costs an fsync or a
///   round trip. Batch a scheduling cycle's writes into one commit (see
///   [`BatchWriter`](crate::BatchWriter)).
///
/// The methods return `Send` futures (return-position `impl Future + Send`), so a store can be
/// used from spawned tokio tasks; they need a tokio runtime.
pub trait Store: Send + Sync {
    /// Where the store keeps its data, for messages and logs.
    fn location(&self) -> &StoreLocation;

    /// The furthest this store object has seen the store's history go: after a lease
    /// acquisition, the store's generation then; after each commit, that commit's. `None`
    /// before anything was seen.
    fn generation(&self) -> Option<Generation>;

    /// Says what the caller knew of the store before (a head's record of its last run, a
    /// standby's of what it watched): from now on, an answer behind `known` is refused as
    /// [`StoreError::Behind`]. `None` forgets, accepting the store as it is.
    fn expect(&self, known: Option<Generation>);

    /// Reads every table, keys sorted, as of one point in time.
    fn load(&self) -> impl Future<Output = Result<Snapshot, StoreError>> + Send;

    /// Applies `batch` atomically if `epoch` is the current lease epoch; durable when it
    /// returns `Ok`.
    fn commit(
        &self,
        epoch: Epoch,
        batch: Batch,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Takes the lease for `holder` for `ttl`, starting a new epoch; refused with
    /// [`StoreError::LeaseHeld`] while another holder has it.
    fn acquire_lease(
        &self,
        holder: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Lease, StoreError>> + Send;

    /// Extends `lease` to `ttl` from now; refused with [`StoreError::Fenced`] if another
    /// holder has taken the lease over since.
    fn renew_lease(
        &self,
        lease: &Lease,
        ttl: Duration,
    ) -> impl Future<Output = Result<Lease, StoreError>> + Send;

    /// Gives the lease up so a successor can take it at once (a graceful shutdown); its epoch
    /// stays current until someone acquires the lease. Refused with [`StoreError::Fenced`] if
    /// another holder has taken it over already.
    fn release_lease(&self, lease: &Lease) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A store whose backend was chosen at run time (by [`StoreConfig::open`](crate::StoreConfig::open)).
///
/// An enum rather than `Box<dyn Store>`: the set of backends is closed, and the trait's
/// `impl Future` methods are not object-safe.
#[derive(Debug, Clone)]
pub enum AnyStore {
    /// The embedded redb file.
    Redb(RedbStore),
    /// A Redis server.
    Redis(RedisStore),
    /// An etcd cluster.
    Etcd(EtcdStore),
}

impl AnyStore {
    /// [`Store::commit`] for a thread given to the store: the embedded file commits on the
    /// calling thread, blocking it until durable ([`RedbStore::commit_blocking`]); a network
    /// store awaits its server as `commit` does.
    ///
    /// The batch is borrowed, so a caller can retry it after a failure (puts and deletes are
    /// idempotent: applying a batch twice leaves what applying it once does).
    pub async fn commit_on_this_thread(
        &self,
        epoch: Epoch,
        batch: &Batch,
    ) -> Result<(), StoreError> {
        match self {
            AnyStore::Redb(store) => store.commit_blocking(epoch, batch),
            AnyStore::Redis(store) => store.commit_ref(epoch, batch).await,
            AnyStore::Etcd(store) => store.commit_ref(epoch, batch).await,
        }
    }
}

impl Store for AnyStore {
    fn location(&self) -> &StoreLocation {
        match self {
            AnyStore::Redb(store) => store.location(),
            AnyStore::Redis(store) => store.location(),
            AnyStore::Etcd(store) => store.location(),
        }
    }

    fn generation(&self) -> Option<Generation> {
        match self {
            AnyStore::Redb(store) => store.generation(),
            AnyStore::Redis(store) => store.generation(),
            AnyStore::Etcd(store) => store.generation(),
        }
    }

    fn expect(&self, known: Option<Generation>) {
        match self {
            AnyStore::Redb(store) => store.expect(known),
            AnyStore::Redis(store) => store.expect(known),
            AnyStore::Etcd(store) => store.expect(known),
        }
    }

    async fn load(&self) -> Result<Snapshot, StoreError> {
        match self {
            AnyStore::Redb(store) => store.load().await,
            AnyStore::Redis(store) => store.load().await,
            AnyStore::Etcd(store) => store.load().await,
        }
    }

    async fn commit(&self, epoch: Epoch, batch: Batch) -> Result<(), StoreError> {
        match self {
            AnyStore::Redb(store) => store.commit(epoch, batch).await,
            AnyStore::Redis(store) => store.commit(epoch, batch).await,
            AnyStore::Etcd(store) => store.commit(epoch, batch).await,
        }
    }

    async fn acquire_lease(&self, holder: &str, ttl: Duration) -> Result<Lease, StoreError> {
        match self {
            AnyStore::Redb(store) => store.acquire_lease(holder, ttl).await,
            AnyStore::Redis(store) => store.acquire_lease(holder, ttl).await,
            AnyStore::Etcd(store) => store.acquire_lease(holder, ttl).await,
        }
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        match self {
            AnyStore::Redb(store) => store.renew_lease(lease, ttl).await,
            AnyStore::Redis(store) => store.renew_lease(lease, ttl).await,
            AnyStore::Etcd(store) => store.renew_lease(lease, ttl).await,
        }
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        match self {
            AnyStore::Redb(store) => store.release_lease(lease).await,
            AnyStore::Redis(store) => store.release_lease(lease).await,
            AnyStore::Etcd(store) => store.release_lease(lease).await,
        }
    }
}
