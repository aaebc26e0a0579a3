//! The embedded backend: one redb file in the data directory.
//!
//! Layout: `DATA_DIR/berth.redb`, one redb table per [`Table`] (named [`Table::name`]), keys
//! the UTF-8 bytes of the store's string keys (`&[u8]`), values `&[u8]`. The lease is the row
//! [`LEASE_KEY`] of the `meta` table: the current epoch, the expiry (wall-clock milliseconds
//! since the Unix epoch, so it means the same after a restart) and the holder. Commits check
//! that row and write the batch in one write transaction, committed with redb's default
//! durability (fsync before `commit` returns).
//!
//! redb is synchronous; every call runs on tokio's blocking pool so the runtime's workers never
//! wait for a disk. redb locks the file: a second process (or a second `open` in this process)
//! gets a clear "already open" error, which is why this backend is single-process by nature.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};

use crate::batch::{Batch, Op, RESERVED_META_PREFIX};
use crate::error::{Operation, StoreError, StoreLocation};
use crate::lease::{check_lease_request, ttl_millis, Epoch, Generation, Lease, Watermark};
use crate::snapshot::Snapshot;
use crate::store::Store;
use crate::table::Table;

/// The database file's name inside the data directory.
pub const DATABASE_FILE: &str = "berth.redb";

/// The `meta` row that holds the lease.
pub const LEASE_KEY: &str = "berth.store.lease";

/// The `meta` row that holds the store's ID and commit counter.
const GENERATION_KEY: &str = "berth.store.generation";

/// The redb table definition of a [`Table`]. Keys are the bytes of the store's string keys:
/// redb orders `&[u8]` and `&str` keys alike (byte by byte), but checks a `&str` key as UTF-8
/// at every comparison, which was 2.8 % of `berth bench api --quick`'s instructions
/// (callgrind). Every key written is a `String`, so every key read back is UTF-8
/// ([`Inner::load`] checks once).
fn definition(table: Table) -> TableDefinition<'static, &'static [u8], &'static [u8]> {
    TableDefinition::new(table.name())
}

/// A [`Table`] as stores written before byte keys laid it out: `&str` keys. Such a table is
/// copied to byte keys when the store opens ([`migrate_keys`]).
fn str_key_definition(table: Table) -> TableDefinition<'static, &'static str, &'static [u8]> {
    TableDefinition::new(table.name())
}

/// Where lease expiry times come from: the wall clock, or a hand-set one in unit tests.
#[derive(Debug, Clone)]
pub(crate) enum Clock {
    /// `SystemTime::now()`.
    System,
    /// Milliseconds since the Unix epoch, set by the test.
    #[cfg(test)]
    Manual(Arc<std::sync::atomic::AtomicU64>),
}

impl Clock {
    fn now_unix_ms(&self) -> u64 {
        match self {
            Clock::System => {
                let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            }
            #[cfg(test)]
            Clock::Manual(now) => now.load(std::sync::atomic::Ordering::SeqCst),
        }
    }
}

/// The embedded store: a redb file, zero setup. Cheap to clone (clones share the database).
#[derive(Clone)]
pub struct RedbStore {
    inner: Arc<Inner>,
}

struct Inner {
    db: Database,
    /// The database file, also named in `location`.
    path: PathBuf,
    /// Named in every error.
    location: StoreLocation,
    /// Where lease expiry times come from.
    clock: Clock,
    /// The furthest this store object has seen the file's history go.
    watermark: Watermark,
}

impl fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedbStore").field("location", &self.inner.location).finish_non_exhaustive()
    }
}

impl RedbStore {
    /// Opens (creating if needed) the store in `data_dir`: creates the directory, then
    /// `data_dir/berth.redb` and its tables. Fails with a message naming the path if the
    /// directory cannot be created or written, or the file is open elsewhere.
    pub async fn open(data_dir: impl Into<PathBuf>) -> Result<Self, StoreError> {
        Self::open_with_clock(data_dir.into(), Clock::System).await
    }

    pub(crate) async fn open_with_clock(
        data_dir: PathBuf,
        clock: Clock,
    ) -> Result<Self, StoreError> {
        let path = data_dir.join(DATABASE_FILE);
        let location = StoreLocation::Redb { path: path.clone() };
        let (for_task, path_for_task) = (location.clone(), path.clone());
        let db = blocking(&location, Operation::Open, move || {
            open_database(&data_dir, &path_for_task, &for_task)
        })
        .await?;
        Ok(RedbStore {
            inner: Arc::new(Inner { db, path, location, clock, watermark: Watermark::default() }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }
}

/// redb's page cache. Its default (1 GiB) keeps every page a write touched, so a head's memory
/// grew by about a record's size per object written; the head reads its tables only when it
/// starts, and writes need only the tree's interior pages (a few MiB at a million records).
/// 16 MiB: at 64 MiB the cache was 680 B of the memory per actor at 100,000 actors (`berth
/// bench api`), with the same creation rates at both sizes (the kernel's page cache still
/// holds the file).
const CACHE_BYTES: usize = 16 * 1024 * 1024;

/// Creates the data directory and the database, and makes sure every table exists (so `load`
/// on a new store finds empty tables, not missing ones).
fn open_database(
    data_dir: &Path,
    path: &Path,
    location: &StoreLocation,
) -> Result<Database, StoreError> {
    let open_failed = |cause: Box<dyn std::error::Error + Send + Sync>| {
        StoreError::backend(location, Operation::Open, cause)
    };
    std::fs::create_dir_all(data_dir).map_err(|e| {
        open_failed(format!("cannot create the data directory {}: {e}", data_dir.display()).into())
    })?;
    let db = redb::Builder::new()
        .set_cache_size(CACHE_BYTES)
        .create(path)
        .map_err(|e| open_failed(redb::Error::from(e).into()))?;
    // Its owner's alone: it holds every work's environment, secrets included.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|e| {
            open_failed(format!("cannot make {} private: {e}", path.display()).into())
        })?;
    }
    if has_every_table(&db) {
        return Ok(db);
    }
    let txn = db.begin_write().map_err(|e| open_failed(redb::Error::from(e).into()))?;
    for table in Table::ALL {
        match txn.open_table(definition(table)) {
            Ok(_) => {}
            Err(redb::TableError::TableTypeMismatch { .. }) => {
                migrate_keys(&txn, table).map_err(|e| {
                    open_failed(format!("copying table {table} to byte keys: {e}").into())
                })?
            }
            Err(e) => return Err(open_failed(redb::Error::from(e).into())),
        }
    }
    // One transaction: a store is migrated whole or not at all.
    txn.commit().map_err(|e| open_failed(redb::Error::from(e).into()))?;
    Ok(db)
}

/// Copies `table`, written with `&str` keys, to byte keys: into a table of its own, which then
/// takes the old one's name. Same keys, same order, same values; the caller's transaction
/// commits it.
fn migrate_keys(txn: &WriteTransaction, table: Table) -> Result<(), redb::Error> {
    let name = format!("{}.byte-keys", table.name());
    let copy = TableDefinition::<&[u8], &[u8]>::new(&name);
    {
        let old = txn.open_table(str_key_definition(table))?;
        let mut new = txn.open_table(copy)?;
        for entry in old.iter()? {
            let (key, value) = entry?;
            new.insert(key.value().as_bytes(), value.value())?;
        }
    }
    txn.delete_table(str_key_definition(table))?;
    txn.rename_table(copy, definition(table))?;
    Ok(())
}

/// Whether every table exists already, so opening an existing store costs no write.
fn has_every_table(db: &Database) -> bool {
    let Ok(txn) = db.begin_read() else { return false };
    Table::ALL.iter().all(|&table| txn.open_table(definition(table)).is_ok())
}

/// Runs blocking redb work on tokio's blocking pool. A panic in it becomes an error, not a
/// panic of the caller.
async fn blocking<T, F>(
    location: &StoreLocation,
    operation: Operation,
    work: F,
) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(join) => Err(StoreError::backend(
            location,
            operation,
            format!("the blocking task failed: {join}"),
        )),
    }
}

/// The lease row of the `meta` table.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LeaseRow {
    /// The last epoch granted (its number and token).
    epoch: Epoch,
    /// When the lease expires, in milliseconds since the Unix epoch; 0 once released.
    expires_at_ms: u64,
    /// Who was granted the epoch.
    holder: String,
}

impl LeaseRow {
    /// Format version 2: `[2][epoch: u64 BE][expires_at_ms: u64 BE][token: u64 BE][holder]`.
    /// Version 1 had no token: it reads as token 0.
    const VERSION: u8 = 2;
    const HEADER: usize = 1 + 8 + 8 + 8;
    const HEADER_V1: usize = 1 + 8 + 8;

    fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(Self::HEADER + self.holder.len());
        bytes.push(Self::VERSION);
        bytes.extend_from_slice(&self.epoch.get().to_be_bytes());
        bytes.extend_from_slice(&self.expires_at_ms.to_be_bytes());
        bytes.extend_from_slice(&self.epoch.token().to_be_bytes());
        bytes.extend_from_slice(self.holder.as_bytes());
        bytes
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        let header = match bytes.first() {
            Some(1) => Self::HEADER_V1,
            Some(&Self::VERSION) => Self::HEADER,
            Some(other) => {
                return Err(format!("format version {other}, this build reads 1 and 2"));
            }
            None => return Err("empty".to_owned()),
        };
        if bytes.len() < header {
            return Err(format!("{} bytes, fewer than the {header}-byte header", bytes.len()));
        }
        let token = if header == Self::HEADER { be_u64(&bytes[17..25]) } else { 0 };
        let holder = std::str::from_utf8(&bytes[header..])
            .map_err(|e| format!("the holder is not UTF-8: {e}"))?;
        Ok(LeaseRow {
            epoch: Epoch::with_token(be_u64(&bytes[1..9]), token),
            expires_at_ms: be_u64(&bytes[9..17]),
            holder: holder.to_owned(),
        })
    }
}

/// A big-endian `u64` from 8 bytes.
fn be_u64(bytes: &[u8]) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(word)
}

/// The generation row: `[1][commits: u64 BE][id: UTF-8]`.
fn encode_generation(generation: &Generation) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(9 + generation.id.len());
    bytes.push(1);
    bytes.extend_from_slice(&generation.commits.to_be_bytes());
    bytes.extend_from_slice(generation.id.as_bytes());
    bytes
}

fn decode_generation(bytes: &[u8]) -> Result<Generation, String> {
    if bytes.len() < 9 || bytes[0] != 1 {
        return Err(format!("{} bytes, not format version 1", bytes.len()));
    }
    let id = std::str::from_utf8(&bytes[9..]).map_err(|e| format!("the ID is not UTF-8: {e}"))?;
    Ok(Generation { id: id.to_owned(), commits: be_u64(&bytes[1..9]) })
}

impl Inner {
    fn error(&self, operation: Operation) -> impl Fn(redb::Error) -> StoreError + '_ {
        move |e| StoreError::backend(&self.location, operation, e)
    }

    /// Runs `work` in one write transaction and commits it (durably) if `work` succeeds; aborts
    /// it otherwise, so a failed operation writes nothing.
    fn write<T>(
        &self,
        operation: Operation,
        work: impl FnOnce(&WriteTransaction) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let error = self.error(operation);
        let txn = self.db.begin_write().map_err(|e| error(e.into()))?;
        match work(&txn) {
            Ok(value) => {
                txn.commit().map_err(|e| error(e.into()))?;
                Ok(value)
            }
            Err(e) => {
                // Aborting only releases the transaction: nothing was committed either way.
                let _ = txn.abort();
                Err(e)
            }
        }
    }

    /// Reads the lease row.
    fn lease_row(
        &self,
        operation: Operation,
        meta: &impl ReadableTable<&'static [u8], &'static [u8]>,
    ) -> Result<Option<LeaseRow>, StoreError> {
        let Some(guard) =
            meta.get(LEASE_KEY.as_bytes()).map_err(|e| self.error(operation)(e.into()))?
        else {
            return Ok(None);
        };
        LeaseRow::decode(guard.value()).map(Some).map_err(|reason| StoreError::Corrupt {
            location: self.location.clone(),
            operation,
            what: format!("the lease row {:?} of the meta table", LEASE_KEY),
            reason,
        })
    }

    /// Writes the lease row.
    fn put_lease_row(
        &self,
        operation: Operation,
        meta: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
        row: &LeaseRow,
    ) -> Result<(), StoreError> {
        meta.insert(LEASE_KEY.as_bytes(), row.encode().as_slice())
            .map_err(|e| self.error(operation)(e.into()))?;
        Ok(())
    }

    /// Refuses `ours` unless it is the current epoch (number and token).
    fn check_epoch(
        &self,
        operation: Operation,
        row: Option<&LeaseRow>,
        ours: Epoch,
    ) -> Result<(), StoreError> {
        let current = row.map_or(Epoch::new(0), |row| row.epoch);
        if current == ours {
            return Ok(());
        }
        Err(StoreError::Fenced { location: self.location.clone(), operation, ours, current })
    }

    /// Reads the generation row (an ID of "" and no commits when there is none yet) and
    /// refuses it if it is behind what this store object has seen.
    fn check_generation(
        &self,
        operation: Operation,
        meta: &impl ReadableTable<&'static [u8], &'static [u8]>,
    ) -> Result<Generation, StoreError> {
        let guard =
            meta.get(GENERATION_KEY.as_bytes()).map_err(|e| self.error(operation)(e.into()))?;
        let found = match guard {
            Some(guard) => {
                decode_generation(guard.value()).map_err(|reason| StoreError::Corrupt {
                    location: self.location.clone(),
                    operation,
                    what: format!("the generation row {GENERATION_KEY:?} of the meta table"),
                    reason,
                })?
            }
            None => Generation { id: String::new(), commits: 0 },
        };
        // Inside the write transaction, and the watermark only takes what the file held: no
        // answer here can race another.
        match self.watermark.get() {
            Some(known) if known.is_ahead_of(&found) => {
                Err(StoreError::Behind { location: self.location.clone(), operation, known, found })
            }
            _ => Ok(found),
        }
    }

    /// Writes the generation row; the watermark follows once the transaction commits.
    fn put_generation(
        &self,
        operation: Operation,
        meta: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
        generation: &Generation,
    ) -> Result<(), StoreError> {
        meta.insert(GENERATION_KEY.as_bytes(), encode_generation(generation).as_slice())
            .map_err(|e| self.error(operation)(e.into()))?;
        Ok(())
    }

    /// Moves the watermark to what a committed transaction wrote or read.
    fn seen(&self, generation: &Generation) {
        // Cannot be behind: the transaction checked it, and nothing else writes the file.
        let _ = self.watermark.observe(None, generation);
    }

    fn load(&self) -> Result<Snapshot, StoreError> {
        let error = self.error(Operation::Load);
        let txn = self.db.begin_read().map_err(|e| error(e.into()))?;
        let mut snapshot = Snapshot::new();
        for table in Table::ALL {
            let handle = txn.open_table(definition(table)).map_err(|e| error(e.into()))?;
            for entry in handle.iter().map_err(|e| error(e.into()))? {
                let (key, value) = entry.map_err(|e| error(e.into()))?;
                let key = std::str::from_utf8(key.value()).map_err(|e| StoreError::Corrupt {
                    location: self.location.clone(),
                    operation: Operation::Load,
                    what: format!("a key of the {table} table"),
                    reason: format!("it is not UTF-8: {e}"),
                })?;
                if table == Table::Meta && key.starts_with(RESERVED_META_PREFIX) {
                    continue;
                }
                snapshot.insert(table, key.to_owned(), value.value().to_vec());
            }
        }
        Ok(snapshot)
    }

    fn commit(&self, epoch: Epoch, batch: &Batch) -> Result<(), StoreError> {
        let operation = Operation::Commit;
        self.write(operation, |txn| {
            let error = self.error(operation);
            let mut meta = txn.open_table(definition(Table::Meta)).map_err(|e| error(e.into()))?;
            let mut generation = self.check_generation(operation, &meta)?;
            let row = self.lease_row(operation, &meta)?;
            self.check_epoch(operation, row.as_ref(), epoch)?;
            generation.commits += 1;
            self.put_generation(operation, &mut meta, &generation)?;
            // Only the tables the batch writes are opened: a commit of creations and starts
            // touches two of the six, and each table opened is a lookup in redb's table of
            // tables and a handle to close again, in every commit.
            let mut tables: [Option<redb::Table<'_, &[u8], &[u8]>>; Table::ALL.len()] =
                Default::default();
            tables[Table::Meta.index()] = Some(meta);
            for op in batch.ops() {
                let slot = &mut tables[op.table().index()];
                let handle = match slot {
                    Some(handle) => handle,
                    None => slot.insert(
                        txn.open_table(definition(op.table())).map_err(|e| error(e.into()))?,
                    ),
                };
                match op {
                    Op::Put { key, value, .. } => {
                        handle
                            .insert(key.as_bytes(), value.as_slice())
                            .map_err(|e| error(e.into()))?;
                    }
                    Op::Delete { key, .. } => {
                        handle.remove(key.as_bytes()).map_err(|e| error(e.into()))?;
                    }
                }
            }
            Ok(generation)
        })
        .map(|generation| self.seen(&generation))
    }

    fn acquire_lease(&self, holder: &str, ttl: Duration) -> Result<Lease, StoreError> {
        let operation = Operation::AcquireLease;
        self.write(operation, |txn| {
            let mut meta = txn
                .open_table(definition(Table::Meta))
                .map_err(|e| self.error(operation)(e.into()))?;
            let mut generation = self.check_generation(operation, &meta)?;
            let row = self.lease_row(operation, &meta)?;
            let now = self.clock.now_unix_ms();
            if let Some(row) = &row {
                if row.holder != holder && row.expires_at_ms > now {
                    return Err(StoreError::LeaseHeld {
                        location: self.location.clone(),
                        holder: row.holder.clone(),
                        remaining: Duration::from_millis(row.expires_at_ms - now),
                    });
                }
            }
            let previous = row.map_or(0, |row| row.epoch.get());
            let number = previous.checked_add(1).ok_or_else(|| StoreError::Corrupt {
                location: self.location.clone(),
                operation,
                what: "the lease epoch".to_owned(),
                reason: "it has reached u64::MAX".to_owned(),
            })?;
            let epoch = Epoch::with_token(number, crate::lease::random_u64());
            let expires_at_ms = now.saturating_add(ttl_millis(ttl));
            self.put_lease_row(
                operation,
                &mut meta,
                &LeaseRow { epoch, expires_at_ms, holder: holder.to_owned() },
            )?;
            if generation.id.is_empty() {
                generation.id = crate::lease::new_store_id();
                self.put_generation(operation, &mut meta, &generation)?;
            }
            Ok((Lease::new(holder, epoch, ttl), generation))
        })
        .map(|(lease, generation)| {
            self.seen(&generation);
            lease
        })
    }

    fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        let operation = Operation::RenewLease;
        self.write(operation, |txn| {
            let mut meta = txn
                .open_table(definition(Table::Meta))
                .map_err(|e| self.error(operation)(e.into()))?;
            self.check_generation(operation, &meta)?;
            let row = self.lease_row(operation, &meta)?;
            self.check_epoch(operation, row.as_ref(), lease.epoch())?;
            let expires_at_ms = self.clock.now_unix_ms().saturating_add(ttl_millis(ttl));
            let row =
                LeaseRow { epoch: lease.epoch(), expires_at_ms, holder: lease.holder().to_owned() };
            self.put_lease_row(operation, &mut meta, &row)?;
            Ok(Lease::new(lease.holder(), lease.epoch(), ttl))
        })
    }

    fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let operation = Operation::ReleaseLease;
        self.write(operation, |txn| {
            let mut meta = txn
                .open_table(definition(Table::Meta))
                .map_err(|e| self.error(operation)(e.into()))?;
            let row = self.lease_row(operation, &meta)?;
            self.check_epoch(operation, row.as_ref(), lease.epoch())?;
            let row = LeaseRow {
                epoch: lease.epoch(),
                expires_at_ms: 0,
                holder: lease.holder().to_owned(),
            };
            self.put_lease_row(operation, &mut meta, &row)
        })
    }
}

impl RedbStore {
    /// [`Store::commit`] on the calling thread, which it blocks until the commit is durable
    /// (the fsync included): for a thread that does nothing else, as the head's committer
    /// (why: the head's `owner::spawn_committer`). [`Store::commit`] is this on tokio's
    /// blocking pool.
    pub fn commit_blocking(&self, epoch: Epoch, batch: &Batch) -> Result<(), StoreError> {
        batch.validate()?;
        self.inner.commit(epoch, batch)
    }
}

impl Store for RedbStore {
    fn location(&self) -> &StoreLocation {
        &self.inner.location
    }

    fn generation(&self) -> Option<Generation> {
        self.inner.watermark.get()
    }

    fn expect(&self, known: Option<Generation>) {
        self.inner.watermark.set(known);
    }

    async fn load(&self) -> Result<Snapshot, StoreError> {
        let inner = Arc::clone(&self.inner);
        blocking(&self.inner.location, Operation::Load, move || inner.load()).await
    }

    async fn commit(&self, epoch: Epoch, batch: Batch) -> Result<(), StoreError> {
        let store = self.clone();
        blocking(&self.inner.location, Operation::Commit, move || {
            store.commit_blocking(epoch, &batch)
        })
        .await
    }

    async fn acquire_lease(&self, holder: &str, ttl: Duration) -> Result<Lease, StoreError> {
        let operation = Operation::AcquireLease;
        check_lease_request(holder, ttl).map_err(|reason| StoreError::InvalidLeaseRequest {
            location: self.inner.location.clone(),
            operation,
            reason,
        })?;
        let inner = Arc::clone(&self.inner);
        let holder = holder.to_owned();
        blocking(&self.inner.location, operation, move || inner.acquire_lease(&holder, ttl)).await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        let operation = Operation::RenewLease;
        check_lease_request(lease.holder(), ttl).map_err(|reason| {
            StoreError::InvalidLeaseRequest {
                location: self.inner.location.clone(),
                operation,
                reason,
            }
        })?;
        let inner = Arc::clone(&self.inner);
        let lease = lease.clone();
        blocking(&self.inner.location, operation, move || inner.renew_lease(&lease, ttl)).await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let inner = Arc::clone(&self.inner);
        let lease = lease.clone();
        blocking(&self.inner.location, Operation::ReleaseLease, move || inner.release_lease(&lease))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    /// A store in a temporary directory whose lease clock the test sets.
    struct Fixture {
        store: RedbStore,
        now_ms: Arc<AtomicU64>,
        _dir: tempfile::TempDir,
    }

    impl Fixture {
        async fn new() -> Self {
            let dir = tempfile::tempdir().expect("temporary directory");
            let now_ms = Arc::new(AtomicU64::new(1_000_000));
            let store = RedbStore::open_with_clock(
                dir.path().to_path_buf(),
                Clock::Manual(Arc::clone(&now_ms)),
            )
            .await
            .expect("open");
            Fixture { store, now_ms, _dir: dir }
        }

        fn advance(&self, millis: u64) {
            self.now_ms.fetch_add(millis, Ordering::SeqCst);
        }
    }

    fn one_put(key: &str) -> Batch {
        let mut batch = Batch::new();
        batch.put(Table::Nodes, key, b"v".to_vec());
        batch
    }

    #[test]
    fn the_lease_row_is_reserved() {
        // Otherwise a batch could overwrite the lease.
        assert!(LEASE_KEY.starts_with(RESERVED_META_PREFIX));
    }

    #[test]
    fn lease_row_round_trips_and_rejects_garbage() {
        let row = LeaseRow {
            epoch: Epoch::with_token(7, 0xfeed),
            expires_at_ms: 123_456,
            holder: "head-é".into(),
        };
        assert_eq!(LeaseRow::decode(&row.encode()), Ok(row));
        // A version-1 row (no token) reads as token 0.
        let v1 = [1, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, b'o'];
        let old = LeaseRow::decode(&v1).expect("version 1");
        assert_eq!((old.epoch, old.holder.as_str()), (Epoch::new(4), "o"));
        let cases: [(&[u8], &str); 4] = [
            (&[1, 2, 3], "fewer than the 17-byte header"),
            (&[2; 20], "fewer than the 25-byte header"),
            (&[9; 17], "format version 9"),
            (&[1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0xff], "not UTF-8"),
        ];
        for (bytes, expected) in cases {
            let message = LeaseRow::decode(bytes).expect_err("garbage accepted");
            assert!(message.contains(expected), "{message}");
        }
    }

    #[tokio::test]
    async fn lease_expires_exactly_at_its_ttl() {
        let f = Fixture::new().await;
        let ttl = Duration::from_secs(10);
        let a = f.store.acquire_lease("a", ttl).await.expect("a acquires");
        assert_eq!(a.epoch().get(), 1);

        f.advance(9_999);
        match f.store.acquire_lease("b", ttl).await {
            Err(StoreError::LeaseHeld { holder, remaining, .. }) => {
                assert_eq!((holder.as_str(), remaining), ("a", Duration::from_millis(1)));
            }
            other => panic!("b took a live lease: {other:?}"),
        }

        f.advance(1);
        let b = f.store.acquire_lease("b", ttl).await.expect("b takes the expired lease over");
        assert_eq!(b.epoch().get(), 2);
        let fenced = f.store.commit(a.epoch(), one_put("n")).await.expect_err("a is fenced");
        assert!(fenced.is_fenced(), "{fenced}");
        assert!(f.store.renew_lease(&a, ttl).await.expect_err("a cannot renew").is_fenced());
        assert!(f.store.release_lease(&a).await.expect_err("a cannot release").is_fenced());
        f.store.commit(b.epoch(), one_put("n")).await.expect("b commits");
    }

    #[tokio::test]
    async fn a_commit_on_the_calling_thread_is_durable_fenced_and_checked_as_commit_is() {
        let f = Fixture::new().await;
        let ttl = Duration::from_secs(10);
        let a = f.store.acquire_lease("a", ttl).await.expect("a acquires");
        f.store.commit_blocking(a.epoch(), &one_put("n1")).expect("a commits");
        let mut empty_key = Batch::new();
        empty_key.put(Table::Nodes, "", b"v".to_vec());
        let refused = f.store.commit_blocking(a.epoch(), &empty_key).expect_err("an empty key");
        assert!(matches!(refused, StoreError::InvalidBatch { index: 0, .. }), "{refused}");
        f.store.release_lease(&a).await.expect("release");
        let b = f.store.acquire_lease("b", ttl).await.expect("b acquires");
        let fenced = f.store.commit_blocking(a.epoch(), &one_put("n2")).expect_err("a is fenced");
        assert!(fenced.is_fenced(), "{fenced}");
        f.store.commit_blocking(b.epoch(), &one_put("n3")).expect("b commits");
        let snapshot = f.store.load().await.expect("load");
        let keys: Vec<&String> = snapshot.table(Table::Nodes).keys().collect();
        assert_eq!(keys, ["n1", "n3"], "the refused and the fenced batches wrote nothing");
    }

    #[tokio::test]
    async fn renewal_extends_the_lease_from_now() {
        let f = Fixture::new().await;
        let ttl = Duration::from_secs(10);
        let a = f.store.acquire_lease("a", ttl).await.expect("acquire");
        f.advance(9_000);
        f.store.renew_lease(&a, ttl).await.expect("renew");
        f.advance(9_000);
        assert!(matches!(f.store.acquire_lease("b", ttl).await, Err(StoreError::LeaseHeld { .. })));
    }

    #[tokio::test]
    async fn an_expired_lease_nobody_took_can_still_be_renewed_and_used() {
        let f = Fixture::new().await;
        let ttl = Duration::from_secs(1);
        let a = f.store.acquire_lease("a", ttl).await.expect("acquire");
        f.advance(5_000);
        f.store.commit(a.epoch(), one_put("n")).await.expect("expiry alone fences nothing");
        let renewed = f.store.renew_lease(&a, ttl).await.expect("renew after expiry");
        assert_eq!(renewed.epoch(), a.epoch());
        assert!(matches!(f.store.acquire_lease("b", ttl).await, Err(StoreError::LeaseHeld { .. })));
    }

    #[tokio::test]
    async fn release_lets_a_successor_in_at_once() {
        let f = Fixture::new().await;
        let ttl = Duration::from_secs(60);
        let a = f.store.acquire_lease("a", ttl).await.expect("acquire");
        f.store.release_lease(&a).await.expect("release");
        let b = f.store.acquire_lease("b", ttl).await.expect("b acquires at once");
        assert_eq!(b.epoch().get(), 2);
    }

    #[tokio::test]
    async fn the_lease_row_is_hidden_from_load() {
        let f = Fixture::new().await;
        let lease = f.store.acquire_lease("a", Duration::from_secs(1)).await.expect("acquire");
        let mut batch = Batch::new();
        batch.put(Table::Meta, "format", b"1".to_vec());
        f.store.commit(lease.epoch(), batch).await.expect("commit");
        let snapshot = f.store.load().await.expect("load");
        let keys: Vec<&String> = snapshot.table(Table::Meta).keys().collect();
        assert_eq!(keys, ["format"]);
    }

    #[tokio::test]
    async fn a_corrupt_lease_row_is_reported_not_trusted() {
        let f = Fixture::new().await;
        let txn = f.store.inner.db.begin_write().expect("write");
        txn.open_table(definition(Table::Meta))
            .expect("meta")
            .insert(LEASE_KEY.as_bytes(), &b"junk"[..])
            .expect("insert");
        txn.commit().expect("commit");
        let error =
            f.store.commit(Epoch::new(1), one_put("n")).await.expect_err("corrupt row trusted");
        let message = error.to_string();
        assert!(matches!(error, StoreError::Corrupt { .. }), "{message}");
        assert!(
            message.contains(
                "commit failed: the lease row \"berth.store.lease\" of the meta table is corrupt"
            ),
            "{message}"
        );
        assert!(f.store.load().await.expect("load").is_empty(), "nothing was written");
    }

    #[tokio::test]
    async fn a_store_written_with_str_keys_opens_with_its_rows_its_order_and_its_lease() {
        let dir = tempfile::tempdir().expect("temporary directory");
        {
            // As earlier builds wrote it: `&str` keys, a lease (epoch 4), no `starts` or `jobs`
            // table.
            let db = Database::create(dir.path().join(DATABASE_FILE)).expect("create");
            let txn = db.begin_write().expect("write");
            let old_lease =
                LeaseRow { epoch: Epoch::new(4), expires_at_ms: 0, holder: "old".into() };
            for table in Table::ALL.into_iter().filter(|&t| t != Table::Starts && t != Table::Jobs)
            {
                let mut handle = txn.open_table(str_key_definition(table)).expect("table");
                for key in ["b", "a/2", "a/10", "é"] {
                    handle.insert(key, format!("{table}:{key}").as_bytes()).expect("insert");
                }
                if table == Table::Meta {
                    handle.insert(LEASE_KEY, old_lease.encode().as_slice()).expect("lease");
                }
            }
            txn.commit().expect("commit");
        }
        let store = RedbStore::open(dir.path()).await.expect("an old store opens");
        let snapshot = store.load().await.expect("load");
        for table in Table::ALL.into_iter().filter(|&t| t != Table::Starts && t != Table::Jobs) {
            let rows: Vec<(&str, &[u8])> =
                snapshot.table(table).iter().map(|(k, v)| (k.as_str(), v.as_slice())).collect();
            let expected: Vec<(&str, Vec<u8>)> = ["a/10", "a/2", "b", "é"]
                .into_iter()
                .map(|key| (key, format!("{table}:{key}").into_bytes()))
                .collect();
            let expected: Vec<(&str, &[u8])> =
                expected.iter().map(|(k, v)| (*k, v.as_slice())).collect();
            assert_eq!(rows, expected, "{table}: every row");
        }
        let keys: Vec<Vec<u8>> = {
            let txn = store.inner.db.begin_read().expect("read");
            let nodes = txn.open_table(definition(Table::Nodes)).expect("nodes");
            nodes.iter().expect("iter").map(|e| e.expect("row").0.value().to_vec()).collect()
        };
        let in_order: Vec<&[u8]> = ["a/10", "a/2", "b", "é"].map(str::as_bytes).to_vec();
        assert_eq!(keys, in_order, "the copy's keys in byte order, as the old ones were");
        assert!(snapshot.table(Table::Starts).is_empty());
        let lease = store.acquire_lease("new", Duration::from_secs(5)).await.expect("acquire");
        assert_eq!(lease.epoch().get(), 5, "the old lease's epoch carried over");
        store.commit_blocking(lease.epoch(), &one_put("c")).expect("commit");
        drop(store);
        // Opened again: byte keys already, nothing to copy; the copy tables are gone.
        let store = RedbStore::open(dir.path()).await.expect("reopen");
        let names: Vec<String> = {
            let txn = store.inner.db.begin_read().expect("read");
            txn.list_tables()
                .expect("tables")
                .map(|t| redb::TableHandle::name(&t).to_string())
                .collect()
        };
        assert_eq!(names.len(), Table::ALL.len(), "{names:?}");
        let nodes = store.load().await.expect("load");
        assert_eq!(
            nodes.table(Table::Nodes).keys().collect::<Vec<_>>(),
            ["a/10", "a/2", "b", "c", "é"]
        );
    }

    #[tokio::test]
    async fn an_unwritable_data_dir_is_named() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"not a directory").expect("write");
        let data_dir = file.join("data");
        let message =
            RedbStore::open(&data_dir).await.expect_err("opened under a file").to_string();
        let expected = format!(
            "redb at {}: open failed: cannot create the data directory {}:",
            data_dir.join(DATABASE_FILE).display(),
            data_dir.display()
        );
        assert!(message.starts_with(&expected), "{message}");
    }

    #[tokio::test]
    async fn a_second_open_of_the_same_file_is_refused() {
        let f = Fixture::new().await;
        let data_dir = f.store.path().parent().expect("data dir").to_path_buf();
        let message = RedbStore::open(data_dir).await.expect_err("opened twice").to_string();
        assert!(message.contains("open failed: Database already open"), "{message}");
    }
}
