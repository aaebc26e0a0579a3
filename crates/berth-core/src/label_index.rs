//! The label index: key → value → nodes, so that a selector narrows candidates by set algebra
//! instead of visiting every node (seed 003's "hard match" done on bitmaps).

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use rustc_hash::{FxHashMap, FxHasher};
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

/// A set of nodes from the index: one of its own, one its cache shares, or one made for the
/// caller. Reads as a [`NodeSet`].
pub enum Nodes<'a> {
    /// A set the index holds.
    Borrowed(&'a NodeSet),
    /// A cached union, shared (not copied: a zone-wide set is kilobytes).
    Shared(Arc<NodeSet>),
    /// A set made for this call.
    Owned(NodeSet),
}

impl Nodes<'_> {
    /// The set, copied unless it was made for this call.
    pub fn into_owned(self) -> NodeSet {
        match self {
            Nodes::Borrowed(set) => set.clone(),
            Nodes::Shared(set) => Arc::unwrap_or_clone(set),
            Nodes::Owned(set) => set,
        }
    }
}

impl std::ops::Deref for Nodes<'_> {
    type Target = NodeSet;

    fn deref(&self) -> &NodeSet {
        match self {
            Nodes::Borrowed(set) => set,
            Nodes::Shared(set) => set,
            Nodes::Owned(set) => set,
        }
    }
}

/// Which nodes carry which labels. Kept current by the cluster on every label change.
#[derive(Debug, Default)]
pub struct LabelIndex {
    keys: FxHashMap<String, KeyEntry>,
    /// The nodes of recent `key in (values)` conditions: a union over several value sets is
    /// most of a selector's cost, and the same selectors come again and again (every replica
    /// of a deployment has its one). Emptied on every label change, and when it holds
    /// [`CACHE_KEPT`] entries.
    unions: Cache<CachedUnion>,
    /// The nodes recent selectors match, whatever the universe (see [`LabelIndex::select`]);
    /// emptied as `unions` is.
    selections: Cache<(LabelSelector, Arc<NodeSet>)>,
}

/// A cache by fingerprint: not part of what the index is, so its `Debug` does not show it.
struct Cache<T>(Mutex<FxHashMap<u64, Vec<T>>>);

impl<T> Default for Cache<T> {
    fn default() -> Self {
        Cache(Mutex::default())
    }
}

impl<T> Cache<T> {
    /// The first entry under `fingerprint` that `hit` accepts, mapped by it.
    fn find<R>(&self, fingerprint: u64, hit: impl Fn(&T) -> Option<R>) -> Option<R> {
        let cache = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        cache.get(&fingerprint)?.iter().find_map(hit)
    }

    /// Keeps `entry` under `fingerprint`, emptying the cache first when it is full.
    fn keep(&self, fingerprint: u64, entry: T) {
        let mut cache = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.values().map(Vec::len).sum::<usize>() >= CACHE_KEPT {
            cache.clear();
        }
        cache.entry(fingerprint).or_default().push(entry);
    }

    /// Forgets every entry (labels changed).
    fn clear(&mut self) {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner).clear();
    }
}

impl<T> std::fmt::Debug for Cache<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("(cache)")
    }
}

/// What a cache entry is filed under.
fn fingerprint(value: &impl Hash) -> u64 {
    let mut hasher = FxHasher::default();
    value.hash(&mut hasher);
    hasher.finish()
}

/// How many entries each cache of the index keeps between label changes.
const CACHE_KEPT: usize = 1024;

#[derive(Debug)]
struct CachedUnion {
    key: String,
    values: Vec<String>,
    nodes: Arc<NodeSet>,
}

impl Clone for LabelIndex {
    /// The index without its caches (the copy fills its own).
    fn clone(&self) -> LabelIndex {
        LabelIndex {
            keys: self.keys.clone(),
            unions: Cache::default(),
            selections: Cache::default(),
        }
    }
}

impl LabelIndex {
    /// Records `node`'s labels.
    pub fn insert(&mut self, node: NodeIndex, labels: &Labels) {
        self.unions.clear();
        self.selections.clear();
        for (key, value) in labels.iter() {
            let entry = self.keys.entry(key.to_string()).or_default();
            entry.any.insert(node);
            entry.values.entry(value.to_string()).or_default().insert(node);
        }
    }

    /// Forgets `node`'s labels (the ones it was inserted with).
    pub fn remove(&mut self, node: NodeIndex, labels: &Labels) {
        self.unions.clear();
        self.selections.clear();
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
    /// A selector with a condition that names nodes (`=`, `in`, exists) matches the same
    /// nodes whatever the universe, and the same selectors come again and again (every
    /// replica of a deployment has its one): those nodes are kept until a label changes, and
    /// a decision meets them with its universe once.
    pub fn select(&self, selector: &LabelSelector, universe: &NodeSet) -> NodeSet {
        let names_nodes = |(_, conditions): (&str, &[Condition])| {
            conditions
                .iter()
                .any(|c| matches!(c, Condition::Equal(_) | Condition::In(_) | Condition::Exists))
        };
        if !selector.iter().any(names_nodes) {
            return self.narrow(selector, Some(universe));
        }
        let fingerprint = fingerprint(selector);
        let hit = |(cached, nodes): &(LabelSelector, Arc<NodeSet>)| {
            (cached == selector).then(|| Arc::clone(nodes))
        };
        let matched = match self.selections.find(fingerprint, hit) {
            Some(nodes) => nodes,
            None => {
                let nodes = Arc::new(self.narrow(selector, None));
                self.selections.keep(fingerprint, (selector.clone(), Arc::clone(&nodes)));
                nodes
            }
        };
        matched.intersection(universe)
    }

    /// The nodes `selector` matches within `universe`, or among all nodes when `None` (then
    /// the selector must name nodes).
    ///
    /// Every condition narrows by intersection (`=`, `in`, exists) or difference (the
    /// others), which commute: so the work starts from the smallest set a condition names and
    /// meets the universe once, instead of copying the universe (most of the cluster) and
    /// narrowing it condition by condition.
    fn narrow(&self, selector: &LabelSelector, universe: Option<&NodeSet>) -> NodeSet {
        let empty = NodeSet::new();
        let mut narrowing: SmallVec<[Nodes<'_>; 4]> = SmallVec::new();
        let mut removing: SmallVec<[(&str, &Condition); 2]> = SmallVec::new();
        for (key, conditions) in selector.iter() {
            for condition in conditions {
                let set = match condition {
                    Condition::Equal(value) => {
                        Nodes::Borrowed(self.nodes_with(key, value).unwrap_or(&empty))
                    }
                    Condition::In(values) => self.any_of(key, values),
                    Condition::Exists => {
                        Nodes::Borrowed(self.nodes_with_key(key).unwrap_or(&empty))
                    }
                    _ => {
                        removing.push((key, condition));
                        continue;
                    }
                };
                narrowing.push(set);
            }
        }
        let smallest = (0..narrowing.len()).min_by_key(|&i| narrowing[i].len());
        let mut result = match (smallest, universe) {
            (Some(i), Some(universe)) => narrowing.swap_remove(i).intersection(universe),
            (Some(i), None) => narrowing.swap_remove(i).into_owned(),
            (None, Some(universe)) => universe.clone(),
            (None, None) => NodeSet::new(),
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

    /// The nodes of every domain of `topology` (each value of that label key is a domain) that
    /// holds a node of `nodes`: `nodes` widened to whole domains. The union is cached as an
    /// `in` union is: the same few domains come again and again (the zones of a service's
    /// replicas), and one set difference against the union is far cheaper than one per domain.
    pub fn domains_of(&self, topology: &str, nodes: &NodeSet) -> Nodes<'_> {
        if nodes.is_empty() {
            return Nodes::Owned(NodeSet::new());
        }
        // In the index's order of values: it holds until a label changes, which empties the
        // cache, so the same domains always make the same cache key.
        let hit: SmallVec<[&str; 8]> = self
            .values_of(topology)
            .filter(|(_, domain)| !domain.is_disjoint(nodes))
            .map(|(value, _)| value)
            .collect();
        self.any_of(topology, &hit)
    }

    /// The nodes whose `key` is one of `values`: one set's nodes as they are, several sets'
    /// union from the cache when asked for since the last label change.
    fn any_of<V: AsRef<str> + Hash>(&self, key: &str, values: &[V]) -> Nodes<'_> {
        let sets = || values.iter().filter_map(|value| self.nodes_with(key, value.as_ref()));
        if values.len() < 2 {
            return sets().next().map_or_else(|| Nodes::Owned(NodeSet::new()), Nodes::Borrowed);
        }
        // `str` and `String` hash alike, so either kind of list finds the same entry.
        let fingerprint = fingerprint(&(key, values));
        let same = |entry: &CachedUnion| {
            entry.key == key
                && entry.values.len() == values.len()
                && entry.values.iter().zip(values).all(|(a, b)| a == b.as_ref())
        };
        if let Some(nodes) =
            self.unions.find(fingerprint, |entry| same(entry).then(|| Arc::clone(&entry.nodes)))
        {
            return Nodes::Shared(nodes);
        }
        let nodes = Arc::new(NodeSet::union_all(sets()));
        let entry = CachedUnion {
            key: key.to_string(),
            values: values.iter().map(|v| v.as_ref().to_string()).collect(),
            nodes: Arc::clone(&nodes),
        };
        self.unions.keep(fingerprint, entry);
        Nodes::Shared(nodes)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        Labels::from_pairs(pairs.iter().copied()).unwrap()
    }

    #[test]
    fn cached_unions_follow_every_label_change() {
        let mut index = LabelIndex::default();
        for (node, zone) in [(0, "a"), (1, "b"), (2, "c")] {
            index.insert(NodeIndex(node), &labels(&[("zone", zone)]));
        }
        let all: NodeSet = (0..4).map(NodeIndex).collect();
        let selector = LabelSelector::parse([("zone", "in(a,b)")]).unwrap();
        let nodes = |index: &LabelIndex| index.select(&selector, &all).iter().collect::<Vec<_>>();
        assert_eq!(nodes(&index), [NodeIndex(0), NodeIndex(1)]);
        assert_eq!(nodes(&index), [NodeIndex(0), NodeIndex(1)], "from the cache");
        index.insert(NodeIndex(3), &labels(&[("zone", "b")]));
        assert_eq!(nodes(&index), [NodeIndex(0), NodeIndex(1), NodeIndex(3)]);
        index.remove(NodeIndex(0), &labels(&[("zone", "a")]));
        assert_eq!(nodes(&index), [NodeIndex(1), NodeIndex(3)]);
        // A copy answers the same, with its own cache.
        assert_eq!(nodes(&index.clone()), [NodeIndex(1), NodeIndex(3)]);
        // Another order of the same values is another entry with the same nodes.
        let reversed = LabelSelector::parse([("zone", "in(b,a)")]).unwrap();
        assert_eq!(index.select(&reversed, &all).iter().collect::<Vec<_>>(), nodes(&index));
    }

    #[test]
    fn domains_are_the_zones_holding_the_nodes_and_follow_label_changes() {
        let mut index = LabelIndex::default();
        for (node, zone) in [(0, "a"), (1, "a"), (2, "b"), (3, "b"), (4, "c")] {
            index.insert(NodeIndex(node), &labels(&[("zone", zone)]));
        }
        let set = |nodes: &[u32]| nodes.iter().map(|&n| NodeIndex(n)).collect::<NodeSet>();
        let domains = |index: &LabelIndex, nodes: &[u32]| {
            index.domains_of("zone", &set(nodes)).iter().map(|n| n.0).collect::<Vec<_>>()
        };
        assert_eq!(domains(&index, &[]), Vec::<u32>::new());
        assert_eq!(domains(&index, &[1]), [0, 1]);
        assert_eq!(domains(&index, &[1, 4]), [0, 1, 4]);
        assert_eq!(domains(&index, &[1, 4]), [0, 1, 4], "from the cache");
        assert_eq!(domains(&index, &[9]), Vec::<u32>::new(), "a node without the key");
        // Node 5 joins zone c: the cached union of a and c must include it.
        index.insert(NodeIndex(5), &labels(&[("zone", "c")]));
        assert_eq!(domains(&index, &[1, 4]), [0, 1, 4, 5]);
        assert!(index.domains_of("rack", &set(&[1])).is_empty(), "an unknown topology key");
    }
}
