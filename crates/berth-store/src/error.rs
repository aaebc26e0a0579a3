//! The store's errors: each names the backend and its location, the operation and the cause.

use std::error::Error as StdError;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::batch::InvalidOp;
use crate::lease::{Epoch, Generation};
use crate::table::Table;

/// Which store an error or a log line is about: the backend and where its data lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// The embedded redb file.
    Redb {
        /// The database file (`DATA_DIR/berth.redb`).
        path: PathBuf,
    },
    /// A Redis server.
    Redis {
        /// The server's URL, with any password replaced by `***`.
        url: String,
        /// The namespace of this store's keys.
        prefix: String,
    },
    /// An etcd cluster.
    Etcd {
        /// Its members, comma-separated.
        endpoints: String,
        /// The namespace of this store's keys.
        prefix: String,
    },
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Redb { path } => write!(f, "redb at {}", path.display()),
            StoreLocation::Redis { url, prefix } => write!(f, "redis at {url} (prefix {prefix})"),
            StoreLocation::Etcd { endpoints, prefix } => {
                write!(f, "etcd at {endpoints} (prefix {prefix})")
            }
        }
    }
}

/// The store operation that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Opening the database or connecting to the server.
    Open,
    /// [`Store::load`](crate::Store::load).
    Load,
    /// [`Store::commit`](crate::Store::commit).
    Commit,
    /// [`Store::acquire_lease`](crate::Store::acquire_lease).
    AcquireLease,
    /// [`Store::renew_lease`](crate::Store::renew_lease).
    RenewLease,
    /// [`Store::release_lease`](crate::Store::release_lease).
    ReleaseLease,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Open => "open",
            Operation::Load => "load",
            Operation::Commit => "commit",
            Operation::AcquireLease => "acquire lease",
            Operation::RenewLease => "renew lease",
            Operation::ReleaseLease => "release lease",
        })
    }
}

/// The underlying error of a failed operation, shared so that [`StoreError`] is `Clone` (a
/// group commit answers every caller with the same error).
pub type Cause = Arc<dyn StdError + Send + Sync + 'static>;

/// Everything that can go wrong in the store.
///
/// Messages name the backend and its location, the operation, and the cause, in one line:
/// `redb at /var/lib/berth/berth.redb: commit failed: No space left on device (os error 28)`.
/// The cause is part of the message (not a separate `source()`), so printing the error once
/// says everything.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The backend failed: I/O, the network, or the server refused. For redb, a failed commit
    /// changed nothing. For Redis, an I/O error or timeout leaves unknown whether a commit
    /// was applied: retrying the same batch with the same epoch is safe, as puts and deletes
    /// are idempotent.
    #[error("{location}: {operation} failed: {cause}")]
    Backend {
        /// The store.
        location: StoreLocation,
        /// What it was doing.
        operation: Operation,
        /// Why it failed.
        cause: Cause,
    },
    /// The writer's lease epoch is not the current one: another holder took the lease over
    /// (or the epoch was never granted). Nothing was written. This is final for that epoch:
    /// the writer must stop writing, and reload if it wants to go on.
    #[error(
        "{location}: {operation} refused: lease epoch {ours} is fenced, the current epoch is \
         {current} (another head took the lease over)"
    )]
    Fenced {
        /// The store.
        location: StoreLocation,
        /// What was refused.
        operation: Operation,
        /// The epoch the writer gave.
        ours: Epoch,
        /// The store's current epoch.
        current: Epoch,
    },
    /// The store is behind what this store object saw of it before, or what its caller said
    /// it knew ([`Store::expect`](crate::Store::expect)): another store ID, or fewer commits.
    /// The store lost acknowledged writes (a Redis server restarted without persistence, a
    /// database restored from an old copy) or is another store. Nothing was written. Final
    /// until an operator decides: restore the store, or accept it as it is.
    #[error(
        "{location}: {operation} refused: the store is behind what this head saw of it: it is \
         {found}, this head saw {known}. It lost acknowledged writes (a server restarted \
         without persistence, or restored from an old copy), or it is another store"
    )]
    Behind {
        /// The store.
        location: StoreLocation,
        /// What was refused.
        operation: Operation,
        /// What was seen or known before.
        known: Generation,
        /// What the store holds now.
        found: Generation,
    },
    /// Another holder has the lease and it has not expired.
    #[error("{location}: acquire lease refused: {holder:?} holds it for up to {remaining:?} more")]
    LeaseHeld {
        /// The store.
        location: StoreLocation,
        /// Who holds the lease.
        holder: String,
        /// How long until it expires, unless renewed.
        remaining: Duration,
    },
    /// A lease request is invalid (empty holder name, ttl out of range).
    #[error("{location}: {operation} refused: {reason}")]
    InvalidLeaseRequest {
        /// The store.
        location: StoreLocation,
        /// What was refused.
        operation: Operation,
        /// The rule broken.
        reason: String,
    },
    /// An op of a batch is invalid; nothing was written.
    #[error("invalid batch: op {index} ({table} {key:?}): {reason}")]
    InvalidBatch {
        /// The op's position in the batch.
        index: usize,
        /// The op's table.
        table: Table,
        /// The op's key (shortened when long).
        key: String,
        /// The rule broken.
        reason: InvalidOp,
    },
    /// The store holds data this version cannot read.
    #[error("{location}: {operation} failed: {what} is corrupt: {reason}")]
    Corrupt {
        /// The store.
        location: StoreLocation,
        /// What was being read.
        operation: Operation,
        /// Which data.
        what: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The `--store` value cannot be understood.
    #[error("store {input:?}: {reason}")]
    Config {
        /// The value given.
        input: String,
        /// The rule broken, and what is accepted.
        reason: String,
    },
    /// The [`BatchWriter`](crate::BatchWriter) has stopped (its task ended or panicked), so
    /// the write was not committed.
    #[error("batch writer stopped: the write was not committed")]
    WriterStopped,
}

impl StoreError {
    /// A backend failure with its cause.
    pub(crate) fn backend(
        location: &StoreLocation,
        operation: Operation,
        cause: impl Into<Box<dyn StdError + Send + Sync + 'static>>,
    ) -> Self {
        StoreError::Backend {
            location: location.clone(),
            operation,
            cause: Arc::from(cause.into()),
        }
    }

    /// Whether this is [`StoreError::Fenced`].
    pub fn is_fenced(&self) -> bool {
        matches!(self, StoreError::Fenced { .. })
    }

    /// Whether this is [`StoreError::Behind`].
    pub fn is_behind(&self) -> bool {
        matches!(self, StoreError::Behind { .. })
    }

    /// Whether the operation may succeed if tried again later: the backend failed (the
    /// network, a server down or failing over). Everything else is final.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Backend { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_backend_location_operation_and_cause() {
        let redb = StoreLocation::Redb { path: PathBuf::from("/x/berth.redb") };
        let redis = StoreLocation::Redis { url: "redis://h:6379/0".into(), prefix: "p".into() };
        let io = std::io::Error::other("disk on fire");
        let cases: [(StoreError, &str); 4] = [
            (
                StoreError::backend(&redb, Operation::Commit, io),
                "redb at /x/berth.redb: commit failed: disk on fire",
            ),
            (
                StoreError::Fenced {
                    location: redis.clone(),
                    operation: Operation::Commit,
                    ours: Epoch::new(3),
                    current: Epoch::new(4),
                },
                "redis at redis://h:6379/0 (prefix p): commit refused: lease epoch 3 is fenced, \
                 the current epoch is 4 (another head took the lease over)",
            ),
            (
                StoreError::LeaseHeld {
                    location: redis,
                    holder: "head-a".into(),
                    remaining: Duration::from_millis(1500),
                },
                "redis at redis://h:6379/0 (prefix p): acquire lease refused: \"head-a\" holds it \
                 for up to 1.5s more",
            ),
            (
                StoreError::Config { input: "ftp://x".into(), reason: "unknown scheme".into() },
                "store \"ftp://x\": unknown scheme",
            ),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message);
        }
    }
}
