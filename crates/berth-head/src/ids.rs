//! The numbers in the IDs the head hands out.

use std::sync::atomic::{AtomicU64, Ordering};

use berth_api::ObjectKind;

/// Sequence numbers for IDs, shared by every handle so IDs are unique without asking the
/// owner. A create refused later leaves a gap, which is harmless.
#[derive(Debug, Default)]
pub(crate) struct Sequences {
    pub(crate) actors: AtomicU64,
    pub(crate) tasks: AtomicU64,
    pub(crate) groups: AtomicU64,
    pub(crate) jobs: AtomicU64,
}

impl Sequences {
    /// The highest numbers handed out.
    pub(crate) fn ids(&self) -> crate::store_mark::Ids {
        crate::store_mark::Ids {
            actors: self.actors.load(Ordering::Relaxed),
            tasks: self.tasks.load(Ordering::Relaxed),
            groups: self.groups.load(Ordering::Relaxed),
            jobs: self.jobs.load(Ordering::Relaxed),
        }
    }

    /// Numbers new work after `ids` too.
    pub(crate) fn raise(&self, ids: crate::store_mark::Ids) {
        self.actors.fetch_max(ids.actors, Ordering::Relaxed);
        self.tasks.fetch_max(ids.tasks, Ordering::Relaxed);
        self.groups.fetch_max(ids.groups, Ordering::Relaxed);
        self.jobs.fetch_max(ids.jobs, Ordering::Relaxed);
    }

    /// The next number for `kind`.
    pub(crate) fn next(&self, kind: ObjectKind) -> u64 {
        self.of(kind).fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The counter of `kind`.
    pub(crate) fn of(&self, kind: ObjectKind) -> &AtomicU64 {
        match kind {
            ObjectKind::Actor => &self.actors,
            ObjectKind::Task => &self.tasks,
            ObjectKind::Group => &self.groups,
            ObjectKind::Job => &self.jobs,
        }
    }
}
