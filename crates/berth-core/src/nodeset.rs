//! Sets of nodes as compressed bitmaps over dense [`NodeIndex`]es.
//!
//! Candidate narrowing is set algebra (alive ∩ has-label − tainted …); a bitmap makes each step
//! cost what the seeds' pseudo-code assumes, where hash sets would allocate per element.

use roaring::{MultiOps, RoaringBitmap};

use crate::node::NodeIndex;

/// Sets up to this size are tested against others node by node ([`NodeSet::is_disjoint`]).
const PROBE_MAX: u64 = 16;

/// A set of nodes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeSet(RoaringBitmap);

impl NodeSet {
    /// The empty set.
    pub fn new() -> NodeSet {
        NodeSet::default()
    }

    /// Adds a node; true when it was not there.
    pub fn insert(&mut self, node: NodeIndex) -> bool {
        self.0.insert(node.0)
    }

    /// Removes a node; true when it was there.
    pub fn remove(&mut self, node: NodeIndex) -> bool {
        self.0.remove(node.0)
    }

    /// True when `node` is in the set.
    pub fn contains(&self, node: NodeIndex) -> bool {
        self.0.contains(node.0)
    }

    /// Number of nodes.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Nodes in index order.
    pub fn iter(&self) -> impl Iterator<Item = NodeIndex> + '_ {
        self.0.iter().map(NodeIndex)
    }

    /// Nodes in index order starting at `start`, wrapping around to the lower ones.
    pub fn iter_from(&self, start: u32) -> impl Iterator<Item = NodeIndex> + '_ {
        self.0.range(start..).chain(self.0.range(..start)).map(NodeIndex)
    }

    /// `self ∩ other`.
    pub fn intersection(&self, other: &NodeSet) -> NodeSet {
        NodeSet(&self.0 & &other.0)
    }

    /// `self − other`.
    pub fn difference(&self, other: &NodeSet) -> NodeSet {
        NodeSet(&self.0 - &other.0)
    }

    /// True when the sets share no node.
    pub fn is_disjoint(&self, other: &NodeSet) -> bool {
        // roaring compares two sorted arrays by merging them, in time of both; a handful of
        // nodes against a large set (the hosts of a service against a zone) is cheaper
        // looked up one by one.
        let (small, large) = if self.len() <= other.len() { (self, other) } else { (other, self) };
        if small.len() <= PROBE_MAX {
            return small.0.iter().all(|node| !large.0.contains(node));
        }
        self.0.is_disjoint(&other.0)
    }

    /// `self ∩= other`.
    pub fn intersect_with(&mut self, other: &NodeSet) {
        self.0 &= &other.0;
    }

    /// `self −= other`.
    pub fn difference_with(&mut self, other: &NodeSet) {
        self.0 -= &other.0;
    }

    /// `self ∪= other`.
    pub fn union_with(&mut self, other: &NodeSet) {
        self.0 |= &other.0;
    }

    /// `self ∪ other`.
    pub fn union(&self, other: &NodeSet) -> NodeSet {
        NodeSet(&self.0 | &other.0)
    }

    /// The union of every set of `sets` in one pass (roaring's multi-way union: it
    /// accumulates into bitmap containers instead of merging sorted arrays pair by pair).
    pub fn union_all<'a>(sets: impl IntoIterator<Item = &'a NodeSet>) -> NodeSet {
        NodeSet(sets.into_iter().map(|set| &set.0).union())
    }
}

impl FromIterator<NodeIndex> for NodeSet {
    fn from_iter<I: IntoIterator<Item = NodeIndex>>(iter: I) -> NodeSet {
        NodeSet(iter.into_iter().map(|n| n.0).collect())
    }
}
