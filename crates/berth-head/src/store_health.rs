//! Whether the store answers, shared by the committer (which finds out) and the edges (which
//! refuse writes meanwhile).

use std::sync::atomic::Ordering;

use crate::error::HeadError;

/// Whether the store answers, as the committer finds it: while a commit is being retried,
/// new writes are refused at once (503) rather than queued behind it, and reads go on from
/// memory.
#[derive(Debug, Default)]
pub(crate) struct StoreHealth {
    /// Why the store does not answer; `None` while it does.
    down: std::sync::Mutex<Option<String>>,
    /// Set when the committer marks the store down, so the write path reads one atomic.
    is_down: std::sync::atomic::AtomicBool,
    /// A standing warning: the store's durability relaxed.
    durability: Option<String>,
}

impl StoreHealth {
    pub(crate) fn new(durability: Option<String>) -> StoreHealth {
        StoreHealth { durability, ..StoreHealth::default() }
    }

    /// The store failed: `cause`.
    pub(crate) fn mark_down(&self, cause: String) {
        *self.down.lock().unwrap_or_else(|e| e.into_inner()) = Some(cause);
        self.is_down.store(true, Ordering::Release);
    }

    /// The store answers again.
    pub(crate) fn mark_up(&self) {
        self.is_down.store(false, Ordering::Release);
        *self.down.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The refusal of a write while the store is down.
    pub(crate) fn refusal(&self) -> Option<HeadError> {
        if !self.is_down.load(Ordering::Acquire) {
            return None;
        }
        let cause = self.down.lock().unwrap_or_else(|e| e.into_inner()).clone()?;
        Some(HeadError::Unavailable(format!(
            "the store is unavailable; nothing was acknowledged (retry later): {cause}"
        )))
    }

    /// What `berth status` warns about.
    pub(crate) fn warnings(&self) -> Vec<String> {
        let down = self.down.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let down =
            down.map(|cause| format!("the store does not answer; writes are refused: {cause}"));
        self.durability.iter().cloned().chain(down).collect()
    }
}
