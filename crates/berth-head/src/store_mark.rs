//! What a head last saw of its store, kept in its data directory (`DATA_DIR/store-mark.json`):
//! the store's location, ID and commit count, and the highest IDs the head had handed out. A head started again reads it and tells the store
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
    /// The highest IDs handed out, so that a head that accepts a store's loss numbers new work
    /// after them.
    #[serde(default)]
    ids: Ids,
}

/// The highest actor, task, group and job numbers handed out.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Ids {
    pub(crate) actors: u64,
    pub(crate) tasks: u64,
    pub(crate) groups: u64,
    /// (Marks written before jobs existed have none.)
    #[serde(default)]
    pub(crate) jobs: u64,
}

impl Ids {
    fn max(self, other: Ids) -> Ids {
        Ids {
            actors: self.actors.max(other.actors),
            tasks: self.tasks.max(other.tasks),
            groups: self.groups.max(other.groups),
            jobs: self.jobs.max(other.jobs),
        }
    }
}

/// What a data directory's mark says of the store at one location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The store's generation.
    pub(crate) generation: Generation,
    /// The highest IDs handed out.
    pub(crate) ids: Ids,
}

/// The mark's path.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(MARK_FILE)
}

/// What this data directory last saw of the store at `location`; `None` when it saw nothing,
/// or another store (the operator pointed the head elsewhere: nothing to compare).
pub(crate) fn read(data_dir: &Path, location: &StoreLocation) -> Option<Seen> {
    let text = std::fs::read_to_string(path(data_dir)).ok()?;
    match serde_json::from_str::<Mark>(&text) {
        Ok(mark) if mark.store == location.to_string() => {
            Some(Seen { generation: mark.generation, ids: mark.ids })
        }
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

/// Records `generation` of the store at `location` and the highest `ids` handed out (kept at
/// least as high as the mark says already; mode 0600, replaced whole: a crash leaves the old
/// mark or the new one). A failure is logged, not fatal: the mark only narrows what a
/// restart trusts.
pub(crate) fn write(data_dir: &Path, location: &StoreLocation, generation: &Generation, ids: Ids) {
    let before = read(data_dir, location).map(|seen| seen.ids).unwrap_or_default();
    let ids = ids.max(before);
    let mark = Mark { store: location.to_string(), generation: generation.clone(), ids };
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
        let ids = Ids { actors: 7, tasks: 3, groups: 0, jobs: 2 };
        write(dir.path(), &here, &generation, ids);
        assert_eq!(read(dir.path(), &here), Some(Seen { generation: generation.clone(), ids }));
        // IDs only go up (a standby writes none).
        write(dir.path(), &here, &generation, Ids::default());
        assert_eq!(read(dir.path(), &here).unwrap().ids, ids);
        assert_eq!(read(dir.path(), &there), None);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(path(dir.path())).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(path(dir.path()), "not json").unwrap();
        assert_eq!(read(dir.path(), &here), None);
    }
}
