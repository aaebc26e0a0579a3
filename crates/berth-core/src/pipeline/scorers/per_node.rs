//! A value counted per node slot and kept up to date from the cluster's change feed
//! ([`crate::feed`]): the one way the stages that keep counts over the nodes (share packing,
//! `keep_large_hosts`, the CPU-short condition) follow the cluster. Each decision counts again
//! only the slots noted since the last one whose node's version differs from the one counted.

use crate::cluster::Cluster;
use crate::feed::FeedCursor;
use crate::node::{Node, NodeIndex, Version};

/// Per node slot, the node's version when counted and what it counted for.
#[derive(Debug)]
pub(super) struct PerNode<T> {
    cursor: FeedCursor,
    slots: Vec<(Version, T)>,
}

impl<T> Default for PerNode<T> {
    fn default() -> Self {
        PerNode { cursor: FeedCursor::default(), slots: Vec::new() }
    }
}

impl<T: Clone + Default> PerNode<T> {
    /// Counts again each slot whose node changed since the last call: `count` gives what the
    /// node (or an empty slot, `None`) counts for now, and `changed(before, now)` is called
    /// with what the slot counted for before, so that sums kept beside follow.
    pub(super) fn follow(
        &mut self,
        cluster: &Cluster,
        mut count: impl FnMut(Option<&Node>) -> T,
        mut changed: impl FnMut(T, &T),
    ) {
        let slots = &mut self.slots;
        if slots.len() < cluster.index_bound() {
            slots.resize(cluster.index_bound(), (Version::NONE, T::default()));
        }
        cluster.each_changed(&mut self.cursor, slots.len(), |slot| {
            let node = cluster.node(NodeIndex(slot as u32));
            let version = node.map_or(Version::NONE, Node::version);
            if slots[slot].0 == version {
                return;
            }
            let (_, before) = std::mem::replace(&mut slots[slot], (version, count(node)));
            changed(before, &slots[slot].1);
        });
    }

    /// What each slot counts for, in slot order.
    pub(super) fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().map(|(_, value)| value)
    }
}
