//! Why a running head stopped by itself, and what its process does next: step down and stand
//! by (its lease moved, or its store stayed away longer than the retry window), or refuse to
//! go on (its store lost acknowledged writes, which only an operator can settle).

use std::fmt;

use berth_store::StoreError;

/// Why a head stopped by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    /// What kind of stop, which decides what follows.
    pub kind: StopKind,
    /// What happened, for the log and the operator.
    pub reason: String,
}

/// What follows a [`Stop`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopKind {
    /// Another head took the store's lease over: this one steps down and stands by.
    LeaseLost,
    /// The store did not answer for longer than the retry window: this one steps down and
    /// stands by until the store answers (and takes the lease again if nobody else did).
    StoreUnavailable,
    /// The store is behind what this head saw of it: it lost acknowledged writes. The head
    /// refuses to go on; agents keep running what they run until a head with a consistent
    /// store tells them otherwise.
    StoreBehind,
}

impl Stop {
    /// The stop a store error calls for.
    pub(crate) fn from_store(error: &StoreError) -> Stop {
        let kind = if error.is_behind() {
            StopKind::StoreBehind
        } else if error.is_fenced() {
            StopKind::LeaseLost
        } else {
            StopKind::StoreUnavailable
        };
        Stop { kind, reason: error.to_string() }
    }

    /// Whether the head should step down and stand by (rather than refuse to go on).
    pub fn steps_down(&self) -> bool {
        self.kind != StopKind::StoreBehind
    }
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// What an operator reads when a store is behind: what it means and the two ways on.
pub const BEHIND_ADVICE: &str = "this head refuses to serve on it, and agents keep running \
    what they run. Restore the store from a copy that has the missing writes, or, to take the \
    store as it is, start the head with --accept-store-loss (the work the store lost is then \
    stopped when its agents report it)";

#[cfg(test)]
mod tests {
    use super::*;
    use berth_store::{Epoch, Generation, Operation, StoreLocation};

    #[test]
    fn store_errors_choose_the_stop() {
        let location = StoreLocation::Redis { url: "redis://h:1/0".into(), prefix: "p".into() };
        let fenced = StoreError::Fenced {
            location: location.clone(),
            operation: Operation::Commit,
            ours: Epoch::new(1),
            current: Epoch::new(2),
        };
        let behind = StoreError::Behind {
            location: location.clone(),
            operation: Operation::RenewLease,
            known: Generation { id: "a".into(), commits: 9 },
            found: Generation { id: String::new(), commits: 0 },
        };
        let down = StoreError::Backend {
            location,
            operation: Operation::Commit,
            cause: std::sync::Arc::new(std::io::Error::other("connection refused")),
        };
        assert_eq!(Stop::from_store(&fenced).kind, StopKind::LeaseLost);
        assert_eq!(Stop::from_store(&behind).kind, StopKind::StoreBehind);
        assert_eq!(Stop::from_store(&down).kind, StopKind::StoreUnavailable);
        assert!(Stop::from_store(&down).steps_down());
        assert!(!Stop::from_store(&behind).steps_down());
    }
}
