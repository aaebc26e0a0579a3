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
//!
//! The `{P}` is a Redis Cluster hash tag: every key of one store lands in one slot, so the
//! scripts, which touch several keys, would also run on a cluster.
//!
//! Every write is one Lua script (run atomically by the server): the commit script compares the
//! writer's epoch with `epoch` and only then applies the batch's `HSET`s and `HDEL`s in order;
//! the lease scripts `SET … PX` the lease and `INCR` the epoch on acquisition. Lease expiry is
//! the server's TTL, so the heads' clocks never matter. `load` reads every hash in one
//! `MULTI`/`EXEC`, a consistent snapshot.
//!
//! Durability is the server's: a commit is applied in the server's memory when it returns, and
//! on its disk as the server's persistence says (run it with `appendonly yes` and
//! `appendfsync always`, or with replicas, for a head that must survive the server's loss).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Script, Value};

use crate::batch::{Batch, Op};
use crate::config::{check_prefix, redact_url};
use crate::error::{Operation, StoreError, StoreLocation};
use crate::lease::{check_lease_request, ttl_millis, Epoch, Lease};
use crate::snapshot::Snapshot;
use crate::store::Store;
use crate::table::Table;

/// How long connecting to the server may take, per attempt.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one command may wait for its answer (a large load or commit included).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// How many times a lost connection is retried (with exponential backoff) before an error.
const CONNECT_RETRIES: usize = 2;

/// Applies a batch if the writer's epoch is current. Returns `{1}` or `{0, current_epoch}`.
static COMMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
-- KEYS[1]: the epoch counter; KEYS[2..]: the table hashes, in Table::ALL order.
-- ARGV[1]: the writer's epoch; then per op 'P', table index (from 0), key, value
-- or 'D', table index, key.
local current = redis.call('GET', KEYS[1]) or '0'
if current ~= ARGV[1] then
  return {0, current}
end
-- Check every table before writing any, so a wrong type fails the whole batch.
for i = 2, #KEYS do
  local kind = redis.call('TYPE', KEYS[i]).ok
  if kind ~= 'hash' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE the store key ' .. KEYS[i] .. ' holds a ' .. kind .. ', not a hash')
  end
end
local i = 2
while i <= #ARGV do
  local hash = KEYS[tonumber(ARGV[i + 1]) + 2]
  if ARGV[i] == 'P' then
    redis.call('HSET', hash, ARGV[i + 2], ARGV[i + 3])
    i = i + 4
  else
    redis.call('HDEL', hash, ARGV[i + 2])
    i = i + 3
  end
end
return {1}
",
    )
});

/// Takes the lease if it is free, expired or the caller's. Returns `{1, new_epoch}` or
/// `{0, holder, remaining_ms}`.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
-- KEYS[1]: the lease; KEYS[2]: the epoch counter. ARGV[1]: the holder; ARGV[2]: ttl in ms.
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return {0, holder, redis.call('PTTL', KEYS[1])}
end
local epoch = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, epoch}
",
    )
});

/// Extends the lease if the epoch is current. Returns `{1, epoch}` or `{0, current_epoch}`.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
-- KEYS[1]: the lease; KEYS[2]: the epoch counter.
-- ARGV[1]: the holder; ARGV[2]: its epoch; ARGV[3]: ttl in ms.
local current = redis.call('GET', KEYS[2]) or '0'
if current ~= ARGV[2] then
  return {0, current}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return {1, current}
",
    )
});

/// Deletes the lease if the epoch is current. Returns `{1, epoch}` or `{0, current_epoch}`.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
-- KEYS[1]: the lease; KEYS[2]: the epoch counter. ARGV[1]: the holder's epoch.
local current = redis.call('GET', KEYS[2]) or '0'
if current ~= ARGV[1] then
  return {0, current}
end
redis.call('DEL', KEYS[1])
return {1, current}
",
    )
});

/// The Redis keys of one store.
#[derive(Debug)]
struct Keys {
    /// One hash per table, indexed by [`Table::index`].
    tables: [String; Table::ALL.len()],
    /// The epoch counter.
    epoch: String,
    /// The lease.
    lease: String,
}

impl Keys {
    fn new(prefix: &str) -> Self {
        let key = |name: &str| format!("berth:{{{prefix}}}:{name}");
        Keys {
            tables: Table::ALL.map(|table| key(table.name())),
            epoch: key("epoch"),
            lease: key("lease"),
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
        Ok(RedisStore { connection, keys: Arc::new(Keys::new(prefix)), location })
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
        match epoch_of(current) {
            Some(current) => {
                StoreError::Fenced { location: self.location.clone(), operation, ours, current }
            }
            None => self.unexpected(operation, current),
        }
    }

    /// Runs a lease script whose answer is `{1, epoch}` or `{0, current_epoch}`, with the lease
    /// and epoch keys.
    async fn guarded_lease_script(
        &self,
        operation: Operation,
        script: &Script,
        ours: Epoch,
        args: &[Vec<u8>],
    ) -> Result<(), StoreError> {
        let mut invocation = script.prepare_invoke();
        invocation.key(&self.keys.lease).key(&self.keys.epoch);
        for arg in args {
            invocation.arg(arg.as_slice());
        }
        let reply: Value = invocation
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(self.error(operation))?;
        match reply.as_sequence() {
            Some([status, _]) if int_of(status) == Some(1) => Ok(()),
            Some([status, current]) if int_of(status) == Some(0) => {
                Err(self.fenced(operation, ours, current))
            }
            _ => Err(self.unexpected(operation, &reply)),
        }
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

/// An epoch, given as an integer or a decimal string.
fn epoch_of(value: &Value) -> Option<Epoch> {
    match value {
        Value::Int(number) => u64::try_from(*number).ok().map(Epoch::new),
        _ => text_of(value)?.parse().ok().map(Epoch::new),
    }
}

impl Store for RedisStore {
    fn location(&self) -> &StoreLocation {
        &self.location
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
        batch.validate()?;
        let operation = Operation::Commit;
        let mut invocation = COMMIT.prepare_invoke();
        invocation.key(&self.keys.epoch);
        for key in &self.keys.tables {
            invocation.key(key);
        }
        invocation.arg(epoch.get().to_string());
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
        let reply: Value = invocation
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(self.error(operation))?;
        match reply.as_sequence() {
            Some([status]) if int_of(status) == Some(1) => Ok(()),
            Some([status, current]) if int_of(status) == Some(0) => {
                Err(self.fenced(operation, epoch, current))
            }
            _ => Err(self.unexpected(operation, &reply)),
        }
    }

    async fn acquire_lease(&self, holder: &str, ttl: Duration) -> Result<Lease, StoreError> {
        let operation = Operation::AcquireLease;
        check_lease_request(holder, ttl)
            .map_err(|reason| self.invalid_lease_request(operation, reason))?;
        let reply: Value = ACQUIRE
            .key(&self.keys.lease)
            .key(&self.keys.epoch)
            .arg(holder)
            .arg(ttl_millis(ttl))
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(self.error(operation))?;
        match reply.as_sequence() {
            Some([status, epoch]) if int_of(status) == Some(1) => match epoch_of(epoch) {
                Some(epoch) => Ok(Lease::new(holder, epoch, ttl)),
                None => Err(self.unexpected(operation, &reply)),
            },
            Some([status, other, remaining_ms]) if int_of(status) == Some(0) => {
                let (Some(other), Some(remaining_ms)) = (text_of(other), int_of(remaining_ms))
                else {
                    return Err(self.unexpected(operation, &reply));
                };
                Err(StoreError::LeaseHeld {
                    location: self.location.clone(),
                    holder: other,
                    // PTTL is -1 for a key without expiry (set by hand): report no time left.
                    remaining: Duration::from_millis(u64::try_from(remaining_ms).unwrap_or(0)),
                })
            }
            _ => Err(self.unexpected(operation, &reply)),
        }
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        let operation = Operation::RenewLease;
        check_lease_request(lease.holder(), ttl)
            .map_err(|reason| self.invalid_lease_request(operation, reason))?;
        let args = [
            lease.holder().as_bytes().to_vec(),
            lease.epoch().get().to_string().into_bytes(),
            ttl_millis(ttl).to_string().into_bytes(),
        ];
        self.guarded_lease_script(operation, &RENEW, lease.epoch(), &args).await?;
        Ok(Lease::new(lease.holder(), lease.epoch(), ttl))
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let args = [lease.epoch().get().to_string().into_bytes()];
        self.guarded_lease_script(Operation::ReleaseLease, &RELEASE, lease.epoch(), &args).await
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
    }

    #[test]
    fn epochs_are_read_from_integers_and_strings() {
        assert_eq!(epoch_of(&Value::Int(7)), Some(Epoch::new(7)));
        assert_eq!(epoch_of(&Value::BulkString(b"12".to_vec())), Some(Epoch::new(12)));
        assert_eq!(epoch_of(&Value::BulkString(b"x".to_vec())), None);
        assert_eq!(epoch_of(&Value::Int(-1)), None);
    }
}
