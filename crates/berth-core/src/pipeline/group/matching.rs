//! STRICT_SPREAD's selection: each bundle on its own node, as a perfect matching of bundles to
//! distinct nodes (exact: a bundle on one node cannot change what fits on another).

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use crate::node::NodeIndex;

/// A perfect matching of slots (bundles) to distinct nodes, `options[slot]` in preference
/// order, by augmenting paths (Kuhn). Returns the node of each slot.
pub(super) fn match_bundles(options: &[Vec<NodeIndex>]) -> Option<Vec<NodeIndex>> {
    let mut owner: FxHashMap<NodeIndex, usize> = FxHashMap::default();
    for slot in 0..options.len() {
        let mut seen = SmallVec::<[NodeIndex; 16]>::new();
        if !augment(slot, options, &mut owner, &mut seen) {
            return None;
        }
    }
    let mut result = vec![NodeIndex(0); options.len()];
    for (node, slot) in owner {
        result[slot] = node;
    }
    Some(result)
}

fn augment(
    slot: usize,
    options: &[Vec<NodeIndex>],
    owner: &mut FxHashMap<NodeIndex, usize>,
    seen: &mut SmallVec<[NodeIndex; 16]>,
) -> bool {
    for &node in &options[slot] {
        if seen.contains(&node) {
            continue;
        }
        seen.push(node);
        let free = match owner.get(&node) {
            None => true,
            Some(&other) => augment(other, options, owner, seen),
        };
        if free {
            owner.insert(node, slot);
            return true;
        }
    }
    false
}
