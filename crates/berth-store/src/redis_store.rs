//! The Redis backend: the same tables in a Redis server, so a head on another machine can
//! take over (as Ray's GCS keeps its tables in Redis for fault tolerance).
//!
//! Layout, for the namespace `P` (the URL's `prefix`):
//!
//! | key | type | holds |
//! | --- | --- | --- |
//! | `berth:{P}:nodes`, `…:actors`, `…:tasks`, `…:groups`, `…:meta` | hash | one table each, field = key |
//! | `berth:{P}:epoch` | string (integer) | the last lease epoch granted; never expires |
//! | `berth:{P}:lease` | string, with a TTL | the lease holder's name; gone once it expires |
//! | `berth:{P}:owner` | string | the current epoch, `NUMBER:TOKEN` (the token random per acquisition); never expires |
//! | `berth:{P}:id`, `…:commits` | string, integer | the store's random ID and its commit counter ([`Generation`]) |
//!
//! The `{P}` is a Redis Cluster hash tag: every key of one store lands in one slot, so the
//! scripts, which touch several keys, would also run on a cluster.
//!
//! Every write is one Lua script (run atomically by the server): the commit script refuses a
//! store behind what the writer knows (another `id`, fewer `commits`), compares the writer's
//! epoch (number and token) with `owner`, and only then applies the batch's `HSET`s and
//! `HDEL`s in order and counts the commit; the lease scripts `SET … PX` the lease, and on
//! acquisition `INCR` the epoch and write the new `owner`. A server that comes back without
//! its data has no `owner` and no `id`: every head's writes are refused, and a head that saw
//! the store before refuses to acquire it. Lease expiry is
//! the server's TTL, so the heads' clocks never matter. `load` reads every hash in one
//! `MULTI`/`EXEC`, a consistent snapshot.
//!
//! Durability is the server's: a commit is applied in the server's memory when it returns, and
//! on its disk as the server's persistence says. [`RedisStore::persistence`] reads the two
//! settings that make an acknowledged commit survive a restart of the server (`appendonly yes`,
//! `appendfsync always`); the head refuses a server without them unless told otherwise.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Script, Value};

use crate::batch::{Batch, Op};
use crate::config::{check_prefix, redact_url};
use crate::error::{Operation, StoreError, StoreLocation};
use crate::lease::{check_lease_request, ttl_millis, Epoch, Generation, Lease, Watermark};
use crate::snapshot::Snapshot;
use crate::store::Store;
use crate::table::Table;

/// How long connecting to the server may take, per attempt.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one command may wait for its answer (a large load or commit included).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// How many times a lost connection is retried (with exponential backoff) before an error.
const CONNECT_RETRIES: usize = 2;

/// Lua that refuses a store behind what the caller knows (another ID, fewer commits) with
/// `{2, id, commits}`, leaving the store's ID and count in the locals `id` and `commits`: the
/// keys of the ID and the counter, and the arguments holding what the caller knows.
fn behind_check(id: &str, commits: &str, known_id: &str, known_commits: &str) -> String {
    format!(
        "local id = redis.call('GET', {id}) or ''\n\
         local commits = tonumber(redis.call('GET', {commits}) or '0')\n\
         if ({known_id} ~= '' and id ~= {known_id}) or commits < tonumber({known_commits}) then\n\
         \x20 return {{2, id, commits}}\n\
         end\n"
    )
}

/// Lua that refuses a caller whose epoch (`NUMBER:TOKEN`, in `epoch`) is not the owner's (in
/// the key `owner`) with `{0, current_epoch}`.
fn owner_check(owner: &str, epoch: &str) -> String {
    format!(
        "local owner = redis.call('GET', {owner}) or ''\n\
         if owner ~= {epoch} then\n\
         \x20 return {{0, owner}}\n\
         end\n"
    )
}

/// Applies a batch if the writer holds the current epoch (number and token) and the store is
/// not behind. Returns `{1, commits, id}`, `{0, current_epoch}` or `{2, id, commits}`.
static COMMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&[
        "-- KEYS[1]: the owner (the current epoch, NUMBER:TOKEN); KEYS[2]: the store's ID;\n\
         -- KEYS[3]: its commit counter; KEYS[4..]: the table hashes, in Table::ALL order.\n\
         -- ARGV[1]: the writer's epoch; ARGV[2], ARGV[3]: the ID and commits it knows; then\n\
         -- per op 'P', table index (from 0), key, value or 'D', table index, key.\n",
        &behind_check("KEYS[2]", "KEYS[3]", "ARGV[2]", "ARGV[3]"),
        &owner_check("KEYS[1]", "ARGV[1]"),
        r"
-- Check every table before writing any, so a wrong type fails the whole batch.
for i = 4, #KEYS do
  local kind = redis.call('TYPE', KEYS[i]).ok
  if kind ~= 'hash' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE the store key ' .. KEYS[i] .. ' holds a ' .. kind .. ', not a hash')
  end
end
local i = 4
while i <= #ARGV do
  local hash = KEYS[tonumber(ARGV[i + 1]) + 4]
  if ARGV[i] == 'P' then
    redis.call('HSET', hash, ARGV[i + 2], ARGV[i + 3])
    i = i + 4
  else
    redis.call('HDEL', hash, ARGV[i + 2])
    i = i + 3
  end
end
return {1, redis.call('INCR', KEYS[3]), id}
",
    ]
    .concat())
});

/// Takes the lease if it is free, expired or the caller's, and the store is not behind.
/// Returns `{1, new_epoch_number, id, commits}`, `{3, holder, remaining_ms, id, commits}` or
/// `{2, id, commits}`.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&[
        "-- KEYS: the lease, the epoch counter, the owner, the store's ID, its commit counter.\n\
         -- ARGV: the holder, ttl in ms, the new token (hex), an ID for a store without one,\n\
         -- the ID and commits the caller knows.\n",
        &behind_check("KEYS[4]", "KEYS[5]", "ARGV[5]", "ARGV[6]"),
        r"
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return {3, holder, redis.call('PTTL', KEYS[1]), id, commits}
end
local epoch = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[3], epoch .. ':' .. ARGV[3])
if id == '' then
  id = ARGV[4]
  redis.call('SET', KEYS[4], id)
end
return {1, epoch, id, commits}
",
    ]
    .concat())
});

/// Extends the lease if the caller holds the current epoch and the store is not behind.
/// Returns `{1, id, commits}`, `{0, current_epoch}` or `{2, id, commits}`.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        &[
            "-- KEYS: the lease, the owner, the store's ID, its commit counter.\n\
         -- ARGV: the holder, its epoch (NUMBER:TOKEN), ttl in ms, the ID and commits it knows.\n",
            &behind_check("KEYS[3]", "KEYS[4]", "ARGV[4]", "ARGV[5]"),
            &owner_check("KEYS[2]", "ARGV[2]"),
            "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])\nreturn {1, id, commits}\n",
        ]
        .concat(),
    )
});

/// Deletes the lease if the caller holds the current epoch. Returns `{1}` or
/// `{0, current_epoch}`.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&[
        "-- KEYS[1]: the lease; KEYS[2]: the owner. ARGV[1]: the holder's epoch (NUMBER:TOKEN).\n",
        &owner_check("KEYS[2]", "ARGV[1]"),
        "redis.call('DEL', KEYS[1])\nreturn {1}\n",
    ]
    .concat())
});

/// A Redis server's persistence settings, as `CONFIG GET` reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisPersistence {
    /// `appendonly`: `yes` keeps an append-only log of every write.
    pub appendonly: String,
    /// `appendfsync`: `always` fsyncs the log before answering a write; `everysec` (Redis's
    /// default) may lose the last second of acknowledged writes, `no` more.
    pub appendfsync: String,
}

impl RedisPersistence {
    /// Whether an acknowledged commit survives the server's crash: `appendonly yes` and
    /// `appendfsync always`.
    pub fn is_durable(&self) -> bool {
        self.appendonly.eq_ignore_ascii_case("yes")
            && self.appendfsync.eq_ignore_ascii_case("always")
    }
}

impl fmt::Display for RedisPersistence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "appendonly {}, appendfsync {}", self.appendonly, self.appendfsync)
    }
}

/// The Redis keys of one store.
#[derive(Debug)]
struct Keys {
    /// One hash per table, indexed by [`Table::index`].
    tables: [String; Table::ALL.len()],
    /// The epoch counter.
    epoch: String,
    /// The lease.
    lease: String,
    /// The current epoch, `NUMBER:TOKEN`; never expires.
    owner: String,
    /// The store's random ID; never expires.
    id: String,
    /// The commit counter; never expires.
    commits: String,
}

impl Keys {
    fn new(prefix: &str) -> Self {
        let key = |name: &str| format!("berth:{{{prefix}}}:{name}");
        Keys {
            tables: Table::ALL.map(|table| key(table.name())),
            epoch: key("epoch"),
            lease: key("lease"),
            owner: key("owner"),
            id: key("id"),
            commits: key("commits"),
        }
    }
}

/// The Redis store. Cheap to clone (clones share one multiplexed connection, which reconnects
/// by itself after a failure).
#[derive(Clone)]
pub struct RedisStore {
    connection: ConnectionManager,
    keys: Arc<Keys>,
    location: StoreLocation,
    watermark: Arc<Watermark>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore").field("location", &self.location).finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to the server at `url` (`redis://HOST:PORT[/DB]`, no query) and keeps the
    /// store under the namespace `prefix`. Fails, naming the URL, if the server cannot be
    /// reached within a few seconds.
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, StoreError> {
        let location = StoreLocation::Redis { url: redact_url(url), prefix: prefix.to_owned() };
        check_prefix(prefix)
            .map_err(|reason| StoreError::Config { input: prefix.to_owned(), reason })?;
        let client = redis::Client::open(url)
            .map_err(|e| StoreError::backend(&location, Operation::Open, e))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(CONNECT_RETRIES);
        let connection = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|e| StoreError::backend(&location, Operation::Open, e))?;
        Ok(RedisStore {
            connection,
            keys: Arc::new(Keys::new(prefix)),
            location,
            watermark: Arc::default(),
        })
    }

    /// The server's persistence settings (`CONFIG GET appendonly appendfsync`). Fails when
    /// the server refuses `CONFIG` (some managed services rename it).
    pub async fn persistence(&self) -> Result<RedisPersistence, StoreError> {
        let operation = Operation::Open;
        let get = |name: &'static str| {
            let mut connection = self.connection.clone();
            async move {
                let pairs: Vec<String> = redis::cmd("CONFIG")
                    .arg("GET")
                    .arg(name)
                    .query_async(&mut connection)
                    .await
                    .map_err(self.error(operation))?;
                Ok::<_, StoreError>(pairs.get(1).cloned().unwrap_or_default())
            }
        };
        let appendonly = get("appendonly").await?;
        let appendfsync = get("appendfsync").await?;
        Ok(RedisPersistence { appendonly, appendfsync })
    }

    /// [`Store::commit`] of a batch the caller keeps (to retry it).
    pub(crate) async fn commit_ref(&self, epoch: Epoch, batch: &Batch) -> Result<(), StoreError> {
        batch.validate()?;
        let operation = Operation::Commit;
        let (sent, known_id, known_commits) = self.known();
        let mut invocation = COMMIT.prepare_invoke();
        invocation.key(&self.keys.owner).key(&self.keys.id).key(&self.keys.commits);
        for key in &self.keys.tables {
            invocation.key(key);
        }
        invocation.arg(epoch.stored()).arg(known_id).arg(known_commits);
        for op in batch.ops() {
            match op {
                Op::Put { table, key, value } => {
                    invocation.arg("P").arg(table.index()).arg(key).arg(value.as_slice());
                }
                Op::Delete { table, key } => {
                    invocation.arg("D").arg(table.index()).arg(key);
                }
            }
        }
        let reply = self.invoke(operation, &invocation).await?;
        match reply.as_sequence() {
            Some([status, commits, id]) if int_of(status) == Some(1) => {
                self.observe(operation, sent.as_ref(), id, commits)
            }
            Some([status, current]) if int_of(status) == Some(0) => {
                Err(self.fenced(operation, epoch, current))
            }
            Some([status, id, commits]) if int_of(status) == Some(2) => {
                Err(self.behind(operation, sent.as_ref(), id, commits))
            }
            _ => Err(self.unexpected(operation, &reply)),
        }
    }

    fn error(&self, operation: Operation) -> impl Fn(redis::RedisError) -> StoreError + '_ {
        move |e| StoreError::backend(&self.location, operation, e)
    }

    fn invalid_lease_request(&self, operation: Operation, reason: String) -> StoreError {
        StoreError::InvalidLeaseRequest { location: self.location.clone(), operation, reason }
    }

    fn unexpected(&self, operation: Operation, reply: &Value) -> StoreError {
        StoreError::backend(
            &self.location,
            operation,
            format!("unexpected reply from the script: {reply:?}"),
        )
    }

    fn fenced(&self, operation: Operation, ours: Epoch, current: &Value) -> StoreError {
        let parsed = match text_of(current) {
            Some(text) if text.is_empty() => Some(Epoch::new(0)),
            Some(text) => Epoch::parse_stored(&text),
            None => None,
        };
        match parsed {
            Some(parsed) => StoreError::Fenced {
                location: self.location.clone(),
                operation,
                ours,
                current: parsed,
            },
            None => self.unexpected(operation, current),
        }
    }

    /// What is known of the store now (sent with a request, and its answer compared with it),
    /// and it as script arguments (`''` and 0: nothing).
    fn known(&self) -> (Option<Generation>, String, u64) {
        let sent = self.watermark.get();
        let (id, commits) = sent.as_ref().map_or((String::new(), 0), |g| (g.id.clone(), g.commits));
        (sent, id, commits)
    }

    /// Takes in the store's generation from the answer to a request sent knowing `sent`:
    /// `Behind` if it is behind.
    fn observe(
        &self,
        operation: Operation,
        sent: Option<&Generation>,
        id: &Value,
        commits: &Value,
    ) -> Result<(), StoreError> {
        let (Some(id_text), Some(count)) = (text_of(id), int_of(commits)) else {
            return Err(
                self.unexpected(operation, &Value::Array(vec![id.clone(), commits.clone()]))
            );
        };
        let (id, commits) = (id_text, count);
        let found = Generation { id, commits: u64::try_from(commits).unwrap_or(0) };
        self.watermark.observe(sent, &found).map_err(|known| StoreError::Behind {
            location: self.location.clone(),
            operation,
            known,
            found,
        })
    }

    /// The `Behind` error of a `{2, id, commits}` answer (the script found the store behind
    /// what was sent).
    fn behind(
        &self,
        operation: Operation,
        sent: Option<&Generation>,
        id: &Value,
        commits: &Value,
    ) -> StoreError {
        match self.observe(operation, sent, id, commits) {
            Err(err) => err,
            // The script judged against what was sent, as `observe` does: they cannot disagree
            // unless the script and this build differ; say what the server answered.
            Ok(()) => self.unexpected(operation, &Value::Array(vec![id.clone(), commits.clone()])),
        }
    }

    /// Runs `invocation` and reads its answer.
    async fn invoke(
        &self,
        operation: Operation,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<Value, StoreError> {
        invocation.invoke_async(&mut self.connection.clone()).await.map_err(self.error(operation))
    }
}

/// An integer reply.
fn int_of(value: &Value) -> Option<i64> {
    match value {
        Value::Int(number) => Some(*number),
        _ => None,
    }
}

/// A string reply.
fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

impl Store for RedisStore {
    fn location(&self) -> &StoreLocation {
        &self.location
    }

    fn generation(&self) -> Option<Generation> {
        self.watermark.get()
    }

    fn expect(&self, known: Option<Generation>) {
        self.watermark.set(known);
    }

    async fn load(&self) -> Result<Snapshot, StoreError> {
        let mut pipe = redis::pipe();
        pipe.atomic();
        for key in &self.keys.tables {
            pipe.cmd("HGETALL").arg(key);
        }
        let tables: Vec<BTreeMap<String, Vec<u8>>> = pipe
            .query_async(&mut self.connection.clone())
            .await
            .map_err(self.error(Operation::Load))?;
        if tables.len() != Table::ALL.len() {
            return Err(StoreError::backend(
                &self.location,
                Operation::Load,
                format!(
                    "expected {} tables from MULTI/EXEC, got {}",
                    Table::ALL.len(),
                    tables.len()
                ),
            ));
        }
        let mut snapshot = Snapshot::new();
        for (table, entries) in Table::ALL.into_iter().zip(tables) {
            snapshot.set_table(table, entries);
        }
        Ok(snapshot)
    }

    async fn commit(&self, epoch: Epoch, batch: Batch) -> Result<(), StoreError> {
        self.commit_ref(epoch, &batch).await
    }

    async fn acquire_lease(&self, holder: &str, ttl: Duration) -> Result<Lease, StoreError> {
        let operation = Operation::AcquireLease;
        check_lease_request(holder, ttl)
            .map_err(|reason| self.invalid_lease_request(operation, reason))?;
        let (sent, known_id, known_commits) = self.known();
        let token = crate::lease::random_u64();
        let mut invocation = ACQUIRE.prepare_invoke();
        invocation
            .key(&self.keys.lease)
            .key(&self.keys.epoch)
            .key(&self.keys.owner)
            .key(&self.keys.id)
            .key(&self.keys.commits)
            .arg(holder)
            .arg(ttl_millis(ttl))
            .arg(format!("{token:016x}"))
            .arg(crate::lease::new_store_id())
            .arg(known_id)
            .arg(known_commits);
        let reply = self.invoke(operation, &invocation).await?;
        match reply.as_sequence() {
            Some([status, number, id, commits]) if int_of(status) == Some(1) => {
                let Some(number) = int_of(number).and_then(|n| u64::try_from(n).ok()) else {
                    return Err(self.unexpected(operation, &reply));
                };
                self.observe(operation, sent.as_ref(), id, commits)?;
                Ok(Lease::new(holder, Epoch::with_token(number, token), ttl))
            }
            Some([status, other, remaining_ms, id, commits]) if int_of(status) == Some(3) => {
                let (Some(other), Some(remaining_ms)) = (text_of(other), int_of(remaining_ms))
                else {
                    return Err(self.unexpected(operation, &reply));
                };
                // A standby learns the store's history while it waits.
                self.observe(operation, sent.as_ref(), id, commits)?;
                Err(StoreError::LeaseHeld {
                    location: self.location.clone(),
                    holder: other,
                    // PTTL is -1 for a key without expiry (set by hand): report no time left.
                    remaining: Duration::from_millis(u64::try_from(remaining_ms).unwrap_or(0)),
                })
            }
            Some([status, id, commits]) if int_of(status) == Some(2) => {
                Err(self.behind(operation, sent.as_ref(), id, commits))
            }
            _ => Err(self.unexpected(operation, &reply)),
        }
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        let operation = Operation::RenewLease;
        check_lease_request(lease.holder(), ttl)
            .map_err(|reason| self.invalid_lease_request(operation, reason))?;
        let (sent, known_id, known_commits) = self.known();
        let mut invocation = RENEW.prepare_invoke();
        invocation
            .key(&self.keys.lease)
            .key(&self.keys.owner)
            .key(&self.keys.id)
            .key(&self.keys.commits)
            .arg(lease.holder())
            .arg(lease.epoch().stored())
            .arg(ttl_millis(ttl))
            .arg(known_id)
            .arg(known_commits);
        let reply = self.invoke(operation, &invocation).await?;
        match reply.as_sequence() {
            Some([status, id, commits]) if int_of(status) == Some(1) => {
                self.observe(operation, sent.as_ref(), id, commits)?;
                Ok(Lease::new(lease.holder(), lease.epoch(), ttl))
            }
            Some([status, current]) if int_of(status) == Some(0) => {
                Err(self.fenced(operation, lease.epoch(), current))
            }
            Some([status, id, commits]) if int_of(status) == Some(2) => {
                Err(self.behind(operation, sent.as_ref(), id, commits))
            }
            _ => Err(self.unexpected(operation, &reply)),
        }
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let operation = Operation::ReleaseLease;
        let mut invocation = RELEASE.prepare_invoke();
        invocation.key(&self.keys.lease).key(&self.keys.owner).arg(lease.epoch().stored());
        let reply = self.invoke(operation, &invocation).await?;
        match reply.as_sequence() {
            Some([status]) if int_of(status) == Some(1) => Ok(()),
            Some([status, current]) if int_of(status) == Some(0) => {
                Err(self.fenced(operation, lease.epoch(), current))
            }
            _ => Err(self.unexpected(operation, &reply)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let keys = Keys::new("ci-1");
        assert_eq!(keys.tables[Table::Nodes.index()], "berth:{ci-1}:nodes");
        assert_eq!(keys.tables[Table::Meta.index()], "berth:{ci-1}:meta");
        assert_eq!(keys.epoch, "berth:{ci-1}:epoch");
        assert_eq!(keys.lease, "berth:{ci-1}:lease");
        assert_eq!(keys.owner, "berth:{ci-1}:owner");
    }

    #[test]
    fn stored_epochs_read_back() {
        let epoch = Epoch::with_token(7, 0xabc);
        assert_eq!(epoch.stored(), "7:0000000000000abc");
        assert_eq!(Epoch::parse_stored(&epoch.stored()), Some(epoch));
        assert_eq!(Epoch::parse_stored("12"), Some(Epoch::new(12)));
        assert_eq!(Epoch::parse_stored("x:1"), None);
        assert_eq!(Epoch::parse_stored("1:zz"), None);
    }
}
