//! The etcd backend: the same tables in an etcd cluster (Raft-replicated), so the store
//! survives the loss of a minority of its members and a head on another machine can take
//! over.
//!
//! It speaks etcd's v3 API through etcd's own JSON gateway (`POST /v3/kv/range`,
//! `/v3/kv/txn`, `/v3/lease/grant`, `/v3/lease/revoke`, `/v3/lease/timetolive`) with reqwest.
//! The gRPC client crates need `protoc` at build time, which a fresh machine does not have;
//! the gateway is the same API, served on the client port by every etcd since 3.4.
//!
//! Layout, for the namespace `P` (the URL's `prefix`; keys and values are bytes, the gateway
//! carries them in base64):
//!
//! | key | holds |
//! | --- | --- |
//! | `berth/P/t/TABLE/KEY` | one record of a table |
//! | `berth/P/epoch` | the last lease epoch granted (decimal); never expires |
//! | `berth/P/lease` | the holder's name, attached to an etcd lease: gone once it expires |
//! | `berth/P/owner` | the current epoch, `NUMBER:TOKEN` (the token random per acquisition) |
//! | `berth/P/id` | the store's random ID |
//! | `berth/P/mark` | written by every commit: its revision is the store's commit count |
//!
//! Every write is one transaction (`/v3/kv/txn`): a commit compares `owner` with the writer's
//! epoch and `id` and `mark`'s revision with what the writer has seen (a cluster restored from
//! an old snapshot shows an older `mark`), and only then applies the batch, so a fenced head
//! writes nothing, and nobody writes to a store that went back in time. Acquiring the lease
//! compares the revisions it read of `epoch` and `lease` and writes both; renewing attaches
//! the lease key to a fresh etcd lease if the epoch is still the caller's. Expiry is etcd's,
//! so the heads' clocks never matter. `load` reads the tables at one revision.
//!
//! With several endpoints, a request that cannot reach one is sent to the next. etcd limits a
//! transaction to `--max-txn-ops` operations (128 by default) and `--max-request-bytes` (1.5
//! MiB): run it with higher limits (the README's set-up says which), or large commits fail.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::batch::{Batch, Op};
use crate::error::{Operation, StoreError, StoreLocation};
use crate::lease::{check_lease_request, Epoch, Generation, Lease, Watermark};
use crate::snapshot::Snapshot;
use crate::store::Store;
use crate::table::Table;

/// How long one request to one member may take before the next member is asked. A member
/// that lost its leader holds a proposal for seconds before it answers; another member, with
/// the new leader, answers at once. Retrying a commit elsewhere is safe: the same batch under
/// the same epoch writes the same values.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one page of a load may take.
const LOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting to one member may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Keys read per range request while loading.
const PAGE: u64 = 2000;
/// Attempts at acquiring the lease when another writer races this one.
const ACQUIRE_ATTEMPTS: usize = 5;

/// The etcd store. Cheap to clone.
#[derive(Clone)]
pub struct EtcdStore {
    http: reqwest::Client,
    endpoints: Arc<Vec<String>>,
    /// The endpoint tried first (the last that answered).
    current: Arc<AtomicUsize>,
    prefix: String,
    location: StoreLocation,
    watermark: Arc<Watermark>,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore").field("location", &self.location).finish_non_exhaustive()
    }
}

/// One key-value of a range answer.
struct Kv {
    key: Vec<u8>,
    value: Vec<u8>,
    mod_revision: i64,
    lease: i64,
}

/// An int64 of the gateway's JSON: a decimal string (or, leniently, a number); absent is 0.
fn int(value: &Value) -> i64 {
    match value {
        Value::String(text) => text.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

/// The end of the range of every key that starts with `prefix`.
fn range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl EtcdStore {
    /// Connects to the etcd members at `endpoints` (`http://HOST:PORT`) and keeps the store
    /// under the namespace `prefix`. Fails, naming them, when none answers within a few
    /// seconds.
    pub async fn connect(endpoints: &[String], prefix: &str) -> Result<Self, StoreError> {
        let location =
            StoreLocation::Etcd { endpoints: endpoints.join(","), prefix: prefix.to_owned() };
        crate::config::check_prefix(prefix)
            .map_err(|reason| StoreError::Config { input: prefix.to_owned(), reason })?;
        // An error means a provider is installed already: that one serves (see Cargo.toml).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .no_proxy()
            .build()
            .map_err(|e| StoreError::backend(&location, Operation::Open, e))?;
        let store = EtcdStore {
            http,
            endpoints: Arc::new(endpoints.to_vec()),
            current: Arc::new(AtomicUsize::new(0)),
            prefix: format!("berth/{prefix}/"),
            location,
            watermark: Arc::default(),
        };
        // One read, so a wrong address fails at open, not at the first commit.
        store.range(Operation::Open, store.key("epoch"), None, 0, 1).await?;
        Ok(store)
    }

    fn key(&self, name: &str) -> Vec<u8> {
        format!("{}{name}", self.prefix).into_bytes()
    }

    fn table_prefix(&self) -> Vec<u8> {
        self.key("t/")
    }

    fn record_key(&self, table: Table, key: &str) -> Vec<u8> {
        format!("{}t/{}/{key}", self.prefix, table.name()).into_bytes()
    }

    fn error(&self, operation: Operation, cause: impl fmt::Display) -> StoreError {
        StoreError::backend(&self.location, operation, cause.to_string())
    }

    /// POSTs `body` to `path` on the first member that answers; the decoded answer.
    async fn call<T: DeserializeOwned>(
        &self,
        operation: Operation,
        path: &str,
        body: &Value,
    ) -> Result<T, StoreError> {
        let n = self.endpoints.len();
        let start = self.current.load(Ordering::Relaxed);
        let mut last = String::new();
        for i in 0..n {
            let index = (start + i) % n;
            let url = format!("{}{path}", self.endpoints[index]);
            let timeout = if operation == Operation::Load { LOAD_TIMEOUT } else { REQUEST_TIMEOUT };
            let response = match self.http.post(&url).json(body).timeout(timeout).send().await {
                Ok(response) => response,
                Err(err) => {
                    last = format!("{url}: {err}");
                    continue;
                }
            };
            let status = response.status();
            let text = match response.text().await {
                Ok(text) => text,
                Err(err) => {
                    last = format!("{url}: {err}");
                    continue;
                }
            };
            if status.is_success() {
                self.current.store(index, Ordering::Relaxed);
                return serde_json::from_str(&text)
                    .map_err(|e| self.error(operation, format!("{url} answered {text:?}: {e}")));
            }
            // A member without a leader (an election under way) answers 503: try the next.
            last = format!("{url} answered {status}: {text}");
            if status.as_u16() != 503 {
                break;
            }
        }
        Err(self.error(operation, last))
    }

    async fn range(
        &self,
        operation: Operation,
        key: Vec<u8>,
        end: Option<Vec<u8>>,
        revision: i64,
        limit: u64,
    ) -> Result<(Vec<Kv>, bool, i64), StoreError> {
        let mut body = json!({"key": b64(&key), "limit": limit.to_string()});
        if let Some(end) = end {
            body["range_end"] = json!(b64(&end));
        }
        if revision > 0 {
            body["revision"] = json!(revision.to_string());
        }
        let answer: Value = self.call(operation, "/v3/kv/range", &body).await?;
        let kvs = answer["kvs"].as_array().map(|a| a.as_slice()).unwrap_or_default();
        let decode = |field: &Value| B64.decode(field.as_str().unwrap_or("")).unwrap_or_default();
        let kvs = kvs
            .iter()
            .map(|kv| Kv {
                key: decode(&kv["key"]),
                value: decode(&kv["value"]),
                mod_revision: int(&kv["mod_revision"]),
                lease: int(&kv["lease"]),
            })
            .collect();
        let more = answer["more"].as_bool().unwrap_or(false);
        Ok((kvs, more, int(&answer["header"]["revision"])))
    }

    /// One key, if it exists.
    async fn get(&self, operation: Operation, key: Vec<u8>) -> Result<Option<Kv>, StoreError> {
        Ok(self.range(operation, key, None, 0, 1).await?.0.into_iter().next())
    }

    /// Runs a transaction; whether its comparisons held, and its answer.
    async fn txn(&self, operation: Operation, body: Value) -> Result<(bool, Value), StoreError> {
        let answer: Value = self.call(operation, "/v3/kv/txn", &body).await?;
        Ok((answer["succeeded"].as_bool().unwrap_or(false), answer))
    }

    async fn grant(&self, operation: Operation, ttl: Duration) -> Result<i64, StoreError> {
        // etcd counts lease ttls in whole seconds.
        let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let answer: Value =
            self.call(operation, "/v3/lease/grant", &json!({"TTL": seconds.to_string()})).await?;
        match int(&answer["ID"]) {
            0 => Err(self.error(operation, format!("no lease granted: {answer}"))),
            id => Ok(id),
        }
    }

    /// Gives an etcd lease back; a failure only leaves it to expire.
    async fn revoke(&self, id: i64) {
        if id != 0 {
            let body = json!({"ID": id.to_string()});
            let _: Result<Value, _> =
                self.call(Operation::ReleaseLease, "/v3/lease/revoke", &body).await;
        }
    }

    /// [`Store::commit`] of a batch the caller keeps (to retry it).
    pub(crate) async fn commit_ref(&self, epoch: Epoch, batch: &Batch) -> Result<(), StoreError> {
        batch.validate()?;
        let operation = Operation::Commit;
        // etcd refuses a key twice in one transaction; in a batch the last op on a key wins,
        // so only that one is sent.
        let mut seen = std::collections::HashSet::new();
        let mut last: Vec<&Op> = batch
            .ops()
            .iter()
            .rev()
            .filter(|op| match op {
                Op::Put { table, key, .. } | Op::Delete { table, key } => {
                    seen.insert((*table, key))
                }
            })
            .collect();
        last.reverse();
        let ops: Vec<Value> = last
            .into_iter()
            .map(|op| match op {
                Op::Put { table, key, value } => json!({"request_put": {
                    "key": b64(&self.record_key(*table, key)), "value": b64(value)}}),
                Op::Delete { table, key } => json!({"request_delete_range": {
                    "key": b64(&self.record_key(*table, key))}}),
            })
            .collect();
        let mut ops = ops;
        ops.push(json!({"request_put": {"key": b64(&self.key("mark")), "value": ""}}));
        let sent = self.watermark.get();
        let mut compare = vec![self.owner_is(epoch)];
        compare.extend(self.not_behind(sent.as_ref()));
        let body = json!({"compare": compare, "success": ops});
        match self.txn(operation, body).await? {
            (true, answer) => {
                let revision = u64::try_from(int(&answer["header"]["revision"])).unwrap_or(0);
                let id = sent.as_ref().map(|known| known.id.clone()).unwrap_or_default();
                // The compares held, so only the ID may be unknown (a commit without an
                // acquisition): then the count alone is taken in.
                let _ = self.watermark.observe(None, &Generation { id, commits: revision });
                Ok(())
            }
            (false, _) => Err(self.refused(operation, epoch, sent.as_ref()).await),
        }
    }

    /// The comparison "`owner` is `epoch`".
    fn owner_is(&self, epoch: Epoch) -> Value {
        json!({"key": b64(&self.key("owner")), "target": "VALUE", "result": "EQUAL",
               "value": b64(epoch.stored().as_bytes())})
    }

    /// The comparisons "the store is not behind what was seen": the same `id`, and `mark`
    /// written at the last revision seen or later.
    fn not_behind(&self, sent: Option<&Generation>) -> Vec<Value> {
        let Some(known) = sent else { return Vec::new() };
        let mut compares = Vec::new();
        if !known.id.is_empty() {
            compares.push(json!({"key": b64(&self.key("id")), "target": "VALUE",
                                 "result": "EQUAL", "value": b64(known.id.as_bytes())}));
        }
        if known.commits > 0 {
            compares.push(json!({"key": b64(&self.key("mark")), "target": "MOD",
                                 "result": "GREATER", "mod_revision": (known.commits - 1).to_string()}));
        }
        compares
    }

    /// The store's generation now: its `id` and `mark`'s revision.
    async fn read_generation(&self, operation: Operation) -> Result<Generation, StoreError> {
        let id = self.get(operation, self.key("id")).await?;
        let mark = self.get(operation, self.key("mark")).await?;
        Ok(Generation {
            id: id.map(|kv| String::from_utf8_lossy(&kv.value).into_owned()).unwrap_or_default(),
            commits: mark.map_or(0, |kv| u64::try_from(kv.mod_revision).unwrap_or(0)),
        })
    }

    /// `Behind` if `found`, read after `sent` was known, is behind it.
    fn check_behind(
        &self,
        operation: Operation,
        sent: Option<&Generation>,
        found: Generation,
    ) -> Result<(), StoreError> {
        match sent {
            Some(known) if known.is_ahead_of(&found) => Err(StoreError::Behind {
                location: self.location.clone(),
                operation,
                known: known.clone(),
                found,
            }),
            _ => Ok(()),
        }
    }

    /// Why a guarded transaction sent knowing `sent` was refused: the store is behind, or
    /// `ours` is fenced.
    async fn refused(
        &self,
        operation: Operation,
        ours: Epoch,
        sent: Option<&Generation>,
    ) -> StoreError {
        let found = match self.read_generation(operation).await {
            Ok(found) => found,
            Err(err) => return err,
        };
        if let Err(err) = self.check_behind(operation, sent, found) {
            return err;
        }
        match self.get(operation, self.key("owner")).await {
            Ok(owner) => {
                let current = owner
                    .and_then(|kv| Epoch::parse_stored(std::str::from_utf8(&kv.value).ok()?))
                    .unwrap_or(Epoch::new(0));
                StoreError::Fenced { location: self.location.clone(), operation, ours, current }
            }
            Err(err) => err,
        }
    }

    /// Attaches the lease key (holder `holder`) to a fresh etcd lease of `ttl` if `epoch` is
    /// still the current one and the store is not behind; the etcd lease it had is revoked.
    async fn attach(
        &self,
        operation: Operation,
        holder: &str,
        epoch: Epoch,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let id = self.grant(operation, ttl).await?;
        let put = json!({"request_put": {"key": b64(&self.key("lease")),
                         "value": b64(holder.as_bytes()), "lease": id.to_string(), "prev_kv": true}});
        let sent = self.watermark.get();
        let mut compare = vec![self.owner_is(epoch)];
        compare.extend(self.not_behind(sent.as_ref()));
        let (held, answer) =
            self.txn(operation, json!({"compare": compare, "success": [put]})).await?;
        if !held {
            self.revoke(id).await;
            return Err(self.refused(operation, epoch, sent.as_ref()).await);
        }
        let previous = int(&answer["responses"][0]["response_put"]["prev_kv"]["lease"]);
        if previous != id {
            self.revoke(previous).await;
        }
        Ok(())
    }
}

impl Store for EtcdStore {
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
        let operation = Operation::Load;
        let prefix = self.table_prefix();
        let end = range_end(&prefix);
        let mut snapshot = Snapshot::new();
        let mut tables: Vec<std::collections::BTreeMap<String, Vec<u8>>> =
            vec![Default::default(); Table::ALL.len()];
        let (mut from, mut revision) = (prefix.clone(), 0);
        loop {
            let (kvs, more, at) =
                self.range(operation, from.clone(), Some(end.clone()), revision, PAGE).await?;
            // Every page at the revision of the first: one consistent snapshot.
            if revision == 0 {
                revision = at;
            }
            for kv in &kvs {
                let name = String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned();
                let Some((table, key)) = name.split_once('/') else { continue };
                let Some(table) = Table::ALL.into_iter().find(|t| t.name() == table) else {
                    continue;
                };
                tables[table.index()].insert(key.to_string(), kv.value.clone());
            }
            match (more, kvs.last()) {
                (true, Some(last)) => {
                    from = last.key.clone();
                    from.push(0);
                }
                _ => break,
            }
        }
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
        check_lease_request(holder, ttl).map_err(|reason| StoreError::InvalidLeaseRequest {
            location: self.location.clone(),
            operation,
            reason,
        })?;
        for _ in 0..ACQUIRE_ATTEMPTS {
            let sent = self.watermark.get();
            let lease = self.get(operation, self.key("lease")).await?;
            let id_kv = self.get(operation, self.key("id")).await?;
            let mark = self.get(operation, self.key("mark")).await?;
            let found = Generation {
                id: id_kv
                    .as_ref()
                    .map(|kv| String::from_utf8_lossy(&kv.value).into_owned())
                    .unwrap_or_default(),
                commits: mark.as_ref().map_or(0, |kv| u64::try_from(kv.mod_revision).unwrap_or(0)),
            };
            self.check_behind(operation, sent.as_ref(), found.clone())?;
            if let Some(kv) = &lease {
                if kv.value != holder.as_bytes() {
                    let answer: Value = self
                        .call(
                            operation,
                            "/v3/lease/timetolive",
                            &json!({"ID": kv.lease.to_string()}),
                        )
                        .await?;
                    let remaining = u64::try_from(int(&answer["TTL"])).unwrap_or(0);
                    // A standby learns the store's history while it waits.
                    let _ = self.watermark.observe(sent.as_ref(), &found);
                    return Err(StoreError::LeaseHeld {
                        location: self.location.clone(),
                        holder: String::from_utf8_lossy(&kv.value).into_owned(),
                        remaining: Duration::from_secs(remaining),
                    });
                }
            }
            let epoch_kv = self.get(operation, self.key("epoch")).await?;
            let current: u64 = epoch_kv
                .as_ref()
                .and_then(|kv| std::str::from_utf8(&kv.value).ok()?.parse().ok())
                .unwrap_or(0);
            // Unchanged since read: the lease key (absent, or ours), the epoch, the ID and the
            // mark.
            let unchanged = |key: Vec<u8>, kv: &Option<Kv>| match kv {
                None => json!({"key": b64(&key), "target": "VERSION", "result": "EQUAL",
                               "version": "0"}),
                Some(kv) => json!({"key": b64(&key), "target": "MOD", "result": "EQUAL",
                                   "mod_revision": kv.mod_revision.to_string()}),
            };
            let id = self.grant(operation, ttl).await?;
            let epoch = Epoch::with_token(current + 1, crate::lease::random_u64());
            let mut generation = found.clone();
            let mut success = vec![
                json!({"request_put": {"key": b64(&self.key("epoch")),
                                       "value": b64(epoch.get().to_string().as_bytes())}}),
                json!({"request_put": {"key": b64(&self.key("owner")),
                                       "value": b64(epoch.stored().as_bytes())}}),
                json!({"request_put": {"key": b64(&self.key("lease")), "value": b64(holder.as_bytes()),
                                       "lease": id.to_string()}}),
            ];
            if generation.id.is_empty() {
                generation.id = crate::lease::new_store_id();
                success.push(json!({"request_put": {"key": b64(&self.key("id")),
                                                    "value": b64(generation.id.as_bytes())}}));
            }
            let body = json!({
                "compare": [
                    unchanged(self.key("lease"), &lease),
                    unchanged(self.key("epoch"), &epoch_kv),
                    unchanged(self.key("id"), &id_kv),
                    unchanged(self.key("mark"), &mark),
                ],
                "success": success,
            });
            match self.txn(operation, body).await? {
                (true, _) => {
                    if let Some(kv) = &lease {
                        self.revoke(kv.lease).await;
                    }
                    let _ = self.watermark.observe(sent.as_ref(), &generation);
                    return Ok(Lease::new(holder, epoch, ttl));
                }
                // Another writer came in between: look again.
                (false, _) => self.revoke(id).await,
            }
        }
        Err(self.error(operation, "other writers kept changing the lease; try again"))
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        let operation = Operation::RenewLease;
        check_lease_request(lease.holder(), ttl).map_err(|reason| {
            StoreError::InvalidLeaseRequest { location: self.location.clone(), operation, reason }
        })?;
        self.attach(operation, lease.holder(), lease.epoch(), ttl).await?;
        Ok(Lease::new(lease.holder(), lease.epoch(), ttl))
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let operation = Operation::ReleaseLease;
        let delete =
            json!({"request_delete_range": {"key": b64(&self.key("lease")), "prev_kv": true}});
        let body = json!({"compare": [self.owner_is(lease.epoch())], "success": [delete]});
        match self.txn(operation, body).await? {
            (true, answer) => {
                let kvs = &answer["responses"][0]["response_delete_range"]["prev_kvs"];
                if let Some(kv) = kvs.as_array().and_then(|a| a.first()) {
                    self.revoke(int(&kv["lease"])).await;
                }
                Ok(())
            }
            (false, _) => Err(self.refused(operation, lease.epoch(), None).await),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_range_ends_after_its_last_key() {
        assert_eq!(range_end(b"berth/p/t/"), b"berth/p/t0".to_vec());
        assert_eq!(range_end(&[b'a', 0xff]), b"b".to_vec());
        assert_eq!(range_end(&[0xff]), vec![0]);
    }

    #[test]
    fn the_gateways_int64s_are_strings() {
        assert_eq!(int(&json!("42")), 42);
        assert_eq!(int(&json!(7)), 7);
        assert_eq!(int(&Value::Null), 0);
    }
}
