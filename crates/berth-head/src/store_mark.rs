//! What a head last saw of its store, kept in its data directory (`DATA_DIR/store-mark.json`):
//! the store's location, ID and commit count. A head started again reads it and tells the store
//! ([`Store::expect`](berth_store::Store::expect)), so a store that came back without
//! acknowledged writes (a Redis server restarted without persistence, a restored backup) is
//! refused instead of trusted: the IDs it forgot would be handed out again, and the work it
//! forgot would be stopped on the agents.
//!
//! The mark is written after the store answered, never ahead of it, so a store that keeps its
//! writes is never refused. It may lag (it is written at start and with each lease renewal),
//! which only narrows what it catches.

use std::path::{Path, PathBuf};

use berth_store::{Generation, StoreLocation};
use serde::{Deserialize, Serialize};

/// The mark's file name in the data directory.
pub const MARK_FILE: &str = "store-mark.json";

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Mark {
    /// The store's location as the head names it ([`StoreLocation`]'s text).
    store: String,
    /// Its generation as last seen.
    generation: Generation,
}

/// The mark's path.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(MARK_FILE)
}

/// What this data directory last saw of the store at `location`; `None` when it saw nothing,
/// or another store (the operator pointed the head elsewhere: nothing to compare).
pub(crate) fn read(data_dir: &Path, location: &StoreLocation) -> Option<Generation> {
    let text = std::fs::read_to_string(path(data_dir)).ok()?;
    match serde_json::from_str::<Mark>(&text) {
        Ok(mark) if mark.store == location.to_string() => Some(mark.generation),
        Ok(mark) => {
            tracing::info!(mark = %mark.store, store = %location, "the store mark is of another store; not compared");
            None
        }
        Err(err) => {
            tracing::warn!(path = %path(data_dir).display(), error = %err, "the store mark is unreadable; not compared");
            None
        }
    }
}

/// Records `generation` of the store at `location` (mode 0600, replaced whole: a crash leaves
/// the old mark or the new one). A failure is
/// logged, not fatal: the mark only narrows what a restart trusts.
pub(crate) fn write(data_dir: &Path, location: &StoreLocation, generation: &Generation) {
    let mark = Mark { store: location.to_string(), generation: generation.clone() };
    let target = path(data_dir);
    let written = serde_json::to_vec(&mark)
        .map_err(std::io::Error::other)
        .and_then(|bytes| berth_api::local::write_private(&target, &bytes));
    if let Err(err) = written {
        tracing::warn!(path = %target.display(), error = %err, "cannot write the store mark");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_read_back_for_its_store_only() {
        let dir = tempfile::tempdir().unwrap();
        let here = StoreLocation::Redis { url: "redis://h:1/0".into(), prefix: "p".into() };
        let there = StoreLocation::Redis { url: "redis://h:1/0".into(), prefix: "q".into() };
        assert_eq!(read(dir.path(), &here), None);
        let generation = Generation { id: "abc".into(), commits: 42 };
        write(dir.path(), &here, &generation);
        assert_eq!(read(dir.path(), &here), Some(generation));
        assert_eq!(read(dir.path(), &there), None);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(path(dir.path())).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(path(dir.path()), "not json").unwrap();
        assert_eq!(read(dir.path(), &here), None);
    }
}
