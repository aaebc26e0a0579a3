//! The cluster's change feed: the node slots that changed, in order, so that a stage keeping
//! counts over the nodes (how many could take a shape, how many GPUs have some part free)
//! brings them up to date by reading what changed since its last decision, not every node.
//!
//! Assumptions: a decision changes one node or a few; the stages that read the feed run once
//! per decision. Rules: every change the cluster makes to a node slot (a node added, changed,
//! reserved on, released, moved to another state, removed) appends the slot; the feed keeps
//! the last [`ChangeFeed::CAPACITY`] entries. A reader holds a [`FeedCursor`]; reading gives
//! the slots appended since, or [`Changes::Everything`] when the reader is new, fell behind
//! what the feed keeps, or reads another cluster (each feed has an identity of its own, and a
//! clone of a cluster starts a feed of its own). A slot may come more than once, and a change
//! that failed half way may be noted: a reader compares the node's [`Version`](crate::node)
//! with the one it counted, so the feed may say too much, never too little.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::node::NodeIndex;

/// The slots changed, most recent last (see the module documentation).
#[derive(Debug)]
pub struct ChangeFeed {
    /// Tells this feed from every other of the process: a cursor of another feed reads
    /// [`Changes::Everything`].
    identity: u64,
    /// The sequence number of `slots[0]`.
    first: u64,
    slots: VecDeque<u32>,
}

/// Where a reader is in a feed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeedCursor {
    /// The feed read; 0 (no feed has it): nothing read yet.
    identity: u64,
    /// The sequence number of the next slot to read.
    next: u64,
}

/// What a reader has to look at again.
#[derive(Debug)]
pub enum Changes<'a> {
    /// The slots changed since the reader's last read, oldest first (possibly repeated).
    Slots(std::collections::vec_deque::Iter<'a, u32>),
    /// Every slot: the reader is new, fell behind, or read another cluster before.
    Everything,
}

impl ChangeFeed {
    /// Entries kept: 512 KiB of slots. A reader that reads once per decision falls behind only
    /// when more nodes than that changed between two decisions, and then counts every node
    /// again, once.
    pub const CAPACITY: usize = 1 << 17;

    fn with_identity() -> ChangeFeed {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ChangeFeed {
            identity: NEXT.fetch_add(1, Ordering::Relaxed),
            first: 0,
            slots: VecDeque::new(),
        }
    }

    /// Notes that `index`'s slot changed.
    #[inline]
    pub(crate) fn note(&mut self, index: NodeIndex) {
        if self.slots.len() == Self::CAPACITY {
            self.slots.pop_front();
            self.first += 1;
        }
        self.slots.push_back(index.0);
    }

    /// What changed since `cursor`, which then points past it.
    pub fn read(&self, cursor: &mut FeedCursor) -> Changes<'_> {
        let end = self.first + self.slots.len() as u64;
        let since = cursor.next;
        let known = cursor.identity == self.identity && since >= self.first && since <= end;
        *cursor = FeedCursor { identity: self.identity, next: end };
        if !known {
            return Changes::Everything;
        }
        Changes::Slots(self.slots.range((since - self.first) as usize..))
    }

    /// Calls `changed` with each slot appended since `cursor`, or, when the feed cannot say
    /// ([`Changes::Everything`]), with every slot below `slots`; then `cursor` points past them.
    /// `slots` must cover every slot the reader counts, so that a reader of another cluster
    /// forgets the slots this one does not have.
    pub fn each_changed(&self, cursor: &mut FeedCursor, slots: usize, changed: impl FnMut(usize)) {
        match self.read(cursor) {
            Changes::Slots(noted) => noted.map(|&slot| slot as usize).for_each(changed),
            Changes::Everything => (0..slots).for_each(changed),
        }
    }
}

impl Default for ChangeFeed {
    fn default() -> ChangeFeed {
        ChangeFeed::with_identity()
    }
}

impl Clone for ChangeFeed {
    /// A feed of its own: the clone's changes are not the original's, so a reader of one that
    /// then reads the other counts every node again.
    fn clone(&self) -> ChangeFeed {
        ChangeFeed::with_identity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(changes: Changes<'_>) -> Option<Vec<u32>> {
        match changes {
            Changes::Slots(slots) => Some(slots.copied().collect()),
            Changes::Everything => None,
        }
    }

    #[test]
    fn a_reader_sees_everything_first_then_what_changed_since() {
        let mut feed = ChangeFeed::default();
        feed.note(NodeIndex(3));
        let mut cursor = FeedCursor::default();
        assert_eq!(slots(feed.read(&mut cursor)), None);
        assert_eq!(slots(feed.read(&mut cursor)), Some(vec![]));
        feed.note(NodeIndex(1));
        feed.note(NodeIndex(1));
        assert_eq!(slots(feed.read(&mut cursor)), Some(vec![1, 1]));
        assert_eq!(slots(feed.read(&mut cursor)), Some(vec![]));
    }

    #[test]
    fn each_changed_calls_back_the_noted_slots_or_every_slot() {
        let mut feed = ChangeFeed::default();
        let mut cursor = FeedCursor::default();
        let called = |feed: &ChangeFeed, cursor: &mut FeedCursor| {
            let mut slots = Vec::new();
            feed.each_changed(cursor, 3, |slot| slots.push(slot));
            slots
        };
        feed.note(NodeIndex(9));
        assert_eq!(called(&feed, &mut cursor), [0, 1, 2], "new: every slot below the bound");
        feed.note(NodeIndex(1));
        feed.note(NodeIndex(5));
        assert_eq!(called(&feed, &mut cursor), [1, 5]);
        assert!(called(&feed, &mut cursor).is_empty());
    }

    #[test]
    fn a_reader_that_fell_behind_or_reads_a_clone_sees_everything() {
        let mut feed = ChangeFeed::default();
        let mut cursor = FeedCursor::default();
        feed.read(&mut cursor);
        for i in 0..=ChangeFeed::CAPACITY as u32 {
            feed.note(NodeIndex(i));
        }
        assert_eq!(slots(feed.read(&mut cursor)), None, "one entry was dropped");
        feed.note(NodeIndex(7));
        assert_eq!(slots(feed.read(&mut cursor)), Some(vec![7]));
        let clone = feed.clone();
        assert_eq!(slots(clone.read(&mut cursor)), None);
        assert_eq!(slots(clone.read(&mut cursor)), Some(vec![]));
        assert_eq!(slots(feed.read(&mut cursor)), None, "back on the original");
    }
}
