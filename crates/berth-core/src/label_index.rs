//! The label index: key → value → nodes, so that a selector narrows candidates by set algebra
//! instead of visiting every node (seed 003's "hard match" done on bitmaps).

use std::borrow::Cow;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use crate::labels::Labels;
use crate::node::NodeIndex;
use crate::nodeset::NodeSet;
use crate::selector::{Condition, LabelSelector};

#[derive(Clone, Debug, Default)]
struct KeyEntry {
    /// Nodes with the key, whatever the value.
    any: NodeSet,
    values: FxHashMap<String, NodeSet>,
}

/// Which nodes carry which labels. Kept current by the cluster on every label change.
#[derive(Clone, Debug, Default)]
pub struct LabelIndex {
    keys: FxHashMap<String, KeyEntry>,
}

impl LabelIndex {
    /// Records `node`'s labels.
    pub fn insert(&mut self, node: NodeIndex, labels: &Labels) {
        for (key, value) in labels.iter() {
            let entry = self.keys.entry(key.to_string()).or_default();
            entry.any.insert(node);
            entry.values.entry(value.to_string()).or_default().insert(node);
        }
    }

    /// Forgets `node`'s labels (the ones it was inserted with).
    pub fn remove(&mut self, node: NodeIndex, labels: &Labels) {
        for (key, value) in labels.iter() {
            let Some(entry) = self.keys.get_mut(key) else { continue };
            entry.any.remove(node);
            if let Some(set) = entry.values.get_mut(value) {
                set.remove(node);
                if set.is_empty() {
                    entry.values.remove(value);
                }
            }
            if entry.any.is_empty() {
                self.keys.remove(key);
            }
        }
    }

    /// Nodes whose `key` is `value`.
    pub fn nodes_with(&self, key: &str, value: &str) -> Option<&NodeSet> {
        self.keys.get(key).and_then(|entry| entry.values.get(value))
    }

    /// Nodes that have `key`.
    pub fn nodes_with_key(&self, key: &str) -> Option<&NodeSet> {
        self.keys.get(key).map(|entry| &entry.any)
    }

    /// Each value of `key` with its nodes (the domains of a topology key), in no fixed order.
    pub fn values_of(&self, key: &str) -> impl Iterator<Item = (&str, &NodeSet)> {
        self.keys
            .get(key)
            .into_iter()
            .flat_map(|entry| entry.values.iter().map(|(v, s)| (v.as_str(), s)))
    }

    /// The nodes of `universe` that `selector` matches.
    ///
    /// Every condition narrows by intersection (`=`, `in`, exists) or difference (the
    /// others), which commute: so the work starts from the smallest set a condition names and
    /// meets the universe once, instead of copying the universe (most of the cluster) and
    /// narrowing it condition by condition.
    pub fn select(&self, selector: &LabelSelector, universe: &NodeSet) -> NodeSet {
        let empty = NodeSet::new();
        let mut narrowing: SmallVec<[Cow<'_, NodeSet>; 4]> = SmallVec::new();
        let mut removing: SmallVec<[(&str, &Condition); 2]> = SmallVec::new();
        for (key, conditions) in selector.iter() {
            for condition in conditions {
                let set = match condition {
                    Condition::Equal(value) => {
                        Cow::Borrowed(self.nodes_with(key, value).unwrap_or(&empty))
                    }
                    Condition::In(values) => Cow::Owned(self.any_of(key, values)),
                    Condition::Exists => Cow::Borrowed(self.nodes_with_key(key).unwrap_or(&empty)),
                    _ => {
                        removing.push((key, condition));
                        continue;
                    }
                };
                narrowing.push(set);
            }
        }
        let smallest = (0..narrowing.len()).min_by_key(|&i| narrowing[i].len());
        let mut result = match smallest {
            None => universe.clone(),
            Some(i) => narrowing.swap_remove(i).intersection(universe),
        };
        for set in &narrowing {
            if result.is_empty() {
                return result;
            }
            result.intersect_with(set);
        }
        for (key, condition) in removing {
            if result.is_empty() {
                return result;
            }
            self.apply(&mut result, key, condition);
        }
        result
    }

    /// The nodes whose `key` is one of `values`.
    fn any_of(&self, key: &str, values: &[String]) -> NodeSet {
        NodeSet::union_all(values.iter().filter_map(|value| self.nodes_with(key, value)))
    }

    fn apply(&self, result: &mut NodeSet, key: &str, condition: &Condition) {
        let empty = NodeSet::new();
        let nodes_with = |value: &str| self.nodes_with(key, value).unwrap_or(&empty);
        match condition {
            Condition::Equal(value) => result.intersect_with(nodes_with(value)),
            Condition::NotEqual(value) => result.difference_with(nodes_with(value)),
            Condition::In(values) => result.intersect_with(&self.any_of(key, values)),
            Condition::NotIn(values) => result.difference_with(&self.any_of(key, values)),
            Condition::Exists => result.intersect_with(self.nodes_with_key(key).unwrap_or(&empty)),
            Condition::DoesNotExist => {
                result.difference_with(self.nodes_with_key(key).unwrap_or(&empty))
            }
        }
    }
}
