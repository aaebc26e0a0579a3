//! The change log behind the watch API (`GET /api/v1/watch`): every change to a node, actor,
//! task, placement group or job, numbered in the order the owner made it, with the object as it
//! was after that change.
//!
//! The log is part of the published [`View`](crate::view::View): a cycle's changes become
//! visible with the cycle, once durable, so a watcher never sees a change a crash could take
//! back, and a reader of one view sees the objects and the log agree. Numbers (versions) start
//! at the head's start time in microseconds, so a version from an earlier head process is
//! older than anything this one has, and a client resuming with it is told to start over
//! instead of silently missing changes. The last [`MAX_CHANGES`] changes are kept; the objects
//! are shared with the view (`Arc`), so keeping a change costs a pointer unless the object has
//! changed since. A change's event is made once, for the first watcher that sends it.

use std::io::Write;
use std::sync::{Arc, OnceLock};

use berth_api::rest::{Actor, Group, Job, Node, Task};
use bytes::Bytes;
use imbl::Vector;
use serde::Serialize;

/// Changes kept for watchers that resume or fall behind.
pub const MAX_CHANGES: usize = 65_536;

/// What a change is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchKind {
    /// A node.
    Node,
    /// An actor.
    Actor,
    /// A task.
    Task,
    /// A placement group.
    PlacementGroup,
    /// A job.
    Job,
}

impl WatchKind {
    /// Every kind.
    pub const ALL: [WatchKind; 5] = [
        WatchKind::Node,
        WatchKind::Actor,
        WatchKind::Task,
        WatchKind::PlacementGroup,
        WatchKind::Job,
    ];

    /// Its word in the API (`node`, `actor`, `task`, `placement_group`, `job`).
    pub fn word(self) -> &'static str {
        match self {
            WatchKind::Node => "node",
            WatchKind::Actor => "actor",
            WatchKind::Task => "task",
            WatchKind::PlacementGroup => "placement_group",
            WatchKind::Job => "job",
        }
    }
}

/// The object after a change (for a deletion: as it last was).
#[derive(Clone, Debug, PartialEq)]
pub enum Object {
    /// A node.
    Node(Arc<Node>),
    /// An actor.
    Actor(Arc<Actor>),
    /// A task.
    Task(Arc<Task>),
    /// A placement group.
    Group(Arc<Group>),
    /// A job.
    Job(Arc<Job>),
}

impl Serialize for Object {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Object::Node(n) => n.serialize(serializer),
            Object::Actor(a) => a.serialize(serializer),
            Object::Task(t) => t.serialize(serializer),
            Object::Group(g) => g.serialize(serializer),
            Object::Job(j) => j.serialize(serializer),
        }
    }
}

impl Object {
    /// What it is.
    pub fn kind(&self) -> WatchKind {
        match self {
            Object::Node(_) => WatchKind::Node,
            Object::Actor(_) => WatchKind::Actor,
            Object::Task(_) => WatchKind::Task,
            Object::Group(_) => WatchKind::PlacementGroup,
            Object::Job(_) => WatchKind::Job,
        }
    }

    /// Its ID.
    pub fn id(&self) -> &str {
        match self {
            Object::Node(n) => &n.node_id,
            Object::Actor(a) => &a.actor_id,
            Object::Task(t) => &t.task_id,
            Object::Group(g) => &g.group_id,
            Object::Job(j) => &j.job_id,
        }
    }
}

/// How the object changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ChangeType {
    /// It appeared (created, registered; and, at the start of a watch, what exists).
    Added,
    /// It changed.
    Modified,
    /// The head forgot it (a finished object past its retention).
    Deleted,
}

/// One change.
#[derive(Debug, Serialize)]
pub struct Change {
    /// Its number: larger than every earlier change's.
    pub version: u64,
    /// How the object changed.
    #[serde(rename = "type")]
    pub change: ChangeType,
    /// What the object is.
    pub kind: WatchKind,
    /// The object after the change.
    pub object: Object,
    #[serde(skip)]
    event: OnceLock<Bytes>,
}

impl Change {
    /// A change numbered `version`.
    pub fn new(version: u64, change: ChangeType, object: Object) -> Change {
        Change { version, change, kind: object.kind(), object, event: OnceLock::new() }
    }

    /// The change as a server-sent event: `id: VERSION`, `event: change`, and the change as
    /// one line of JSON in `data`. Made once, then shared by every watcher it goes to (a
    /// reference count each, not a copy).
    pub fn event(&self) -> Bytes {
        self.event
            .get_or_init(|| {
                let mut text = Vec::with_capacity(1024);
                let _ = write!(text, "id: {}\nevent: change\ndata: ", self.version);
                serde_json::to_writer(&mut text, self).expect("changes serialize");
                text.extend_from_slice(b"\n\n");
                // Exactly its size: the log keeps up to MAX_CHANGES of these.
                Bytes::from(text.into_boxed_slice())
            })
            .clone()
    }
}

/// The last [`MAX_CHANGES`] changes, oldest first, and the number the next one gets.
#[derive(Clone, Debug)]
pub struct ChangeLog {
    changes: Vector<Arc<Change>>,
    next: u64,
}

impl Default for ChangeLog {
    fn default() -> ChangeLog {
        let micros = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_micros() as u64);
        ChangeLog::starting_at(micros)
    }
}

/// A version the log cannot resume from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// Older than the oldest change kept (or from an earlier head): list again.
    Expired {
        /// The oldest version that can be resumed from now.
        oldest: u64,
    },
    /// Newer than any change made.
    Unknown {
        /// The newest version.
        newest: u64,
    },
}

impl ChangeLog {
    /// An empty log whose first change gets `version`.
    pub fn starting_at(version: u64) -> ChangeLog {
        ChangeLog { changes: Vector::new(), next: version.max(1) }
    }

    /// Records a change; the oldest is dropped past [`MAX_CHANGES`].
    pub fn push(&mut self, change: ChangeType, object: Object) {
        let version = self.next;
        self.next += 1;
        self.changes.push_back(Arc::new(Change::new(version, change, object)));
        if self.changes.len() > MAX_CHANGES {
            self.changes.pop_front();
        }
    }

    /// The version of the last change made (the one before the first, when none was).
    pub fn newest(&self) -> u64 {
        self.next - 1
    }

    /// The changes after `version`, oldest first. Finding the first is O(log n): a watcher
    /// that wakes for each cycle reads only what is new to it.
    pub fn after(&self, version: u64) -> Result<impl Iterator<Item = Arc<Change>>, Resume> {
        let newest = self.newest();
        if version > newest {
            return Err(Resume::Unknown { newest });
        }
        // The versions kept are contiguous: the first is `next - len`.
        let first = self.next - self.changes.len() as u64;
        if version + 1 < first {
            return Err(Resume::Expired { oldest: first - 1 });
        }
        let skip = (version + 1 - first) as usize;
        Ok(self.changes.skip(skip).into_iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str) -> Object {
        let json = serde_json::json!({"node_id": id, "address": "", "state": "ALIVE",
            "labels": {}, "taints": [], "resources": {}, "actors": 0, "tasks": 0,
            "registered_at_ms": 0});
        Object::Node(Arc::new(serde_json::from_value(json).unwrap()))
    }

    fn versions(changes: impl Iterator<Item = Arc<Change>>) -> Vec<u64> {
        changes.map(|c| c.version).collect()
    }

    #[test]
    fn changes_after_a_version_in_order() {
        let mut log = ChangeLog::starting_at(100);
        assert_eq!(log.newest(), 99);
        assert_eq!(versions(log.after(99).unwrap()), Vec::<u64>::new());
        for id in ["a", "b", "c"] {
            log.push(ChangeType::Added, node(id));
        }
        assert_eq!(log.newest(), 102);
        assert_eq!(versions(log.after(99).unwrap()), [100, 101, 102]);
        assert_eq!(versions(log.after(101).unwrap()), [102]);
        assert_eq!(versions(log.after(102).unwrap()), Vec::<u64>::new());
        assert_eq!(log.after(103).err(), Some(Resume::Unknown { newest: 102 }));
        assert_eq!(log.after(5).err(), Some(Resume::Expired { oldest: 99 }));
    }

    #[test]
    fn only_the_last_changes_are_kept() {
        let mut log = ChangeLog::starting_at(1);
        for _ in 0..MAX_CHANGES + 10 {
            log.push(ChangeType::Modified, node("n"));
        }
        let newest = log.newest();
        assert_eq!(newest, (MAX_CHANGES + 10) as u64);
        assert_eq!(log.after(5).err(), Some(Resume::Expired { oldest: 10 }));
        assert_eq!(log.after(10).unwrap().count(), MAX_CHANGES);
        assert_eq!(versions(log.after(newest - 1).unwrap()), [newest]);
    }

    #[test]
    fn a_change_is_one_event_whose_data_is_one_json_line_with_its_object() {
        let mut log = ChangeLog::starting_at(7);
        log.push(ChangeType::Added, node("n1"));
        let change = log.after(6).unwrap().next().unwrap();
        let event = change.event();
        let text = std::str::from_utf8(&event).unwrap();
        let data = text.strip_prefix("id: 7\nevent: change\ndata: ").expect(text);
        let data = data.strip_suffix("\n\n").expect("an event ends with a blank line");
        assert!(!data.contains('\n'), "one data line");
        let json: serde_json::Value = serde_json::from_str(data).unwrap();
        assert_eq!(json["version"], 7);
        assert_eq!(json["type"], "ADDED");
        assert_eq!(json["kind"], "node");
        assert_eq!(json["object"]["node_id"], "n1");
        assert_eq!(change.event().as_ptr(), event.as_ptr(), "made once");
    }
}
