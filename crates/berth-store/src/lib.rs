//! Berth's durable state store: where the head keeps nodes, actors, tasks and placement groups
//! so that it survives a restart, or, with Redis or etcd, the loss of its machine.
//!
//! # Layout
//!
//! - [`Store`] (`store.rs`): the trait, its contract (durable when a commit returns, atomic
//!   batches, leases with fencing epochs), and [`AnyStore`], the backend chosen at run time.
//! - [`RedbStore`] (`redb_store.rs`): the default, embedded backend, one redb file
//!   `DATA_DIR/berth.redb`; zero setup.
//! - [`RedisStore`] (`redis_store.rs`): the same tables in Redis, for a head that another
//!   machine can take over; every write is one Lua script.
//! - [`EtcdStore`] (`etcd_store.rs`): the same tables in an etcd cluster (Raft: it survives
//!   the loss of a minority of members); every write is one transaction, the lease an etcd
//!   lease.
//! - [`Batch`] / [`Op`] (`batch.rs`), [`Table`] (`table.rs`), [`Snapshot`] (`snapshot.rs`),
//!   [`Lease`] / [`Epoch`] (`lease.rs`): the values that go in and out.
//! - [`BatchWriter`] (`writer.rs`): group commit, many callers per transaction.
//! - [`StoreConfig`] (`config.rs`): the head's `--store` value, parsed and validated.
//! - [`StoreError`] (`error.rs`): one enum; every message names the backend, its path or URL,
//!   the operation and the cause.
//! - `testutil` (feature `testutil`): a real `redis-server` on a free port, and real etcd
//!   clusters, for tests.
//!
//! # Decisions, and why
//!
//! - **Opaque values in a fixed set of tables.** The store knows [`Table::Nodes`],
//!   [`Table::Actors`], [`Table::Tasks`], [`Table::Groups`] and [`Table::Meta`], string keys and
//!   byte values; the head serializes its own types. The store cannot then drift from
//!   `berth-api`'s types, and a format change is the head's business alone.
//! - **Group commit.** redb fsyncs every commit, and a commit of one object costs nearly as
//!   much as a commit of a hundred (measured here, `benches/commit.rs`: 450 to 4,500 commits
//!   per second, depending on how busy the disk is; 240k to 490k objects per second in
//!   batches of 1,000), so one commit per object would cap the head at the fsync rate. The
//!   head writes a scheduling cycle's changes as one batch, or lets [`BatchWriter`] gather
//!   concurrent writes into one commit; callers are answered only after their commit is
//!   durable. Heartbeats are never stored.
//! - **Fencing by epoch, checked inside the write.** A lease ([`Store::acquire_lease`]) gives a
//!   new epoch each time it is taken; every commit carries its writer's epoch and is refused
//!   ([`StoreError::Fenced`]) unless it is current. The check and the writes are one redb
//!   write transaction, one Redis Lua script or one etcd transaction, so a stale head can never overwrite what a new
//!   head wrote, however late its commit arrives. Time (lease expiry) only decides when a new
//!   head may take over; correctness never depends on clocks.
//! - **`impl Future + Send` in the trait, no macro crate.** Return-position `impl Trait` in
//!   traits is stable Rust (1.75), needs no dependency and boxes nothing, and spelling out
//!   `+ Send` lets the head call the store from spawned tasks. `trait-variant` would generate
//!   the same thing from a macro; `async-trait` would box every future. The one thing given
//!   up, `dyn Store`, is covered by the closed enum [`AnyStore`].
//! - **Blocking work off the runtime.** redb is synchronous; its calls run on tokio's blocking
//!   pool, so a slow disk never stalls the head's tasks.
//! - **Errors are values, clonable.** No I/O failure panics; [`StoreError`] is `Clone` (causes
//!   are shared) because a group commit gives one error to many callers.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use berth_store::{Batch, Store, StoreConfig, Table};
//!
//! # async fn example() -> Result<(), berth_store::StoreError> {
//! let store = StoreConfig::parse("/var/lib/berth")?.open().await?;
//! // Take the lease first, then load: nothing a predecessor writes after this is accepted.
//! let lease = store.acquire_lease("head-1", Duration::from_secs(10)).await?;
//! let snapshot = store.load().await?;
//! println!("{} nodes", snapshot.table(Table::Nodes).len());
//!
//! let mut batch = Batch::new();
//! batch.put(Table::Nodes, "node-1", b"{...}".to_vec()).delete(Table::Tasks, "task-9");
//! store.commit(lease.epoch(), batch).await?; // durable now: acknowledge
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod batch;
mod config;
mod error;
mod etcd_store;
mod lease;
mod redb_store;
mod redis_store;
mod snapshot;
mod store;
mod table;
#[cfg(feature = "testutil")]
pub mod testutil;
mod writer;

pub use batch::{Batch, InvalidOp, Op, MAX_KEY_BYTES, MAX_VALUE_BYTES, RESERVED_META_PREFIX};
pub use config::{StoreConfig, DEFAULT_REDIS_PREFIX, MAX_PREFIX_CHARS};
pub use error::{Cause, Operation, StoreError, StoreLocation};
pub use etcd_store::EtcdStore;
pub use lease::{Epoch, Generation, Lease, MAX_HOLDER_BYTES, MAX_LEASE_TTL, MIN_LEASE_TTL};
pub use redb_store::{RedbStore, DATABASE_FILE, LEASE_KEY};
pub use redis_store::{RedisPersistence, RedisStore};
pub use snapshot::Snapshot;
pub use store::{AnyStore, Store};
pub use table::Table;
pub use writer::{BatchWriter, BatchWriterConfig, WriterStats};
